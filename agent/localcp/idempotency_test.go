package localcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
)

// TestClientTokenMakesRunTaskIdempotent: as in ECS, a RunTask or StartTask that repeats a client
// token with the same parameters gets the first call's answer and starts nothing, also after a
// restart; other parameters, or the other operation, get a ConflictException naming the first call's
// tasks; tokens are per cluster, and forgotten after 24 hours.
func TestClientTokenMakesRunTaskIdempotent(t *testing.T) {
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	h.ok("CreateCluster", `{"clusterName":"dev"}`)

	const run = `{"taskDefinition":"sleep","count":2,"clientToken":"tok-1"}`
	first := h.ok("RunTask", run)
	require.Len(t, first["tasks"], 2)
	again := h.ok("RunTask", run)
	assert.Equal(t, first, again, "the same token and parameters: the first call's answer")
	assert.Equal(t, first, h.ok("RunTask", `{"cluster":"default","clientToken":"tok-1","count":2,"taskDefinition":"sleep"}`),
		"the same parameters written otherwise")
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 2, "nothing more started")

	arns := []any{at(t, first, "tasks", 0, "taskArn"), at(t, first, "tasks", 1, "taskArn")}
	for _, body := range []string{
		`{"taskDefinition":"sleep","count":1,"clientToken":"tok-1"}`,
		`{"taskDefinition":"sleep","count":2,"clientToken":"tok-1","startedBy":"other"}`,
	} {
		_, out := h.do("RunTask", body)
		assert.Equal(t, "ConflictException", out["__type"], body)
		assert.Equal(t, arns, out["resourceIds"], body)
	}
	_, out := h.do("StartTask", mustJSON(map[string]any{"taskDefinition": "sleep", "containerInstances": []string{ci}, "clientToken": "tok-1"}))
	assert.Equal(t, "ConflictException", out["__type"], "the token of a RunTask, on StartTask")
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 2, "a conflict starts nothing")

	// Tokens are per cluster: the same token in another cluster is another call (it waits there for
	// an instance).
	assert.Len(t, h.ok("RunTask", `{"cluster":"dev","taskDefinition":"sleep","clientToken":"tok-1"}`)["tasks"], 1)

	start := mustJSON(map[string]any{"taskDefinition": "sleep", "containerInstances": []string{ci}, "clientToken": "tok-2"})
	started := h.ok("StartTask", start)
	require.Len(t, started["tasks"], 1)

	h.restart()
	assert.Equal(t, first, h.ok("RunTask", run), "the token holds across a restart")
	assert.Equal(t, started, h.ok("StartTask", start))
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 3)

	h.clock.Advance(clientTokenTTL + time.Minute)
	h.restart()
	again = h.ok("RunTask", run)
	require.Len(t, again["tasks"], 2)
	assert.NotEqual(t, arns, []any{at(t, again, "tasks", 0, "taskArn"), at(t, again, "tasks", 1, "taskArn")},
		"after 24 hours the token is forgotten")
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 5)
}

// TestClientTokenForgottenWithItsTask: a token is forgotten when the first of its tasks is, an hour
// after it stopped, and no sooner.
func TestClientTokenForgottenWithItsTask(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	const run = `{"taskDefinition":"sleep","clientToken":"tok"}`
	arn := at(t, h.ok("RunTask", run), "tasks", 0, "taskArn").(string)
	stopOnAgent(t, h, arn)
	h.clock.Advance(59 * time.Minute)
	assert.Equal(t, arn, at(t, h.ok("RunTask", run), "tasks", 0, "taskArn"), "within the hour: the first call's answer")
	h.clock.Advance(2 * time.Minute)
	assert.NotEqual(t, arn, at(t, h.ok("RunTask", run), "tasks", 0, "taskArn"), "its task forgotten, so is the token")
}

// TestReplayedSignedRunTaskRunsOnce: the same signed request sent twice within the signature's
// validity (a captured call replayed, as the AWS CLI sends it, with its client token) starts one task.
func TestReplayedSignedRunTaskRunsOnce(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	body := `{"taskDefinition":"sleep","clientToken":"6c5f1e1e-8f0e-4a3e-9d7a-2b1f0c9e4d11"}`
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", targetPrefix+"RunTask")
	require.NoError(t, localauth.Sign(t.Context(), req, []byte(body), h.keys, "us-east-1", time.Now()))
	var answers []string
	for range 2 {
		replay := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
		replay.Header = req.Header.Clone()
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, replay)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		answers = append(answers, rec.Body.String())
	}
	assert.Equal(t, answers[0], answers[1])
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 1)
}

// TestClientTokenIsChecked: a token ECS would refuse is an InvalidParameterException, and nothing
// starts.
func TestClientTokenIsChecked(t *testing.T) {
	h := newHarness(t)
	h.ok("RegisterTaskDefinition", sleepDef)
	for _, token := range []string{strings.Repeat("a", 65), "has space", "tab\there", "é"} {
		h.fails("RunTask", mustJSON(map[string]any{"taskDefinition": "sleep", "clientToken": token}), "InvalidParameterException")
	}
	h.ok("RunTask", mustJSON(map[string]any{"taskDefinition": "sleep", "clientToken": strings.Repeat("~", 64)}))
	assert.Len(t, h.ok("ListTasks", `{}`)["taskArns"], 1)
}

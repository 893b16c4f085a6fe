package localcp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sdkClient is aws-sdk-go-v2's ECS client against the harness's control plane (the one it has now,
// after restarts too), signed with its keys.
func sdkClient(t *testing.T, h *harness) *ecs.Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.srv.Handler().ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), Credentials: testKeys.Provider(),
		Retryer: aws.NopRetryer{}})
}

// TestTaskProtection drives GetTaskProtection and UpdateTaskProtection with the AWS SDK's ECS client:
// a task starts unprotected, is protected for 120 minutes by default or for the minutes asked,
// reads as unprotected once that lapses (and across a restart), and is unprotected on request; a task
// the cluster does not hold is a MISSING failure, by ARN.
func TestTaskProtection(t *testing.T) {
	h := newHarness(t)
	client := sdkClient(t, h)
	ctx := t.Context()
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	other := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	id := arn[strings.LastIndexByte(arn, '/')+1:]
	start := h.clock.Now()

	get := func(tasks ...string) *ecs.GetTaskProtectionOutput {
		t.Helper()
		out, err := client.GetTaskProtection(ctx, &ecs.GetTaskProtectionInput{Cluster: aws.String("default"), Tasks: tasks})
		require.NoError(t, err)
		return out
	}
	out := get(arn)
	require.Len(t, out.ProtectedTasks, 1)
	assert.Equal(t, arn, aws.ToString(out.ProtectedTasks[0].TaskArn))
	assert.False(t, out.ProtectedTasks[0].ProtectionEnabled, "a new task is not protected")
	assert.Nil(t, out.ProtectedTasks[0].ExpirationDate)
	assert.Empty(t, out.Failures)

	up, err := client.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("default"), Tasks: []string{id},
		ProtectionEnabled: true})
	require.NoError(t, err)
	require.Len(t, up.ProtectedTasks, 1)
	assert.Equal(t, arn, aws.ToString(up.ProtectedTasks[0].TaskArn), "a task named by ID is answered by ARN")
	assert.True(t, up.ProtectedTasks[0].ProtectionEnabled)
	assert.True(t, start.Add(2*time.Hour).Equal(aws.ToTime(up.ProtectedTasks[0].ExpirationDate)), "the default is 2 hours: %v",
		up.ProtectedTasks[0].ExpirationDate)

	out = get(arn, other)
	require.Len(t, out.ProtectedTasks, 2)
	assert.True(t, out.ProtectedTasks[0].ProtectionEnabled)
	assert.False(t, out.ProtectedTasks[1].ProtectionEnabled, "only the task named is protected")

	h.clock.Advance(2*time.Hour - time.Second)
	assert.True(t, get(arn).ProtectedTasks[0].ProtectionEnabled, "a second before it lapses")
	h.clock.Advance(time.Second)
	out = get(arn)
	assert.False(t, out.ProtectedTasks[0].ProtectionEnabled, "once it lapses it reads as not enabled")
	assert.Nil(t, out.ProtectedTasks[0].ExpirationDate)

	now := h.clock.Now()
	up, err = client.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("default"), Tasks: []string{arn},
		ProtectionEnabled: true, ExpiresInMinutes: aws.Int32(2880)})
	require.NoError(t, err)
	assert.True(t, now.Add(48*time.Hour).Equal(aws.ToTime(up.ProtectedTasks[0].ExpirationDate)))
	h.restart()
	out = get(arn)
	assert.True(t, out.ProtectedTasks[0].ProtectionEnabled, "the protection is kept across a restart")
	assert.True(t, now.Add(48*time.Hour).Equal(aws.ToTime(out.ProtectedTasks[0].ExpirationDate)))

	up, err = client.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("default"), Tasks: []string{arn},
		ProtectionEnabled: false, ExpiresInMinutes: aws.Int32(0)})
	require.NoError(t, err, "expiresInMinutes is not checked when protection is turned off")
	assert.False(t, up.ProtectedTasks[0].ProtectionEnabled)
	assert.Nil(t, up.ProtectedTasks[0].ExpirationDate)
	assert.False(t, get(arn).ProtectedTasks[0].ProtectionEnabled)

	unknown := "arn:aws:ecs:local:000000000000:task/default/0123456789abcdef0123456789abcdef"
	out = get(unknown, "feedfacefeedfacefeedfacefeedface")
	assert.Empty(t, out.ProtectedTasks)
	require.Len(t, out.Failures, 2)
	assert.Equal(t, unknown, aws.ToString(out.Failures[0].Arn))
	assert.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))
	assert.Equal(t, "arn:aws:ecs:local:000000000000:task/default/feedfacefeedfacefeedfacefeedface", aws.ToString(out.Failures[1].Arn))
	up, err = client.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("default"), Tasks: []string{unknown, arn},
		ProtectionEnabled: true, ExpiresInMinutes: aws.Int32(1)})
	require.NoError(t, err)
	require.Len(t, up.Failures, 1)
	assert.Equal(t, "MISSING", aws.ToString(up.Failures[0].Reason))
	require.Len(t, up.ProtectedTasks, 1, "the known task is protected all the same")
	assert.True(t, up.ProtectedTasks[0].ProtectionEnabled)
}

// TestTaskProtectionValidation: the errors ECS answers for a bad UpdateTaskProtection or
// GetTaskProtection: expiresInMinutes out of 1–2880, too many tasks, no tasks, an unknown cluster.
func TestTaskProtectionValidation(t *testing.T) {
	h := newHarness(t)
	client := sdkClient(t, h)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	for _, minutes := range []int32{0, -1, 2881} {
		_, err := client.UpdateTaskProtection(t.Context(), &ecs.UpdateTaskProtectionInput{Cluster: aws.String("default"),
			Tasks: []string{arn}, ProtectionEnabled: true, ExpiresInMinutes: aws.Int32(minutes)})
		var ipe *types.InvalidParameterException
		require.True(t, errors.As(err, &ipe), "%d minutes: %v", minutes, err)
		assert.Equal(t, "expiresInMinutes must be between 1 and 2880.", ipe.ErrorMessage())
	}
	assert.False(t, at(t, h.ok("GetTaskProtection", mustJSON(map[string]any{"tasks": []string{arn}})), "protectedTasks", 0,
		"protectionEnabled").(bool), "a refused update changes nothing")

	eleven := make([]string, 11)
	for i := range eleven {
		eleven[i] = arn
	}
	h.fails("UpdateTaskProtection", mustJSON(map[string]any{"tasks": eleven, "protectionEnabled": true}), "InvalidParameterException")
	h.fails("UpdateTaskProtection", mustJSON(map[string]any{"tasks": []string{}, "protectionEnabled": true}), "InvalidParameterException")
	h.fails("UpdateTaskProtection", mustJSON(map[string]any{"tasks": []string{arn}}), "InvalidParameterException")
	h.fails("UpdateTaskProtection", `{"tasks":["`+arn+`"],"protectionEnabled":true,"expiresInMinutes":"5"}`, "SerializationException")
	h.fails("GetTaskProtection", mustJSON(map[string]any{"tasks": make([]string, 101)}), "InvalidParameterException")
	h.fails("GetTaskProtection", mustJSON(map[string]any{"cluster": "nope", "tasks": []string{arn}}), "ClusterNotFoundException")
	h.fails("UpdateTaskProtection", mustJSON(map[string]any{"cluster": "nope", "tasks": []string{arn}, "protectionEnabled": true}),
		"ClusterNotFoundException")
}

// TestTaskProtectionForgottenWithItsTask: a stopped task keeps its protection record until it is
// forgotten, an hour after it stopped; then it is MISSING.
func TestTaskProtectionForgottenWithItsTask(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	h.ok("UpdateTaskProtection", mustJSON(map[string]any{"tasks": []string{arn}, "protectionEnabled": true, "expiresInMinutes": 2880}))
	stopOnAgent(t, h, arn)
	h.clock.Advance(61 * time.Minute)
	h.restart()
	out := h.ok("GetTaskProtection", mustJSON(map[string]any{"tasks": []string{arn}}))
	assert.Empty(t, out["protectedTasks"])
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"))
	assert.Equal(t, arn, at(t, out, "failures", 0, "arn"))
}

// TestTaskProtectionRefusesStrangers: UpdateTaskProtection unsigned, or signed with other keys,
// protects nothing, and GetTaskProtection tells such a caller nothing.
func TestTaskProtectionRefusesStrangers(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	for name, keys := range map[string]*localauth.Keys{"unsigned": nil, "other keys": {AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}} {
		for op, body := range map[string]string{
			"UpdateTaskProtection": `{"tasks":["` + arn + `"],"protectionEnabled":true,"expiresInMinutes":60}`,
			"GetTaskProtection":    `{"tasks":["` + arn + `"]}`,
		} {
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-amz-json-1.1")
			req.Header.Set("X-Amz-Target", targetPrefix+op)
			if keys != nil {
				require.NoError(t, localauth.Sign(t.Context(), req, []byte(body), *keys, "us-east-1", time.Now()))
			}
			rec := httptest.NewRecorder()
			h.srv.Handler().ServeHTTP(rec, req)
			assert.GreaterOrEqual(t, rec.Code, 400, "%s %s", name, op)
			assert.NotContains(t, rec.Body.String(), arn, "%s %s", name, op)
		}
	}
	assert.False(t, at(t, h.ok("GetTaskProtection", `{"tasks":["`+arn+`"]}`), "protectedTasks", 0, "protectionEnabled").(bool),
		"a stranger's update protected nothing")
}

package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// oneTask is the task endpoint's TaskSource and CredentialsSource for tasks by token, each with the
// role credentials of its CredentialsID, if any.
type oneTask struct {
	tasks map[string]*task.Task // by metadata token
	creds map[string]taskcreds.Credentials
}

func (o oneTask) ByToken(token string) (*task.Task, string, bool) {
	t, ok := o.tasks[token]
	if !ok {
		return nil, "", false
	}
	return t.Clone(), "app", true
}

func (o oneTask) Tasks() []*task.Task { return nil }

func (o oneTask) TaskCredentials(_ context.Context, id string) (taskcreds.Credentials, error) {
	c, ok := o.creds[id]
	if !ok {
		return taskcreds.Credentials{}, fmt.Errorf("credentials %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// TestProtectionSignedByTheAgentInLocalMode: in local mode the agent API's calls reach the embedded
// control plane signed with the agent's keys, for the task the token names: a container's PUT and GET
// of its task's protection work end to end, the control plane's range check comes back as ECS's 400,
// and a task without a role is still refused. Signed with the task role's (STS-issued) credentials,
// as in ecs mode, the control plane would refuse them.
func TestProtectionSignedByTheAgentInLocalMode(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_ECS", "")
	dataDir := t.TempDir()
	keys, err := localauth.Ensure(localauth.Path(dataDir))
	require.NoError(t, err)
	cp, err := localcp.New(localcp.Config{DBPath: filepath.Join(dataDir, "localcp.db"), Keys: keys}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Close() })
	ts := httptest.NewServer(cp.Handler())
	t.Cleanup(ts.Close)
	ctx := t.Context()
	endpoint := ts.URL
	def := json.RawMessage(`{"family":"guarded","containerDefinitions":[{"name":"app","image":"busybox","memory":32}]}`)
	require.NoError(t, localcp.Call(ctx, http.DefaultClient, endpoint, keys, "RegisterTaskDefinition", def, nil))
	var run struct {
		Tasks []struct {
			TaskArn string `json:"taskArn"`
		} `json:"tasks"`
	}
	require.NoError(t, localcp.Call(ctx, http.DefaultClient, endpoint, keys, "RunTask", map[string]any{"taskDefinition": "guarded"}, &run))
	require.Len(t, run.Tasks, 1)
	arn := run.Tasks[0].TaskArn

	cfg := &config.Config{Mode: config.ModeLocal, DataDir: dataDir, LocalControlPlaneAddr: strings.TrimPrefix(endpoint, "http://")}
	client, _, _, err := NewECSClient(ctx, cfg, logger.Nop())
	require.NoError(t, err)
	src := oneTask{
		tasks: map[string]*task.Task{
			"tok-role":   {Arn: arn, CredentialsID: "role-id"},
			"tok-norole": {Arn: arn},
		},
		creds: map[string]taskcreds.Credentials{"role-id": {AccessKeyID: "ASIASTSISSUEDKEY0001", SecretAccessKey: "sts-secret", SessionToken: "sts-token"}},
	}
	handler := func(agentSigns bool) *taskendpoint.Handler {
		h, err := taskendpoint.New(taskendpoint.Config{Tasks: src, Credentials: src, Protection: taskProtection{ecs: client, agentSigns: agentSigns}})
		require.NoError(t, err)
		return h
	}
	local := handler(planOf(cfg).agentSignsTaskCalls)
	do := func(h *taskendpoint.Handler, method, token, body string) (int, map[string]any) {
		req := httptest.NewRequest(method, "http://169.254.170.2/api/"+token+"/task-protection/v1/state", strings.NewReader(body))
		req.RemoteAddr = "172.17.0.2:40000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		out := map[string]any{}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
		return rec.Code, out
	}

	before := time.Now()
	status, out := do(local, http.MethodPut, "tok-role", `{"ProtectionEnabled":true,"ExpiresInMinutes":30}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	p := out["protection"].(map[string]any)
	assert.Equal(t, arn, p["TaskArn"])
	assert.Equal(t, true, p["ProtectionEnabled"])
	expires, err := time.Parse(time.RFC3339Nano, p["ExpirationDate"].(string))
	require.NoError(t, err)
	assert.WithinRange(t, expires, before.Add(30*time.Minute-time.Second), time.Now().Add(30*time.Minute+time.Second))

	status, out = do(local, http.MethodGet, "tok-role", "")
	require.Equal(t, http.StatusOK, status, "%v", out)
	assert.Equal(t, true, out["protection"].(map[string]any)["ProtectionEnabled"])

	status, out = do(local, http.MethodPut, "tok-role", `{"ProtectionEnabled":true,"ExpiresInMinutes":2881}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, map[string]any{"Arn": arn, "Code": "InvalidParameterException", "Message": "expiresInMinutes must be between 1 and 2880."}, out["error"])
	assert.NotEmpty(t, out["requestID"], "the control plane's request ID")

	status, out = do(local, http.MethodGet, "tok-norole", "")
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, "AccessDeniedException", out["error"].(map[string]any)["Code"])

	status, out = do(handler(false), http.MethodGet, "tok-role", "")
	assert.Equal(t, http.StatusBadRequest, status, "the control plane refuses keys it did not issue: %v", out)
	assert.Equal(t, "UnrecognizedClientException", out["error"].(map[string]any)["Code"])
}

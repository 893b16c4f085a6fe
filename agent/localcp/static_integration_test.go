//go:build integration

package localcp

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
)

// TestAWSCLIStaticTasks: the AWS CLI lists and describes the agent's static tasks (a stand-in for
// the engine here), marked as such, and prints StopTask's refusal naming the file.
func TestAWSCLIStaticTasks(t *testing.T) {
	cli := awsCLI(t)
	keysFile := localauth.Path(t.TempDir())
	keys, err := localauth.Ensure(keysFile)
	require.NoError(t, err)
	h := newHarnessWithKeys(t, keys)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	h.static.set(staticWeb(ci), staticOld(ci))
	env := cliEnv("AWS_SHARED_CREDENTIALS_FILE="+keysFile, "AWS_PROFILE="+localauth.Profile)
	runJSON := func(args ...string) map[string]any {
		t.Helper()
		stdout, stderr, err := runCLI(t, cli, ts.URL, env, args...)
		require.NoError(t, err, "aws ecs %s: %s", strings.Join(args, " "), stderr)
		out := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		return out
	}

	assert.Equal(t, []any{webArn}, runJSON("list-tasks")["taskArns"])
	assert.Equal(t, []any{webArn}, runJSON("list-tasks", "--started-by", StaticStartedBy, "--container-instance", lastSegment(ci))["taskArns"])
	assert.Equal(t, []any{oldArn}, runJSON("list-tasks", "--desired-status", "STOPPED")["taskArns"])

	out := runJSON("describe-tasks", "--tasks", webID, "--include", "TAGS")
	require.Len(t, out["tasks"], 1)
	want := wantStaticWeb(t, ci)
	for k, v := range map[string]string{"createdAt": "2025-03-01T11:01:00+00:00", "pullStartedAt": "2025-03-01T11:01:01+00:00",
		"pullStoppedAt": "2025-03-01T11:01:02.500000+00:00", "startedAt": "2025-03-01T11:01:03+00:00", "connectivityAt": "2025-03-01T11:01:03+00:00"} {
		want[k] = v // as the CLI prints times
	}
	assert.Equal(t, want, at(t, out, "tasks", 0))
	out = runJSON("describe-tasks", "--tasks", webArn)
	assert.NotContains(t, at(t, out, "tasks", 0), "tags", "without --include TAGS")

	out = runJSON("describe-container-instances", "--container-instances", ci)
	assert.EqualValues(t, 1, at(t, out, "containerInstances", 0, "runningTasksCount"))

	_, stderr, err := runCLI(t, cli, ts.URL, env, "stop-task", "--task", webArn, "--reason", "enough")
	require.Error(t, err)
	assert.Contains(t, stderr, "An error occurred (ClientException) when calling the StopTask operation: "+webStopRefused)
	assert.Equal(t, []any{webArn}, runJSON("list-tasks")["taskArns"], "still running")
}

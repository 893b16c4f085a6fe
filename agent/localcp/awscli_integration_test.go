//go:build integration

package localcp

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// awsCLI finds the AWS CLI; its absence fails the test.
func awsCLI(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/aws"); err == nil {
		return "/usr/bin/aws"
	}
	p, err := exec.LookPath("aws")
	require.NoError(t, err, "the AWS CLI is required (apt-get install awscli)")
	return p
}

// TestAWSCLI drives the control plane with the real AWS CLI, as people do on a laptop.
func TestAWSCLI(t *testing.T) {
	cli := awsCLI(t)
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)

	run := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), cli, append([]string{"ecs"}, append(args, "--endpoint-url", ts.URL, "--region", "us-east-1", "--output", "json")...)...)
		cmd.Env = append(os.Environ(),
			"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y", "AWS_EC2_METADATA_DISABLED=true",
			"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	runJSON := func(args ...string) map[string]any {
		t.Helper()
		stdout, stderr, err := run(args...)
		require.NoError(t, err, "aws ecs %s: %s", strings.Join(args, " "), stderr)
		out := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		return out
	}

	out := runJSON("list-clusters")
	assert.Equal(t, []any{"arn:aws:ecs:local:000000000000:cluster/default"}, out["clusterArns"])

	def := filepath.Join(t.TempDir(), "web.json")
	require.NoError(t, os.WriteFile(def, []byte(webRequest(t)), 0o600))
	out = runJSON("register-task-definition", "--cli-input-json", "file://"+def)
	assert.Equal(t, "arn:aws:ecs:local:000000000000:task-definition/web:1", at(t, out, "taskDefinition", "taskDefinitionArn"))

	// The shorthand form of the CLI.
	out = runJSON("register-task-definition", "--family", "sleep",
		"--container-definitions", `[{"name":"app","image":"busybox","memory":32,"command":["sleep","60"]}]`)
	assert.EqualValues(t, 1, at(t, out, "taskDefinition", "revision"))

	out = runJSON("describe-task-definition", "--task-definition", "web")
	assert.Equal(t, "ACTIVE", at(t, out, "taskDefinition", "status"))

	out = runJSON("run-task", "--cluster", "default", "--task-definition", "sleep:1",
		"--overrides", `{"containerOverrides":[{"name":"app","command":["sleep","1"]}]}`)
	arn := at(t, out, "tasks", 0, "taskArn").(string)
	out = runJSON("describe-tasks", "--tasks", arn)
	assert.Equal(t, "PENDING", at(t, out, "tasks", 0, "lastStatus"))
	out = runJSON("list-tasks")
	assert.Equal(t, []any{arn}, out["taskArns"])
	out = runJSON("stop-task", "--task", arn, "--reason", "done")
	assert.Equal(t, "STOPPED", at(t, out, "task", "desiredStatus"))
	runJSON("list-task-definitions", "--family-prefix", "we")
	runJSON("list-container-instances")

	_, stderr, err := run("describe-task-definition", "--task-definition", "nope")
	require.Error(t, err)
	assert.Contains(t, stderr, "An error occurred (ClientException) when calling the DescribeTaskDefinition operation: Unable to describe task definition.")

	_, stderr, err = run("register-task-definition", "--family", "bad",
		"--container-definitions", `[{"name":"app","memory":32,"image":"busybox","dependsOn":[{"containerName":"x","condition":"START"}]}]`)
	require.Error(t, err)
	assert.Contains(t, stderr, "(ClientException) when calling the RegisterTaskDefinition operation")
	assert.Contains(t, stderr, "containerDefinitions[0].dependsOn[0].containerName")
}

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

	"github.com/berth-agent/berth/agent/localauth"
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

// cliEnv is the environment the AWS CLI runs with: no configuration of the host's, no IMDS, and the
// given variables.
func cliEnv(vars ...string) []string {
	env := []string{"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_PAGER=", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	return append(env, vars...)
}

// runCLI runs `aws ecs args...` against endpoint with env and returns stdout and stderr.
func runCLI(t *testing.T, cli, endpoint string, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), cli, append([]string{"ecs"}, append(args, "--endpoint-url", endpoint, "--region", "us-east-1", "--output", "json")...)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestAWSCLI drives the control plane with the real AWS CLI, as people do on a laptop, signing with
// the berth profile of the keys file as the README shows.
func TestAWSCLI(t *testing.T) {
	cli := awsCLI(t)
	keysFile := localauth.Path(t.TempDir())
	keys, err := localauth.Ensure(keysFile)
	require.NoError(t, err)
	h := newHarnessWithKeys(t, keys)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	profile := cliEnv("AWS_SHARED_CREDENTIALS_FILE="+keysFile, "AWS_PROFILE="+localauth.Profile)

	run := func(args ...string) (string, string, error) {
		t.Helper()
		return runCLI(t, cli, ts.URL, profile, args...)
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

	// Strangers: other keys, no signature, and a signed request naming a foreign Host, which is what
	// a web page gets through DNS rebinding (the CLI reaches the server through it as a proxy).
	def2 := filepath.Join(t.TempDir(), "root.json")
	require.NoError(t, os.WriteFile(def2, []byte(rootDef), 0o600))
	register := []string{"register-task-definition", "--cli-input-json", "file://" + def2}
	for _, c := range []struct {
		name, endpoint string
		env            []string
		args           []string
		want           string
	}{
		{"other keys", ts.URL, cliEnv("AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_ACCESS_KEY_ID=AKIASTRANGERSTRANGER", "AWS_SECRET_ACCESS_KEY=guess"), register,
			"(UnrecognizedClientException) when calling the RegisterTaskDefinition operation: The security token included in the request is invalid."},
		{"the right key id with another secret", ts.URL, cliEnv("AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_ACCESS_KEY_ID="+keys.AccessKeyID, "AWS_SECRET_ACCESS_KEY=guess"), register,
			"(InvalidSignatureException) when calling the RegisterTaskDefinition operation"},
		{"unsigned", ts.URL, profile, append([]string{"--no-sign-request"}, register...),
			"(MissingAuthenticationTokenException) when calling the RegisterTaskDefinition operation: Missing Authentication Token"},
		{"foreign host", "http://berth.attacker.example:51677", append(profile, "HTTP_PROXY="+ts.URL, "http_proxy="+ts.URL, "NO_PROXY=", "no_proxy="), register,
			"(AccessDeniedException) when calling the RegisterTaskDefinition operation: Host \"berth.attacker.example:51677\" is not a loopback name or address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := runCLI(t, cli, c.endpoint, c.env, c.args...)
			require.Error(t, err)
			assert.Contains(t, stderr, c.want)
		})
	}
	out = runJSON("list-task-definitions", "--family-prefix", "root")
	assert.Empty(t, out["taskDefinitionArns"], "no refused request registered anything")
}

// TestAWSCLIExecuteCommand runs `aws ecs execute-command` as people type it: the CLI first checks
// that Session Manager's plugin is installed (a stand-in here, which only exits 0), then calls
// ExecuteCommand, whose error it prints: the berth exec command to use on this host instead.
func TestAWSCLIExecuteCommand(t *testing.T) {
	cli := awsCLI(t)
	keysFile := localauth.Path(t.TempDir())
	keys, err := localauth.Ensure(keysFile)
	require.NoError(t, err)
	h := newHarnessWithKeys(t, keys)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "session-manager-plugin"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	env := cliEnv("AWS_SHARED_CREDENTIALS_FILE="+keysFile, "AWS_PROFILE="+localauth.Profile)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + bin + ":" + strings.TrimPrefix(kv, "PATH=")
		}
	}
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	id := arn[strings.LastIndexByte(arn, '/')+1:]

	_, stderr, err := runCLI(t, cli, ts.URL, env, "execute-command", "--cluster", "default", "--task", id,
		"--container", "app", "--command", "/bin/sh", "--interactive")
	require.Error(t, err)
	assert.Contains(t, stderr, "An error occurred (TargetNotConnectedException) when calling the ExecuteCommand operation: "+
		"ECS Exec needs AWS (a Session Manager session), which the embedded control plane does not have; "+
		"on this host, run the command with: berth exec "+id+" app -- /bin/sh")
}

//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/app"
)

// TestIntegrationCommandsFindTheAgent is the first hour after `make run`: the agent runs in local
// mode with its data directory, introspection and control plane addresses and cluster set in its own
// environment only. It writes its run file; berth run, ps, stop and drain, run without any of those
// (nor ECS_DATADIR), find it through that file and work. The agent removes the file when it exits,
// and berth run then says what it tried and what to do.
func TestIntegrationCommandsFindTheAgent(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	runFile := filepath.Join(t.TempDir(), "run", "berth", "agent.json")
	controlPlane := freeAddr(t)
	agent := env.start(app.RunFileEnv+"="+runFile, "ECS_LOCAL_CONTROL_PLANE_ADDR="+controlPlane)

	waitRunFile(t, agent, runFile, 60*time.Second)
	data, err := os.ReadFile(runFile)
	require.NoError(t, err)
	var info app.RunInfo
	require.NoError(t, json.Unmarshal(data, &info), "%s", data)
	assert.Equal(t, app.RunInfo{PID: agent.cmd.Process.Pid, DataDir: env.dataDir, Mode: "local", Cluster: env.cluster,
		IntrospectionAddr: agent.addr, LocalControlPlaneAddr: controlPlane, TaskEndpointAddr: "127.0.0.1:51679"}, info)
	assert.NotContains(t, string(data), "ecretAccessKey", "no secret in the run file")
	st, err := os.Stat(runFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	st, err = os.Stat(filepath.Dir(runFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "the directory the agent made, whatever its umask")

	// The commands' environment names nothing of the agent but its run file.
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ECS_") && !strings.HasPrefix(kv, app.RunFileEnv+"=") {
			environ = append(environ, kv)
		}
	}
	environ = append(environ, "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
		app.RunFileEnv+"="+runFile)
	berth := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), agent.bin, args...)
		cmd.Env = environ
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exitErr *exec.ExitError
		switch {
		case errors.As(err, &exitErr):
			code = exitErr.ExitCode()
		case err != nil:
			t.Fatalf("berth %s: %v", strings.Join(args, " "), err)
		}
		return out.String(), errOut.String(), code
	}

	const family = "runfile-it"
	defFile := filepath.Join(t.TempDir(), "def.json")
	require.NoError(t, os.WriteFile(defFile, []byte(fmt.Sprintf(`{"family": %q, "containerDefinitions": [
		{"name": "app", "image": %q, "memory": 16, "essential": true, "command": ["sleep"]}]}`, family, testappImage)), 0o600))
	stdout, stderr, code := berth("run", defFile, "--wait", "90s")
	require.Equal(t, 0, code, "berth run: stdout:\n%s\nstderr:\n%s\nagent log:\n%s", stdout, stderr, agent.out.String())
	assert.Empty(t, stderr)
	started := regexp.MustCompile(`(?m)^started (arn:\S+/` + regexp.QuoteMeta(env.cluster) + `/(\S+))$`).FindStringSubmatch(stdout)
	require.NotNil(t, started, "berth run names the task it started, in the agent's cluster:\n%s", stdout)
	arn, id := started[1], started[2]
	assert.Contains(t, stdout, id+": RUNNING\n")

	stdout, stderr, code = berth("ps")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, regexp.QuoteMeta(id)+`\s+`+family+`:1\s+RUNNING\s+RUNNING\s+app\s+RUNNING`, stdout)

	stdout, stderr, code = berth("stop", arn, "--wait", "60s")
	require.Equal(t, 0, code, "berth stop: stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, id+": STOPPED\n")

	stdout, stderr, code = berth("drain")
	require.Equal(t, 0, code, "berth drain: stderr:\n%s", stderr)
	assert.Regexp(t, `^arn:\S+:container-instance/`+regexp.QuoteMeta(env.cluster)+`/\S+ is DRAINING\n$`, stdout)

	stdout, stderr, code = berth("healthcheck")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "healthy: "+agent.addr+"\n", stdout)

	agent.stop()
	assert.NoFileExists(t, runFile, "the agent removes its run file when it exits")
	_, stderr, code = berth("run", defFile)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "berth run: no running agent found in "+runFile+" (it does not exist)")
	assert.Contains(t, stderr, "set ECS_DATADIR to the running agent's data directory")
}

// waitRunFile waits until the agent has written its run file, failing the test with its log when it
// exits first or the timeout passes.
func waitRunFile(t *testing.T, agent *agentRun, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-agent.exited:
			agent.exited <- err
			t.Fatalf("the agent exited (%v) before it wrote its run file; log:\n%s", err, agent.out.String())
		case <-deadline:
			t.Fatalf("the agent did not write its run file within %s; log:\n%s", timeout, agent.out.String())
		case <-tick.C:
		}
	}
}

//go:build integration

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// berthCLI runs the binary of r with args against r's agent, stdin as its standard input, and
// returns what it printed and its exit status.
func (r *agentRun) berthCLI(stdin string, args ...string) (stdout, stderr string, code int) {
	r.t.Helper()
	cmd := exec.CommandContext(r.t.Context(), r.bin, args...)
	cmd.Env = r.environ
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		r.t.Fatalf("berth %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestIntegrationExecAndLogs runs a three-container task through the agent and uses berth exec and
// berth logs on it: a command's stdin, stdout, stderr and exit status pass through (no TTY: stdin
// is a pipe), the default container is the essential one, logs show each container's lines (with
// their names when several are shown), --tail, a none-driver container named with its driver,
// -f ending when the task stops, and exec refusing the stopped container.
func TestIntegrationExecAndLogs(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	const family = "cliexec"
	def := fmt.Sprintf(`{"family": %q, "containerDefinitions": [
		{"name": "web", "image": %q, "memory": 16, "essential": true,
		 "command": ["print", "-out", "hello from web", "-err", "web warning", "-stay"]},
		{"name": "side", "image": %q, "memory": 16, "essential": false,
		 "command": ["print", "-out", "side one", "-out", "side two", "-stay"]},
		{"name": "quiet", "image": %q, "memory": 16, "essential": false, "command": ["sleep"],
		 "logConfiguration": {"logDriver": "none"}}]}`, family, testappImage, testappImage, testappImage)
	defFile := filepath.Join(env.tasksDir, family+".json")
	require.NoError(t, os.WriteFile(defFile, []byte(def), 0o600))
	agent := env.start()
	tasks := agent.waitTasks(90*time.Second, "the task runs", familyRunning(family, 3))
	var id string
	for _, tk := range tasks {
		if tk.Family == family {
			id = tk.Arn[strings.LastIndexByte(tk.Arn, '/')+1:]
		}
	}
	require.NotEmpty(t, id)
	prefix := id[:len(id)-3]
	// The containers print at start: wait until Docker has web's and side's lines.
	require.Eventually(t, func() bool {
		out, _, _ := agent.berthCLI("", "logs", id, "side")
		return strings.Contains(out, "side two")
	}, 30*time.Second, 200*time.Millisecond)

	t.Run("exec", func(t *testing.T) {
		stdout, stderr, code := agent.berthCLI("piped through\nberth exec\n", "exec", prefix, "--", "/testapp", "cat")
		assert.Equal(t, 0, code, stderr)
		assert.Equal(t, "piped through\nberth exec\n", stdout, "stdin reaches the command in the essential container, its output comes back")

		_, stderr, code = agent.berthCLI("", "exec", id, "--", "/testapp", "exit", "-code", "3")
		assert.Equal(t, 3, code, "the command's exit status is berth's; stderr: %s", stderr)

		stdout, stderr, code = agent.berthCLI("", "exec", "-e", "BERTH_IT=cli", id, "side", "--", "/testapp", "print", "-out", "to stdout", "-err", "to stderr")
		assert.Equal(t, 0, code, stderr)
		assert.Equal(t, "to stdout\n", stdout)
		assert.Equal(t, "to stderr\n", stderr, "without a TTY stdout and stderr stay apart")

		stdout, _, code = agent.berthCLI("", "exec", "-e", "BERTH_IT=cli", id, "side", "--", "/testapp", "env")
		assert.Equal(t, 0, code)
		assert.Contains(t, stdout, "BERTH_IT=cli\n")

		_, stderr, code = agent.berthCLI("", "exec", "nope", "--", "/testapp", "exit")
		assert.Equal(t, 125, code)
		assert.Contains(t, stderr, `berth exec: no task "nope"`)
		assert.Contains(t, stderr, id)

		_, stderr, code = agent.berthCLI("", "exec", id, "db", "--", "/testapp", "exit")
		assert.Equal(t, 125, code)
		assert.Contains(t, stderr, `has no container "db"; its containers: web, side, quiet`)
	})

	t.Run("logs", func(t *testing.T) {
		stdout, stderr, code := agent.berthCLI("", "logs", prefix, "web")
		assert.Equal(t, 0, code, stderr)
		assert.Equal(t, "hello from web\n", stdout, "one container: its lines, no prefix")
		assert.Equal(t, "web warning\n", stderr, "its stderr on stderr")

		stdout, _, code = agent.berthCLI("", "logs", id, "side", "--tail", "1")
		assert.Equal(t, 0, code)
		assert.Equal(t, "side two\n", stdout)

		stdout, stderr, code = agent.berthCLI("", "logs", id)
		assert.Equal(t, 1, code, "a container could not be shown")
		assert.Contains(t, stdout, "web   | hello from web\n")
		assert.Contains(t, stdout, "side  | side one\nside  | side two\n")
		assert.Contains(t, stderr, "web   | web warning\n")
		assert.Contains(t, stderr, "berth logs: container quiet logs with the none driver, which the Docker Engine cannot read back")
	})

	t.Run("follow until the task stops", func(t *testing.T) {
		follow := exec.CommandContext(t.Context(), agent.bin, "logs", "-f", id, "web")
		follow.Env = agent.environ
		var out, errOut logger.Buffer // read while the command writes
		follow.Stdout, follow.Stderr = &out, &errOut
		require.NoError(t, follow.Start())
		done := make(chan error, 1)
		go func() { done <- follow.Wait() }()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "hello from web") }, 30*time.Second, 100*time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("berth logs -f ended while the task runs: %v, %s", err, errOut.String())
		default: // still following: the task runs
		}
		require.NoError(t, os.Remove(defFile), "stop the static task")
		select {
		case err := <-done:
			assert.NoError(t, err, "stderr: %s", errOut.String())
		case <-time.After(90 * time.Second):
			_ = follow.Process.Kill()
			t.Fatal("berth logs -f did not end when the task stopped")
		}
		assert.Contains(t, out.String(), "hello from web\n")
		agent.waitTasks(60*time.Second, "the task stops", familyStopped(family))

		_, stderr, code := agent.berthCLI("", "exec", id, "--", "/testapp", "exit")
		assert.Equal(t, 125, code)
		assert.Regexp(t, `berth exec: container web of task `+id+` is not running: its status is STOPPED \(exit 0\)`, stderr)
	})
	agent.stop()
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/introspection"
)

const arnPrefix = "arn:aws:ecs:local:000000000000:task/default/"

func exitOf(n int) *int { return &n }

// testTasks are the agent's tasks the resolution tests run against.
func testTasks() []introspection.TaskResponse {
	return []introspection.TaskResponse{
		{Arn: arnPrefix + "0a1b2c3d4e5f", Family: "web", Version: "1", KnownStatus: "RUNNING", Containers: []introspection.ContainerResponse{
			{Name: "~internal~ecs~pause", DockerID: "pause0", KnownStatus: "RESOURCES_PROVISIONED", Essential: true},
			{Name: "sidecar", DockerID: "side0", KnownStatus: "RUNNING"},
			{Name: "web", DockerID: "web0", KnownStatus: "RUNNING", Essential: true},
			{Name: "init", DockerID: "init0", KnownStatus: "STOPPED", ExitCode: exitOf(0)},
			{Name: "late", KnownStatus: "NONE"}}},
		{Arn: arnPrefix + "0a1bffff0000", Family: "job", Version: "2", KnownStatus: "RUNNING", Containers: []introspection.ContainerResponse{
			{Name: "only", DockerID: "only0", KnownStatus: "RUNNING"}}},
		{Arn: arnPrefix + "99aa", Family: "pair", Version: "3", KnownStatus: "RUNNING", Containers: []introspection.ContainerResponse{
			{Name: "a", DockerID: "a0", KnownStatus: "RUNNING"}, {Name: "b", DockerID: "b0", KnownStatus: "RUNNING"}}},
	}
}

func TestResolveTask(t *testing.T) {
	tasks := testTasks()
	for _, tt := range []struct {
		ref     string
		want    string   // the task ID found
		wantErr []string // what the error says, when none is found
	}{
		{ref: arnPrefix + "0a1bffff0000", want: "0a1bffff0000"},
		{ref: "0a1b2c3d4e5f", want: "0a1b2c3d4e5f"},
		{ref: "0a1b2", want: "0a1b2c3d4e5f"},
		{ref: "99", want: "99aa"},
		{ref: "0a1b", wantErr: []string{`task "0a1b" is ambiguous`, "0a1b2c3d4e5f (web:1, RUNNING)", "0a1bffff0000 (job:2, RUNNING)", "give more of the ID"}},
		{ref: "zz", wantErr: []string{`no task "zz"`, "0a1b2c3d4e5f (web:1, RUNNING), 0a1bffff0000 (job:2, RUNNING), 99aa (pair:3, RUNNING)"}},
		{ref: arnPrefix + "0a1b", wantErr: []string{`no task "` + arnPrefix + `0a1b"`}},
		{ref: "", wantErr: []string{"no task given"}},
	} {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := resolveTask(tasks, tt.ref)
			if tt.wantErr != nil {
				require.Error(t, err)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, arnPrefix+tt.want, got.Arn)
		})
	}
	_, err := resolveTask(nil, "x")
	assert.EqualError(t, err, `no task "x": the agent has no tasks`)

	var many []introspection.TaskResponse
	for i := range 20 {
		many = append(many, introspection.TaskResponse{Arn: arnPrefix + strings.Repeat("f", i+1), Family: "f", Version: "1", KnownStatus: "RUNNING"})
	}
	_, err = resolveTask(many, "nope")
	assert.Contains(t, err.Error(), "and 12 more (berth ps lists them)", "a long list is cut short")
}

func TestPickContainer(t *testing.T) {
	tasks := testTasks()
	web, job, pair := tasks[0], tasks[1], tasks[2]

	c, err := defaultContainer(web)
	require.NoError(t, err)
	assert.Equal(t, "web", c.Name, "the first essential container; the pause container, essential and first, never")
	c, err = defaultContainer(job)
	require.NoError(t, err)
	assert.Equal(t, "only", c.Name, "the only container, essential or not")
	_, err = defaultContainer(pair)
	assert.EqualError(t, err, "task 99aa has 2 containers and none is essential: name one of: a, b")
	_, err = defaultContainer(introspection.TaskResponse{Arn: arnPrefix + "empty"})
	assert.EqualError(t, err, "task empty has no containers")

	c, err = namedContainer(web, "sidecar")
	require.NoError(t, err)
	assert.Equal(t, "side0", c.DockerID)
	_, err = namedContainer(web, "db")
	assert.EqualError(t, err, `task 0a1b2c3d4e5f has no container "db"; its containers: sidecar, web, init, late`)
	_, err = namedContainer(web, "~internal~ecs~pause")
	assert.Error(t, err, "the pause container cannot be named either")
}

func TestParseExec(t *testing.T) {
	for _, tt := range []struct {
		name     string
		args     []string
		want     execRequest
		wantCode int // an exitCode, -1 for none
		wantErr  string
	}{
		{name: "task and command", args: []string{"0a1b", "--", "/testapp", "env", "-stay"}, wantCode: -1,
			want: execRequest{task: "0a1b", cfg: dockerclient.ExecConfig{Cmd: []string{"/testapp", "env", "-stay"}}}},
		{name: "every flag", args: []string{"-u", "1000:1000", "-w", "/tmp", "-e", "A=1", "-e", "B=x=y", "-T", "0a1b", "web", "--", "sh", "--", "-c"}, wantCode: -1,
			want: execRequest{task: "0a1b", container: "web", noTTY: true,
				cfg: dockerclient.ExecConfig{Cmd: []string{"sh", "--", "-c"}, User: "1000:1000", WorkingDir: "/tmp", Env: []string{"A=1", "B=x=y"}}}},
		{name: "flags after the task", args: []string{"0a1b", "-t", "web", "-e", "K=V", "--", "top"}, wantCode: -1,
			want: execRequest{task: "0a1b", container: "web", forceTTY: true, cfg: dockerclient.ExecConfig{Cmd: []string{"top"}, Env: []string{"K=V"}}}},
		{name: "no --", args: []string{"0a1b", "sh"}, wantCode: 2, wantErr: "no command: give it after --"},
		{name: "nothing after --", args: []string{"0a1b", "--"}, wantCode: 2, wantErr: "no command after --"},
		{name: "no task", args: []string{"--", "sh"}, wantCode: 2, wantErr: "want TASK [CONTAINER] before --, got 0"},
		{name: "three names", args: []string{"a", "b", "c", "--", "sh"}, wantCode: 2, wantErr: "got 3 argument(s)"},
		{name: "-t and -T", args: []string{"-t", "-T", "a", "--", "sh"}, wantCode: 2, wantErr: "contradict"},
		{name: "bad -e", args: []string{"-e", "NOEQUALS", "a", "--", "sh"}, wantCode: 2, wantErr: `want K=V, got "NOEQUALS"`},
		{name: "unknown flag", args: []string{"-x", "a", "--", "sh"}, wantCode: 2, wantErr: "flag provided but not defined: -x"},
		{name: "help", args: []string{"-h"}, wantCode: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got, _, err := parseExec(mustCommand(t, "exec"), tt.args, &stdout, &stderr)
			if tt.wantCode == 0 {
				assert.Equal(t, exitCode(0), err)
				assert.Contains(t, stdout.String(), "usage: berth exec [flags] TASK [CONTAINER] -- COMMAND [ARG...]\n", "help goes to stdout")
				assert.Empty(t, stderr.String())
				return
			}
			if tt.wantCode > 0 {
				code, ok := flagExit(err)
				require.True(t, ok, "an exit code, got %v", err)
				assert.Equal(t, tt.wantCode, code)
				assert.Contains(t, stderr.String(), tt.wantErr)
				assert.Empty(t, stdout.String())
				return
			}
			require.NoError(t, err, stderr.String())
			assert.Equal(t, tt.want, got)
		})
	}
}

// fakeExecer records the command it was asked to run and answers with code or err.
type fakeExecer struct {
	id     string
	cfg    dockerclient.ExecConfig
	code   int
	err    error
	onExec func()
}

func (f *fakeExecer) Exec(_ context.Context, id string, cfg dockerclient.ExecConfig) (int, error) {
	f.id, f.cfg = id, cfg
	if f.onExec != nil {
		f.onExec()
	}
	if cfg.Stdin != nil && cfg.Stdout != nil {
		_, _ = io.Copy(cfg.Stdout, cfg.Stdin)
	}
	return f.code, f.err
}

// agentWith serves tasks on /v1/tasks as the agent's introspection API does and returns a
// configuration pointing at it.
func agentWith(t *testing.T, tasks []introspection.TaskResponse) *config.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/tasks" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(introspection.TasksResponse{Tasks: tasks})
	}))
	t.Cleanup(srv.Close)
	return &config.Config{IntrospectionAddr: srv.Listener.Addr().String()}
}

func TestExecIn(t *testing.T) {
	cfg := agentWith(t, testTasks())
	stdin, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = stdin.Close() })
	_, _ = w.WriteString("piped\n")
	require.NoError(t, w.Close())

	f := &fakeExecer{code: 3}
	var stdout, stderr bytes.Buffer
	req := execRequest{task: "0a1b2", cfg: dockerclient.ExecConfig{Cmd: []string{"/testapp", "cat"}, User: "u", Env: []string{"A=1"}}}
	code, err := execIn(t.Context(), cfg, agentLookup{}, f, req, stdin, &stdout, &stderr)
	require.NoError(t, err)
	assert.Equal(t, 3, code, "the command's exit code")
	assert.Equal(t, "web0", f.id, "the first essential container's Docker ID")
	assert.False(t, f.cfg.TTY, "a pipe is no terminal")
	assert.Equal(t, []string{"/testapp", "cat"}, f.cfg.Cmd)
	assert.Equal(t, "u", f.cfg.User)
	assert.Equal(t, "piped\n", stdout.String(), "stdin and stdout handed to the command")

	req.forceTTY = true
	_, err = execIn(t.Context(), cfg, agentLookup{}, f, req, stdin, &stdout, &stderr)
	require.NoError(t, err)
	assert.True(t, f.cfg.TTY, "-t forces a TTY")
	assert.Nil(t, f.cfg.Resize, "no terminal to take sizes from")

	for _, tt := range []struct {
		task, container string
		execErr         error
		want            string
	}{
		{task: "0a1b2", container: "init", want: "container init of task 0a1b2c3d4e5f is not running: its status is STOPPED (exit 0)"},
		{task: "0a1b2", container: "late", want: "container late of task 0a1b2c3d4e5f has no Docker container yet (status NONE)"},
		{task: "0a1b2", container: "db", want: `task 0a1b2c3d4e5f has no container "db"; its containers: sidecar, web, init, late`},
		{task: "0a1b", want: `task "0a1b" is ambiguous`},
		{task: "nope", want: `no task "nope"`},
		{task: "0a1bf", execErr: dockerclient.ErrNotRunning, want: "container only of task 0a1bffff0000 is not running (the Docker Engine says so)"},
		{task: "0a1bf", execErr: &dockerclient.NotFoundError{Kind: "container", Name: "only0"}, want: "container only of task 0a1bffff0000 is gone from the Docker Engine"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			f := &fakeExecer{err: tt.execErr}
			_, err := execIn(t.Context(), cfg, agentLookup{}, f, execRequest{task: tt.task, container: tt.container, cfg: dockerclient.ExecConfig{Cmd: []string{"x"}}}, stdin, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestExecInterrupted(t *testing.T) {
	cfg := agentWith(t, testTasks())
	ctx, cancel := context.WithCancel(t.Context())
	f := &fakeExecer{err: context.Canceled}
	f.onExec = cancel // the signal comes while the command runs
	_, err := execIn(ctx, cfg, agentLookup{}, f, execRequest{task: "0a1bf", cfg: dockerclient.ExecConfig{Cmd: []string{"x"}}}, nil, io.Discard, io.Discard)
	assert.EqualError(t, err, "interrupted; the command may still be running in container only of task 0a1bffff0000")
}

func TestExecAgentNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var stderr bytes.Buffer
	code := runExec(t.Context(), mustCommand(t, "exec"), []string{"web", "--", "sh"}, testEnviron(t, "", "", "ECS_INTROSPECTION_ADDR="+addr), nil, io.Discard, &stderr)
	assert.Equal(t, exitFailed, code, "berth's own failure, told apart from the command's statuses")
	assert.Contains(t, stderr.String(), "berth exec: is the agent running? its introspection API at "+addr+" does not answer")
}

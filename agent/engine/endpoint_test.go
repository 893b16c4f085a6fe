package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// fakeRoles records what the engine asks of a role credentials provider.
type fakeRoles struct {
	mu        sync.Mutex
	provided  []string // taskArn|roleType|roleArn|id
	stopped   []string
	forgotten []string
}

func (f *fakeRoles) Provide(taskArn, roleType, roleArn, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.provided = append(f.provided, strings.Join([]string{taskArn, roleType, roleArn, id}, "|"))
	return nil
}

func (f *fakeRoles) Stop(taskArn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, taskArn)
}

func (f *fakeRoles) stops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stopped)
}

func (f *fakeRoles) Remove(taskArn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, taskArn)
}

func (f *fakeRoles) state() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.provided), slices.Clone(f.forgotten)
}

func envOf(opts []string) map[string]string {
	out := map[string]string{}
	for _, kv := range opts {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// TestTaskEndpointIDsAndVariables runs a task with a role: every container gets its own metadata
// token, the role one credentials ID, both saved with the task and injected into the containers;
// ByToken finds the container, the provider is asked for the role, and everything is forgotten at
// cleanup.
func TestTaskEndpointIDsAndVariables(t *testing.T) {
	roles := &fakeRoles{}
	cfg := testConfig()
	cfg.CleanupWait = 0
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Region: "eu-west-1", Roles: roles}
	h := newHarness(t, cfg)

	tk := newTask("arn:aws:ecs:r:1:task/c/role", ctr("app", func(c *task.Container) {
		c.Environment = []task.KeyValue{{Name: "AWS_REGION", Value: "us-east-2"}, {Name: "ECS_CONTAINER_METADATA_URI_V4", Value: "spoofed"},
			{Name: "ECS_AGENT_URI", Value: "spoofed"}}
	}), ctr("side"))
	tk.RoleArn = "arn:aws:iam::1:role/app"
	h.add(tk)
	running := h.waitStatus(tk.Arn, task.TaskRunning)

	require.Len(t, running.CredentialsID, 32)
	assert.False(t, running.PullStartedAt.IsZero(), "the pull's start is recorded")
	assert.False(t, running.PullStoppedAt.Before(running.PullStartedAt), "and its end, after it")
	for _, c := range running.Containers {
		assert.False(t, c.CreatedAt.IsZero(), "container %s: its creation time is recorded", c.Name)
	}
	assert.Empty(t, running.ExecutionCredentialsID)
	app, side := running.Container("app"), running.Container("side")
	require.Len(t, app.MetadataToken, 32)
	require.Len(t, side.MetadataToken, 32)
	assert.NotEqual(t, app.MetadataToken, side.MetadataToken)
	assert.NotEqual(t, app.MetadataToken, running.CredentialsID)
	var saved *task.Task
	for _, st := range h.store.snapshot() {
		if st.Arn == tk.Arn {
			saved = st
		}
	}
	require.NotNil(t, saved)
	assert.Equal(t, running.CredentialsID, saved.CredentialsID, "the ID is saved, so it survives a restart")
	assert.Equal(t, app.MetadataToken, saved.Container("app").MetadataToken)

	h.docker.mu.Lock()
	creates := slices.Clone(h.docker.creates)
	h.docker.mu.Unlock()
	require.Len(t, creates, 2)
	for _, opts := range creates {
		env := envOf(opts.Config.Env)
		c := running.Container(opts.Config.Labels[LabelContainerName])
		assert.Equal(t, "http://169.254.170.2/v4/"+c.MetadataToken, env["ECS_CONTAINER_METADATA_URI_V4"], "the agent's value wins")
		assert.Equal(t, "http://169.254.170.2/v3/"+c.MetadataToken, env["ECS_CONTAINER_METADATA_URI"])
		assert.Equal(t, "http://169.254.170.2/api/"+c.MetadataToken, env["ECS_AGENT_URI"], "the agent API, by the container's own token; the agent's value wins")
		assert.Equal(t, "/v2/credentials/"+running.CredentialsID, env["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"])
		assert.Equal(t, "eu-west-1", env["AWS_DEFAULT_REGION"])
		if c.Name == "app" {
			assert.Equal(t, "us-east-2", env["AWS_REGION"], "the definition's region wins")
		} else {
			assert.Equal(t, "eu-west-1", env["AWS_REGION"])
		}
	}

	got, name, ok := h.engine.ByToken(side.MetadataToken)
	require.True(t, ok)
	assert.Equal(t, "side", name)
	assert.Equal(t, tk.Arn, got.Arn)
	_, _, ok = h.engine.ByToken("not-a-token")
	assert.False(t, ok)

	provided, _ := roles.state()
	assert.Equal(t, []string{tk.Arn + "|TaskApplication|arn:aws:iam::1:role/app|" + running.CredentialsID}, provided)

	require.NoError(t, h.engine.StopTask(context.Background(), tk.Arn, "done"))
	require.True(t, pollUntil(func() bool { _, f := roles.state(); return len(f) == 1 }), "the provider forgets the task at cleanup")
	_, _, ok = h.engine.ByToken(side.MetadataToken)
	assert.False(t, ok, "a cleaned-up task's tokens are gone")
}

func TestEndpointEnv(t *testing.T) {
	cfg := TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Region: "r"}
	withRole := &task.Task{NetworkMode: task.NetworkBridge, CredentialsID: "id"}
	host := &task.Task{NetworkMode: task.NetworkHost, CredentialsID: "id"}
	noRole := &task.Task{NetworkMode: task.NetworkBridge}
	c := &task.Container{Name: "c", MetadataToken: "tok"}

	env := envOf(endpointEnv(withRole, c, cfg, nil))
	assert.Equal(t, map[string]string{"ECS_CONTAINER_METADATA_URI": "http://169.254.170.2/v3/tok", "ECS_CONTAINER_METADATA_URI_V4": "http://169.254.170.2/v4/tok",
		"ECS_AGENT_URI": "http://169.254.170.2/api/tok", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/id", "AWS_REGION": "r", "AWS_DEFAULT_REGION": "r"}, env)

	env = envOf(endpointEnv(noRole, c, cfg, nil))
	assert.Equal(t, "http://169.254.170.2/api/tok", env["ECS_AGENT_URI"], "a task without a role gets the agent API too (its answer is a 403)")
	assert.NotContains(t, env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
	assert.NotContains(t, env, "AWS_REGION", "the region goes with credentials, as the ECS agent does")

	assert.NotContains(t, envOf(endpointEnv(host, c, cfg, nil)), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "host network needs its own switch")
	hostCfg := cfg
	hostCfg.HostNetwork = true
	assert.Contains(t, envOf(endpointEnv(host, c, hostCfg, nil)), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")

	off := cfg
	off.Credentials = false
	assert.NotContains(t, envOf(endpointEnv(withRole, c, off, nil)), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "ECS_ENABLE_TASK_IAM_ROLE=false")
	assert.Empty(t, endpointEnv(withRole, c, TaskEndpointConfig{}, nil), "no endpoint, no variables")
	assert.Empty(t, endpointEnv(withRole, &task.Container{Pause: true}, cfg, nil), "the pause container gets nothing")
}

// TestByCredentialsID: a task's credentials IDs name it, for the task endpoint, whether the engine
// was given the task or restored it from the saved state.
func TestByCredentialsID(t *testing.T) {
	const arn = "arn:aws:ecs:r:1:task/c/creds"
	first := newHarness(t, testConfig())
	tk := newTask(arn, ctr("app"))
	tk.CredentialsID, tk.ExecutionCredentialsID = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	first.add(tk)
	first.waitStatus(arn, task.TaskRunning)
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"} {
		got, ok := first.engine.ByCredentialsID(id)
		if assert.True(t, ok, id) {
			assert.Equal(t, arn, got.Arn)
		}
	}
	for _, id := range []string{"", "0123456789abcdef", "00000000000000000000000000000000"} {
		_, ok := first.engine.ByCredentialsID(id)
		assert.False(t, ok, "%q names no task", id)
	}
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))

	second := newHarness(t, testConfig(), func(h *harness) { h.docker = first.docker })
	_, ok := second.engine.ByCredentialsID("0123456789abcdef0123456789abcdef")
	assert.False(t, ok, "nothing before Restore")
	_, err := second.engine.Restore(context.Background(), first.store.snapshot(), true)
	require.NoError(t, err)
	got, ok := second.engine.ByCredentialsID("0123456789abcdef0123456789abcdef")
	require.True(t, ok, "a restored task holds its IDs before the control plane sends its credentials")
	assert.Equal(t, arn, got.Arn)
}

// TestTaskEndpointRolesStopWithTheTask: the provider stops refreshing a task's roles once its
// containers have stopped, not at cleanup hours later; after an agent restart, a task that had stopped
// gets no role again, while a running one does.
func TestTaskEndpointRolesStopWithTheTask(t *testing.T) {
	const stoppedArn, runningArn = "arn:aws:ecs:r:1:task/c/stopped", "arn:aws:ecs:r:1:task/c/running"
	roles := &fakeRoles{}
	cfg := testConfig() // cleanup an hour after the stop
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Roles: roles}
	first := newHarness(t, cfg)
	for _, arn := range []string{stoppedArn, runningArn} {
		tk := newTask(arn, ctr("app"))
		tk.RoleArn, tk.ExecutionRoleArn = "arn:aws:iam::1:role/app", "arn:aws:iam::1:role/exec"
		first.add(tk)
		first.waitStatus(arn, task.TaskRunning)
	}
	require.NoError(t, first.engine.StopTask(context.Background(), stoppedArn, "done"))
	first.waitStatus(stoppedArn, task.TaskStopped)
	require.True(t, pollUntil(func() bool { return len(roles.stops()) > 0 }), "the stop is told once the containers stopped")
	assert.Equal(t, []string{stoppedArn}, roles.stops())
	provided, forgotten := roles.state()
	assert.Len(t, provided, 4)
	assert.Empty(t, forgotten, "the IDs are kept until cleanup")
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))
	assert.Equal(t, []string{stoppedArn}, roles.stops(), "a shutdown stops no task's roles")

	restarted := &fakeRoles{}
	cfg.TaskEndpoint.Roles = restarted
	second := newHarness(t, cfg, func(h *harness) { h.docker = first.docker })
	_, err := second.engine.Restore(context.Background(), first.store.snapshot(), true)
	require.NoError(t, err)
	second.waitStatus(runningArn, task.TaskRunning)
	provided, _ = restarted.state()
	require.Len(t, provided, 2, "only the running task's roles are provided again: %v", provided)
	for _, p := range provided {
		assert.True(t, strings.HasPrefix(p, runningArn+"|"), p)
	}
}

// TestTaskRoleWithoutTaskRoleCredentials: with task role credentials off (ECS_ENABLE_TASK_IAM_ROLE
// =false) a task with a role gets no credentials ID, so the endpoint never takes one for due, and
// its containers are told of none; the role is not provided.
func TestTaskRoleWithoutTaskRoleCredentials(t *testing.T) {
	roles := &fakeRoles{}
	cfg := testConfig()
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: false, Region: "eu-west-1", Roles: roles}
	h := newHarness(t, cfg)
	tk := newTask("arn:aws:ecs:r:1:task/c/role-off", ctr("app"))
	tk.RoleArn = "arn:aws:iam::1:role/app"
	h.add(tk)
	running := h.waitStatus(tk.Arn, task.TaskRunning)
	assert.Empty(t, running.CredentialsID)
	h.docker.mu.Lock()
	creates := slices.Clone(h.docker.creates)
	h.docker.mu.Unlock()
	require.Len(t, creates, 1)
	assert.NotContains(t, envOf(creates[0].Config.Env), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
	roles.mu.Lock()
	defer roles.mu.Unlock()
	assert.Empty(t, roles.provided, "no role is provided")
}

// fakeRoute is an EndpointRoute a test turns on and off.
type fakeRoute struct {
	mu      sync.Mutex
	reason  string
	changed chan struct{}
}

var _ EndpointRoute = (*fakeRoute)(nil)

func newFakeRoute(reason string) *fakeRoute {
	return &fakeRoute{reason: reason, changed: make(chan struct{})}
}

func (f *fakeRoute) Missing() (string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reason, f.changed
}

func (f *fakeRoute) set(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reason = reason
	close(f.changed)
	f.changed = make(chan struct{})
}

// createdFor returns how many containers of the task Docker was asked to create.
func (h *harness) createdFor(arn string) int {
	n := 0
	for _, o := range h.docker.createCalls() {
		if o.Config.Labels[LabelTaskARN] == arn {
			n++
		}
	}
	return n
}

// TestRoleTaskWaitsForTheEndpointRoute: while the route to the task endpoint is missing, a task whose
// containers get role credentials from it (task role, awslogs with the execution role) makes no
// container and waits with the route's reason as its PendingReason, then starts once the route is
// back; tasks without a role, and host-network tasks that get no credentials, start at once; a stop
// ends the wait.
func TestRoleTaskWaitsForTheEndpointRoute(t *testing.T) {
	const missing = "waiting for the task endpoint's NAT at 169.254.170.2, which the task's credentials need: no rule"
	route := newFakeRoute(missing)
	cfg := testConfig()
	cfg.AWSLogsExecutionRole = true
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Route: route}
	h := newHarness(t, cfg)

	role := newTask("arn:aws:ecs:r:1:task/c/role", ctr("app"))
	role.RoleArn = "arn:aws:iam::1:role/app"
	awslogs := newTask("arn:aws:ecs:r:1:task/c/awslogs", ctr("app", func(c *task.Container) {
		c.LogsAuthExecutionRole = true
		c.LogConfiguration = &task.LogConfiguration{LogDriver: "awslogs"}
	}))
	awslogs.ExecutionRoleArn = "arn:aws:iam::1:role/exec"
	stopped := newTask("arn:aws:ecs:r:1:task/c/stopped", ctr("app"))
	stopped.RoleArn = "arn:aws:iam::1:role/app"
	plain := newTask("arn:aws:ecs:r:1:task/c/plain", ctr("app"))
	execOnly := newTask("arn:aws:ecs:r:1:task/c/exec-only", ctr("app")) // an execution role for pulls only
	execOnly.ExecutionRoleArn = "arn:aws:iam::1:role/exec"
	host := newTask("arn:aws:ecs:r:1:task/c/host", ctr("app"))
	host.NetworkMode, host.RoleArn = task.NetworkHost, "arn:aws:iam::1:role/app"
	for _, tk := range []*task.Task{role, awslogs, stopped, plain, execOnly, host} {
		h.add(tk)
	}

	for _, tk := range []*task.Task{plain, execOnly, host} {
		got := h.waitStatus(tk.Arn, task.TaskRunning)
		assert.Empty(t, got.PendingReason, tk.Arn)
	}
	for _, tk := range []*task.Task{role, awslogs, stopped} {
		got := h.waitTask(tk.Arn, "it waits for the route", func(tk *task.Task) bool { return tk.PendingReason == missing })
		assert.Less(t, got.KnownStatus, task.TaskCreated, tk.Arn)
		assert.Zero(t, h.createdFor(tk.Arn), "%s: no container is made without the route", tk.Arn)
	}

	require.NoError(t, h.engine.StopTask(context.Background(), stopped.Arn, "no longer wanted"))
	h.waitStatus(stopped.Arn, task.TaskStopped)

	route.set("")
	for _, tk := range []*task.Task{role, awslogs} {
		got := h.waitStatus(tk.Arn, task.TaskRunning)
		assert.Empty(t, got.PendingReason, tk.Arn)
		assert.Equal(t, 1, h.createdFor(tk.Arn), tk.Arn)
	}
	assert.Zero(t, h.createdFor(stopped.Arn), "a task stopped while it waited never starts")
}

// TestRestoredRoleTaskIsNotHeld: a role task restored with its containers made is supervised as
// before while the route is missing: it does not wait, and a container that exits stops it.
func TestRestoredRoleTaskIsNotHeld(t *testing.T) {
	const arn = "arn:aws:ecs:r:1:task/c/restored"
	cfg := testConfig()
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Route: newFakeRoute("")}
	first := newHarness(t, cfg)
	tk := twoContainerTask(arn)
	tk.RoleArn = "arn:aws:iam::1:role/app"
	first.add(tk)
	first.waitStatus(arn, task.TaskRunning)
	webID := first.dockerID(arn, "web")
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))

	cfg.TaskEndpoint.Route = newFakeRoute("waiting for the task endpoint's NAT")
	second := newHarness(t, cfg, func(h *harness) { h.docker = first.docker })
	_, err := second.engine.Restore(context.Background(), first.store.snapshot(), true)
	require.NoError(t, err)
	got := second.waitStatus(arn, task.TaskRunning)
	assert.Empty(t, got.PendingReason)
	first.docker.exit(webID, 3, false, false)
	got = second.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, task.StopReasonEssentialExited, got.StoppedReason)
}

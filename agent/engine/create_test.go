package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcgroup"
)

// fakeSecrets is a SecretSource with fixed values per container name, or an error for every fetch.
type fakeSecrets struct {
	values map[string]ContainerSecrets
	err    error

	mu    sync.Mutex
	asked []string // container names, in fetch order
}

var _ SecretSource = (*fakeSecrets)(nil)

func (f *fakeSecrets) ContainerSecrets(_ context.Context, _ *task.Task, c *task.Container) (ContainerSecrets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, c.Name)
	if f.err != nil {
		return ContainerSecrets{}, f.err
	}
	return f.values[c.Name], nil
}

func (f *fakeSecrets) RepositoryAuth(_ *task.Task, c *task.Container) dockerclient.AuthSource {
	return namedAuth{name: "repository " + c.RepositoryCredentials.CredentialsParameter}
}

func (f *fakeSecrets) askedFor() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

const (
	secretARN    = "arn:aws:secretsmanager:us-west-2:012345678901:secret:db-AbCdEf"
	envFileARN   = "arn:aws:s3:::bucket/app.env"
	splunkSecret = "arn:aws:ssm:us-west-2:012345678901:parameter/splunk-token"
)

// secretContainer is an essential container with a secret, an environment file and a log driver
// secret option.
func secretContainer(c *task.Container) {
	c.Environment = []task.KeyValue{{Name: "PLAIN", Value: "plain"}}
	c.Secrets = []task.Secret{{Name: "DB_PASSWORD", ValueFrom: secretARN}}
	c.EnvironmentFiles = []task.EnvironmentFile{{Value: envFileARN, Type: "s3"}}
	c.LogConfiguration = &task.LogConfiguration{LogDriver: "splunk", Options: map[string]string{"splunk-url": "https://splunk.example"},
		SecretOptions: []task.Secret{{Name: "splunk-token", ValueFrom: splunkSecret}}}
}

// TestSecretsReachTheContainerOnly: the values a SecretSource fetched are in the created container's
// environment and log options, and in nothing the engine saves or reports.
func TestSecretsReachTheContainerOnly(t *testing.T) {
	const dbPassword, fileValue, splunkToken = "hunter2-db-7c1e", "from-file-3f9a", "splunk-tok-9b2d"
	secrets := &fakeSecrets{values: map[string]ContainerSecrets{"app": {
		FileEnv:    []string{"FROM_FILE=" + fileValue, "PLAIN=from-file"},
		SecretEnv:  []string{"DB_PASSWORD=" + dbPassword},
		LogOptions: map[string]string{"splunk-token": splunkToken},
	}}}
	cfg := testConfig()
	cfg.Secrets = secrets
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/secrets"
	h.add(newTask(arn, ctr("app", secretContainer), ctr("side", nonEssential)))
	running := h.waitStatus(arn, task.TaskRunning)
	assert.Equal(t, []string{"app"}, secrets.askedFor(), "only a container that asks for secrets fetches them")

	var app *dockerOptions
	for _, o := range h.docker.createCalls() {
		if o.Config.Labels[LabelContainerName] == "app" {
			app = &dockerOptions{env: o.Config.Env, log: o.HostConfig.LogConfig.Config}
		}
	}
	require.NotNil(t, app)
	assert.Equal(t, []string{"FROM_FILE=" + fileValue, "PLAIN=plain", "DB_PASSWORD=" + dbPassword}, app.env,
		"the definition's environment wins over the file's")
	assert.Equal(t, map[string]string{"splunk-url": "https://splunk.example", "splunk-token": splunkToken}, app.log)
	assert.Equal(t, map[string]string{"splunk-url": "https://splunk.example"}, running.Container("app").LogConfiguration.Options,
		"the task's log options are not changed")

	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
	h.waitStatus(arn, task.TaskStopped)
	saved, err := jsonOf(h.store.snapshot())
	require.NoError(t, err)
	require.Contains(t, saved, secretARN, "the saved task holds the secret's reference")
	var all strings.Builder
	all.WriteString(saved)
	for _, e := range h.journal.all() {
		all.WriteString(e.json)
	}
	for _, value := range []string{dbPassword, fileValue, splunkToken} {
		// Not assert.NotContains: its failure would print every saved task.
		assert.False(t, strings.Contains(all.String(), value), "a saved or reported task holds the fetched value %q", value)
	}
}

type dockerOptions struct {
	env []string
	log map[string]string
}

// TestSecretsRefused: a container whose secrets cannot be fetched is not created and its task stops
// with a reason naming the create error and the cause.
func TestSecretsRefused(t *testing.T) {
	fetchErr := errors.New("secret " + secretARN + ": AccessDeniedException")
	tests := []struct {
		name    string
		secrets SecretSource
		want    string
	}{
		{name: "the source fails", secrets: &fakeSecrets{err: fetchErr}, want: fetchErr.Error()},
		{name: "no source", want: ErrNoSecretSource.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Secrets = tt.secrets
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/refused"
			h.add(newTask(arn, ctr("app", secretContainer)))
			stopped := h.waitStatus(arn, task.TaskStopped)
			for _, want := range []string{"container app", "CannotCreateContainerError", tt.want} {
				assert.Contains(t, stopped.StoppedReason, want)
			}
			assert.Contains(t, stopped.Container("app").Reason, tt.want)
			assert.Equal(t, task.ContainerStopped, stopped.Container("app").KnownStatus)
			assert.Empty(t, h.creates(), "nothing is created")
		})
	}
}

// TestSecretsNeededBy: only secrets, environment files and log driver secret options need a source.
func TestSecretsNeededBy(t *testing.T) {
	tests := []struct {
		name string
		c    *task.Container
		want bool
	}{
		{name: "nothing", c: &task.Container{}},
		{name: "secrets", c: &task.Container{Secrets: []task.Secret{{Name: "A", ValueFrom: secretARN}}}, want: true},
		{name: "environment files", c: &task.Container{EnvironmentFiles: []task.EnvironmentFile{{Value: envFileARN, Type: "s3"}}}, want: true},
		{name: "log secret options", c: &task.Container{LogConfiguration: &task.LogConfiguration{LogDriver: "splunk",
			SecretOptions: []task.Secret{{Name: "splunk-token", ValueFrom: splunkSecret}}}}, want: true},
		{name: "log options only", c: &task.Container{LogConfiguration: &task.LogConfiguration{LogDriver: "awslogs",
			Options: map[string]string{"awslogs-group": "g"}}}},
		{name: "repository credentials only", c: &task.Container{RepositoryCredentials: &task.RepositoryCredentials{CredentialsParameter: secretARN}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, needsSecrets(tt.c))
		})
	}
}

// TestRepositoryCredentials: a container with repositoryCredentials is pulled with the SecretSource's
// credentials, the others with the agent's own; without a SecretSource its pull fails for good.
func TestRepositoryCredentials(t *testing.T) {
	const private = "registry.example/private:1"
	withCreds := func(c *task.Container) {
		c.Image = private
		c.RepositoryCredentials = &task.RepositoryCredentials{CredentialsParameter: secretARN}
	}

	t.Run("with a secret source", func(t *testing.T) {
		cfg := testConfig()
		cfg.Secrets = &fakeSecrets{}
		h := newHarness(t, cfg, func(h *harness) { h.auth = namedAuth{name: "host"} })
		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/repo"
		h.add(newTask(arn, ctr("app", withCreds), ctr("side")))
		h.waitStatus(arn, task.TaskRunning)
		assert.Equal(t, namedAuth{name: "repository " + secretARN}, h.puller.authOf(private))
		assert.Equal(t, namedAuth{name: "host"}, h.puller.authOf(ctr("side").Image))
	})

	t.Run("without a secret source", func(t *testing.T) {
		h := newHarness(t, testConfig(), func(h *harness) { h.auth = namedAuth{name: "host"} })
		c := ctr("app", withCreds)
		auth := h.engine.pullAuth(newTask("arn:x", c), c)
		require.Equal(t, noRepositoryAuth{}, auth, "never the agent's own credentials")
		_, err := auth.Auth(context.Background(), private)
		require.ErrorIs(t, err, ErrNoSecretSource)
		assert.False(t, errdefs.IsRetriable(err), "a pull that cannot authenticate is not retried")

		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/norepo"
		h.add(newTask(arn, ctr("app", withCreds)))
		stopped := h.waitStatus(arn, task.TaskStopped)
		for _, want := range []string{"container app", "CannotPullContainerError", ErrNoSecretSource.Error()} {
			assert.Contains(t, stopped.StoppedReason, want)
		}
		assert.Zero(t, h.puller.pulls(private), "nothing is pulled anonymously")
		assert.Empty(t, h.creates())
	})
}

// fakeCgroups is a TaskCgroups that records its calls.
type fakeCgroups struct {
	createErr error
	listErr   error

	everyTask bool // EveryTask's answer

	mu      sync.Mutex
	creates []cgroupCreate
	removed []string
	ids     []string
}

type cgroupCreate struct {
	taskID                    string
	cpu, memory, containerCPU int
}

var _ TaskCgroups = (*fakeCgroups)(nil)

func (f *fakeCgroups) Create(taskID string, l taskcgroup.Limits) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, cgroupCreate{taskID, l.CPUUnits, l.MemoryMiB, l.ContainerCPUUnits})
	if f.createErr != nil {
		return "", f.createErr
	}
	return "/ecs/" + taskID, nil
}

func (f *fakeCgroups) EveryTask() bool { return f.everyTask }

func (f *fakeCgroups) Remove(taskID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, taskID)
	return nil
}

func (f *fakeCgroups) TaskIDs() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ids), f.listErr
}

func (f *fakeCgroups) calls() ([]cgroupCreate, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates), slices.Clone(f.removed)
}

// TestTaskCgroup: a task with task-level limits gets its cgroup, with those limits and the sum of
// its containers' cpu, as its containers' cgroup parent, and loses it at cleanup; a task without
// them gets none.
func TestTaskCgroup(t *testing.T) {
	tests := []struct {
		name        string
		cpu, memory int
		everyTask   bool
		want        bool
	}{
		{name: "cpu and memory", cpu: 1024, memory: 2048, want: true},
		{name: "memory only", memory: 512, want: true},
		{name: "cpu only", cpu: 256, want: true},
		{name: "no task-level limits"},
		{name: "no task-level limits, a limit for every task", everyTask: true, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cgroups := &fakeCgroups{everyTask: tt.everyTask}
			cfg := testConfig()
			cfg.TaskCgroups = cgroups
			cfg.CleanupWait = 0
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/cg-1"
			tk := newTask(arn, ctr("app", func(c *task.Container) { c.CPU = 128 }))
			tk.CPU, tk.Memory = tt.cpu, tt.memory
			h.add(tk)
			h.waitStatus(arn, task.TaskRunning)
			creates, _ := cgroups.calls()
			parent := ""
			if tt.want {
				assert.Equal(t, []cgroupCreate{{"cg-1", tt.cpu, tt.memory, 128}}, creates)
				parent = "/ecs/cg-1"
			} else {
				assert.Empty(t, creates, "a task without task-level limits gets no cgroup")
			}
			require.Len(t, h.docker.createCalls(), 1)
			assert.Equal(t, parent, h.docker.createCalls()[0].HostConfig.CgroupParent)

			require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
			require.True(t, pollUntil(func() bool { return h.journal.removed(arn) }), "the task is cleaned up")
			_, removed := cgroups.calls()
			if tt.want {
				assert.Equal(t, []string{"cg-1"}, removed, "the cgroup is removed at cleanup")
			} else {
				assert.Empty(t, removed)
			}
		})
	}
}

// Every container of a task with task-level limits is created in the one task cgroup, whose
// limits count every container's cpu.
func TestTaskCgroupSharedByContainers(t *testing.T) {
	cgroups := &fakeCgroups{}
	cfg := testConfig()
	cfg.TaskCgroups = cgroups
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/cg-2"
	tk := newTask(arn, ctr("app"), ctr("side", func(c *task.Container) { c.CPU = 30 }))
	tk.CPU, tk.Memory = 512, 1024
	h.add(tk)
	h.waitStatus(arn, task.TaskRunning)
	creates, _ := cgroups.calls()
	require.NotEmpty(t, creates)
	for _, c := range creates {
		assert.Equal(t, cgroupCreate{"cg-2", 512, 1024, 40}, c)
	}
	for _, o := range h.docker.createCalls() {
		assert.Equal(t, "/ecs/cg-2", o.HostConfig.CgroupParent)
	}
}

// A task whose cgroup cannot be made stops before any container is created.
func TestTaskCgroupRefused(t *testing.T) {
	cfg := testConfig()
	cfg.TaskCgroups = &fakeCgroups{createErr: errors.New("mkdir /sys/fs/cgroup/ecs/cg-3: permission denied")}
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/cg-3"
	tk := newTask(arn, ctr("app"))
	tk.Memory = 512
	h.add(tk)
	stopped := h.waitStatus(arn, task.TaskStopped)
	for _, want := range []string{"CannotCreateContainerError", "task cgroup", "permission denied"} {
		assert.Contains(t, stopped.StoppedReason, want)
	}
	assert.Empty(t, h.creates())
}

// TestRemoveCgroupLeftovers: at recovery, the cgroups of tasks the engine does not hold are removed, those of
// its tasks kept; a failed listing removes nothing.
func TestRemoveCgroupLeftovers(t *testing.T) {
	cgroups := &fakeCgroups{ids: []string{"gone-1", "held", "gone-2"}}
	cfg := testConfig()
	cfg.TaskCgroups = cgroups
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/held"
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)

	h.engine.RemoveLeftovers(context.Background())
	_, removed := cgroups.calls()
	assert.Equal(t, []string{"gone-1", "gone-2"}, removed)

	failing := &fakeCgroups{ids: []string{"gone-3"}, listErr: errors.New("read /sys/fs/cgroup/ecs: no such file or directory")}
	cfg.TaskCgroups = failing
	newHarness(t, cfg).engine.RemoveLeftovers(context.Background())
	_, removed = failing.calls()
	assert.Empty(t, removed)

	newHarness(t, testConfig()).engine.RemoveLeftovers(context.Background()) // without task cgroups: nothing to do
}

// TestTaskNamespacesPause: a task with pidMode or ipcMode task gets a pause container that holds the
// namespace, provisioned without CNI, and its containers join it; without a pause image the task
// stops naming it.
func TestTaskNamespacesPause(t *testing.T) {
	tests := []struct {
		name             string
		pidMode, ipcMode string
	}{
		{name: "pidMode task", pidMode: "task"},
		{name: "ipcMode task", ipcMode: "task"},
		{name: "both", pidMode: "task", ipcMode: "task"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.PauseImage = "berth/pause"
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/ns"
			tk := newTask(arn, ctr("app"))
			tk.PidMode, tk.IpcMode = tt.pidMode, tt.ipcMode
			h.add(tk)
			running := h.waitStatus(arn, task.TaskRunning)
			pause := running.Container(PauseContainerName)
			require.NotNil(t, pause, "the engine adds the pause container")
			assert.Equal(t, task.ContainerResourcesProvisioned, pause.KnownStatus)
			assert.Nil(t, running.AWSVPC, "no task network is set up")
			assert.Zero(t, h.puller.pulls("berth/pause"), "the pause image is not pulled")

			creates := h.docker.createCalls()
			require.Len(t, creates, 2)
			require.Equal(t, PauseContainerName, creates[0].Config.Labels[LabelContainerName], "the pause container is created first")
			assert.Equal(t, "none", creates[0].HostConfig.NetworkMode)
			assert.Empty(t, creates[0].HostConfig.PidMode)
			wantPid, wantIpc, pauseIpc := "", "", ""
			if tt.pidMode == "task" {
				wantPid = "container:" + pause.DockerID
			}
			if tt.ipcMode == "task" {
				wantIpc, pauseIpc = "container:"+pause.DockerID, "shareable"
			}
			assert.Equal(t, pauseIpc, creates[0].HostConfig.IpcMode)
			assert.Equal(t, wantPid, creates[1].HostConfig.PidMode)
			assert.Equal(t, wantIpc, creates[1].HostConfig.IpcMode)
			assert.Equal(t, "bridge", creates[1].HostConfig.NetworkMode, "the app keeps the task's network mode")

			require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
			h.waitStatus(arn, task.TaskStopped)
			assert.Equal(t, []string{"app", PauseContainerName}, h.stopOrder(), "the pause container stops last")
		})
	}

	t.Run("without a pause image", func(t *testing.T) {
		h := newHarness(t, testConfig())
		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/nopause"
		tk := newTask(arn, ctr("app"))
		tk.PidMode = "task"
		h.add(tk)
		stopped := h.waitStatus(arn, task.TaskStopped)
		assert.Contains(t, stopped.StoppedReason, "pause image")
		assert.Nil(t, stopped.Container(PauseContainerName))
		assert.Empty(t, h.creates())
	})

	t.Run("pidMode host needs none", func(t *testing.T) {
		cfg := testConfig()
		cfg.PauseImage = "berth/pause"
		h := newHarness(t, cfg)
		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/hostpid"
		tk := newTask(arn, ctr("app"))
		tk.PidMode = "host"
		h.add(tk)
		running := h.waitStatus(arn, task.TaskRunning)
		assert.Nil(t, running.Container(PauseContainerName))
		require.Len(t, h.docker.createCalls(), 1)
		assert.Equal(t, "host", h.docker.createCalls()[0].HostConfig.PidMode)
	})
}

// TestLinksOrderCreates: a container that links to another is created after it, without dependsOn,
// and links to its Docker name under the alias.
func TestLinksOrderCreates(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/links"
	h.add(newTask(arn,
		ctr("web", func(c *task.Container) { c.Links = []string{"app:backend", "db"} }),
		ctr("app"),
		ctr("db")))
	running := h.waitStatus(arn, task.TaskRunning)
	creates := h.creates()
	require.Len(t, creates, 3)
	assert.Equal(t, "web", creates[2], "created after the containers it links to: %v", creates)
	var links []string
	for _, o := range h.docker.createCalls() {
		if o.Config.Labels[LabelContainerName] == "web" {
			links = o.HostConfig.Links
		}
	}
	assert.Equal(t, []string{running.Container("app").DockerName + ":backend", running.Container("db").DockerName + ":db"}, links)
}

// TestLogDriverRole: the execution role is given to the awslogs driver of a task that has not
// stopped and asks for it, under the task's execution credentials ID, which its container's log
// options name.
func TestLogDriverRole(t *testing.T) {
	cfg := testConfig()
	cfg.AWSLogsExecutionRole = true
	h := newHarness(t, cfg)
	awslogs := func(c *task.Container) {
		c.LogConfiguration = &task.LogConfiguration{LogDriver: "awslogs", Options: map[string]string{"awslogs-group": "g"}}
	}
	logs := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/logs",
		ctr("app", awslogs, func(c *task.Container) { c.LogsAuthExecutionRole = true }), ctr("side", awslogs))
	logs.ExecutionRoleArn, logs.ExecutionCredentialsID = execRole, "11111111111111111111111111111111"
	plain := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/plain", ctr("app", awslogs))
	plain.ExecutionRoleArn, plain.ExecutionCredentialsID = execRole, "22222222222222222222222222222222"
	splunk := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/splunk", ctr("app", func(c *task.Container) {
		c.LogConfiguration = &task.LogConfiguration{LogDriver: "splunk"}
		c.LogsAuthExecutionRole = true
	}))
	splunk.ExecutionRoleArn, splunk.ExecutionCredentialsID = execRole, "44444444444444444444444444444444"
	h.add(logs)
	h.add(plain)
	h.add(splunk)
	h.waitStatus(logs.Arn, task.TaskRunning)
	h.waitStatus(plain.Arn, task.TaskRunning)
	h.waitStatus(splunk.Arn, task.TaskRunning)

	tests := []struct {
		id   string
		want bool
	}{
		{id: logs.ExecutionCredentialsID, want: true},
		{id: plain.ExecutionCredentialsID},  // no container asks for it
		{id: splunk.ExecutionCredentialsID}, // not the awslogs driver: the daemon never asks
		{id: "33333333333333333333333333333333"},
		{id: ""},
	}
	for _, tt := range tests {
		role, ok := h.engine.LogDriverRole(tt.id)
		assert.Equal(t, tt.want, ok, "credentials ID %q", tt.id)
		if tt.want {
			assert.Equal(t, execRole, role)
		} else {
			assert.Empty(t, role)
		}
	}

	endpoints := map[string]string{}
	for _, o := range h.docker.createCalls() {
		endpoints[o.Config.Labels[LabelTaskARN]+" "+o.Config.Labels[LabelContainerName]] = o.HostConfig.LogConfig.Config["awslogs-credentials-endpoint"]
		if o.HostConfig.LogConfig.Type == "awslogs" {
			assert.Equal(t, "g", o.HostConfig.LogConfig.Config["awslogs-group"])
		}
	}
	assert.Equal(t, map[string]string{
		logs.Arn + " app":   "/v2/credentials/" + logs.ExecutionCredentialsID,
		logs.Arn + " side":  "",
		plain.Arn + " app":  "",
		splunk.Arn + " app": "",
	}, endpoints, "only the container that asks for the role is told where its credentials are")
	_, has := h.engine.Task(logs.Arn).Container("app").LogConfiguration.Options["awslogs-credentials-endpoint"]
	assert.False(t, has, "the task's log options are not changed")

	require.NoError(t, h.engine.StopTask(context.Background(), logs.Arn, "done"))
	h.waitStatus(logs.Arn, task.TaskStopped)
	_, ok := h.engine.LogDriverRole(logs.ExecutionCredentialsID)
	assert.False(t, ok, "a stopped task's logs need no credentials")
}

// TestLogDriverRoleNeedsTheOverride: without ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE, as with the
// ECS agent, an awslogs driver that asks for the execution role is not told where its credentials
// are, and the endpoint serves them to no log driver.
func TestLogDriverRoleNeedsTheOverride(t *testing.T) {
	h := newHarness(t, testConfig())
	logs := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/logs", ctr("app", func(c *task.Container) {
		c.LogConfiguration = &task.LogConfiguration{LogDriver: "awslogs", Options: map[string]string{"awslogs-group": "g"}}
		c.LogsAuthExecutionRole = true
	}))
	logs.ExecutionRoleArn, logs.ExecutionCredentialsID = execRole, "11111111111111111111111111111111"
	h.add(logs)
	h.waitStatus(logs.Arn, task.TaskRunning)
	_, ok := h.engine.LogDriverRole(logs.ExecutionCredentialsID)
	assert.False(t, ok)
	calls := h.docker.createCalls()
	require.Len(t, calls, 1)
	assert.Equal(t, "g", calls[0].HostConfig.LogConfig.Config["awslogs-group"])
	assert.NotContains(t, calls[0].HostConfig.LogConfig.Config, "awslogs-credentials-endpoint")
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// TestVisitRunning: only running tasks are visited, as the engine holds them.
func TestVisitRunning(t *testing.T) {
	h := newHarness(t, testConfig())
	run := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/run", ctr("app"))
	done := newTask("arn:aws:ecs:local:000000000000:task/test-cluster/done", ctr("app"))
	h.add(run)
	h.add(done)
	h.waitStatus(run.Arn, task.TaskRunning)
	h.waitStatus(done.Arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), done.Arn, "done"))
	h.waitStatus(done.Arn, task.TaskStopped)
	var visited []string
	h.engine.VisitRunning(func(tk *task.Task) { visited = append(visited, tk.Arn) })
	assert.Equal(t, []string{run.Arn}, visited)
}

// askedSecrets records the containers a SecretSource was asked about, as it was given them.
type askedSecrets struct {
	fakeSecrets
	given []*task.Container
}

func (a *askedSecrets) ContainerSecrets(ctx context.Context, t *task.Task, c *task.Container) (ContainerSecrets, error) {
	a.mu.Lock()
	a.given = append(a.given, c)
	a.mu.Unlock()
	return a.fakeSecrets.ContainerSecrets(ctx, t, c)
}

// TestRouterSecretOptionsAreNotDockers: the log driver secret options of a container that logs with
// awsfirelens are its FireLens router's (the firelens feature's to fetch): the engine's secrets
// feature neither fetches them nor needs a source for them, while the container's other secrets
// are fetched as usual.
func TestRouterSecretOptionsAreNotDockers(t *testing.T) {
	firelensLog := func(c *task.Container) {
		c.LogConfiguration = &task.LogConfiguration{LogDriver: task.LogDriverFirelens, Options: map[string]string{"Name": "splunk"},
			SecretOptions: []task.Secret{{Name: "splunk_token", ValueFrom: splunkSecret}}}
	}
	t.Run("no source is needed for them", func(t *testing.T) {
		h := newHarness(t, testConfig())
		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/firelens-only"
		h.add(newTask(arn, ctr("app", firelensLog)))
		h.waitStatus(arn, task.TaskRunning)
	})
	t.Run("the source is given the container without them", func(t *testing.T) {
		secrets := &askedSecrets{fakeSecrets: fakeSecrets{values: map[string]ContainerSecrets{"app": {SecretEnv: []string{"DB_PASSWORD=pw"}}}}}
		cfg := testConfig()
		cfg.Secrets = secrets
		h := newHarness(t, cfg)
		const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/firelens-secrets"
		h.add(newTask(arn, ctr("app", func(c *task.Container) {
			firelensLog(c)
			c.Secrets = []task.Secret{{Name: "DB_PASSWORD", ValueFrom: secretARN}}
		})))
		running := h.waitStatus(arn, task.TaskRunning)
		secrets.mu.Lock()
		defer secrets.mu.Unlock()
		require.Len(t, secrets.given, 1)
		assert.Empty(t, secrets.given[0].LogConfiguration.SecretOptions)
		assert.Equal(t, []task.Secret{{Name: "DB_PASSWORD", ValueFrom: secretARN}}, secrets.given[0].Secrets)
		assert.Len(t, running.Container("app").LogConfiguration.SecretOptions, 1, "the task's own definition is not changed")
	})
}

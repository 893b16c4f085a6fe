package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// compact drops consecutive duplicates.
func compact[T comparable](in []T) []T { return slices.Compact(slices.Clone(in)) }

func TestTaskLifecycle(t *testing.T) {
	h := newHarness(t, testConfig(), func(h *harness) {
		h.docker.setImage("img-side", fakeImage{ignoresSIGTERM: true})
	})
	const arn = "arn:lifecycle"
	h.add(newTask(arn, ctr("app"), ctr("side", nonEssential, func(c *task.Container) { c.StopTimeout = 70 * time.Millisecond })))

	running := h.waitStatus(arn, task.TaskRunning)
	assert.Equal(t, task.TaskRunning, running.DesiredStatus)
	assert.False(t, running.StartedAt.IsZero(), "task StartedAt")
	for _, c := range running.Containers {
		assert.Equal(t, task.ContainerRunning, c.KnownStatus, c.Name)
		assert.Equal(t, "sha256:"+c.Image, c.ImageID, c.Name)
		assert.False(t, c.StartedAt.IsZero(), c.Name)
		assert.NotEmpty(t, c.DockerName, c.Name)
		assert.Equal(t, []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.2"}}}, c.Networks, c.Name)
	}
	assert.Equal(t, 1, h.puller.pulls("img-app"))
	assert.Equal(t, 1, h.puller.pulls("img-side"))

	require.NoError(t, h.engine.StopTask(context.Background(), arn, "stopped by the test"))
	assert.ErrorIs(t, h.engine.StopTask(context.Background(), "arn:unknown", "x"), ErrUnknownTask, "an unknown task")
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, task.TaskStopped, stopped.DesiredStatus)
	assert.Equal(t, "stopped by the test", stopped.StoppedReason)
	assert.False(t, stopped.StoppedAt.IsZero(), "task StoppedAt")
	wantExit := map[string]int{"app": 143, "side": 137}
	for _, c := range stopped.Containers {
		assert.Equal(t, task.ContainerStopped, c.KnownStatus, c.Name)
		assert.Equal(t, task.ContainerStopped, c.DesiredStatus, c.Name)
		require.NotNil(t, c.ExitCode, c.Name)
		assert.Equal(t, wantExit[c.Name], *c.ExitCode, c.Name)
		assert.Equal(t, "stopped by the test", c.Reason, c.Name)
		assert.False(t, c.FinishedAt.IsZero(), c.Name)
	}

	timeouts := map[string]time.Duration{}
	for _, s := range h.docker.stopCalls() {
		timeouts[s.container] = s.timeout
	}
	assert.Equal(t, map[string]time.Duration{"app": 30 * time.Millisecond, "side": 70 * time.Millisecond}, timeouts,
		"stop timeout: the container's own, else Config.StopTimeout")

	// Listeners saw the task and each container move forward, in order. A container's CREATED is saved
	// with its start, which follows at once, so listeners hear RUNNING next.
	var taskSeq []task.TaskStatus
	ctrSeq := map[string][]task.ContainerStatus{}
	for _, tk := range h.journal.notified(arn) {
		taskSeq = append(taskSeq, tk.KnownStatus)
		for _, c := range tk.Containers {
			ctrSeq[c.Name] = append(ctrSeq[c.Name], c.KnownStatus)
		}
	}
	assert.Equal(t, []task.TaskStatus{task.TaskNone, task.TaskPulled, task.TaskRunning, task.TaskStopped}, compact(taskSeq))
	for _, name := range []string{"app", "side"} {
		assert.Equal(t, []task.ContainerStatus{task.ContainerNone, task.ContainerPulled, task.ContainerRunning, task.ContainerStopped},
			compact(ctrSeq[name]), name)
	}
}

func TestAddTaskCopiesTheTask(t *testing.T) {
	h := newHarness(t, testConfig())
	tk := newTask("arn:copy", ctr("app"))
	h.add(tk)
	h.waitStatus("arn:copy", task.TaskRunning)
	assert.Equal(t, task.TaskNone, tk.KnownStatus, "the caller's task is not the engine's")
	assert.Empty(t, tk.Containers[0].DockerID)
}

func TestDeliveringTwiceStartsOnce(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:twice"
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, h.engine.AddTask(context.Background(), newTask(arn, ctr("app"))))
		}()
	}
	wg.Wait()
	h.waitStatus(arn, task.TaskRunning)
	h.add(newTask(arn, ctr("app"))) // and once more while it runs
	assert.Equal(t, []string{"app"}, h.creates())
	assert.Equal(t, 1, h.puller.pulls("img-app"))
	assert.Len(t, h.engine.Tasks(), 1)
}

func TestStopIsNeverOverwrittenByStart(t *testing.T) {
	t.Run("running task", func(t *testing.T) {
		h := newHarness(t, testConfig())
		const arn = "arn:sticky"
		h.add(newTask(arn, ctr("app")))
		h.waitStatus(arn, task.TaskRunning)
		require.NoError(t, h.engine.StopTask(context.Background(), arn, "scaled in"))
		h.add(newTask(arn, ctr("app"))) // a late RUNNING delivery
		stopped := h.waitStatus(arn, task.TaskStopped)
		assert.Equal(t, task.TaskStopped, stopped.DesiredStatus)
		assert.Equal(t, "scaled in", stopped.StoppedReason)
		h.add(newTask(arn, ctr("app")))
		assert.Equal(t, task.TaskStopped, h.engine.Task(arn).DesiredStatus)
		assert.Equal(t, []string{"app"}, h.creates(), "the task was not started again")
	})
	t.Run("stop while pulling", func(t *testing.T) {
		h := newHarness(t, testConfig())
		const arn = "arn:pulling"
		release := h.puller.gate("img-app")
		defer release()
		h.add(newTask(arn, ctr("app")))
		require.True(t, pollUntil(func() bool { return h.puller.pulls("img-app") == 1 }), "pull started")
		require.NoError(t, h.engine.StopTask(context.Background(), arn, "never mind"))
		h.add(newTask(arn, ctr("app")))
		release()
		stopped := h.waitStatus(arn, task.TaskStopped)
		assert.Equal(t, "never mind", stopped.StoppedReason)
		assert.Equal(t, "never mind", stopped.Containers[0].Reason)
		assert.Empty(t, h.creates(), "no container was created")
	})
	t.Run("delivered stopped", func(t *testing.T) {
		h := newHarness(t, testConfig())
		tk := newTask("arn:born-stopped", ctr("app"))
		tk.DesiredStatus = task.TaskStopped
		h.add(tk)
		h.waitStatus(tk.Arn, task.TaskStopped)
		assert.Empty(t, h.creates())
		assert.Zero(t, h.puller.pulls("img-app"))
	})
}

func TestDependsOn(t *testing.T) {
	healthCheck := func(c *task.Container) {
		c.HealthCheck = &task.HealthCheck{Command: []string{"CMD", "true"}, Interval: time.Second, Retries: 3}
	}
	startTimeout := func(d time.Duration) func(*task.Container) {
		return func(c *task.Container) { c.StartTimeout = d }
	}
	tests := []struct {
		name         string
		cfg          func(*Config)
		images       map[string]fakeImage
		containers   []*task.Container
		act          func(t *testing.T, h *harness, arn string)
		wantStatus   task.TaskStatus
		wantReason   []string // substrings of the task's StoppedReason
		wantCreates  []string
		startsBefore [2]string // the first container's start call precedes the second's create call
	}{
		{
			name:         "START",
			containers:   []*task.Container{ctr("app", dependsOn("db", task.ConditionStart)), ctr("db")},
			wantStatus:   task.TaskRunning,
			wantCreates:  []string{"db", "app"},
			startsBefore: [2]string{"db", "app"},
		},
		{
			name:         "COMPLETE with a failing exit code",
			images:       map[string]fakeImage{"img-init": {exitOnStart: intp(3)}},
			containers:   []*task.Container{ctr("app", dependsOn("init", task.ConditionComplete)), ctr("init", nonEssential)},
			wantStatus:   task.TaskRunning,
			wantCreates:  []string{"init", "app"},
			startsBefore: [2]string{"init", "app"},
		},
		{
			name:         "SUCCESS",
			images:       map[string]fakeImage{"img-init": {exitOnStart: intp(0)}},
			containers:   []*task.Container{ctr("app", dependsOn("init", task.ConditionSuccess)), ctr("init", nonEssential)},
			wantStatus:   task.TaskRunning,
			wantCreates:  []string{"init", "app"},
			startsBefore: [2]string{"init", "app"},
		},
		{
			name:        "SUCCESS not met",
			images:      map[string]fakeImage{"img-init": {exitOnStart: intp(1)}},
			containers:  []*task.Container{ctr("app", dependsOn("init", task.ConditionSuccess)), ctr("init", nonEssential)},
			wantStatus:  task.TaskStopped,
			wantReason:  []string{"app", `"init"`, "exit code 1", "SUCCESS"},
			wantCreates: []string{"init"},
		},
		{
			name:       "HEALTHY",
			containers: []*task.Container{ctr("app", dependsOn("db", task.ConditionHealthy)), ctr("db", healthCheck)},
			act: func(t *testing.T, h *harness, arn string) {
				id := h.dockerID(arn, "db")
				h.waitContainer(arn, "db", task.ContainerRunning)
				assert.Equal(t, []string{"db"}, h.creates(), "app waits for db to be healthy")
				h.docker.setHealth(id, "healthy")
			},
			wantStatus:   task.TaskRunning,
			wantCreates:  []string{"db", "app"},
			startsBefore: [2]string{"db", "app"},
		},
		{
			name:       "HEALTHY never met within the container's startTimeout",
			containers: []*task.Container{ctr("app", dependsOn("db", task.ConditionHealthy), startTimeout(50*time.Millisecond)), ctr("db", healthCheck)},
			act: func(t *testing.T, h *harness, arn string) {
				h.docker.setHealth(h.dockerID(arn, "db"), "unhealthy")
			},
			wantStatus:  task.TaskStopped,
			wantReason:  []string{"app", "timed out after 50ms", `"db"`, "HEALTHY"},
			wantCreates: []string{"db"},
		},
		{
			name:        "HEALTHY never met within Config.StartTimeout",
			cfg:         func(c *Config) { c.StartTimeout = 40 * time.Millisecond },
			containers:  []*task.Container{ctr("app", dependsOn("db", task.ConditionHealthy)), ctr("db", healthCheck)},
			wantStatus:  task.TaskStopped,
			wantReason:  []string{"timed out after 40ms", "HEALTHY"},
			wantCreates: []string{"db"},
		},
		{
			name:        "START never met: the dependency cannot start",
			containers:  []*task.Container{ctr("app", dependsOn("db", task.ConditionStart)), ctr("db", nonEssential, func(c *task.Container) { c.Image = "img-broken" })},
			act:         nil,
			wantStatus:  task.TaskStopped,
			wantReason:  []string{"app", `"db"`, "START"},
			wantCreates: []string{"db"},
		},
		{
			name:        "unknown dependency",
			containers:  []*task.Container{ctr("app", dependsOn("ghost", task.ConditionStart))},
			wantStatus:  task.TaskStopped,
			wantReason:  []string{"ghost"},
			wantCreates: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := newHarness(t, cfg, func(h *harness) {
				for img, fi := range tc.images {
					h.docker.setImage(img, fi)
				}
				h.docker.setHook(func(op, id string) error {
					if op == "start" && h.docker.containers[id].opts.Config.Image == "img-broken" {
						return errors.New("exec format error")
					}
					return nil
				})
			})
			arn := "arn:" + tc.name
			h.add(newTask(arn, tc.containers...))
			if tc.act != nil {
				tc.act(t, h, arn)
			}
			got := h.waitStatus(arn, tc.wantStatus)
			for _, want := range tc.wantReason {
				assert.Contains(t, got.StoppedReason, want)
			}
			for _, tk := range h.journal.notified(arn) {
				if tk.KnownStatus == task.TaskStopped {
					assert.Equal(t, got.StoppedReason, tk.StoppedReason, "STOPPED is reported with its reason")
				}
			}
			assert.Equal(t, tc.wantCreates, h.creates())
			if tc.startsBefore[0] != "" {
				calls := h.docker.callLog()
				start := slices.Index(calls, "start:"+tc.startsBefore[0])
				create := slices.Index(calls, "create:"+tc.startsBefore[1])
				assert.True(t, start >= 0 && create > start, "%s started before %s was created: %v", tc.startsBefore[0], tc.startsBefore[1], calls)
			}
		})
	}
}

func TestStopInReverseDependencyOrder(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:order"
	h.add(newTask(arn,
		ctr("proxy", dependsOn("app", task.ConditionStart)),
		ctr("app", dependsOn("db", task.ConditionHealthy), dependsOn("cache", task.ConditionStart)),
		ctr("db", func(c *task.Container) { c.HealthCheck = &task.HealthCheck{Command: []string{"CMD", "true"}} }),
		ctr("cache"),
		ctr("log", nonEssential),
	))
	h.docker.setHealth(h.dockerID(arn, "db"), "healthy")
	h.waitStatus(arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "deploy"))
	h.waitStatus(arn, task.TaskStopped)

	order := h.stopOrder()
	require.ElementsMatch(t, []string{"proxy", "app", "db", "cache", "log"}, order)
	before := func(a, b string) {
		t.Helper()
		assert.Less(t, slices.Index(order, a), slices.Index(order, b), "%s stops before %s: %v", a, b, order)
	}
	before("proxy", "app")
	before("app", "db")
	before("app", "cache")
}

func TestAWSVPCPauseContainer(t *testing.T) {
	cfg := testConfig()
	network := &fakeNetwork{}
	cfg.AWSVPC = AWSVPCConfig{Network: network, PauseImage: "berth/pause"}
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/awsvpc"
	tk := newTask(arn, ctr("app"))
	tk.NetworkMode = task.NetworkAWSVPC
	h.add(tk)
	running := h.waitStatus(arn, task.TaskRunning)
	pause := running.Container(PauseContainerName)
	require.NotNil(t, pause, "the engine adds the pause container")
	assert.Equal(t, task.ContainerResourcesProvisioned, pause.KnownStatus)
	assert.Zero(t, h.puller.pulls("berth/pause"), "the pause image is not pulled")
	require.NotNil(t, running.AWSVPC)
	assert.Equal(t, "/proc/100/ns/net", running.AWSVPC.NetNS, "CNI runs against the pause container's namespace")
	assert.Equal(t, "10.0.0.2", running.AWSVPC.IPv4)
	assert.Equal(t, []string{"setup awsvpc /proc/100/ns/net"}, network.log())

	creates := h.docker.createCalls()
	require.Len(t, creates, 2)
	assert.Equal(t, PauseContainerName, creates[0].Config.Labels[LabelContainerName], "the pause container is created first")
	assert.Equal(t, "none", creates[0].HostConfig.NetworkMode)
	assert.Equal(t, "container:"+pause.DockerID, creates[1].HostConfig.NetworkMode)

	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, []string{"app", PauseContainerName}, h.stopOrder(), "the pause container stops last")
	assert.Equal(t, []string{"setup awsvpc /proc/100/ns/net", "teardown awsvpc /proc/100/ns/net"}, network.log(),
		"the network is torn down once, before the pause container stops")
	assert.True(t, stopped.AWSVPC.TornDown)
}

func TestAWSVPCRefusedWithoutTaskNetworking(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/nonet"
	tk := newTask(arn, ctr("app"))
	tk.NetworkMode = task.NetworkAWSVPC
	h.add(tk)
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Contains(t, stopped.StoppedReason, "ECS_ENABLE_TASK_ENI=true")
	assert.Empty(t, h.docker.createCalls())
}

func TestAWSVPCStaticAddressOneTaskAtATime(t *testing.T) {
	cfg := testConfig()
	static := mustCIDR(t, "169.254.172.10/22")
	cfg.AWSVPC = AWSVPCConfig{Network: &fakeNetwork{}, PauseImage: "berth/pause", BridgeIPv4: &static}
	h := newHarness(t, cfg)
	first, second := "arn:aws:ecs:local:000000000000:task/test-cluster/one", "arn:aws:ecs:local:000000000000:task/test-cluster/two"
	for _, arn := range []string{first, second} {
		tk := newTask(arn, ctr("app"))
		tk.NetworkMode = task.NetworkAWSVPC
		h.add(tk)
		if arn == first {
			h.waitStatus(first, task.TaskRunning)
		}
	}
	waiting := h.waitTask(second, "wait for the static address", func(tk *task.Task) bool { return tk.PendingReason != "" })
	assert.Contains(t, waiting.PendingReason, "OverrideAWSVPCLocalIPv4Address")
	assert.Contains(t, waiting.PendingReason, first)

	require.NoError(t, h.engine.StopTask(context.Background(), first, "make way"))
	h.waitStatus(first, task.TaskStopped)
	h.waitStatus(second, task.TaskRunning)
}

func TestEssentialContainerExitStopsTask(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:essential"
	h.add(newTask(arn, ctr("app"), ctr("side", nonEssential)))
	h.waitStatus(arn, task.TaskRunning)
	h.docker.exit(h.dockerID(arn, "app"), 2, false, false)

	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, task.StopReasonEssentialExited, stopped.StoppedReason)
	app, side := stopped.Container("app"), stopped.Container("side")
	require.NotNil(t, app.ExitCode)
	assert.Equal(t, 2, *app.ExitCode)
	assert.Empty(t, app.Reason, "the container that exited by itself has no reason")
	require.NotNil(t, side.ExitCode)
	assert.Equal(t, 143, *side.ExitCode)
	assert.Equal(t, task.StopReasonEssentialExited, side.Reason)
	assert.Equal(t, []string{"side"}, h.stopOrder(), "only the still running container is stopped")
}

func TestNonEssentialContainerMayExit(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:nonessential"
	h.add(newTask(arn, ctr("app"), ctr("side", nonEssential)))
	h.waitStatus(arn, task.TaskRunning)
	h.docker.exit(h.dockerID(arn, "side"), 0, false, false)

	side := h.waitContainer(arn, "side", task.ContainerStopped)
	require.NotNil(t, side.ExitCode)
	assert.Equal(t, 0, *side.ExitCode)
	tk := h.engine.Task(arn)
	assert.Equal(t, task.TaskRunning, tk.KnownStatus)
	assert.Equal(t, task.TaskRunning, tk.DesiredStatus)
	assert.Empty(t, h.stopOrder())
}

func TestDockerEventsDriveKnownStatus(t *testing.T) {
	withHealthCheck := func(c *task.Container) { c.HealthCheck = &task.HealthCheck{Command: []string{"CMD", "true"}} }
	tests := []struct {
		name  string
		image fakeImage
		act   func(h *harness, id string)
		check func(t *testing.T, tk *task.Task) bool
	}{
		{
			name: "oom kill",
			act:  func(h *harness, id string) { h.docker.exit(id, 137, true, false) },
			check: func(t *testing.T, tk *task.Task) bool {
				c := tk.Container("app")
				return tk.KnownStatus == task.TaskStopped && c.Reason == reasonOOM && c.ExitCode != nil && *c.ExitCode == 137
			},
		},
		{
			name: "oom event alone",
			act:  func(h *harness, id string) { h.docker.exit(id, 137, true, true) }, // an "oom" event but no "die"
			check: func(t *testing.T, tk *task.Task) bool {
				return tk.KnownStatus == task.TaskStopped && tk.Container("app").Reason == reasonOOM
			},
		},
		{
			name: "unhealthy",
			act:  func(h *harness, id string) { h.docker.setHealth(id, "unhealthy") },
			check: func(t *testing.T, tk *task.Task) bool {
				return tk.Container("app").Health == task.HealthUnhealthy && tk.KnownStatus == task.TaskRunning
			},
		},
		{
			name: "healthy",
			act:  func(h *harness, id string) { h.docker.setHealth(id, "healthy") },
			check: func(t *testing.T, tk *task.Task) bool {
				return tk.Container("app").Health == task.HealthHealthy
			},
		},
		{
			name:  "exit reason from inspect",
			image: fakeImage{exitOnStart: intp(127), stateError: "exec: \"/app\": not found"},
			check: func(t *testing.T, tk *task.Task) bool {
				c := tk.Container("app")
				return tk.KnownStatus == task.TaskStopped && c.Reason == "exec: \"/app\": not found" && c.ExitCode != nil && *c.ExitCode == 127
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(), func(h *harness) { h.docker.setImage("img-app", tc.image) })
			arn := "arn:" + tc.name
			h.add(newTask(arn, ctr("app", withHealthCheck)))
			if tc.act != nil {
				h.waitStatus(arn, task.TaskRunning)
				tc.act(h, h.dockerID(arn, "app"))
			}
			h.waitTask(arn, tc.name, func(tk *task.Task) bool { return tc.check(t, tk) })
		})
	}
}

func TestMissedEventsAreCaught(t *testing.T) {
	tests := []struct {
		name      string
		reconcile time.Duration
		after     func(h *harness)
	}{
		{name: "resubscribed event", reconcile: time.Hour, after: func(h *harness) {
			h.docker.push(dockerclient.Event{Type: dockerclient.EventTypeBerth, Action: dockerclient.ActionResubscribed})
		}},
		{name: "periodic reconcile", reconcile: 20 * time.Millisecond, after: func(*harness) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ReconcileInterval = tc.reconcile
			h := newHarness(t, cfg)
			const arn = "arn:missed"
			h.add(newTask(arn, ctr("app")))
			h.waitStatus(arn, task.TaskRunning)
			h.docker.exit(h.dockerID(arn, "app"), 5, false, true) // no event
			tc.after(h)
			stopped := h.waitStatus(arn, task.TaskStopped)
			require.NotNil(t, stopped.Container("app").ExitCode)
			assert.Equal(t, 5, *stopped.Container("app").ExitCode)
			assert.Equal(t, task.StopReasonEssentialExited, stopped.StoppedReason)
		})
	}
}

func TestContainerRemovedOutsideBerth(t *testing.T) {
	cfg := testConfig()
	cfg.ReconcileInterval = 10 * time.Millisecond
	h := newHarness(t, cfg)
	const arn = "arn:removed"
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)
	require.NoError(t, h.docker.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: h.dockerID(arn, "app")}))
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Contains(t, stopped.Container("app").Reason, "removed outside Berth")
}

// restoredContainer makes a running container from before an agent restart (before the engine
// subscribed to events, so no event about it reaches the engine) and returns the model of it.
func restoredContainer(t *testing.T, h *harness, arn string, c *task.Container) *task.Container {
	t.Helper()
	ctx := context.Background()
	opts, err := createOptions(newTask(arn, c), c, "test-cluster", "", testConfig(), createInputs{})
	require.NoError(t, err)
	opts.Name = "ecs-fam-3-" + c.Name + "-restored"
	created, err := h.docker.CreateContainer(ctx, opts)
	require.NoError(t, err)
	require.NoError(t, h.docker.StartContainer(ctx, created.ID))
	c.DockerID, c.DockerName, c.KnownStatus, c.DesiredStatus = created.ID, opts.Name, task.ContainerRunning, task.ContainerRunning
	return c
}

func TestRestoredTaskIsReinspected(t *testing.T) {
	var tk *task.Task
	h := newHarness(t, testConfig(), func(h *harness) {
		c := restoredContainer(t, h, "arn:restored", ctr("app"))
		h.docker.exit(c.DockerID, 9, false, true) // it exited while the agent was down
		tk = newTask("arn:restored", c)
		tk.KnownStatus = task.TaskRunning
	})
	h.add(tk)
	stopped := h.waitStatus(tk.Arn, task.TaskStopped)
	assert.Equal(t, 9, *stopped.Container("app").ExitCode)
	assert.Len(t, h.docker.createCalls(), 1, "the restored container is not created again")
	assert.Zero(t, h.puller.pulls("img-app"))
}

func TestStopBreaksADependencyCycle(t *testing.T) {
	// Validation rules cycles out, but a bad restored record must not make the worker spin forever.
	var tk *task.Task
	h := newHarness(t, testConfig(), func(h *harness) {
		tk = newTask("arn:cycle",
			restoredContainer(t, h, "arn:cycle", ctr("a", dependsOn("b", task.ConditionStart))),
			restoredContainer(t, h, "arn:cycle", ctr("b", dependsOn("a", task.ConditionStart))))
		tk.KnownStatus = task.TaskRunning
	})
	h.add(tk)
	h.waitStatus(tk.Arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), tk.Arn, "stop"))
	h.waitStatus(tk.Arn, task.TaskStopped)
	assert.ElementsMatch(t, []string{"a", "b"}, h.stopOrder())
}

func TestHostResources(t *testing.T) {
	t.Run("waits with a reason and starts when resources free", func(t *testing.T) {
		cfg := testConfig()
		cfg.Resources = Resources{CPU: 1000, MemoryMiB: 1000}
		h := newHarness(t, cfg)
		h.add(newTask("arn:a", ctr("app", func(c *task.Container) { c.CPU = 600 })))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:b", ctr("app", func(c *task.Container) { c.CPU = 600 })))

		b := h.waitTask("arn:b", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, b.PendingReason, "CPU 400 of 1000 units free, 600 needed")
		var fromList *task.Task
		for _, tk := range h.engine.Tasks() {
			if tk.Arn == "arn:b" {
				fromList = tk
			}
		}
		require.NotNil(t, fromList)
		assert.Equal(t, b.PendingReason, fromList.PendingReason, "Tasks shows the reason too")
		assert.Equal(t, task.TaskNone, b.KnownStatus)
		assert.Len(t, h.docker.createCalls(), 1, "b waits without creating anything")

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		b = h.waitStatus("arn:b", task.TaskRunning)
		assert.Empty(t, b.PendingReason)
	})

	t.Run("FIFO and a reason that follows the queue", func(t *testing.T) {
		cfg := testConfig()
		cfg.Resources = Resources{CPU: 4096, MemoryMiB: 1000}
		h := newHarness(t, cfg)
		mem := func(m int) func(*task.Container) { return func(c *task.Container) { c.Memory = m } }
		h.add(newTask("arn:a", ctr("app", mem(600))))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:big", ctr("app", mem(800))))
		h.waitTask("arn:big", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		h.add(newTask("arn:small", ctr("app", mem(100))))
		small := h.waitTask("arn:small", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, small.PendingReason, "1 task(s) ahead", "small fits but waits behind big")
		h.add(newTask("arn:medium", ctr("app", mem(500))))
		medium := h.waitTask("arn:medium", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, medium.PendingReason, "2 task(s) ahead")

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:big", "cancelled"))
		h.waitStatus("arn:big", task.TaskStopped)
		h.waitStatus("arn:small", task.TaskRunning)
		medium = h.waitTask("arn:medium", "waits for memory", func(tk *task.Task) bool {
			return regexp.MustCompile(`memory \d+ of 1000 MiB free, 500 needed`).MatchString(tk.PendingReason)
		})
		assert.Equal(t, task.TaskNone, medium.KnownStatus)

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		h.waitStatus("arn:medium", task.TaskRunning)
	})

	t.Run("host port held by another task", func(t *testing.T) {
		h := newHarness(t, testConfig())
		port := func(c *task.Container) { c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: 8080}} }
		h.add(newTask("arn:a", ctr("web", port)))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:b", ctr("web", port)))
		b := h.waitTask("arn:b", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, b.PendingReason, "host port 8080/tcp is used by task arn:a")
		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		h.waitStatus("arn:b", task.TaskRunning)
	})

	tests := []struct {
		name       string
		tk         *task.Task
		wantReason string
	}{
		{"too much CPU", newTask("arn:cpu", ctr("app", func(c *task.Container) { c.CPU = 5000 })), "task needs 5000 CPU units; the host has 4096"},
		{"too much task memory", func() *task.Task {
			tk := newTask("arn:mem", ctr("app"))
			tk.Memory = 9000
			return tk
		}(), "task needs 9000 MiB of memory; the host offers 8192"},
		{"reserved port", newTask("arn:ssh", ctr("app", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 22, HostPort: 22}}
		})), "host port 22/tcp is reserved"},
		{"port bound twice", newTask("arn:dup", ctr("a", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: 8080, Protocol: "udp"}}
		}), ctr("b", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 81, HostPort: 8080, Protocol: "UDP"}}
		})), "host port 8080/udp is bound twice"},
		// Values no validated definition holds, from a damaged state record, say. They used to be
		// admitted: the reservation's byte value wrapped to 0 (no reservation), and a negative cpu
		// made room for every other task.
		{"memoryReservation whose bytes overflow", newTask("arn:wrap", ctr("app", func(c *task.Container) { c.MemoryReservation = 1 << 44 })),
			`container "app": memoryReservation: 17592186044416 MiB is out of range`},
		{"negative cpu", newTask("arn:neg", ctr("app", func(c *task.Container) { c.CPU = -1 << 40 })),
			`container "app": cpu -1099511627776 is negative`},
	}
	for _, tc := range tests {
		t.Run("never fits: "+tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Resources.ReservedTCP = []uint16{22, 2375}
			h := newHarness(t, cfg)
			h.add(tc.tk)
			stopped := h.waitStatus(tc.tk.Arn, task.TaskStopped)
			assert.Contains(t, stopped.StoppedReason, "ResourceError")
			assert.Contains(t, stopped.StoppedReason, tc.wantReason)
			assert.Empty(t, h.docker.createCalls())
			h.add(newTask("arn:other", ctr("app")))
			h.waitStatus("arn:other", task.TaskRunning)
		})
	}
}

func TestDynamicHostPorts(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:ports"
	h.add(newTask(arn, ctr("web", func(c *task.Container) {
		c.PortMappings = []task.PortMapping{{ContainerPort: 80}, {ContainerPort: 53, HostPort: 5353, Protocol: "udp"}}
	})))
	web := h.waitStatus(arn, task.TaskRunning).Container("web")
	assert.Equal(t, []task.NetworkBinding{
		{BindIP: "0.0.0.0", ContainerPort: 53, HostPort: 5353, Protocol: "udp"},
		{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
	}, web.NetworkBindings)
}

func TestContainerNamesAndLabels(t *testing.T) {
	h := newHarness(t, testConfig())
	for _, arn := range []string{"arn:one", "arn:two"} {
		h.add(newTask(arn, ctr("app", func(c *task.Container) {
			c.DockerLabels = map[string]string{"team": "blue", LabelCluster: "spoofed"}
		}), ctr("side")))
		h.waitStatus(arn, task.TaskRunning)
	}
	names := map[string]bool{}
	nameRE := regexp.MustCompile(`^ecs-fam-3-(app|side)-[0-9a-f]{12}$`)
	for _, o := range h.docker.createCalls() {
		assert.Regexp(t, nameRE, o.Name)
		assert.False(t, names[o.Name], "name %s is unique", o.Name)
		names[o.Name] = true
		l := o.Config.Labels
		assert.Equal(t, "true", l[LabelManaged])
		assert.Contains(t, []string{"arn:one", "arn:two"}, l[LabelTaskARN])
		assert.Contains(t, []string{"app", "side"}, l[LabelContainerName])
		assert.Equal(t, "fam", l[LabelTaskFamily])
		assert.Equal(t, "3", l[LabelTaskRevision])
		assert.Equal(t, "test-cluster", l[LabelCluster], "Berth's labels win over dockerLabels")
		if l[LabelContainerName] == "app" {
			assert.Equal(t, "blue", l["team"])
		}
		tk := h.engine.Task(l[LabelTaskARN])
		assert.Equal(t, o.Name, tk.Container(l[LabelContainerName]).DockerName)
	}
	assert.Len(t, names, 4)
}

func TestBadInputStopsOnlyItsTask(t *testing.T) {
	tests := []struct {
		name       string
		prepare    func(h *harness)
		wantReason []string
	}{
		{
			name: "image cannot be pulled",
			prepare: func(h *harness) {
				h.puller.fail("img-bad", fmt.Errorf("manifest unknown: %w", dockerclient.ErrNotFound))
			},
			wantReason: []string{"bad", "CannotPullContainerError", `"img-bad"`, "manifest unknown"},
		},
		{
			name: "container cannot be created",
			prepare: func(h *harness) {
				h.docker.setHook(func(op, id string) error {
					if op == "create" && regexp.MustCompile(`-bad-`).MatchString(id) {
						return errors.New("invalid mount config")
					}
					return nil
				})
			},
			wantReason: []string{"bad", "CannotCreateContainerError", "invalid mount config"},
		},
		{
			name: "container cannot be started",
			prepare: func(h *harness) {
				h.docker.setHook(func(op, id string) error {
					if op == "start" && h.docker.containers[id].opts.Config.Labels[LabelContainerName] == "bad" {
						return errors.New("OCI runtime create failed")
					}
					return nil
				})
			},
			wantReason: []string{"bad", "CannotStartContainerError", "OCI runtime create failed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(), tc.prepare)
			h.add(newTask("arn:good", ctr("app")))
			h.add(newTask("arn:bad", ctr("app"), ctr("bad")))
			stopped := h.waitStatus("arn:bad", task.TaskStopped)
			for _, want := range tc.wantReason {
				assert.Contains(t, stopped.StoppedReason, want)
			}
			assert.Contains(t, stopped.Container("bad").Reason, tc.wantReason[1])
			h.waitStatus("arn:good", task.TaskRunning)
			h.add(newTask("arn:later", ctr("app")))
			h.waitStatus("arn:later", task.TaskRunning)
			assert.Equal(t, task.TaskRunning, h.engine.Task("arn:good").KnownStatus)
		})
	}
}

func TestStopRetriesAFailedStop(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:retry-stop"
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)
	var mu sync.Mutex
	failing := true
	h.docker.setHook(func(op, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		if op == "stop" && failing {
			return errors.New("docker daemon busy")
		}
		return nil
	})
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "stop"))
	require.True(t, pollUntil(func() bool { return len(h.docker.stopCalls()) >= 3 }), "the stop is retried")
	time.Sleep(50 * time.Millisecond) // let the retries run for a while: they must be spaced, not spin
	mu.Lock()
	failing = false
	mu.Unlock()
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, 143, *stopped.Container("app").ExitCode)
	assert.Less(t, len(h.docker.stopCalls()), 30, "retries wait retryDelay (5 ms) between attempts")
}

func TestStoreBeforeListeners(t *testing.T) {
	// checkJournal asserts that every notification carries exactly the state saved just before it.
	checkJournal := func(t *testing.T, j *journal) (saves, notifies int) {
		t.Helper()
		lastSaved := map[string]string{}
		for i, e := range j.all() {
			switch e.kind {
			case "save":
				saves++
				lastSaved[e.arn] = e.json
			case "notify":
				notifies++
				require.Equal(t, lastSaved[e.arn], e.json, "notification %d is of the state saved before it", i)
				delete(lastSaved, e.arn) // each save is reported at most once
			}
		}
		return saves, notifies
	}

	t.Run("saved first", func(t *testing.T) {
		h := newHarness(t, testConfig())
		h.add(newTask("arn:a", ctr("app"), ctr("side")))
		h.add(newTask("arn:b", ctr("app")))
		h.waitStatus("arn:a", task.TaskRunning)
		h.waitStatus("arn:b", task.TaskRunning)
		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "x"))
		h.waitStatus("arn:a", task.TaskStopped)
		h.shutdown()
		saves, notifies := checkJournal(t, h.journal)
		assert.Equal(t, saves, notifies)
		assert.Positive(t, notifies)
	})

	t.Run("failed save is retried, not reported", func(t *testing.T) {
		var failedOnce bool
		h := newHarness(t, testConfig(), func(h *harness) {
			h.store.fail = func(_ int, tk *task.Task) error {
				if !failedOnce && tk.Containers[0].DockerName != "" {
					failedOnce = true
					return errors.New("disk full")
				}
				return nil
			}
		})
		h.add(newTask("arn:a", ctr("app")))
		h.waitStatus("arn:a", task.TaskRunning)
		h.shutdown()
		saves, notifies := checkJournal(t, h.journal)
		assert.Equal(t, saves, notifies)
		assert.Equal(t, saves+1, h.store.saveCount(), "one save failed")
		assert.Len(t, h.docker.createCalls(), 1, "the create waited for the retried save, and ran once")
	})
}

func TestCleanupAfterWait(t *testing.T) {
	cfg := testConfig()
	cfg.CleanupWait = 30 * time.Millisecond
	h := newHarness(t, cfg)
	const arn = "arn:task/cluster/abc123"
	tk := newTask(arn,
		ctr("app", func(c *task.Container) {
			c.MountPoints = []task.MountPoint{{SourceVolume: "scratch", ContainerPath: "/scratch"}, {SourceVolume: "host", ContainerPath: "/host"}}
		}),
		ctr("side", nonEssential))
	tk.Volumes = []task.Volume{{Name: "scratch", Host: &task.HostVolume{}}, {Name: "host", Host: &task.HostVolume{SourcePath: "/var/log"}},
		{Name: "shared", Docker: &task.DockerVolume{Scope: "shared"}}}
	h.add(tk)
	running := h.waitStatus(arn, task.TaskRunning)
	ids := []string{running.Container("app").DockerID, running.Container("side").DockerID}
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))

	require.True(t, pollUntil(func() bool { return h.engine.Task(arn) == nil }), "the task is forgotten after the cleanup wait")
	assert.Empty(t, h.engine.Tasks())
	assert.ElementsMatch(t, ids, h.docker.removedIDs())
	assert.Equal(t, []string{arn}, h.store.deletedARNs())
	assert.Equal(t, []string{"ecs-fam-3-scratch-abc123"}, h.docker.removedVolumeNames(), "only the task-scoped volume")
	last := h.journal.notified(arn)
	assert.Equal(t, task.TaskStopped, last[len(last)-1].KnownStatus)

	// Events for the removed containers go nowhere; the engine keeps working.
	h.docker.push(dockerclient.Event{Type: "container", Action: "die", ID: ids[0]})
	h.add(newTask("arn:next", ctr("app")))
	h.waitStatus("arn:next", task.TaskRunning)
}

func TestShutdownLeavesContainersRunning(t *testing.T) {
	h := newHarness(t, testConfig())
	h.add(newTask("arn:running", ctr("app")))
	running := h.waitStatus("arn:running", task.TaskRunning)
	release := h.puller.gate("img-slow")
	defer release()
	h.add(newTask("arn:pulling", ctr("slow")))
	require.True(t, pollUntil(func() bool { return h.puller.pulls("img-slow") == 1 }))

	h.shutdown()
	assert.Empty(t, h.docker.stopCalls(), "agent shutdown stops no container")
	assert.Empty(t, h.docker.removedIDs())
	assert.True(t, h.docker.running(running.Containers[0].DockerID))
	assert.ErrorIs(t, h.engine.AddTask(context.Background(), newTask("arn:late", ctr("app"))), ErrStopped)
}

func TestStartAndAddTaskErrors(t *testing.T) {
	d := newFakeDocker()
	e := New(testConfig(), d, newFakePuller(), nil, newFakeStore(&journal{}), logger.Nop())
	assert.ErrorIs(t, e.AddTask(context.Background(), newTask("arn:early", ctr("app"))), ErrStopped, "before Start")

	boom := errors.New("docker is down")
	d.setHook(func(op, _ string) error {
		if op == "events" {
			return boom
		}
		return nil
	})
	assert.ErrorIs(t, e.Start(context.Background()), boom)
}

func TestInspectFailureAfterStartDoesNotRestart(t *testing.T) {
	h := newHarness(t, testConfig(), func(h *harness) {
		h.docker.setHook(func(op, _ string) error {
			if op == "inspect" {
				return errors.New("docker is slow")
			}
			return nil
		})
	})
	h.add(newTask("arn:noinspect", ctr("app")))
	h.waitStatus("arn:noinspect", task.TaskRunning)
	starts := 0
	for _, c := range h.docker.callLog() {
		if c == "start:app" {
			starts++
		}
	}
	assert.Equal(t, 1, starts, "Docker said it started; it is not started again")
}

type fakeENIs struct{ present map[string]bool }

func (f fakeENIs) WaitForMAC(ctx context.Context, mac string) error {
	if f.present[mac] {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestAWSVPCWaitsForTheENI(t *testing.T) {
	for _, tt := range []struct {
		name    string
		present bool
	}{{name: "ENI appears", present: true}, {name: "ENI never appears", present: false}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			network := &fakeNetwork{}
			const mac = "0a:58:0a:00:00:05"
			cfg.AWSVPC = AWSVPCConfig{Network: network, PauseImage: "berth/pause", ENIs: fakeENIs{present: map[string]bool{mac: tt.present}},
				ENIWait: 50 * time.Millisecond}
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:us-west-2:012345678901:task/test-cluster/eni"
			tk := newTask(arn, ctr("app"))
			tk.NetworkMode = task.NetworkAWSVPC
			tk.ENI = &task.ENI{MAC: mac, IPv4: netip.MustParsePrefix("10.0.0.5/24"), Gateway: netip.MustParseAddr("10.0.0.1")}
			h.add(tk)
			if tt.present {
				h.waitStatus(arn, task.TaskRunning)
				assert.Len(t, network.log(), 1)
				return
			}
			stopped := h.waitStatus(arn, task.TaskStopped)
			assert.Contains(t, stopped.StoppedReason, "timed out")
			assert.Contains(t, stopped.StoppedReason, mac, "the reason names the MAC")
			assert.Empty(t, network.log(), "no network is set up without the ENI")
		})
	}
}

// With ECS_DISABLE_PRIVILEGED AddTask refuses a new task with a privileged container, naming it,
// and neither saves nor holds it; such a task restored from the store stops before anything of it is
// created, its reason naming the container and the field, and a later delivery of it is an update.
// Without it the container runs privileged.
func TestPrivilegedRefusedWhenDisabled(t *testing.T) {
	cfg := testConfig()
	cfg.DisablePrivileged = true
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/priv"
	priv := func() *task.Task {
		return newTask(arn, ctr("app"), ctr("root", func(c *task.Container) { c.Privileged = true }))
	}
	err := h.engine.AddTask(context.Background(), priv())
	require.ErrorIs(t, err, task.ErrPrivilegedRefused)
	var pe *task.PrivilegedError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, task.PrivilegedError{Index: 1, Container: "root"}, *pe)
	assert.Contains(t, err.Error(), arn)
	assert.Nil(t, h.engine.Task(arn), "a refused task is not held")
	assert.Empty(t, h.store.snapshot(), "a refused task is not saved")

	_, err = h.engine.Restore(context.Background(), []*task.Task{priv()}, false)
	require.NoError(t, err)
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Contains(t, stopped.StoppedReason, "container root: privileged")
	assert.Contains(t, stopped.StoppedReason, "ECS_DISABLE_PRIVILEGED=true")
	assert.Empty(t, h.docker.createCalls(), "no container of the task was created")
	again := priv()
	again.DesiredStatus = task.TaskStopped
	require.NoError(t, h.engine.AddTask(context.Background(), again), "a task the engine holds is updated, not refused")

	allowed := newHarness(t, testConfig())
	allowed.add(newTask(arn, ctr("root", func(c *task.Container) { c.Privileged = true })))
	allowed.waitStatus(arn, task.TaskRunning)
	require.Len(t, allowed.docker.createCalls(), 1)
	assert.True(t, allowed.docker.createCalls()[0].HostConfig.Privileged)
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

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

func TestStaticTasksCopiesOnlyStaticTasks(t *testing.T) {
	h := newHarness(t, testConfig())
	plain, static := newTask("arn:plain", ctr("app")), newTask("arn:static", ctr("app"))
	static.Static = true
	h.add(plain)
	h.add(static)
	h.waitStatus("arn:static", task.TaskRunning)

	got := h.engine.StaticTasks()
	require.Len(t, got, 1)
	assert.Equal(t, "arn:static", got[0].Arn)
	got[0].Containers[0].Name = "changed"
	assert.Equal(t, "app", h.engine.Task("arn:static").Containers[0].Name, "the caller gets a copy")
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

// With ECS_DISABLE_PRIVILEGED AddTask refuses a new task with a privileged container, naming it,
// and neither saves nor holds it; such a task restored from the store stops before anything of it is
// created, its reason naming the container and the field, and a later delivery of it is an update.
// Without it the container runs privileged.
func TestPrivilegedRefusedWhenDisabled(t *testing.T) {
	cfg := testConfig()
	cfg.Policy = task.Policy{NoPrivileged: true}
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/priv"
	priv := func() *task.Task {
		return newTask(arn, ctr("app"), ctr("root", func(c *task.Container) { c.Privileged = true }))
	}
	err := h.engine.AddTask(context.Background(), priv())
	require.ErrorIs(t, err, task.ErrRefused)
	var re *task.RefusedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, task.RefusedError{Field: "containerDefinitions[1].privileged", Value: "true", By: "ECS_DISABLE_PRIVILEGED=true"}, *re)
	assert.Contains(t, err.Error(), arn)
	assert.Nil(t, h.engine.Task(arn), "a refused task is not held")
	assert.Empty(t, h.store.snapshot(), "a refused task is not saved")

	_, err = h.engine.Restore(context.Background(), []*task.Task{priv()}, false)
	require.NoError(t, err)
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, "containerDefinitions[1].privileged: true is refused by ECS_DISABLE_PRIVILEGED=true", stopped.StoppedReason)
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

// With ECS_TASK_SECURITY_POLICY=baseline AddTask refuses a new task the policy refuses, naming the
// field as the definition does (the pause container of a pidMode task not counted), and such a task
// restored from the store stops with that reason before anything of it is created. Under the default
// policy the same task runs with what it asked for.
func TestBaselinePolicyRefused(t *testing.T) {
	cfg := testConfig()
	cfg.Policy = task.Policy{Baseline: true, DataDir: "/var/lib/ecs/data"}
	cfg.PauseImage = "berth/pause"
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/admin"
	admin := func() *task.Task {
		t := newTask(arn, ctr("app"), ctr("tool", func(c *task.Container) {
			c.Linux = &task.LinuxParameters{CapAdd: []string{"NET_BIND_SERVICE", "SYS_ADMIN"}}
		}))
		t.PidMode = "task"
		return t
	}
	const reason = "containerDefinitions[1].linuxParameters.capabilities.add[1]: SYS_ADMIN is refused by ECS_TASK_SECURITY_POLICY=baseline"
	err := h.engine.AddTask(context.Background(), admin())
	require.ErrorIs(t, err, task.ErrRefused)
	assert.Equal(t, "task "+arn+": "+reason, err.Error())
	assert.Nil(t, h.engine.Task(arn), "a refused task is not held")
	assert.Empty(t, h.store.snapshot(), "a refused task is not saved")

	_, err = h.engine.Restore(context.Background(), []*task.Task{admin()}, false)
	require.NoError(t, err)
	assert.Equal(t, reason, h.waitStatus(arn, task.TaskStopped).StoppedReason)
	assert.Empty(t, h.docker.createCalls(), "no container of the task was created")

	allowed := newHarness(t, testConfig())
	t2 := admin()
	t2.PidMode = ""
	allowed.add(t2)
	allowed.waitStatus(arn, task.TaskRunning)
	require.Len(t, allowed.docker.createCalls(), 2)
	assert.Contains(t, allowed.docker.createCalls()[1].HostConfig.CapAdd, "SYS_ADMIN")
}

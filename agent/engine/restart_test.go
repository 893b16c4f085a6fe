package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

const testRestartPeriod = 5 * time.Minute

// withRestart gives a container an enabled restart policy with ECS's default attempt period.
func withRestart(ignored ...int) func(c *task.Container) {
	return func(c *task.Container) {
		c.RestartPolicy = &task.RestartPolicy{Enabled: true, IgnoredExitCodes: ignored, AttemptPeriod: testRestartPeriod}
	}
}

// restartHarness runs the engine on a fake clock that starts at the real time (the fake Docker stamps
// StartedAt with the real clock).
func restartHarness(t *testing.T, prepare ...func(h *harness)) (*harness, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now())
	cfg := testConfig()
	cfg.Clock = clock
	return newHarness(t, cfg, prepare...), clock
}

// starts counts the StartContainer calls for a task container.
func (h *harness) starts(name string) int {
	n := 0
	for _, c := range h.docker.callLog() {
		if c == "start:"+name {
			n++
		}
	}
	return n
}

// assertNeverReportedStopped checks that listeners never heard of the container or the task as STOPPED.
func assertNeverReportedStopped(t *testing.T, h *harness, arn, name string) {
	t.Helper()
	for _, tk := range h.journal.notified(arn) {
		assert.NotEqual(t, task.TaskStopped, tk.KnownStatus, "the task is never reported STOPPED")
		assert.NotEqual(t, task.TaskStopped, tk.DesiredStatus, "the task is never made to stop")
		assert.NotEqual(t, task.ContainerStopped, tk.Container(name).KnownStatus, "the container is never reported STOPPED")
	}
}

func TestRestartInPlace(t *testing.T) {
	const arn = "arn:restart"
	var mu sync.Mutex
	var savedAtStart []int // the saved RestartCount of app at each restart (its ID is saved after the first start)
	h, clock := restartHarness(t, func(h *harness) {
		h.docker.setHook(func(op, id string) error {
			if op != "start" {
				return nil
			}
			for _, tk := range h.store.snapshot() {
				if c := tk.Container("app"); tk.Arn == arn && c != nil && c.DockerID == id {
					mu.Lock()
					savedAtStart = append(savedAtStart, c.RestartCount)
					mu.Unlock()
				}
			}
			return nil
		})
	})
	h.add(newTask(arn, ctr("app", withRestart(0)), ctr("side", nonEssential)))
	h.waitStatus(arn, task.TaskRunning)
	id := h.dockerID(arn, "app")

	for n := 1; n <= 2; n++ {
		clock.Advance(testRestartPeriod + time.Second)
		h.docker.exit(id, 3, false, false)
		tk := h.waitTask(arn, "app restarted", func(tk *task.Task) bool { return tk.Container("app").RestartCount == n })
		app := tk.Container("app")
		assert.Equal(t, task.ContainerRunning, app.KnownStatus)
		assert.Nil(t, app.ExitCode, "a restarted container has no exit code")
		assert.Equal(t, clock.Now().UTC(), app.RestartedAt)
		assert.Equal(t, id, app.DockerID, "the same container is started again")
		assert.Equal(t, task.TaskRunning, tk.KnownStatus)
		assert.Equal(t, task.TaskRunning, tk.DesiredStatus)
		require.True(t, pollUntil(func() bool { return h.docker.running(id) }), "Docker runs the container again")
		assert.Equal(t, n+1, h.starts("app"))
	}
	assert.Len(t, h.docker.createCalls(), 2, "nothing is created again")
	assert.Empty(t, h.stopOrder())
	mu.Lock()
	assert.Equal(t, []int{1, 2}, savedAtStart, "each restart is saved before Docker starts the container")
	mu.Unlock()
	assertNeverReportedStopped(t, h, arn, "app")

	// A stop still stops it, without a restart.
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, 2, stopped.Container("app").RestartCount)
	assert.Equal(t, 3, h.starts("app"))
}

// Exits that stand: the container stops as it would without a policy, and an essential one stops the
// task with the usual reason.
func TestRestartNotDue(t *testing.T) {
	tests := []struct {
		name    string
		code    int
		advance time.Duration
		failAt  int // fail the app's start with this number (1 is the first start); 0: never
		count   int // RestartCount afterwards
	}{
		{name: "ignored exit code", code: 0, advance: time.Hour},
		{name: "exit before the attempt period", code: 3, advance: testRestartPeriod - time.Minute},
		{name: "start fails", code: 3, advance: time.Hour, failAt: 2, count: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			starts := 0
			h, clock := restartHarness(t, func(h *harness) {
				h.docker.setHook(func(op, _ string) error {
					if op != "start" { // the task's only container
						return nil
					}
					if starts++; starts == tc.failAt {
						return errors.New("no such file or directory")
					}
					return nil
				})
			})
			arn := "arn:" + tc.name
			h.add(newTask(arn, ctr("app", withRestart(0))))
			h.waitStatus(arn, task.TaskRunning)
			clock.Advance(tc.advance)
			h.docker.exit(h.dockerID(arn, "app"), tc.code, false, false)

			stopped := h.waitStatus(arn, task.TaskStopped)
			assert.Equal(t, task.StopReasonEssentialExited, stopped.StoppedReason)
			app := stopped.Container("app")
			require.NotNil(t, app.ExitCode)
			assert.Equal(t, tc.code, *app.ExitCode)
			assert.Equal(t, tc.count, app.RestartCount)
			assert.Len(t, h.docker.createCalls(), 1)
		})
	}
}

func TestNoRestartWhileTheTaskStops(t *testing.T) {
	h, clock := restartHarness(t)
	const arn = "arn:restart-stop"
	h.add(newTask(arn, ctr("app", withRestart())))
	h.waitStatus(arn, task.TaskRunning)
	clock.Advance(time.Hour)
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "scale in"))

	stopped := h.waitStatus(arn, task.TaskStopped)
	app := stopped.Container("app")
	assert.Zero(t, app.RestartCount)
	require.NotNil(t, app.ExitCode)
	assert.Equal(t, 143, *app.ExitCode)
	assert.Equal(t, 1, h.starts("app"))
}

func TestRestartDue(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exited := func(mods ...func(c *task.Container)) *task.Container {
		c := &task.Container{Name: "app", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerStopped,
			ExitCode: intp(1), StartedAt: now.Add(-time.Hour)}
		withRestart(0, 42)(c)
		for _, m := range mods {
			m(c)
		}
		return c
	}
	tests := []struct {
		name     string
		c        *task.Container
		stopping bool
		want     bool
		why      string
	}{
		{name: "due", c: exited(), want: true},
		{name: "no policy", c: exited(func(c *task.Container) { c.RestartPolicy = nil }), why: "no restart policy"},
		{name: "disabled", c: exited(func(c *task.Container) { c.RestartPolicy.Enabled = false }), why: "no restart policy"},
		{name: "task stopping", c: exited(), stopping: true, why: "stopping"},
		{name: "container desired stopped", c: exited(func(c *task.Container) { c.DesiredStatus = task.ContainerStopped }), why: "stopping"},
		{name: "no exit code", c: exited(func(c *task.Container) { c.ExitCode = nil }), why: "no exit code"},
		{name: "ignored code", c: exited(func(c *task.Container) { c.ExitCode = intp(42) }), why: "exit code 42 is ignored"},
		{name: "first run too short", c: exited(func(c *task.Container) { c.StartedAt = now.Add(-time.Minute) }), why: "ran for 1m0s"},
		{name: "period since the last restart", c: exited(func(c *task.Container) { c.RestartedAt = now.Add(-time.Minute) }), why: "ran for 1m0s"},
		{name: "period since the last restart passed", c: exited(func(c *task.Container) {
			c.StartedAt, c.RestartedAt = now.Add(-time.Minute), now.Add(-testRestartPeriod)
		}), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := restartDue(tc.c, tc.stopping, now)
			assert.Equal(t, tc.want, got)
			assert.Contains(t, why, tc.why)
		})
	}
}

// The restart count is part of the task as saved, so it survives an agent restart.
func TestRestartCountIsSaved(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tk := newTask("arn:saved", ctr("app", withRestart(0), func(c *task.Container) { c.RestartCount, c.RestartedAt = 2, at }))
	data, err := json.Marshal(tk)
	require.NoError(t, err)
	var back task.Task
	require.NoError(t, json.Unmarshal(data, &back))
	app := back.Container("app")
	assert.Equal(t, 2, app.RestartCount)
	assert.True(t, at.Equal(app.RestartedAt))
	assert.Equal(t, tk.Container("app").RestartPolicy, app.RestartPolicy)
}

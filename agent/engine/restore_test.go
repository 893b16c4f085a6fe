package engine

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// crashAt makes a harness "crash" the first time the hook fires at point with when(task) true: from
// then on nothing is saved (the store is what a crashed agent leaves on disk) and the worker goroutine
// ends on the spot, as if the process had died.
type crashAt struct {
	point string
	when  func(*task.Task) bool

	mu      sync.Mutex
	crashed bool
	hit     chan struct{}
}

func (c *crashAt) hook(point string, t *task.Task) {
	if point != c.point || (c.when != nil && !c.when(t)) {
		return
	}
	c.mu.Lock()
	if c.crashed {
		c.mu.Unlock()
		return
	}
	c.crashed = true
	c.mu.Unlock()
	close(c.hit)
	runtime.Goexit()
}

func (c *crashAt) frozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

// twoContainerTask: web, and side which starts once web has started.
func twoContainerTask(arn string) *task.Task {
	return newTask(arn, ctr("web"), ctr("side", dependsOn("web", task.ConditionStart)))
}

func knownIs(s task.TaskStatus) func(*task.Task) bool {
	return func(t *task.Task) bool { return t.KnownStatus == s }
}

// TestRecoveryAtEveryKillPoint crashes the engine at each step of a task's launch and stop, restores
// a new engine from what was saved, and checks that the task converges with no container duplicated,
// orphaned, or restarted where it was already running.
func TestRecoveryAtEveryKillPoint(t *testing.T) {
	tests := []struct {
		name     string
		point    string
		when     func(*task.Task) bool
		stopTask bool // stop the task (after it runs) so the crash hits the stop path
		want     task.TaskStatus
	}{
		{name: "accepted, saved before anything else", point: HookSaved, when: knownIs(task.TaskNone), want: task.TaskRunning},
		{name: "after pull", point: HookSaved, when: knownIs(task.TaskPulled), want: task.TaskRunning},
		{name: "name saved, before create", point: HookBeforeCreate, want: task.TaskRunning},
		{name: "created, ID not saved", point: HookAfterCreate, want: task.TaskRunning},
		{name: "created, before start", point: HookBeforeStart, want: task.TaskRunning},
		{name: "started, RUNNING not saved", point: HookAfterStart, want: task.TaskRunning},
		{name: "RUNNING saved, not reported", point: HookSaved, when: knownIs(task.TaskRunning), want: task.TaskRunning},
		{name: "stop saved, containers not stopped", point: HookBeforeStop, stopTask: true, want: task.TaskStopped},
		{name: "containers stopped, STOPPED not saved", point: HookAfterStop, stopTask: true, want: task.TaskStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/kill"
			crash := &crashAt{point: tt.point, when: tt.when, hit: make(chan struct{})}
			cfg := testConfig()
			cfg.Hook = crash.hook
			first := newHarness(t, cfg, func(h *harness) {
				h.store.fail = func(int, *task.Task) error {
					if crash.frozen() {
						return errCrashed
					}
					return nil
				}
			})
			first.add(twoContainerTask(arn))
			if tt.stopTask {
				first.waitStatus(arn, task.TaskRunning)
				require.NoError(t, first.engine.StopTask(context.Background(), arn, "operator stop"))
			}
			<-crash.hit
			first.shutdown()
			require.True(t, pollUntil(first.docker.streamClosed), "the first engine's event stream closes")

			before := first.docker.containersOf(arn)
			saved := first.store.snapshot()

			second := newHarness(t, testConfig(), func(h *harness) { h.docker = first.docker })
			for _, tk := range saved {
				require.NoError(t, second.store.SaveTask(context.Background(), tk))
			}
			_, err := second.engine.Restore(context.Background(), saved)
			require.NoError(t, err)

			got := second.waitTask(arn, "converge to "+tt.want.String(), knownIs(tt.want))
			after := first.docker.containersOf(arn)
			assert.LessOrEqual(t, len(after), 2, "no container is duplicated: %v", after)
			for id, running := range before {
				if running && tt.want == task.TaskRunning {
					assert.True(t, after[id], "container %s was running before the crash and is the same one after", id)
				}
			}
			for _, c := range got.Containers {
				if c.DockerID != "" {
					_, ok := after[c.DockerID]
					assert.True(t, ok, "container %s of the task exists in Docker", c.Name)
				}
			}
			if tt.want == task.TaskRunning {
				assert.Len(t, after, 2, "both containers exist")
				for id, running := range after {
					assert.True(t, running, "container %s runs", id)
				}
			} else {
				for id, running := range after {
					assert.False(t, running, "container %s is stopped", id)
				}
				assert.Equal(t, "operator stop", got.StoppedReason)
			}
		})
	}
}

func TestRestoreRemovesOrphansAndKeepsOwnContainers(t *testing.T) {
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/keep"
	first := newHarness(t, testConfig())
	first.add(twoContainerTask(arn))
	first.waitStatus(arn, task.TaskRunning)
	const ghost = "arn:aws:ecs:local:000000000000:task/test-cluster/ghost"
	first.add(newTask(ghost, ctr("g")))
	first.waitStatus(ghost, task.TaskRunning)
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))

	var saved []*task.Task
	for _, tk := range first.store.snapshot() {
		if tk.Arn == arn { // the ghost task's state is lost: its container is an orphan now
			saved = append(saved, tk)
		}
	}
	second := newHarness(t, testConfig(), func(h *harness) { h.docker = first.docker })
	createsBefore := len(first.docker.createCalls())
	rep, err := second.engine.Restore(context.Background(), saved)
	require.NoError(t, err)
	second.waitStatus(arn, task.TaskRunning)
	assert.Equal(t, 1, rep.Orphans)
	assert.Equal(t, 2, rep.Running)
	assert.Empty(t, first.docker.containersOf(ghost), "the orphan is removed")
	assert.Len(t, first.docker.containersOf(arn), 2, "the known task's containers stay")
	assert.Len(t, first.docker.createCalls(), createsBefore, "nothing is created again")
}

func TestRestoreRecordsExitWhileDownAndStopsTheTask(t *testing.T) {
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/exited"
	first := newHarness(t, testConfig())
	first.add(twoContainerTask(arn))
	first.waitStatus(arn, task.TaskRunning)
	webID := first.dockerID(arn, "web")
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))
	first.docker.exit(webID, 3, false, true) // exits while no agent watches: no event is seen

	saved := first.store.snapshot()
	second := newHarness(t, testConfig(), func(h *harness) { h.docker = first.docker })
	rep, err := second.engine.Restore(context.Background(), saved)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.ExitedWhileDown)
	got := second.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, task.StopReasonEssentialExited, got.StoppedReason)
	require.NotNil(t, got.Container("web").ExitCode)
	assert.Equal(t, 3, *got.Container("web").ExitCode)
}

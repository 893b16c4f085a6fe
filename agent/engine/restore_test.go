package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// crashAt makes a harness "crash" the first time the probe fires at point with when(task) true: from
// then on nothing is saved (the store is what a crashed agent leaves on disk) and the worker goroutine
// ends on the spot, as if the process had died.
type crashAt struct {
	point string
	when  func(*task.Task) bool

	mu      sync.Mutex
	crashed bool
	hit     chan struct{}
}

func (c *crashAt) probe(point string, t *task.Task) {
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
		{name: "accepted, saved before anything else", point: ProbeSaved, when: knownIs(task.TaskNone), want: task.TaskRunning},
		{name: "after pull", point: ProbeSaved, when: knownIs(task.TaskPulled), want: task.TaskRunning},
		{name: "name saved, before create", point: ProbeBeforeCreate, want: task.TaskRunning},
		{name: "created, ID not saved", point: ProbeAfterCreate, want: task.TaskRunning},
		{name: "created, before start", point: ProbeBeforeStart, want: task.TaskRunning},
		{name: "started, RUNNING not saved", point: ProbeAfterStart, want: task.TaskRunning},
		{name: "RUNNING saved, not reported", point: ProbeSaved, when: knownIs(task.TaskRunning), want: task.TaskRunning},
		{name: "stop saved, containers not stopped", point: ProbeBeforeStop, stopTask: true, want: task.TaskStopped},
		{name: "containers stopped, STOPPED not saved", point: ProbeAfterStop, stopTask: true, want: task.TaskStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/kill"
			crash := &crashAt{point: tt.point, when: tt.when, hit: make(chan struct{})}
			cfg := testConfig()
			cfg.Probe = crash.probe
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
			_, err := second.engine.Restore(context.Background(), saved, true)
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

// Containers of no known task: a running one is never removed (its record may be what is missing);
// a stopped one is removed once stopped for the cleanup wait, and only when the saved state is
// trusted.
func TestRestoreOrphansFailSafe(t *testing.T) {
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/keep"
	const live, dead = "arn:aws:ecs:local:000000000000:task/test-cluster/ghost-live", "arn:aws:ecs:local:000000000000:task/test-cluster/ghost-dead"
	for _, trusted := range []bool{true, false} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			first := newHarness(t, testConfig())
			for _, a := range []string{arn, live, dead} {
				first.add(twoContainerTask(a))
				first.waitStatus(a, task.TaskRunning)
			}
			first.shutdown()
			require.True(t, pollUntil(first.docker.streamClosed))
			for id := range first.docker.containersOf(dead) {
				first.docker.exit(id, 0, false, true)
			}

			var saved []*task.Task
			for _, tk := range first.store.snapshot() {
				if tk.Arn == arn { // the ghosts' records are lost
					saved = append(saved, tk)
				}
			}
			cfg := testConfig()
			cfg.CleanupWait = time.Minute
			cfg.Clock = clockwork.NewFakeClockAt(time.Now().Add(time.Hour)) // the dead ghost stopped an hour ago
			second := newHarness(t, cfg, func(h *harness) { h.docker = first.docker })
			createsBefore := len(first.docker.createCalls())
			rep, err := second.engine.Restore(context.Background(), saved, trusted)
			require.NoError(t, err)
			second.waitStatus(arn, task.TaskRunning)
			assert.Equal(t, 2, rep.UnknownRunning, "the running ghost's containers are counted")
			assert.Len(t, first.docker.containersOf(live), 2, "and left alone")
			for _, running := range first.docker.containersOf(live) {
				assert.True(t, running)
			}
			if trusted {
				assert.Equal(t, 2, rep.Orphans)
				assert.Empty(t, first.docker.containersOf(dead), "stopped ghosts past the cleanup wait are removed")
			} else {
				assert.Zero(t, rep.Orphans)
				assert.Len(t, first.docker.containersOf(dead), 2, "nothing is removed when the state may be incomplete")
			}
			assert.Len(t, first.docker.containersOf(arn), 2, "the known task's containers stay")
			assert.Len(t, first.docker.createCalls(), createsBefore, "nothing is created again")
		})
	}
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
	rep, err := second.engine.Restore(context.Background(), saved, true)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.ExitedWhileDown)
	got := second.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, task.StopReasonEssentialExited, got.StoppedReason)
	require.NotNil(t, got.Container("web").ExitCode)
	assert.Equal(t, 3, *got.Container("web").ExitCode)
}

// A running container of no known task is listed after Restore, with what its labels say, and leaves
// the list once Docker says it stopped or was removed: by its event, or by the re-inspection after a
// re-subscription when the event was missed.
func TestRestoreListsUnknownRunningContainersUntilTheyStop(t *testing.T) {
	const arn, ghost = "arn:aws:ecs:local:000000000000:task/test-cluster/keep", "arn:aws:ecs:local:000000000000:task/test-cluster/ghost"
	first := newHarness(t, testConfig())
	first.add(twoContainerTask(arn))
	first.add(newTask(ghost, ctr("dies"), ctr("quiet"), ctr("removed")))
	first.waitStatus(arn, task.TaskRunning)
	first.waitStatus(ghost, task.TaskRunning)
	ids := map[string]string{}
	for _, name := range []string{"dies", "quiet", "removed"} {
		ids[name] = first.dockerID(ghost, name)
	}
	first.shutdown()
	require.True(t, pollUntil(first.docker.streamClosed))

	var saved []*task.Task
	for _, tk := range first.store.snapshot() {
		if tk.Arn == arn { // the ghost's record is lost
			saved = append(saved, tk)
		}
	}
	second := newHarness(t, testConfig(), func(h *harness) { h.docker = first.docker })
	assert.Empty(t, second.engine.UnknownContainers(), "nothing is listed before Restore")
	rep, err := second.engine.Restore(context.Background(), saved, true)
	require.NoError(t, err)
	second.waitStatus(arn, task.TaskRunning)
	assert.Equal(t, 3, rep.UnknownRunning)

	got := second.engine.UnknownContainers()
	require.Len(t, got, 3)
	for i, name := range []string{"dies", "quiet", "removed"} { // ordered by task ARN, then name
		u := got[i]
		assert.Equal(t, ids[name], u.DockerID)
		assert.Equal(t, ghost, u.TaskArn)
		assert.Equal(t, name, u.Name)
		assert.Equal(t, "img-"+name, u.Image)
		assert.NotEmpty(t, u.DockerName)
		assert.NotContains(t, u.DockerName, "/")
		assert.False(t, u.Since.IsZero(), "when it started")
		assert.True(t, first.docker.running(u.DockerID), "left running")
	}
	unknownNames := func() []string {
		var out []string
		for _, u := range second.engine.UnknownContainers() {
			out = append(out, u.Name)
		}
		return out
	}
	waitNames := func(want ...string) {
		t.Helper()
		ok := pollUntil(func() bool { return assert.ObjectsAreEqual(want, unknownNames()) })
		require.True(t, ok, "unknown containers: want %v, have %v", want, unknownNames())
	}

	first.docker.exit(ids["dies"], 1, false, false) // with a die event
	waitNames("quiet", "removed")

	require.NoError(t, first.docker.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: ids["removed"], Force: true}))
	first.docker.push(dockerclient.Event{Type: "container", Action: "destroy", ID: ids["removed"], Time: time.Now()})
	waitNames("quiet")

	first.docker.exit(ids["quiet"], 0, false, true) // no event: missed
	first.docker.push(dockerclient.Event{Type: dockerclient.EventTypeBerth, Action: dockerclient.ActionResubscribed, Time: time.Now()})
	waitNames()

	for _, c := range second.engine.Task(arn).Containers {
		assert.True(t, first.docker.running(c.DockerID), "the known task's containers are untouched")
	}
}

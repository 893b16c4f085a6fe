package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

func TestCleanupStoppedSkipsTheWait(t *testing.T) {
	cfg := testConfig()
	cfg.CleanupWait = time.Hour
	h := newHarness(t, cfg)
	const stopped, running = "arn:aws:ecs:local:000000000000:task/test-cluster/done", "arn:aws:ecs:local:000000000000:task/test-cluster/live"
	h.add(newTask(stopped, ctr("a")))
	h.add(newTask(running, ctr("b")))
	h.waitStatus(stopped, task.TaskRunning)
	h.waitStatus(running, task.TaskRunning)
	stoppedID := h.dockerID(stopped, "a")
	require.NoError(t, h.engine.StopTask(context.Background(), stopped, "done"))
	h.waitStatus(stopped, task.TaskStopped)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := h.engine.CleanupStopped(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Nil(t, h.engine.Task(stopped), "the stopped task is cleaned up without waiting an hour")
	assert.Contains(t, h.docker.removedIDs(), stoppedID)
	assert.NotNil(t, h.engine.Task(running), "a running task is left alone")
}

// StopTask returns once the stop is saved: the store holds desired STOPPED before the containers have
// stopped, without the caller polling.
func TestStopTaskReturnsOnceTheStopIsSaved(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/stop-saved"
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)
	release := make(chan struct{})
	h.docker.setHook(func(op, _ string) error {
		if op == "stop" {
			<-release
		}
		return nil
	})
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.StopTask(ctx, arn, "operator stop"))
	saved := h.store.snapshot()
	require.Len(t, saved, 1)
	assert.Equal(t, task.TaskStopped, saved[0].DesiredStatus, "saved before StopTask returned")
	assert.Equal(t, "operator stop", saved[0].StoppedReason)
	assert.Equal(t, task.TaskRunning, saved[0].KnownStatus, "the containers are still stopping")

	require.NoError(t, h.engine.StopTask(ctx, arn, "again"), "a second stop of a stopping task returns at once")
	assert.ErrorIs(t, h.engine.StopTask(ctx, "arn:unknown", "x"), ErrUnknownTask)
}

// A stop delivered again through AddTask (an ACS payload with desired STOPPED) also returns once saved.
func TestAddTaskWithStopReturnsOnceSaved(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/stop-by-add"
	tk := newTask(arn, ctr("app"))
	h.add(tk)
	h.waitStatus(arn, task.TaskRunning)
	stop := tk.Clone()
	stop.DesiredStatus = task.TaskStopped
	require.NoError(t, h.engine.AddTask(context.Background(), stop))
	saved := h.store.snapshot()
	require.Len(t, saved, 1)
	assert.Equal(t, task.TaskStopped, saved[0].DesiredStatus)
}

// A save that takes long (a slow disk) holds up only its own task: while AddTask waits for it, Tasks()
// answers and Docker events reach the other tasks, whose changes are saved and reported.
func TestSlowSaveBlocksNothingElse(t *testing.T) {
	h := newHarness(t, testConfig())
	const fast, slow = "arn:aws:ecs:local:000000000000:task/test-cluster/fast", "arn:aws:ecs:local:000000000000:task/test-cluster/slow"
	h.add(newTask(fast, ctr("app")))
	h.waitStatus(fast, task.TaskRunning)
	fastID := h.dockerID(fast, "app")

	inSave, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.store.mu.Lock()
	h.store.slow = func(tk *task.Task) {
		if tk.Arn == slow {
			once.Do(func() { close(inSave) })
			<-release
		}
	}
	h.store.mu.Unlock()
	added := make(chan error, 1)
	go func() { added <- h.engine.AddTask(context.Background(), newTask(slow, ctr("app"))) }()
	<-inSave

	listed := make(chan []*task.Task, 1)
	go func() { listed <- h.engine.Tasks() }()
	select {
	case got := <-listed:
		require.Len(t, got, 1, "a task whose first save is in flight is not listed yet")
		assert.Equal(t, fast, got[0].Arn)
	case <-time.After(waitFor):
		t.Fatal("Tasks() blocked behind a slow save")
	}
	h.docker.exit(fastID, 3, false, false)
	h.waitStatus(fast, task.TaskStopped) // the event was dispatched and the change saved meanwhile
	select {
	case err := <-added:
		t.Fatalf("AddTask returned before its save finished: %v", err)
	default:
	}

	close(release)
	require.NoError(t, <-added)
	h.waitStatus(slow, task.TaskRunning)
}

// Timeouts run on the injected clock: a dependsOn wait fails when the fake clock passes the start
// timeout, not before, and a stopped task is cleaned up when the clock passes the cleanup wait.
func TestTimeoutsFollowTheInjectedClock(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cfg := testConfig()
	cfg.Clock = clock
	cfg.StartTimeout = 3 * time.Minute
	cfg.CleanupWait = time.Hour
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/clock"
	waiter := ctr("waiter")
	waiter.DependsOn = []task.Dependency{{ContainerName: "never", Condition: task.ConditionHealthy}}
	never := ctr("never")
	never.Essential = false
	never.HealthCheck = &task.HealthCheck{Command: []string{"CMD", "false"}}
	h.add(newTask(arn, waiter, never))
	h.waitContainer(arn, "never", task.ContainerRunning)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// The worker's dependsOn timer (plus the reconcile ticker) are waiting on the fake clock.
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	clock.Advance(2 * time.Minute)
	assert.Less(t, h.engine.Task(arn).Container("waiter").KnownStatus, task.ContainerCreated, "still waiting before the timeout")
	// The dependsOn wait may have begun a moment after the first Advance (the two blockers seen then
	// can be others), so step on a minute at a time, a few times at most, until the task stops.
	for range 4 {
		require.NoError(t, clock.BlockUntilContext(ctx, 2))
		clock.Advance(time.Minute + time.Second)
		if pollUntil(func() bool { return h.engine.Task(arn).KnownStatus == task.TaskStopped }) {
			break
		}
	}
	h.waitStatus(arn, task.TaskStopped)
	assert.Contains(t, h.engine.Task(arn).Container("waiter").Reason, "dependency wait timed out after 3m0s")

	require.NoError(t, clock.BlockUntilContext(ctx, 2)) // the cleanup timer and the reconcile ticker
	assert.NotNil(t, h.engine.Task(arn), "kept until the cleanup wait has passed")
	clock.Advance(time.Hour)
	require.True(t, pollUntil(func() bool { return h.engine.Task(arn) == nil }), "cleaned up once the fake clock passed the wait")
	// The engine forgets the task before it tells its listeners: wait for them too.
	assert.True(t, pollUntil(func() bool { return h.journal.removed(arn) }), "listeners hear that the task was removed")
}

// StopAll stops every task and returns once each has stopped; with stops that cannot finish it gives
// up when its context ends and says how many are left.
func TestStopAll(t *testing.T) {
	h := newHarness(t, testConfig())
	arns := []string{"arn:aws:ecs:local:000000000000:task/test-cluster/a", "arn:aws:ecs:local:000000000000:task/test-cluster/b"}
	for _, arn := range arns {
		h.add(newTask(arn, ctr("app")))
		h.waitStatus(arn, task.TaskRunning)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	assert.Zero(t, h.engine.StopAll(ctx, "agent exits"))
	for _, arn := range arns {
		tk := h.engine.Task(arn)
		assert.Equal(t, task.TaskStopped, tk.KnownStatus, "stopped before StopAll returned")
		assert.Equal(t, "agent exits", tk.StoppedReason)
	}

	blocked := newHarness(t, testConfig())
	const stuck = "arn:aws:ecs:local:000000000000:task/test-cluster/stuck"
	blocked.add(newTask(stuck, ctr("app")))
	blocked.waitStatus(stuck, task.TaskRunning)
	release := make(chan struct{})
	blocked.docker.setHook(func(op, _ string) error {
		if op == "stop" {
			<-release
		}
		return nil
	})
	defer close(release)
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	assert.Equal(t, 1, blocked.engine.StopAll(short, "agent exits"), "a stop that cannot finish is counted")
}

// A stopped task waits for its cleanup as a timer, not as a goroutine: hundreds of stopped tasks kept
// for the cleanup wait cost no stacks.
func TestStoppedTasksHoldNoGoroutine(t *testing.T) {
	cfg := testConfig()
	cfg.CleanupWait = time.Hour
	h := newHarness(t, cfg)
	baseline := runtime.NumGoroutine()
	const n = 20
	for i := range n {
		arn := fmt.Sprintf("arn:aws:ecs:local:000000000000:task/test-cluster/idle-%d", i)
		h.add(newTask(arn, ctr("app")))
		h.waitStatus(arn, task.TaskRunning)
	}
	withWorkers := runtime.NumGoroutine() // each running task has its worker
	for i := range n {
		arn := fmt.Sprintf("arn:aws:ecs:local:000000000000:task/test-cluster/idle-%d", i)
		require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
		h.waitStatus(arn, task.TaskStopped)
	}
	require.True(t, pollUntil(func() bool { return runtime.NumGoroutine() <= withWorkers-n+2 }),
		"stopped tasks hold no goroutines: %d, %d with %d running tasks", runtime.NumGoroutine(), withWorkers, n)
	assert.LessOrEqual(t, runtime.NumGoroutine(), baseline+2)
	assert.Len(t, h.engine.Tasks(), n, "they are kept for the cleanup wait")
	n2, err := h.engine.CleanupStopped(context.Background())
	require.NoError(t, err)
	assert.Equal(t, n, n2, "and cleaned up at once when asked")
	assert.Empty(t, h.engine.Tasks())
}

// A save that fails (a full disk) stops the task where it is: no Docker call follows until the save
// succeeds on a later attempt, and SaveError reports the failure meanwhile.
func TestFailedSaveStopsTheStepAndRetries(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cfg := testConfig()
	cfg.Clock = clock
	var diskFull atomic.Bool
	h := newHarness(t, cfg, func(h *harness) {
		h.store.fail = func(_ int, tk *task.Task) error {
			if diskFull.Load() && tk.Containers[0].DockerName != "" {
				return errors.New("no space left on device")
			}
			return nil
		}
	})
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/full"
	diskFull.Store(true)
	h.add(newTask(arn, ctr("app")))
	require.True(t, pollUntil(func() bool { return h.engine.SaveError() != nil }), "the failure is reported")
	assert.ErrorContains(t, h.engine.SaveError(), "no space left on device")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 2)) // the retry wait and the reconcile ticker
	assert.Empty(t, h.docker.createCalls(), "nothing is created while the container's name cannot be saved")

	clock.Advance(time.Second) // a retry that fails again: still nothing
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	assert.Empty(t, h.docker.createCalls())

	diskFull.Store(false)
	clock.Advance(time.Minute)
	h.waitStatus(arn, task.TaskRunning)
	assert.NoError(t, h.engine.SaveError(), "the failure clears once a save succeeds")
	assert.Len(t, h.docker.createCalls(), 1)
}

// TestCleanupWaitsForAnUnreachableEngine: a cleanup whose container removal finds the Docker Engine
// away (dockerd restarting) is retried, not forgotten with the containers left behind; a removal that
// fails for another reason is logged and the task forgotten, as before.
func TestCleanupWaitsForAnUnreachableEngine(t *testing.T) {
	cfg := testConfig()
	cfg.CleanupWait = 0
	h := newHarness(t, cfg)
	var failures atomic.Int32
	failures.Store(3)
	h.docker.setHook(func(op, _ string) error {
		if op == "remove" && failures.Add(-1) >= 0 {
			return fmt.Errorf("remove container: %w: dial unix /var/run/docker.sock: connect: no such file or directory", dockerclient.ErrConnection)
		}
		return nil
	})
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/away"
	h.add(newTask(arn, ctr("a")))
	id := h.dockerID(arn, "a")
	h.waitStatus(arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
	require.True(t, pollUntil(func() bool { return len(h.store.deletedARNs()) == 1 }), "the task is cleaned up once the Engine answers")
	assert.LessOrEqual(t, failures.Load(), int32(-1), "every failed removal was retried")
	h.docker.mu.Lock()
	defer h.docker.mu.Unlock()
	assert.Contains(t, h.docker.removed, id, "the container was removed, not left behind")
}

// TestCleanupJitter: ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION_JITTER keeps each stopped task an amount
// of its own longer, within the jitter, the same for the same task (so after an agent restart too),
// and different tasks' amounts spread; the task is cleaned up when the fake clock passes its wait.
func TestCleanupJitter(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cfg := testConfig()
	cfg.Clock = clock
	cfg.CleanupWait = time.Hour
	cfg.CleanupJitter = time.Hour
	h := newHarness(t, cfg)

	extras := map[time.Duration]bool{}
	for i := range 20 {
		arn := fmt.Sprintf("arn:aws:ecs:local:000000000000:task/test-cluster/jitter-%d", i)
		w := h.engine.cleanupWait(arn)
		require.GreaterOrEqual(t, w, time.Hour)
		require.Less(t, w, 2*time.Hour)
		require.Equal(t, w, h.engine.cleanupWait(arn), "the same task, the same wait")
		extras[w] = true
	}
	assert.Greater(t, len(extras), 15, "tasks' waits spread over the jitter")
	unjittered := testConfig()
	unjittered.CleanupWait = time.Hour
	assert.Equal(t, time.Hour, newHarness(t, unjittered).engine.cleanupWait("arn:aws:ecs:local:000000000000:task/test-cluster/x"))

	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/jitter-0"
	extra := h.engine.cleanupWait(arn) - time.Hour
	require.Greater(t, extra, 2*time.Second, "this ARN's share leaves room for the check below")
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "test"))
	h.waitStatus(arn, task.TaskStopped)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 2)) // the cleanup timer and the reconcile ticker
	clock.Advance(time.Hour + extra - time.Second)
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	assert.NotNil(t, h.engine.Task(arn), "kept past the cleanup wait, for its share of the jitter")
	clock.Advance(2 * time.Second)
	require.True(t, pollUntil(func() bool { return h.engine.Task(arn) == nil }), "cleaned up once its wait has passed")
}

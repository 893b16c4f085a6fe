package execagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// fakeExec is a Docker Engine's execs: each ExecDetached makes one, running unless failStarts says
// the next starts fail; end ends one.
type fakeExec struct {
	mu         sync.Mutex
	execs      map[string]*dockerclient.ExecState
	calls      []string // "exec <container> <user> <cmd>"
	failStarts int
}

func (d *fakeExec) ExecDetached(_ context.Context, id, user string, cmd []string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("exec %s %s %v", id, user, cmd))
	if d.failStarts > 0 {
		d.failStarts--
		return "", errors.New("container is not running")
	}
	if d.execs == nil {
		d.execs = map[string]*dockerclient.ExecState{}
	}
	eid := fmt.Sprintf("e%d", len(d.execs)+1)
	d.execs[eid] = &dockerclient.ExecState{Running: true, Pid: 100 + len(d.execs)}
	return eid, nil
}

func (d *fakeExec) ExecStatus(_ context.Context, id string) (dockerclient.ExecState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.execs[id]
	if !ok {
		return dockerclient.ExecState{}, &dockerclient.NotFoundError{Kind: "exec", Name: id}
	}
	return *st, nil
}

func (d *fakeExec) end(id string, code int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.execs[id].Running, d.execs[id].ExitCode = false, code
}

func (d *fakeExec) execCalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

// watchRig runs a watcher on a task of one container with a fake clock; posts are applied to the
// task under its lock.
type watchRig struct {
	t      *testing.T
	clock  *clockwork.FakeClock
	docker *fakeExec
	mu     sync.Mutex
	task   *task.Task
	done   chan struct{}
	cancel context.CancelFunc
}

func newWatchRig(t *testing.T, maxAttempts int, tg target) *watchRig {
	r := &watchRig{t: t, clock: clockwork.NewFakeClock(), docker: &fakeExec{}, done: make(chan struct{}),
		task: &task.Task{Containers: []*task.Container{{Name: "web", KnownStatus: task.ContainerRunning,
			ManagedAgents: []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Status: task.ManagedAgentPending, ID: "id1"}}}}}}
	f := New(Config{Clock: r.clock, CheckInterval: time.Minute, MaxAttempts: maxAttempts,
		NewBackoff: func() retry.Backoff { return retry.NewExponentialBackoff(time.Second, 30*time.Second, 0, 1.5) }}, r.docker, logger.Nop())
	ctx, cancel := context.WithCancel(t.Context())
	r.cancel = cancel
	post := func(fn func(*task.Task)) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		fn(r.task)
		return true
	}
	go func() {
		defer close(r.done)
		f.watch(ctx, nil, post, tg, logger.Nop())
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *watchRig) agent() task.ManagedAgent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.task.Containers[0].ManagedAgents[0]
}

// advanceAsleep advances the fake clock by d once the watcher sleeps: advanced before it has gone to
// sleep (it posts the agent's status, then sleeps), the clock would leave its timer unfired.
func (r *watchRig) advanceAsleep(d time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(r.t, r.clock.BlockUntilContext(ctx, 1), "the watcher never went to sleep")
	r.clock.Advance(d)
}

// waitFor waits until cond holds of the agent, advancing the fake clock by step whenever the
// watcher is asleep.
func (r *watchRig) waitFor(what string, step time.Duration, cond func(task.ManagedAgent) bool) task.ManagedAgent {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ma := r.agent(); cond(ma) {
			return ma
		}
		ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Millisecond)
		if r.clock.BlockUntilContext(ctx, 1) == nil {
			r.clock.Advance(step)
		}
		cancel()
	}
	r.t.Fatalf("timed out waiting for %s; agent %+v", what, r.agent())
	return task.ManagedAgent{}
}

// TestWatchStartsAndRestarts: the agent is started as root with its command; when its process ends
// the agent is PENDING, then RUNNING again after the backoff with a new LastStartedAt and the
// restart counted, as "ExecuteCommandAgent restarted".
func TestWatchStartsAndRestarts(t *testing.T) {
	r := newWatchRig(t, 5, target{container: "web", dockerID: "d1", id: "id1"})
	t0 := r.clock.Now()
	first := r.waitFor("RUNNING", time.Second, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentRunning })
	assert.Equal(t, "ExecuteCommandAgent started", first.Reason)
	assert.Equal(t, "e1", first.ExecID)
	assert.Equal(t, t0, first.LastStartedAt, "started at once")
	assert.Equal(t, []string{"exec d1 0 [/ecs-execute-command-id1/amazon-ssm-agent]"}, r.docker.calls)

	r.docker.end("e1", 137)
	r.advanceAsleep(time.Minute) // the next check finds it ended
	pending := r.waitFor("PENDING", 0, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentPending })
	assert.Equal(t, "ExecuteCommandAgent restarting: its process exited with exit code 137", pending.Reason)
	again := r.waitFor("RUNNING again", time.Second, func(ma task.ManagedAgent) bool {
		return ma.Status == task.ManagedAgentRunning && ma.ExecID == "e2"
	})
	assert.Equal(t, "ExecuteCommandAgent restarted", again.Reason)
	assert.Equal(t, 1, again.Restarts)
	assert.True(t, again.LastStartedAt.After(first.LastStartedAt), "a new lastStartedAt")
}

// TestWatchStopsAfterAttemptsInARow: starts that fail MaxAttempts times in a row leave the agent
// STOPPED with the last failure as its reason, after waits that grow (1 s, 1.5 s).
func TestWatchStopsAfterAttemptsInARow(t *testing.T) {
	r := newWatchRig(t, 3, target{container: "web", dockerID: "d1", id: "id1"})
	r.docker.mu.Lock()
	r.docker.failStarts = 100
	r.docker.mu.Unlock()
	start := r.clock.Now()
	stopped := r.waitFor("STOPPED", 500*time.Millisecond, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentStopped })
	assert.Equal(t, "unable to start ExecuteCommandAgent [create]: container is not running", stopped.Reason)
	assert.Equal(t, 3, r.docker.execCalls())
	assert.Equal(t, 2500*time.Millisecond, r.clock.Since(start), "1 s, then 1.5 s between the attempts")
	<-r.done
}

// TestWatchGivesUpOnACrashLoop: a process that starts but is found ended at every check is
// restarted MaxAttempts-1 times, then STOPPED with "cannot be restarted".
func TestWatchGivesUpOnACrashLoop(t *testing.T) {
	r := newWatchRig(t, 3, target{container: "web", dockerID: "d1", id: "id1"})
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("e%d", i)
		r.waitFor("RUNNING "+id, time.Second, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentRunning && ma.ExecID == id })
		r.docker.end(id, 1)
		r.advanceAsleep(time.Minute)
		if i < 3 {
			r.waitFor("PENDING", 0, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentPending })
		}
	}
	stopped := r.waitFor("STOPPED", 0, func(ma task.ManagedAgent) bool { return ma.Status == task.ManagedAgentStopped })
	assert.Equal(t, "ExecuteCommandAgent cannot be restarted: its process exited with exit code 1, 3 times in a row", stopped.Reason)
	<-r.done
}

// TestWatchKeepsARunningExec: after an agent restart, an exec that still runs is watched, not
// started again.
func TestWatchKeepsARunningExec(t *testing.T) {
	d := &fakeExec{execs: map[string]*dockerclient.ExecState{"old": {Running: true}}}
	clock := clockwork.NewFakeClock()
	f := New(Config{Clock: clock, CheckInterval: time.Minute}, d, logger.Nop())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.watch(ctx, nil, func(func(*task.Task)) bool { return true }, target{container: "web", dockerID: "d1", id: "id1", execID: "old"}, logger.Nop())
	}()
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the watcher waits for its check")
	assert.Zero(t, d.execCalls())
	cancel()
	<-done
}

// TestUpdateIgnoredOnceStopped: STOPPED is final, and a stopped container's agent is not changed.
func TestUpdateIgnoredOnceStopped(t *testing.T) {
	tk := &task.Task{Containers: []*task.Container{{Name: "web", KnownStatus: task.ContainerRunning,
		ManagedAgents: []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Status: task.ManagedAgentStopped, Reason: "x"}}}}}
	update("web", func(ma *task.ManagedAgent) { ma.Status = task.ManagedAgentRunning })(tk)
	assert.Equal(t, task.ManagedAgentStopped, tk.Containers[0].ManagedAgents[0].Status)
	tk.Containers[0].ManagedAgents[0].Status = task.ManagedAgentPending
	tk.Containers[0].KnownStatus = task.ContainerStopped
	update("web", func(ma *task.ManagedAgent) { ma.Status = task.ManagedAgentRunning })(tk)
	assert.Equal(t, task.ManagedAgentPending, tk.Containers[0].ManagedAgents[0].Status)
	update("gone", func(ma *task.ManagedAgent) {})(tk)
}

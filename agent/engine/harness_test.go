package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

const (
	waitFor = 3 * time.Second
	tick    = 2 * time.Millisecond
)

// harness runs an Engine against the fakes until the test ends.
type harness struct {
	t       *testing.T
	docker  *fakeDocker
	puller  *fakePuller
	auth    dockerclient.AuthSource // the engine's own credentials source; nil unless prepare sets it
	store   *fakeStore
	journal *journal
	engine  *Engine
	cancel  context.CancelFunc
	stopped bool
}

// testConfig is a Config with millisecond timeouts, a host big enough for every test task, and
// nothing periodic unless a test asks for it.
func testConfig() Config {
	return Config{
		Cluster:           "test-cluster",
		StopTimeout:       30 * time.Millisecond,
		StartTimeout:      2 * time.Second,
		CleanupWait:       time.Hour,
		ReconcileInterval: time.Hour,
		Resources:         Resources{CPU: 4096, MemoryMiB: 8192},
	}
}

// newHarness builds the fakes; prepare may adjust them before the engine starts.
func newHarness(t *testing.T, cfg Config, prepare ...func(h *harness)) *harness {
	t.Helper()
	j := &journal{}
	h := &harness{t: t, docker: newFakeDocker(), puller: newFakePuller(), store: newFakeStore(j), journal: j}
	for _, p := range prepare {
		p(h)
	}
	h.engine = New(cfg, h.docker, h.puller, h.auth, h.store, logger.Nop())
	h.engine.retryDelay = 5 * time.Millisecond
	h.engine.Subscribe(journalListener{j})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	require.NoError(t, h.engine.Start(ctx))
	t.Cleanup(h.shutdown)
	return h
}

// shutdown cancels the engine's context and waits, bounded, for its goroutines.
func (h *harness) shutdown() {
	if h.stopped {
		return
	}
	h.stopped = true
	h.cancel()
	done := make(chan struct{})
	go func() {
		h.engine.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		h.t.Error("engine goroutines did not finish after the context ended")
	}
	h.checkInvariants()
}

// checkInvariants checks what every notification of every test must satisfy: a task's known status
// never goes back, and a task reported STOPPED is desired STOPPED.
func (h *harness) checkInvariants() {
	h.t.Helper()
	last := map[string]task.TaskStatus{}
	for _, e := range h.journal.all() {
		if e.kind != "notify" {
			continue
		}
		if e.t.KnownStatus < last[e.arn] {
			h.t.Errorf("task %s: known status went back from %s to %s", e.arn, last[e.arn], e.t.KnownStatus)
		}
		last[e.arn] = e.t.KnownStatus
		if e.t.KnownStatus == task.TaskStopped && e.t.DesiredStatus != task.TaskStopped {
			h.t.Errorf("task %s: reported STOPPED while desired %s", e.arn, e.t.DesiredStatus)
		}
	}
}

func (h *harness) add(tk *task.Task) {
	h.t.Helper()
	require.NoError(h.t, h.engine.AddTask(context.Background(), tk))
}

// waitTask waits until the engine's copy of arn satisfies cond.
func (h *harness) waitTask(arn, what string, cond func(tk *task.Task) bool) *task.Task {
	h.t.Helper()
	var last *task.Task
	ok := pollUntil(func() bool {
		last = h.engine.Task(arn)
		return last != nil && cond(last)
	})
	if !ok {
		h.t.Fatalf("task %s: timed out waiting until %s; last seen: %s", arn, what, describe(last))
	}
	return last
}

func (h *harness) waitStatus(arn string, s task.TaskStatus) *task.Task {
	h.t.Helper()
	return h.waitTask(arn, "known status is "+s.String(), func(tk *task.Task) bool { return tk.KnownStatus == s })
}

func (h *harness) waitContainer(arn, name string, s task.ContainerStatus) *task.Container {
	h.t.Helper()
	tk := h.waitTask(arn, fmt.Sprintf("container %s is %s", name, s), func(tk *task.Task) bool {
		c := tk.Container(name)
		return c != nil && c.KnownStatus == s
	})
	return tk.Container(name)
}

// dockerID waits until the container has a Docker ID and returns it.
func (h *harness) dockerID(arn, name string) string {
	h.t.Helper()
	return h.waitTask(arn, "container "+name+" is created", func(tk *task.Task) bool {
		c := tk.Container(name)
		return c != nil && c.DockerID != ""
	}).Container(name).DockerID
}

// pollUntil polls cond until it holds or the deadline passes.
func pollUntil(cond func() bool) bool {
	deadline := time.Now().Add(waitFor)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}

func describe(tk *task.Task) string {
	if tk == nil {
		return "<no task>"
	}
	s := fmt.Sprintf("known=%s desired=%s stoppedReason=%q pendingReason=%q", tk.KnownStatus, tk.DesiredStatus, tk.StoppedReason, tk.PendingReason)
	for _, c := range tk.Containers {
		s += fmt.Sprintf("; %s known=%s reason=%q health=%s", c.Name, c.KnownStatus, c.Reason, c.Health)
	}
	return s
}

// newTask returns a bridge task desired RUNNING.
func newTask(arn string, cs ...*task.Container) *task.Task {
	return &task.Task{Arn: arn, Family: "fam", Revision: 3, NetworkMode: task.NetworkBridge,
		DesiredStatus: task.TaskRunning, Containers: cs}
}

// ctr returns an essential container running image "img-<name>".
func ctr(name string, mods ...func(c *task.Container)) *task.Container {
	c := &task.Container{Name: name, Image: "img-" + name, Essential: true, CPU: 10, Memory: 64}
	for _, m := range mods {
		m(c)
	}
	return c
}

func nonEssential(c *task.Container) { c.Essential = false }

func dependsOn(name string, cond task.Condition) func(c *task.Container) {
	return func(c *task.Container) {
		c.DependsOn = append(c.DependsOn, task.Dependency{ContainerName: name, Condition: cond})
	}
}

func intp(i int) *int { return &i }

// creates returns the task container names in CreateContainer order.
func (h *harness) creates() []string {
	var out []string
	for _, o := range h.docker.createCalls() {
		out = append(out, o.Config.Labels[LabelContainerName])
	}
	return out
}

// stopOrder returns the task container names in StopContainer order.
func (h *harness) stopOrder() []string {
	var out []string
	for _, s := range h.docker.stopCalls() {
		out = append(out, s.container)
	}
	return out
}

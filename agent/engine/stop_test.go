package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

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

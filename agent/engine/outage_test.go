package engine

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// connLost is what the Docker client returns when the Engine's answer to op is lost: dockerd
// stopped mid-call, or its socket is gone.
func connLost(op, id string) error {
	return fmt.Errorf("%s container %q: %w: %w", op, id, dockerclient.ErrConnection, io.ErrUnexpectedEOF)
}

// count returns how many calls of op (as callLog names them, "op:container") the fake saw.
func (f *fakeDocker) count(call string) int {
	n := 0
	for _, c := range f.callLog() {
		if c == call {
			n++
		}
	}
	return n
}

// isContainer reports whether the container with Docker ID id is the task container name. The caller
// may hold f.mu (hooks run under it).
func (f *fakeDocker) isContainer(id, name string) bool {
	c := f.containers[id]
	return c != nil && c.opts.Config.Labels[LabelContainerName] == name
}

// onceFor returns a func that reports true the first time it is called with op, false after.
func onceFor(op string) func(string) bool {
	var mu sync.Mutex
	done := false
	return func(got string) bool {
		mu.Lock()
		defer mu.Unlock()
		if got != op || done {
			return false
		}
		done = true
		return true
	}
}

// TestCreateAnswerLostIsAdopted: Docker makes the container but its answer is lost. The engine finds
// the container by its saved name and adopts it, before the retry or, when that look-up fails too,
// when the retry finds the name taken: the task runs on the one container.
func TestCreateAnswerLostIsAdopted(t *testing.T) {
	tests := []struct {
		name        string
		lookupFails bool // the look-up after the lost answer fails too
		creates     int  // create calls the engine makes
	}{
		{"found by its name before the retry", false, 1},
		{"name taken on the retry", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testConfig())
			lose := onceFor("create")
			var lookupFailed atomic.Bool
			h.docker.setAnswer(func(op, id string) error {
				if lose(op) {
					return connLost(op, id)
				}
				return nil
			})
			h.docker.setHook(func(op, id string) error {
				if tt.lookupFails && op == "inspect" && strings.HasPrefix(id, "ecs-") && lookupFailed.CompareAndSwap(false, true) {
					return connLost(op, id)
				}
				return nil
			})
			h.add(newTask("arn:create-lost", ctr("app")))
			tk := h.waitStatus("arn:create-lost", task.TaskRunning)

			ids := h.docker.containersOf("arn:create-lost")
			require.Len(t, ids, 1, "one container, not a second one")
			for id, running := range ids {
				assert.Equal(t, id, tk.Container("app").DockerID, "the task holds the container Docker made")
				assert.True(t, running)
			}
			assert.Equal(t, tt.creates, h.docker.count("create:app"))
			assert.Equal(t, tt.lookupFails, lookupFailed.Load(), "the look-up after the lost answer failed as the test wants")
		})
	}
}

// TestStartAnswerLostIsAdoptedAsRunning: Docker starts the container but its answer is lost. The
// engine reads the container back, finds it running and takes it as started, without a second start.
func TestStartAnswerLostIsAdoptedAsRunning(t *testing.T) {
	h := newHarness(t, testConfig())
	lose := onceFor("start")
	h.docker.setAnswer(func(op, id string) error {
		if lose(op) {
			return connLost(op, id)
		}
		return nil
	})
	h.add(newTask("arn:start-lost", ctr("app")))
	tk := h.waitStatus("arn:start-lost", task.TaskRunning)
	assert.True(t, h.docker.running(tk.Container("app").DockerID))
	assert.Equal(t, 1, h.docker.count("start:app"), "a running container is not started again")
	assert.Len(t, h.docker.containersOf("arn:start-lost"), 1)
}

// TestOutageShorterThanTheTimeoutIsRetried: the Engine is unreachable for the first creates and
// starts, then answers again within the timeouts: the task runs, one container per task container.
func TestOutageShorterThanTheTimeoutIsRetried(t *testing.T) {
	h := newHarness(t, testConfig())
	var mu sync.Mutex
	failures := map[string]int{"create": 3, "start": 2}
	h.docker.setHook(func(op, id string) error {
		mu.Lock()
		defer mu.Unlock()
		if failures[op] > 0 {
			failures[op]--
			return connLost(op, id)
		}
		return nil
	})
	h.add(newTask("arn:short-outage", ctr("app"), ctr("side")))
	h.waitStatus("arn:short-outage", task.TaskRunning)
	assert.ElementsMatch(t, []string{"app", "side"}, h.creates(), "one container made per task container")
	ids := h.docker.containersOf("arn:short-outage")
	assert.Len(t, ids, 2)
	for id, running := range ids {
		assert.True(t, running, id)
	}
}

// TestOutageLongerThanTheTimeout: Docker carries out the create (or the start), its answer is lost,
// and the Engine stays unreachable past the timeout. The task stops with a reason that says so; it is
// not STOPPED before the Engine has said what became of the container, which is then adopted,
// stopped if it runs, and removed at cleanup: no orphan, nothing left running.
func TestOutageLongerThanTheTimeout(t *testing.T) {
	tests := []struct {
		op     string
		reason string
	}{
		{"create", "CannotCreateContainerError: the Docker Engine did not answer within the create timeout (40ms)"},
		{"start", "CannotStartContainerError: the Docker Engine did not answer within the start timeout (40ms)"},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			cfg := testConfig()
			cfg.CreateTimeout, cfg.StartTimeout = 40*time.Millisecond, 40*time.Millisecond
			h := newHarness(t, cfg)
			var down atomic.Bool
			lose := onceFor(tt.op)
			h.docker.setAnswer(func(op, id string) error {
				if lose(op) {
					down.Store(true) // dockerd died as it answered, and stays away
					return connLost(op, id)
				}
				return nil
			})
			h.docker.setHook(func(op, id string) error {
				if down.Load() {
					return connLost(op, id)
				}
				return nil
			})
			arn := "arn:long-outage-" + tt.op
			h.add(newTask(arn, ctr("app")))
			tk := h.waitTask(arn, "the task is to stop", func(tk *task.Task) bool { return tk.DesiredStatus == task.TaskStopped })
			assert.Contains(t, tk.StoppedReason, "container app: "+tt.reason)
			assert.NotEqual(t, task.TaskStopped, tk.KnownStatus, "STOPPED before Docker said what became of the container")

			down.Store(false) // the Engine is back
			tk = h.waitStatus(arn, task.TaskStopped)
			id := tk.Container("app").DockerID
			require.NotEmpty(t, id, "the container Docker made is held by the task")
			assert.False(t, h.docker.running(id), "a container of a STOPPED task still runs")
			assert.Equal(t, []string{"app"}, h.creates(), "one container made")

			n, err := h.engine.CleanupStopped(t.Context())
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			assert.Empty(t, h.docker.containersOf(arn), "an orphan container is left after the cleanup")
		})
	}
}

// TestNonEssentialGivenUpIsSettled: the start of a non-essential container is given up on while the
// Engine stays away, though Docker started it. Once the Engine answers the container is stopped and
// recorded STOPPED with the reason; the task runs on without it.
func TestNonEssentialGivenUpIsSettled(t *testing.T) {
	cfg := testConfig()
	cfg.StartTimeout = 40 * time.Millisecond
	h := newHarness(t, cfg)
	var down atomic.Bool
	var lost atomic.Bool
	h.docker.setAnswer(func(op, id string) error {
		if op == "start" && h.docker.isContainer(id, "side") && lost.CompareAndSwap(false, true) {
			down.Store(true)
			return connLost(op, id)
		}
		return nil
	})
	h.docker.setHook(func(op, id string) error {
		if down.Load() {
			return connLost(op, id)
		}
		return nil
	})
	h.add(newTask("arn:side-given-up", ctr("app"), ctr("side", nonEssential)))
	h.waitTask("arn:side-given-up", "side is given up on", func(tk *task.Task) bool {
		return tk.Container("side").DesiredStatus == task.ContainerStopped
	})
	down.Store(false)
	side := h.waitContainer("arn:side-given-up", "side", task.ContainerStopped)
	assert.Contains(t, side.Reason, "CannotStartContainerError: the Docker Engine did not answer within the start timeout")
	assert.False(t, h.docker.running(side.DockerID), "the container Docker started unseen still runs")
	tk := h.waitStatus("arn:side-given-up", task.TaskRunning)
	assert.True(t, h.docker.running(tk.Container("app").DockerID))
}

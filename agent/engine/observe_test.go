package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

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
				c := tk.Container("app")
				return c.Health == task.HealthUnhealthy && !c.HealthSince.IsZero() && tk.KnownStatus == task.TaskRunning
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

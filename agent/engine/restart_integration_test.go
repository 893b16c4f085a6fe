//go:build integration

package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// itRestartPeriod is shorter than ECS allows (60 s, checked by taskdef), so the test need not wait a
// minute: the model does not enforce the bound.
const itRestartPeriod = 2 * time.Second

// TestIntegrationRestartPolicy runs containers that exit with a code after 3 s under a restart policy
// with a 2 s attempt period, ignoring exit code 0.
func TestIntegrationRestartPolicy(t *testing.T) {
	h := newITHarness(t)
	var mu sync.Mutex
	reported := map[string][]*task.Task{} // by task ARN, every change the engine reported
	h.eng.Subscribe(ChangeFunc(func(tk *task.Task) {
		mu.Lock()
		defer mu.Unlock()
		reported[tk.Arn] = append(reported[tk.Arn], tk)
	}))
	newTask := func(t *testing.T, code string) *task.Task {
		tk := h.newTask(t, itTaskDef("restart", itContainer("app", true,
			`"restartPolicy": {"enabled": true, "ignoredExitCodes": [0], "restartAttemptPeriod": 60}`,
			"exit", "-code", code, "-after", "3s")))
		tk.Containers[0].RestartPolicy.AttemptPeriod = itRestartPeriod
		return tk
	}

	t.Run("restarted in place", func(t *testing.T) {
		t.Parallel()
		tk := newTask(t, "3")
		require.NoError(t, h.eng.AddTask(context.Background(), tk))
		first := h.waitTask(t, tk.Arn, 60*time.Second, "run", itRunning).Container("app")
		ci, err := h.client.InspectContainer(t.Context(), first.DockerID)
		require.NoError(t, err)
		firstStart := ci.State.StartedAt

		restarted := h.waitTask(t, tk.Arn, 30*time.Second, "restart app", func(tk *task.Task) bool {
			return tk.Container("app").RestartCount >= 1
		})
		app := restarted.Container("app")
		assert.Equal(t, first.DockerID, app.DockerID, "the same container")
		assert.Equal(t, task.TaskRunning, restarted.KnownStatus)
		assert.Equal(t, task.TaskRunning, restarted.DesiredStatus)
		assert.Nil(t, app.ExitCode)

		// The restart is counted and saved before Docker is asked to start the container (restart.go),
		// so Docker's start time is waited for, not read at once.
		require.Eventually(t, func() bool {
			ci, err := h.client.InspectContainer(t.Context(), first.DockerID)
			return err == nil && ci.ID == first.DockerID && ci.State.StartedAt.After(firstStart)
		}, 10*time.Second, 20*time.Millisecond, "Docker starts the same container again after its first start at %s", firstStart)

		// It keeps exiting after 3 s, longer than the period: each exit is a restart.
		h.waitTask(t, tk.Arn, 30*time.Second, "restart app again", func(tk *task.Task) bool {
			return tk.Container("app").RestartCount >= 2
		})
		mu.Lock()
		for _, r := range reported[tk.Arn] {
			assert.NotEqual(t, task.TaskStopped, r.KnownStatus, "the task is never reported STOPPED")
			assert.NotEqual(t, task.ContainerStopped, r.Container("app").KnownStatus, "app is never reported STOPPED")
		}
		mu.Unlock()

		require.NoError(t, h.eng.StopTask(context.Background(), tk.Arn, "done"))
		stopped := h.waitTask(t, tk.Arn, 30*time.Second, "stop", itStopped)
		assert.GreaterOrEqual(t, stopped.Container("app").RestartCount, 2)
	})

	t.Run("ignored exit code", func(t *testing.T) {
		t.Parallel()
		tk := newTask(t, "0")
		require.NoError(t, h.eng.AddTask(context.Background(), tk))
		stopped := h.waitTask(t, tk.Arn, 60*time.Second, "stop", itStopped)
		app := stopped.Container("app")
		assert.Equal(t, task.StopReasonEssentialExited, stopped.StoppedReason)
		require.NotNil(t, app.ExitCode)
		assert.Equal(t, 0, *app.ExitCode)
		assert.Zero(t, app.RestartCount)
		ci, err := h.client.InspectContainer(t.Context(), app.DockerID)
		require.NoError(t, err)
		assert.False(t, ci.State.Running)
		assert.Equal(t, ci.State.StartedAt.UTC(), app.StartedAt.UTC(), "started once")
	})
}

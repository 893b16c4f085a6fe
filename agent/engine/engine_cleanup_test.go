package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	h.engine.StopTask(stopped, "done")
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

func TestMarkSentIsSavedAndNeverMovesBack(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/sent"
	h.add(newTask(arn, ctr("app")))
	running := h.waitStatus(arn, task.TaskRunning)

	sent := running.Clone()
	sent.SentStatus = task.TaskRunning
	sent.Containers[0].SentStatus = task.ContainerRunning
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.MarkSent(ctx, sent))
	saved := h.store.snapshot()
	require.Len(t, saved, 1)
	assert.Equal(t, task.TaskRunning, saved[0].SentStatus, "saved before MarkSent returns")
	assert.Equal(t, task.ContainerRunning, saved[0].Containers[0].SentStatus)

	older := running.Clone() // a stale copy must not move the sent status back
	require.NoError(t, h.engine.MarkSent(ctx, older))
	assert.Equal(t, task.TaskRunning, h.engine.Task(arn).SentStatus)

	require.NoError(t, h.engine.MarkSent(ctx, &task.Task{Arn: "arn:unknown"}), "an unknown task is ignored")
}

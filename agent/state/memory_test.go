package state

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func TestMemoryStore(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	tk := &task.Task{Arn: "b", KnownStatus: task.TaskRunning, Containers: []*task.Container{{Name: "web"}}}
	require.NoError(t, m.SaveTask(ctx, tk))
	require.NoError(t, m.SaveTask(ctx, &task.Task{Arn: "a"}))

	tk.Containers[0].KnownStatus = task.ContainerStopped // the store keeps its own copy
	got, err := m.Tasks(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "a", got[0].Arn)
	assert.Equal(t, task.ContainerNone, got[1].Containers[0].KnownStatus)

	require.NoError(t, m.DeleteTask(ctx, "a"))
	require.NoError(t, m.DeleteTask(ctx, "never-there"))
	got, err = m.Tasks(ctx)
	require.NoError(t, err)
	assert.Len(t, got, 1)
}

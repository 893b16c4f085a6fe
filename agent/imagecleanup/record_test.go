package imagecleanup

import (
	"context"
	"errors"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

type stubPuller struct{ err error }

func (s stubPuller) Pull(context.Context, string, dockerclient.AuthSource) (dockerclient.PullResult, error) {
	return dockerclient.PullResult{Pulled: s.err == nil}, s.err
}

type stubInspector struct{ id string }

func (s stubInspector) InspectImage(context.Context, string) (*docker.Image, error) {
	return &docker.Image{ID: s.id}, nil
}

func TestRecordPulls(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	at := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(at)
	p := RecordPulls(stubPuller{}, stubInspector{id: "sha256:abc"}, store, clock, logger.Nop())
	_, err := p.Pull(ctx, "127.0.0.1:5000/app:1", nil)
	require.NoError(t, err)

	failing := RecordPulls(stubPuller{err: errors.New("refused")}, stubInspector{}, store, clock, logger.Nop())
	_, err = failing.Pull(ctx, "127.0.0.1:5000/other:1", nil)
	require.Error(t, err)

	recs, err := store.Images(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1, "only a successful pull is recorded")
	assert.Equal(t, "127.0.0.1:5000/app:1", recs[0].Ref)
	assert.Equal(t, "sha256:abc", recs[0].ImageID)
	assert.True(t, recs[0].PulledAt.Equal(at))
}

func TestInUseBy(t *testing.T) {
	tasks := []*task.Task{
		{Containers: []*task.Container{{Image: "a:1", ImageID: "sha256:a"}, {Image: "b:1"}}},
		{KnownStatus: task.TaskStopped, Containers: []*task.Container{{Image: "c:1", ImageID: "sha256:c"}}},
	}
	refs, ids := InUseBy(func() []*task.Task { return tasks })()
	assert.Equal(t, []string{"a:1", "b:1", "c:1"}, set.Sorted(refs), "stopped tasks still hold their images until cleaned up")
	assert.Equal(t, []string{"sha256:a", "sha256:c"}, set.Sorted(ids))
}

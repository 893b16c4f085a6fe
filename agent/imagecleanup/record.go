package imagecleanup

import (
	"context"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

// Puller pulls images; the engine's puller has this shape.
type Puller interface {
	Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error)
}

// ImageInspector finds the ID of a pulled image; *dockerclient.Client satisfies it.
type ImageInspector interface {
	InspectImage(ctx context.Context, name string) (*docker.Image, error)
}

// ImageSaver records an image Berth pulled; state.Store satisfies it.
type ImageSaver interface {
	SaveImage(ctx context.Context, img state.ImageRecord) error
}

// RecordPulls returns a Puller that saves a record of every image a pull through next made available,
// so that cleanup knows what Berth pulled and when. A failed save is logged; the pull still succeeds.
func RecordPulls(next Puller, images ImageInspector, store ImageSaver, clock clockwork.Clock, log *logger.Logger) Puller {
	return recordingPuller{next: next, images: images, store: store, clock: clock, log: log}
}

type recordingPuller struct {
	next   Puller
	images ImageInspector
	store  ImageSaver
	clock  clockwork.Clock
	log    *logger.Logger
}

func (p recordingPuller) Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error) {
	res, err := p.next.Pull(ctx, image, auth)
	if err != nil {
		return res, err
	}
	now := p.clock.Now()
	rec := state.ImageRecord{Ref: image, PulledAt: now, LastUsedAt: now}
	if img, err := p.images.InspectImage(ctx, image); err == nil {
		rec.ImageID = img.ID
	}
	if err := p.store.SaveImage(ctx, rec); err != nil {
		p.log.Warn("saving the image record failed; image cleanup will not know this pull", "image", image, "error", err)
	}
	return res, nil
}

// InUseBy lists the image refs and IDs of every task tasks returns, stopped ones included until they
// are cleaned up.
func InUseBy(tasks func() []*task.Task) InUse {
	return func() (set.Set[string], set.Set[string]) {
		var refs, ids set.Set[string]
		for _, t := range tasks() {
			for _, c := range t.Containers {
				refs.Add(c.Image)
				if c.ImageID != "" {
					ids.Add(c.ImageID)
				}
			}
		}
		return refs, ids
	}
}

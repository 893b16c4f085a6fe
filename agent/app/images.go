package app

import (
	"context"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/imagecleanup"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

// imageInspector finds the ID of a pulled image.
type imageInspector interface {
	InspectImage(ctx context.Context, name string) (*docker.Image, error)
}

// recordingPuller saves a record of every image a pull made available, so image cleanup knows what
// Berth pulled and when.
type recordingPuller struct {
	next    engine.Puller
	images  imageInspector
	store   state.Store
	log     *logger.Logger
	nowFunc func() time.Time
}

var _ engine.Puller = recordingPuller{}

func (p recordingPuller) Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error) {
	res, err := p.next.Pull(ctx, image, auth)
	if err != nil {
		return res, err
	}
	rec := state.ImageRecord{Ref: image, PulledAt: p.nowFunc(), LastUsedAt: p.nowFunc()}
	if img, err := p.images.InspectImage(ctx, image); err == nil {
		rec.ImageID = img.ID
	}
	if err := p.store.SaveImage(ctx, rec); err != nil {
		p.log.Warn("saving the image record failed; image cleanup will not know this pull", "image", image, "error", err)
	}
	return res, nil
}

// imageRecords adapts the state store to what image cleanup reads and deletes.
type imageRecords struct{ store state.Store }

var _ imagecleanup.Images = imageRecords{}

func (r imageRecords) Images(ctx context.Context) ([]imagecleanup.ImageRecord, error) {
	recs, err := r.store.Images(ctx)
	out := make([]imagecleanup.ImageRecord, 0, len(recs))
	for _, rec := range recs {
		out = append(out, imagecleanup.ImageRecord{Ref: rec.Ref, ImageID: rec.ImageID, PulledAt: rec.PulledAt, LastUsedAt: rec.LastUsedAt})
	}
	return out, err
}

func (r imageRecords) DeleteImage(ctx context.Context, ref string) error {
	return r.store.DeleteImage(ctx, ref)
}

// imagesInUse lists the image refs and IDs of every task the engine holds, stopped ones included until
// they are cleaned up.
func imagesInUse(tasks func() []*task.Task) imagecleanup.InUse {
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

// newImageCleaner builds image cleanup from the configuration; usage is the disk usage of the Docker
// Engine's data directory.
func newImageCleaner(cfg *config.Config, store state.Store, eng *engine.Engine, client *dockerclient.Client,
	usage imagecleanup.DiskUsage, log *logger.Logger) *imagecleanup.Cleaner {
	minAge := cfg.ImageMinimumCleanupAge
	if minAge == 0 {
		minAge = -1 // configured as zero: no minimum age (the package reads 0 as its default)
	}
	return imagecleanup.New(imagecleanup.Config{
		Interval:   cfg.ImageCleanupInterval,
		MinimumAge: minAge,
		PerCycle:   cfg.NumImagesToDeletePerCycle,
		Disabled:   cfg.ImageCleanupDisabled,
		HighWater:  float64(cfg.DiskHighWaterPercent) / 100,
		LowWater:   float64(cfg.DiskLowWaterPercent) / 100,
	}, imageRecords{store: store}, imagesInUse(eng.Tasks), client, eng.CleanupStopped, usage, log)
}

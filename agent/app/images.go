package app

import (
	"slices"
	"time"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/imagecleanup"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
)

// newImageCleaner builds image cleanup from the configuration; usage is the disk usage of the Docker
// Engine's data directory.
func newImageCleaner(cfg *config.Config, store state.Store, eng *engine.Engine, client *dockerclient.Client,
	usage imagecleanup.DiskUsage, log *logger.Logger) *imagecleanup.Cleaner {
	return imagecleanup.New(imagecleanup.Config{
		Interval:            cfg.ImageCleanupInterval,
		MinimumAge:          orNone(cfg.ImageMinimumCleanupAge),
		PerCycle:            cfg.NumImagesToDeletePerCycle,
		Disabled:            cfg.ImageCleanupDisabled,
		HighWater:           float64(cfg.DiskHighWaterPercent) / 100,
		LowWater:            float64(cfg.DiskLowWaterPercent) / 100,
		Untracked:           cfg.UntrackedImageCleanup,
		UntrackedMinimumAge: orNone(cfg.UntrackedImageMinimumAge),
		Exclude:             append(slices.Clone(cfg.ImageCleanupExclusionList), engine.PauseImage),
	}, store, imagecleanup.InUseBy(eng.Tasks), client, eng.CleanupStopped, usage, log)
}

// orNone maps an age configured as zero to imagecleanup's "no minimum" (it reads 0 as its default).
func orNone(age time.Duration) time.Duration {
	if age == 0 {
		return -1
	}
	return age
}

package app

import (
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
	}, store, imagecleanup.InUseBy(eng.Tasks), client, eng.CleanupStopped, usage, log)
}

package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/logger"
)

// resolveRegion sets the region of an ecs-mode agent whose configuration names none from the
// instance metadata service, as the ECS agent does; an external instance (ECS_EXTERNAL) must be
// given one. Local mode never gets here: it never asks IMDS.
func resolveRegion(ctx context.Context, cfg *config.Config, imdsClient *imds.Client, log *logger.Logger) error {
	if cfg.External {
		return errors.New("ECS_EXTERNAL=true but no AWS region is configured: set AWS_DEFAULT_REGION (or AWS_REGION) in /etc/ecs/ecs.config or the environment")
	}
	region, err := imdsClient.Region(ctx)
	if err != nil {
		return fmt.Errorf("ECS_CLUSTER is set but no AWS region is configured, and the instance metadata service "+
			"did not give one (%w): set AWS_DEFAULT_REGION (or AWS_REGION) in /etc/ecs/ecs.config or the environment", err)
	}
	cfg.AWSRegion = region
	log.Info("region read from the instance metadata service", "region", region)
	return nil
}

// watchSpot drains the instance once IMDS shows a spot interruption notice
// (ECS_ENABLE_SPOT_INSTANCE_DRAINING), as the ECS agent does, so Amazon ECS moves the tasks away
// before the instance goes. It runs until ctx ends.
func watchSpot(ctx context.Context, imdsClient *imds.Client, drain func(context.Context) error, log *logger.Logger) {
	imdsClient.WatchSpot(ctx, imds.DefaultSpotInterval, func(a imds.SpotAction) {
		log.Warn("spot interruption notice; setting the instance DRAINING", "action", a.Action, "time", a.Time)
		if err := drain(ctx); err != nil && ctx.Err() == nil {
			log.Error("draining after the spot interruption notice failed", "error", err)
			return
		}
		log.Info("instance DRAINING after the spot interruption notice")
	})
}

// waitInService waits, before the agent registers, until the instance's Auto Scaling lifecycle
// state is InService (ECS_WARM_POOLS_CHECK): an instance warming up in a warm pool must not take
// tasks. Like the ECS agent it polls once a minute.
func waitInService(ctx context.Context, imdsClient *imds.Client, log *logger.Logger) error {
	log.Info("waiting for the Auto Scaling lifecycle state InService before registering (ECS_WARM_POOLS_CHECK)")
	if err := imdsClient.WaitInService(ctx, imds.DefaultInServiceInterval); err != nil {
		return fmt.Errorf("ECS_WARM_POOLS_CHECK: %w", err)
	}
	log.Info("the instance is InService")
	return nil
}

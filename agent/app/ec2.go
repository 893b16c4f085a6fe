package app

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ec2identity"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
)

// resolveRegion sets the region of an ecs-mode agent whose configuration names none from the
// instance metadata service, as the ECS agent does; an external instance (ECS_EXTERNAL) must be
// given one. Local mode never gets here: it never asks IMDS.
func resolveRegion(ctx context.Context, cfg *config.Config, imds *ec2identity.Client, log *logger.Logger) error {
	if cfg.External {
		return errors.New("ECS_EXTERNAL=true but no AWS region is configured: set AWS_DEFAULT_REGION (or AWS_REGION) in /etc/ecs/ecs.config or the environment")
	}
	region, err := imds.Region(ctx)
	if err != nil {
		return fmt.Errorf("ECS_CLUSTER is set but no AWS region is configured, and the instance metadata service "+
			"did not give one (%w): set AWS_DEFAULT_REGION (or AWS_REGION) in /etc/ecs/ecs.config or the environment", err)
	}
	cfg.AWSRegion = region
	log.Info("region read from the instance metadata service", "region", region)
	return nil
}

// ec2Registration adds this EC2 instance's identity to reg, as the ECS agent registers it: the
// signed instance identity document and the EC2 attributes (ecs.instance-type, ecs.availability-zone,
// ecs.ami-id, ecs.vpc-id, ecs.subnet-id, …), the operator's ECS_INSTANCE_ATTRIBUTES winning on a
// clash. With the instance metadata service turned off (AWS_EC2_METADATA_DISABLED) nothing is
// asked; when it does not answer, the instance registers without them and the agent says so. It
// returns the identity, zero when there is none.
func ec2Registration(ctx context.Context, imds *ec2identity.Client, reg *ecsclient.Registration, log *logger.Logger) ec2identity.Identity {
	id, err := imds.Identity(ctx)
	switch {
	case errors.Is(err, ec2identity.ErrDisabled):
		log.Info("the instance metadata service is turned off; registering without an EC2 identity")
		return ec2identity.Identity{}
	case err != nil:
		log.Warn("registering without an EC2 identity: Amazon ECS cannot tie this container instance to its EC2 instance", "error", err)
		return ec2identity.Identity{}
	}
	reg.InstanceIdentityDocument, reg.InstanceIdentityDocumentSignature = id.Document, id.Signature
	attrs, err := imds.Attributes(ctx, id)
	if err != nil {
		log.Warn("some EC2 attributes could not be read", "error", err)
	}
	operator := reg.Attributes
	reg.Attributes = make(map[string]string, len(attrs)+len(operator))
	maps.Copy(reg.Attributes, attrs)
	maps.Copy(reg.Attributes, operator)
	log.Info("EC2 identity read", "instance_id", id.InstanceID, "availability_zone", id.AvailabilityZone, "instance_type", id.InstanceType)
	return id
}

// watchSpot drains the instance once IMDS shows a spot interruption notice
// (ECS_ENABLE_SPOT_INSTANCE_DRAINING), as the ECS agent does, so Amazon ECS moves the tasks away
// before the instance goes. It runs until ctx ends.
func watchSpot(ctx context.Context, imds *ec2identity.Client, drain func(context.Context) error, log *logger.Logger) {
	imds.WatchSpot(ctx, ec2identity.DefaultSpotInterval, func(a ec2identity.SpotAction) {
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
func waitInService(ctx context.Context, imds *ec2identity.Client, log *logger.Logger) error {
	log.Info("waiting for the Auto Scaling lifecycle state InService before registering (ECS_WARM_POOLS_CHECK)")
	if err := imds.WaitInService(ctx, ec2identity.DefaultInServiceInterval); err != nil {
		return fmt.Errorf("ECS_WARM_POOLS_CHECK: %w", err)
	}
	log.Info("the instance is InService")
	return nil
}

// propagateEC2Tags adds the EC2 instance's tags to the registration
// (ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM=ec2_instance); ECS_CONTAINER_INSTANCE_TAGS win on a
// clash. The tags come from IMDS (instance metadata tags, which the instance must allow): the ECS
// agent calls ec2:DescribeTags instead, which needs an EC2 client and an instance role permission.
func propagateEC2Tags(ctx context.Context, imds *ec2identity.Client, reg *ecsclient.Registration, log *logger.Logger) {
	tags, err := imds.InstanceTags(ctx)
	if err != nil {
		log.Warn("the EC2 instance's tags cannot be read from IMDS (are instance metadata tags allowed?); registering without them", "error", err)
		return
	}
	own := reg.Tags
	reg.Tags = make(map[string]string, len(tags)+len(own))
	maps.Copy(reg.Tags, tags)
	maps.Copy(reg.Tags, own)
}

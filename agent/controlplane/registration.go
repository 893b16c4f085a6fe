package controlplane

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/version"
)

// NewRegistration returns what this host registers with its control plane: the engine's resources,
// the versions, and the configured capabilities and attributes; osRelease is the host's
// /etc/os-release (nil when it cannot be read). The agent version registered, and sent when ACS and
// TCS connect, is version.ECSAgentVersion: the control plane decides by the agent's version what
// it may send and place on the instance, and Berth speaks that ECS agent release's wires; the agent
// hash is Berth's own build.
func NewRegistration(cfg *config.Config, resources engine.Resources, dockerVersion, dockerAPIVersion string, osRelease io.Reader) ecsclient.Registration {
	return ecsclient.Registration{CPU: resources.CPU, MemoryMiB: resources.MemoryMiB,
		ReservedPorts: resources.ReservedTCP, ReservedPortsUDP: resources.ReservedUDP,
		AgentVersion: version.ECSAgentVersion, AgentHash: version.Get().GitHash, DockerVersion: dockerVersion,
		DockerAPIVersion: dockerAPIVersion, LoggingDrivers: cfg.AvailableLoggingDrivers, TaskENI: cfg.TaskENIEnabled,
		BlockIMDS: cfg.AWSVPCBlockIMDS, External: cfg.External, OSFamilyDetailed: DetailedOSFamily(osRelease),
		Privileged: !cfg.PrivilegedDisabled && cfg.TaskSecurityPolicy != config.TaskSecurityPolicyBaseline, HealthCheckDisabled: cfg.DockerHealthCheckDisabled,
		AWSLogsExecutionRole: cfg.AWSLogsExecutionRole, Attributes: cfg.InstanceAttributes,
		TaskIAMRole: cfg.TaskIAMRoleEnabled, TaskIAMRoleNetworkHost: cfg.TaskIAMRoleNetworkHost,
		TaskCPUMemLimit: cfg.TaskCPUMemLimit, SELinux: cfg.SELinuxCapable, AppArmor: cfg.AppArmorCapable,
		Tags: maps.Clone(cfg.ContainerInstanceTags)}
}

// DetailedOSFamily returns ecs.os-type-detailed from an os-release file, as ecs-init computes it for
// the ECS agent (ecs-init/config/os_family.go): "<ID>_<VERSION_ID>" ("amzn_2023", "debian_12"), or
// "linux" when the file is missing or lacks either. Only the first 64 KiB are read.
func DetailedOSFamily(osRelease io.Reader) string {
	const unknown = "linux"
	if osRelease == nil {
		return unknown
	}
	var id, versionID string
	sc := bufio.NewScanner(io.LimitReader(osRelease, 64<<10))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "ID="); ok {
			id = osReleaseValue(v)
		}
		if v, ok := strings.CutPrefix(line, "VERSION_ID="); ok {
			versionID = osReleaseValue(v)
		}
	}
	if sc.Err() != nil || id == "" || versionID == "" {
		return unknown
	}
	return id + "_" + versionID
}

// osReleaseValue unquotes an os-release value.
func osReleaseValue(v string) string { return strings.Trim(strings.TrimSpace(v), `"'`) }

// EC2Identity is what registration asks the instance metadata service (*imds.Client).
type EC2Identity interface {
	Identity(ctx context.Context) (imds.Identity, error)
	Attributes(ctx context.Context, id imds.Identity) (map[string]string, error)
	InstanceTags(ctx context.Context) (map[string]string, error)
}

var _ EC2Identity = (*imds.Client)(nil)

// AddEC2Identity adds this EC2 instance's identity to reg, as the ECS agent registers it: the
// signed instance identity document and the EC2 attributes (ecs.instance-type, ecs.availability-zone,
// ecs.ami-id, ecs.vpc-id, ecs.subnet-id, …), the operator's ECS_INSTANCE_ATTRIBUTES winning on a
// clash. With the instance metadata service turned off (AWS_EC2_METADATA_DISABLED) nothing is
// asked; when it does not answer, the instance registers without them and the agent says so. It
// returns the identity, zero when there is none.
func AddEC2Identity(ctx context.Context, imdsClient EC2Identity, reg *ecsclient.Registration, log *logger.Logger) imds.Identity {
	id, err := imdsClient.Identity(ctx)
	switch {
	case errors.Is(err, imds.ErrDisabled):
		log.Info("the instance metadata service is turned off; registering without an EC2 identity")
		return imds.Identity{}
	case err != nil:
		log.Warn("registering without an EC2 identity: Amazon ECS cannot tie this container instance to its EC2 instance", "error", err)
		return imds.Identity{}
	}
	reg.InstanceIdentityDocument, reg.InstanceIdentityDocumentSignature = id.Document, id.Signature
	attrs, err := imdsClient.Attributes(ctx, id)
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

// AddEC2Tags adds the EC2 instance's tags to the registration
// (ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM=ec2_instance); ECS_CONTAINER_INSTANCE_TAGS win on a
// clash. The tags come from IMDS (instance metadata tags, which the instance must allow): the ECS
// agent calls ec2:DescribeTags instead, which needs an EC2 client and an instance role permission.
func AddEC2Tags(ctx context.Context, imdsClient EC2Identity, reg *ecsclient.Registration, log *logger.Logger) {
	tags, err := imdsClient.InstanceTags(ctx)
	if err != nil {
		log.Warn("the EC2 instance's tags cannot be read from IMDS (are instance metadata tags allowed?); registering without them", "error", err)
		return
	}
	own := reg.Tags
	reg.Tags = make(map[string]string, len(tags)+len(own))
	maps.Copy(reg.Tags, tags)
	maps.Copy(reg.Tags, own)
}

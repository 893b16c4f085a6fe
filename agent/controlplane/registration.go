package controlplane

import (
	"maps"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/version"
)

// NewRegistration returns what this host registers with its control plane: the engine's resources,
// the agent's and the Docker Engine's versions, and the configured capabilities and attributes.
func NewRegistration(cfg *config.Config, resources engine.Resources, dockerVersion, dockerAPIVersion string) ecsclient.Registration {
	return ecsclient.Registration{CPU: resources.CPU, MemoryMiB: resources.MemoryMiB,
		ReservedPorts: resources.ReservedTCP, ReservedPortsUDP: resources.ReservedUDP,
		AgentVersion: version.Get().Version, AgentHash: version.Get().GitHash, DockerVersion: dockerVersion,
		DockerAPIVersion: dockerAPIVersion, LoggingDrivers: cfg.AvailableLoggingDrivers, TaskENI: cfg.TaskENIEnabled,
		Privileged: !cfg.PrivilegedDisabled, HealthCheckDisabled: cfg.DockerHealthCheckDisabled,
		AWSLogsExecutionRole: cfg.AWSLogsExecutionRole, Attributes: cfg.InstanceAttributes,
		TaskIAMRole: cfg.TaskIAMRoleEnabled, TaskIAMRoleNetworkHost: cfg.TaskIAMRoleNetworkHost,
		TaskCPUMemLimit: cfg.TaskCPUMemLimit, SELinux: cfg.SELinuxCapable, AppArmor: cfg.AppArmorCapable,
		Tags: maps.Clone(cfg.ContainerInstanceTags)}
}

package controlplane

import (
	"context"
	"fmt"
	"maps"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/version"
)

// localRegion signs requests to the embedded control plane, which accepts any region.
const localRegion = "us-east-1"

// NewECSClient builds the ECS API client for the configured mode: the embedded control plane with
// the keys of ECS_DATADIR/local-credentials in local mode, the SDK's configuration and
// ECS_BACKEND_HOST in ecs mode. It also returns the credentials and region that sign the ACS websocket.
func NewECSClient(ctx context.Context, cfg *config.Config, log *logger.Logger) (*ecsclient.Client, aws.CredentialsProvider, string, error) {
	endpoint, region := cfg.BackendHost, cfg.AWSRegion
	var creds aws.CredentialsProvider
	if cfg.Mode == config.ModeLocal {
		endpoint = "http://" + cfg.LocalControlPlaneAddr
		keys, err := localauth.Load(localauth.Path(cfg.DataDir))
		if err != nil {
			return nil, nil, "", err
		}
		creds, region = keys.Provider(), localRegion
	} else {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.AWSRegion))
		if err != nil {
			return nil, nil, "", fmt.Errorf("AWS configuration: %w", err)
		}
		creds = awsCfg.Credentials
	}
	client, err := ecsclient.New(ctx, ecsclient.Config{Region: region, Endpoint: endpoint, Credentials: creds,
		Cluster: cfg.Cluster, ExcludeIPv6PortBindings: cfg.ExcludeIPv6PortBindings, Logger: log})
	if err != nil {
		return nil, nil, "", fmt.Errorf("ECS client: %w", err)
	}
	return client, creds, region, nil
}

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

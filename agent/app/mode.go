package app

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/controlplane"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/version"
)

// modePlan is everything the control-plane mode (config.Mode: the embedded control plane, or Amazon
// ECS) decides, decided here once: the rest of the agent is handed what it needs and never asks
// which mode it runs in.
type modePlan struct {
	// embedded: the embedded control plane listens on ECS_LOCAL_CONTROL_PLANE_ADDR (local mode).
	embedded bool
	// assumesRoles: the agent assumes task roles itself with the host's AWS credentials, and a task
	// without an execution role fetches its secrets with them (local mode); in ecs mode ACS sends
	// every role's credentials.
	assumesRoles bool
	// onEC2: the host is an ECS container instance on EC2 (ecs mode, not ECS_EXTERNAL): it registers
	// with its EC2 identity and honours warm pools and spot interruption notices. Local mode never
	// asks the instance metadata service anything.
	onEC2 bool
	// regionFromIMDS: no region is configured, so it is read from the instance metadata service
	// (ecs mode only; ECS_EXTERNAL must be given one).
	regionFromIMDS bool
	// takesOverECSAgent: the container instance an Amazon ECS agent saved on this host becomes
	// Berth's (ecs mode).
	takesOverECSAgent bool
	// agentSignsTaskCalls: the ECS calls the agent API makes for a task (task scale-in protection)
	// are signed with the agent's own keys rather than the task role's credentials, which the
	// embedded control plane cannot verify (local mode). The task is still named by the container's
	// token, never by the request, and still needs its role's credentials.
	agentSignsTaskCalls bool
}

// planOf decides the mode's plan from the configuration.
func planOf(cfg *config.Config) modePlan {
	if cfg.Mode == config.ModeLocal {
		return modePlan{embedded: true, assumesRoles: true, agentSignsTaskCalls: true}
	}
	return modePlan{onEC2: !cfg.External, regionFromIMDS: cfg.AWSRegion == "", takesOverECSAgent: true}
}

// localRegion signs requests to the embedded control plane, which accepts any region.
const localRegion = "us-east-1"

// NewECSClient builds the ECS API client for the configured mode: the embedded control plane with
// the keys of ECS_DATADIR/local-credentials in local mode, the SDK's configuration and
// ECS_BACKEND_HOST in ecs mode. It also returns the credentials and region that sign the ACS and TCS
// websockets. berth drain uses it too.
func NewECSClient(ctx context.Context, cfg *config.Config, log *logger.Logger) (*ecsclient.Client, aws.CredentialsProvider, string, error) {
	endpoint, region := cfg.BackendHost, cfg.AWSRegion
	var creds aws.CredentialsProvider
	if planOf(cfg).embedded {
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
		Cluster: cfg.Cluster, ExcludeIPv6PortBindings: cfg.ExcludeIPv6PortBindings, Logger: log,
		UserAgent: ecsclient.UserAgent(version.Get().ECSAgentString(), "linux", controlplane.DetailedOSFamily(openOSRelease()))})
	if err != nil {
		return nil, nil, "", fmt.Errorf("ECS client: %w", err)
	}
	return client, creds, region, nil
}

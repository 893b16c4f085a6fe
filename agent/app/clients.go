package app

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/registryauth"
)

// NewDockerClient builds the Docker Engine client and its pull path from the configuration. The agent
// and `berth pull` both use it, so a pull from the command line behaves exactly as one for a task.
func NewDockerClient(cfg *config.Config, log *logger.Logger) (*dockerclient.Client, error) {
	behavior, err := dockerclient.ParseBehavior(string(cfg.ImagePullBehavior))
	if err != nil {
		return nil, err
	}
	timeouts := dockerclient.DefaultTimeouts()
	timeouts.Create = cfg.ContainerCreateTimeout
	timeouts.Start = cfg.ContainerStartTimeout
	return dockerclient.NewClient(dockerclient.Config{
		Endpoint: cfg.DockerHost,
		Timeouts: timeouts,
		Pull: dockerclient.PullConfig{
			InactivityTimeout: cfg.ImagePullInactivityTimeout,
			PullTimeout:       cfg.ImagePullTimeout,
			MaxConcurrent:     cfg.ImagePullMaxConcurrent,
			Behavior:          behavior,
			Logger:            log,
		},
		Logger: log,
	})
}

// NewRegistryAuth builds the registry credentials of the configuration and makes the start-up check
// ECS_REGISTRY_REQUIRE asks for (none without it). The agent and `berth pull` both use it.
func NewRegistryAuth(ctx context.Context, cfg *config.Config, log *logger.Logger) (*registryauth.Provider, error) {
	auth, err := registryauth.New(registryAuthConfig(cfg), log)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, requireTimeout)
	defer cancel()
	if err := auth.CheckRequired(ctx); err != nil {
		return nil, err
	}
	return auth, nil
}

// requireTimeout bounds the start-up check of ECS_REGISTRY_REQUIRE, so the agent exits within 15 s
// when a required registry's cloud is unreachable.
const requireTimeout = 15 * time.Second

// registryAuthConfig takes the registry-credential keys from the agent's configuration.
func registryAuthConfig(cfg *config.Config) registryauth.Config {
	return registryauth.Config{
		AuthType:        cfg.EngineAuthType,
		AuthData:        cfg.EngineAuthData,
		AWSRegion:       cfg.AWSRegion,
		ECRRegions:      cfg.Registry.ECRRegions,
		IncludeAccounts: cfg.Registry.IncludeAccounts,
		ExcludeAccounts: cfg.Registry.ExcludeAccounts,
		Require:         cfg.Registry.Require,
	}
}

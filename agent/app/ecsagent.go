package app

import (
	"context"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsagentdata"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
)

// adoptECSAgentInstance keeps the container instance of an Amazon ECS agent this host ran before: when
// Berth's own state has no registration yet, the instance ARN the ECS agent saved in
// the shared data directory (for the same cluster) becomes Berth's, so the next registration re-uses
// it. A file that cannot be read is reported and skipped: the instance then registers anew. The ECS
// agent's containers are not touched: Berth only ever manages containers with its own label.
func adoptECSAgentInstance(ctx context.Context, cfg *config.Config, store state.Store, log *logger.Logger) {
	if _, ok, err := store.Registration(ctx); err != nil || ok {
		return
	}
	inst, found, err := ecsagentdata.Read(cfg.DataDir)
	switch {
	case err != nil:
		log.Warn("the ECS agent's saved container instance cannot be read; registering anew", "error", err)
		return
	case !found:
		return
	case inst.Cluster != cfg.Cluster:
		log.Info("the ECS agent's saved container instance is of another cluster; registering anew",
			"file", inst.File, "saved_cluster", inst.Cluster, "cluster", cfg.Cluster)
		return
	}
	if err := store.SaveRegistration(ctx, state.Registration{Cluster: inst.Cluster, ContainerInstanceArn: inst.ContainerInstanceArn}); err != nil {
		log.Warn("the ECS agent's container instance cannot be saved; registering anew", "error", err)
		return
	}
	log.Info("taking over the container instance the ECS agent registered", "file", inst.File,
		"container_instance", inst.ContainerInstanceArn, "ecs_agent_version", inst.AgentVersion)
}

package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/imdsblock"
	"github.com/berth-agent/berth/agent/logger"
)

// imdsBlockCheckInterval is how often the bridge tasks' instance metadata block is checked.
const imdsBlockCheckInterval = time.Minute

// blockBridgeIMDS installs the instance metadata block for bridge tasks with ECS_BRIDGE_BLOCK_IMDS
// (the agent does not start without it: the operator asked that tasks never reach the instance's
// credentials) and removes a block an earlier start installed without it. The rule stays when the
// agent stops, as its tasks keep running.
func blockBridgeIMDS(ctx context.Context, cfg *config.Config, log *logger.Logger) error {
	if !cfg.BridgeBlockIMDS {
		if err := imdsblock.Remove(ctx, imdsblock.Config{}); err != nil {
			log.Warn("the instance metadata block of an earlier ECS_BRIDGE_BLOCK_IMDS=true could not be removed", "error", err)
		}
		return nil
	}
	if err := imdsblock.Install(ctx, imdsblock.Config{}); err != nil {
		return fmt.Errorf("ECS_BRIDGE_BLOCK_IMDS=true: %w", err)
	}
	log.Info("bridge tasks cannot reach the instance metadata service", "address", imdsblock.Address, "bridge", imdsblock.DefaultDockerBridge)
	return nil
}

// keepBridgeIMDSBlock puts the block back whenever it goes, until ctx ends.
func keepBridgeIMDSBlock(ctx context.Context, log *logger.Logger) {
	imdsblock.Keep(ctx, imdsblock.Config{}, clockwork.NewRealClock(), imdsBlockCheckInterval, func(err error) {
		if err == nil {
			log.Warn("the instance metadata block for bridge tasks was missing; put back", "address", imdsblock.Address)
			return
		}
		log.Error("bridge tasks may reach the instance metadata service", "address", imdsblock.Address, "error", err)
	})
}

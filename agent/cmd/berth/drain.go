package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/logger"
)

// drain sets the running agent's container instance to DRAINING, so the control plane places no new
// task on it. The instance ARN comes from the agent's /v1/metadata; where says how the agent was found.
func drain(ctx context.Context, cfg *config.Config, where agentLookup, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.IntrospectionURL()+"/v1/metadata", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("is the agent running?%s %w", where.hint(), err)
	}
	defer resp.Body.Close()
	var meta introspection.Metadata
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return fmt.Errorf("agent metadata: %w", err)
	}
	if meta.ContainerInstanceArn == nil {
		return fmt.Errorf("the agent has not registered a container instance yet")
	}
	client, _, _, err := app.NewECSClient(ctx, cfg, logger.Nop())
	if err != nil && cfg.Mode == config.ModeLocal {
		return noLocalKeys(cfg, where, err)
	}
	if err != nil {
		return err
	}
	if err := client.Drain(ctx, *meta.ContainerInstanceArn); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s is DRAINING\n", *meta.ContainerInstanceArn)
	return nil
}

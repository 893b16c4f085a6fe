package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
)

// PauseImage is the image of every awsvpc task's pause container, built from misc/pause.
const PauseImage = "berth/pause:latest"

// newTaskNetworking sets up awsvpc support when ECS_ENABLE_TASK_ENI=true: every CNI plugin must be
// present and answer VERSION (the error names the missing one), and the pause image is loaded from
// its tarball when the Docker Engine does not have it. Without task ENIs it returns a zero config,
// and the engine refuses awsvpc tasks with a reason that says how to enable them.
func newTaskNetworking(ctx context.Context, cfg *config.Config, client *dockerclient.Client, log *logger.Logger) (engine.AWSVPCConfig, *ecscni.Client, error) {
	if !cfg.TaskENIEnabled {
		return engine.AWSVPCConfig{}, nil, nil
	}
	cni, err := ecscni.New(ecscni.Config{PluginDirs: []string{cfg.CNIPluginsPath}, StateDir: filepath.Join(cfg.DataDir, "cni")}, log)
	if err != nil {
		return engine.AWSVPCConfig{}, nil, fmt.Errorf("task networking: %w", err)
	}
	if err := cni.VerifyPlugins(ctx); err != nil {
		return engine.AWSVPCConfig{}, nil, fmt.Errorf("ECS_ENABLE_TASK_ENI=true but the CNI plugins in %s (ECS_CNI_PLUGINS_PATH) are not usable: %w", cfg.CNIPluginsPath, err)
	}
	if err := ensurePauseImage(ctx, client, cfg.PauseImageTarball, log); err != nil {
		return engine.AWSVPCConfig{}, nil, err
	}
	subnet := cfg.AWSVPCLocalSubnet
	return engine.AWSVPCConfig{
		Network:               cni,
		ENIs:                  ecscni.ENIWatcher{},
		PauseImage:            PauseImage,
		BridgeIPv4:            cfg.OverrideAWSVPCLocalIPv4Address,
		AdditionalLocalRoutes: cfg.AWSVPCAdditionalLocalRoutes,
		BlockIMDS:             cfg.AWSVPCBlockIMDS,
		LocalSubnet:           &subnet,
	}, cni, nil
}

// ensurePauseImage loads the pause image from its tarball when the Docker Engine lacks it.
func ensurePauseImage(ctx context.Context, client *dockerclient.Client, tarball string, log *logger.Logger) error {
	if _, err := client.InspectImage(ctx, PauseImage); err == nil {
		return nil
	} else if !errors.Is(err, dockerclient.ErrNotFound) {
		return fmt.Errorf("inspect the pause image %s: %w", PauseImage, err)
	}
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("the pause image %s is missing and cannot be loaded (ECS_PAUSE_IMAGE_TARBALL): %w", PauseImage, err)
	}
	defer f.Close()
	if err := client.LoadImage(ctx, f); err != nil {
		return fmt.Errorf("load the pause image from %s: %w", tarball, err)
	}
	if _, err := client.InspectImage(ctx, PauseImage); err != nil {
		return fmt.Errorf("%s holds no image named %s: %w", tarball, PauseImage, err)
	}
	log.Info("pause image loaded", "image", PauseImage, "tarball", tarball)
	return nil
}

// removeNetworkLeftovers deletes the networking of tasks the agent no longer knows (an agent killed
// during setup, a task forgotten with its state).
func removeNetworkLeftovers(ctx context.Context, cni *ecscni.Client, eng *engine.Engine, log *logger.Logger) {
	known := map[string]bool{}
	for _, t := range eng.Tasks() {
		known[engine.CNITaskID(t.Arn)] = true
	}
	removed, err := cni.Leftovers(ctx, func(id string) bool { return known[id] })
	if err != nil {
		log.Warn("removing networking left by unknown tasks failed", "error", err)
	}
	if len(removed) > 0 {
		log.Info("removed networking left by tasks no longer known", "tasks", removed)
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/logger"
)

// PauseImage is the image of every awsvpc task's pause container, built from misc/pause.
const PauseImage = "berth/pause:latest"

// AWSVPCSetup says where awsvpc support finds its parts, from ECS_ENABLE_TASK_ENI's companions.
type AWSVPCSetup struct {
	PluginsPath           string // ECS_CNI_PLUGINS_PATH
	StateDir              string // where the CNI plugins keep their state
	PauseTarball          string // ECS_PAUSE_IMAGE_TARBALL: loaded when the Docker Engine lacks PauseImage
	BridgeIPv4            *cnitypes.IPNet
	AdditionalLocalRoutes []cnitypes.IPNet
	BlockIMDS             bool
	LocalSubnet           cnitypes.IPNet
}

// ImageLoader finds and loads images; *dockerclient.Client satisfies it.
type ImageLoader interface {
	InspectImage(ctx context.Context, name string) (*docker.Image, error)
	LoadImage(ctx context.Context, r io.Reader) error
}

var _ ImageLoader = (*dockerclient.Client)(nil)

// NewAWSVPC sets up awsvpc support: every CNI plugin must be present and answer VERSION (the error
// names the missing one), and the pause image is loaded from its tarball when the Docker Engine
// does not have it.
func NewAWSVPC(ctx context.Context, s AWSVPCSetup, images ImageLoader, log *logger.Logger) (AWSVPCConfig, error) {
	cni, err := ecscni.New(ecscni.Config{PluginDirs: []string{s.PluginsPath}, StateDir: s.StateDir}, log)
	if err != nil {
		return AWSVPCConfig{}, fmt.Errorf("task networking: %w", err)
	}
	if err := cni.VerifyPlugins(ctx); err != nil {
		return AWSVPCConfig{}, fmt.Errorf("ECS_ENABLE_TASK_ENI=true but the CNI plugins in %s (ECS_CNI_PLUGINS_PATH) are not usable: %w", s.PluginsPath, err)
	}
	if err := ensurePauseImage(ctx, images, s.PauseTarball, log); err != nil {
		return AWSVPCConfig{}, err
	}
	subnet := s.LocalSubnet
	return AWSVPCConfig{
		Network:               cni,
		Leftovers:             cni,
		ENIs:                  ecscni.ENIWatcher{},
		PauseImage:            PauseImage,
		BridgeIPv4:            s.BridgeIPv4,
		AdditionalLocalRoutes: s.AdditionalLocalRoutes,
		BlockIMDS:             s.BlockIMDS,
		LocalSubnet:           &subnet,
	}, nil
}

// NamespacePauseImage returns the pause image for tasks outside awsvpc mode that share PID or IPC
// namespaces, loading it from its tarball when the Docker Engine lacks it, or "" and why not.
func NamespacePauseImage(ctx context.Context, images ImageLoader, tarball string, log *logger.Logger) (string, error) {
	if err := ensurePauseImage(ctx, images, tarball, log); err != nil {
		return "", err
	}
	return PauseImage, nil
}

// ensurePauseImage loads the pause image from its tarball when the Docker Engine lacks it.
func ensurePauseImage(ctx context.Context, images ImageLoader, tarball string, log *logger.Logger) error {
	if _, err := images.InspectImage(ctx, PauseImage); err == nil {
		return nil
	} else if !errors.Is(err, dockerclient.ErrNotFound) {
		return fmt.Errorf("inspect the pause image %s: %w", PauseImage, err)
	}
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("the pause image %s is missing and cannot be loaded (ECS_PAUSE_IMAGE_TARBALL): %w", PauseImage, err)
	}
	defer f.Close()
	if err := images.LoadImage(ctx, f); err != nil {
		return fmt.Errorf("load the pause image from %s: %w", tarball, err)
	}
	if _, err := images.InspectImage(ctx, PauseImage); err != nil {
		return fmt.Errorf("%s holds no image named %s: %w", tarball, PauseImage, err)
	}
	log.Info("pause image loaded", "image", PauseImage, "tarball", tarball)
	return nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// PauseContainerName names the pause container Berth adds to every awsvpc task, as ECS does.
const PauseContainerName = "~internal~ecs~pause"

// Network sets up and tears down the network namespace of awsvpc tasks (ecscni.Client).
type Network interface {
	Setup(ctx context.Context, tn ecscni.TaskNetwork) (ecscni.Result, error)
	Teardown(ctx context.Context, tn ecscni.TaskNetwork) error
}

// ENIWaiter waits for an interface with a MAC address to appear on the host.
type ENIWaiter interface {
	WaitForMAC(ctx context.Context, mac string) error
}

// DefaultENIWait bounds the wait for a task's ENI to appear on the host.
const DefaultENIWait = 3 * time.Minute

// AWSVPCConfig enables awsvpc tasks. With a nil Network they are refused (ECS_ENABLE_TASK_ENI=false).
type AWSVPCConfig struct {
	Network               Network
	Leftovers             LeftoverRemover  // removes the networking of unknown tasks; nil: nothing to remove
	ENIs                  ENIWaiter        // waits for a task's ENI before its network is set up (ECS mode)
	ENIWait               time.Duration    // how long, DefaultENIWait when zero
	PauseImage            string           // the pause image, present locally
	BridgeIPv4            *cnitypes.IPNet  // OverrideAWSVPCLocalIPv4Address: one awsvpc task at a time
	AdditionalLocalRoutes []cnitypes.IPNet // routed through the task bridge
	BlockIMDS             bool             // ECS_AWSVPC_BLOCK_IMDS
	LocalSubnet           *cnitypes.IPNet  // local mode's stand-in for the ENI subnet (nil: ecscni's default)
	// TaskBridgeReady, if set, is called after each task network is set up and before the task's
	// containers start: the task bridge exists then, and its route to the task endpoint must work.
	TaskBridgeReady func(ctx context.Context) error
}

// LeftoverRemover deletes the task networking whose task ID keep refuses, and names what it deleted;
// *ecscni.Client satisfies it.
type LeftoverRemover interface {
	Leftovers(ctx context.Context, keep func(taskID string) bool) ([]string, error)
}

// staticBridgeAddress is the exclusive resource an awsvpc task holds while a static bridge address
// is configured: two tasks with one address would collide.
const staticBridgeAddress = "the static task bridge address (OverrideAWSVPCLocalIPv4Address)"

// withPause adds the pause container to a task that needs one and has none: an awsvpc task (the
// pause holds its network namespace), or one with pidMode or ipcMode task (it holds those
// namespaces). image is the pause image for the task's mode; "" adds none.
func withPause(t *task.Task, image string) {
	if image == "" || (t.NetworkMode != task.NetworkAWSVPC && t.PidMode != "task" && t.IpcMode != "task") {
		return
	}
	for _, c := range t.Containers {
		if c.Pause {
			return
		}
	}
	t.Containers = append([]*task.Container{{Name: PauseContainerName, Image: image, Essential: true, Pause: true,
		DesiredStatus: task.ContainerRunning}}, t.Containers...)
}

var unsafeTaskID = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// CNITaskID is the CNI container ID of a task: the last part of its ARN.
func CNITaskID(arn string) string {
	return unsafeTaskID.ReplaceAllString(arn[strings.LastIndexByte(arn, '/')+1:], "-")
}

// awsvpcFeature sets up and tears down the network namespaces of awsvpc tasks (see hooks.go). With
// no Network it refuses them.
type awsvpcFeature struct {
	cfg    AWSVPCConfig
	docker Docker
	log    *logger.Logger
}

var _ Recoverer = (*awsvpcFeature)(nil)

func (f *awsvpcFeature) Name() string { return "awsvpc" }

// TaskHook returns the hook of an awsvpc task; other tasks have none.
func (f *awsvpcFeature) TaskHook(t *task.Task) TaskHook {
	if t.NetworkMode != task.NetworkAWSVPC {
		return nil
	}
	return &awsvpcHook{f: f}
}

// RemoveLeftovers deletes the networking of tasks the engine does not hold; without awsvpc support
// it does nothing.
func (f *awsvpcFeature) RemoveLeftovers(ctx context.Context, known []string) {
	if f.cfg.Leftovers == nil {
		return
	}
	removed, err := f.cfg.Leftovers.Leftovers(ctx, taskIDs(known).Has)
	if err != nil {
		f.log.Warn("removing networking left by unknown tasks failed", "error", err)
	}
	if len(removed) > 0 {
		f.log.Info("removed networking left by tasks no longer known", "tasks", removed)
	}
}

// awsvpcHook is one awsvpc task's network.
type awsvpcHook struct{ f *awsvpcFeature }

var (
	_ Preparer    = (*awsvpcHook)(nil)
	_ StartHook   = (*awsvpcHook)(nil)
	_ StopHook    = (*awsvpcHook)(nil)
	_ CleanupHook = (*awsvpcHook)(nil)
)

// Prepare refuses the task when the agent has no task networking.
func (h *awsvpcHook) Prepare(*Run) error {
	if h.f.cfg.Network == nil {
		return errors.New("awsvpc network mode needs task networking: set ECS_ENABLE_TASK_ENI=true")
	}
	return nil
}

// AfterStart sets up the task network once the pause container runs.
func (h *awsvpcHook) AfterStart(ctx context.Context, r *Run, c *task.Container) error {
	if !c.Pause {
		return nil
	}
	return h.setup(ctx, r, c)
}

// BeforeStop tears the network down before the pause container stops: CNI DEL needs the namespace,
// which goes with the pause container.
func (h *awsvpcHook) BeforeStop(ctx context.Context, r *Run, batch []*task.Container) {
	for _, c := range batch {
		if c.Pause {
			h.teardown(ctx, r)
		}
	}
}

// Stopped tears the network down if it is still up: the pause container may have died by itself.
func (h *awsvpcHook) Stopped(ctx context.Context, r *Run) { h.teardown(ctx, r) }

// Cleanup tears the network down if the stop's teardown failed: the task's addresses and CNI
// records would otherwise outlive it until the next agent start. The namespace went with the pause
// container, which CNI DEL tolerates. The task is not changed: it is about to be forgotten.
func (h *awsvpcHook) Cleanup(ctx context.Context, r *Run) {
	t := r.Task()
	v := t.AWSVPC
	if v == nil || v.TornDown || h.f.cfg.Network == nil {
		return
	}
	if err := h.f.cfg.Network.Teardown(ctx, h.taskNetwork(t, v.NetNS)); err != nil {
		r.Log().Warn("tearing down the task network failed again; it is retried at the next agent start", "error", err)
		return
	}
	r.Log().Info("task network torn down at cleanup")
}

// taskNetwork describes the task's networking for the CNI plugins.
func (h *awsvpcHook) taskNetwork(t *task.Task, netns string) ecscni.TaskNetwork {
	cfg := h.f.cfg
	tn := ecscni.TaskNetwork{TaskID: CNITaskID(t.Arn), NetNS: netns, BridgeIPv4: cfg.BridgeIPv4,
		AdditionalLocalRoutes: cfg.AdditionalLocalRoutes, BlockIMDS: cfg.BlockIMDS, LocalSubnet: cfg.LocalSubnet}
	if eni := t.ENI; eni != nil {
		addr := eni.IPv4.Addr()
		tn.ENI = &ecscni.ENI{MAC: eni.MAC,
			IPv4:    cnitypes.IPNet{IP: net.IP(addr.AsSlice()), Mask: net.CIDRMask(eni.IPv4.Bits(), addr.BitLen())},
			Gateway: net.IP(eni.Gateway.AsSlice()), DNSServers: eni.DNSServers, SearchDomains: eni.SearchDomains}
	}
	return tn
}

// setup runs CNI ADD against the pause container's namespace; only then is the pause container
// RESOURCES_PROVISIONED and may the task's containers join it. Setting up a namespace that is set up
// already returns the recorded result, so a restored task passes through here safely.
func (h *awsvpcHook) setup(ctx context.Context, r *Run, pause *task.Container) error {
	t := r.Task()
	if err := h.waitForENI(ctx, r); err != nil {
		return err
	}
	ci, err := h.f.docker.InspectContainer(ctx, pause.DockerID)
	if err != nil {
		return fmt.Errorf("inspect the pause container: %w", err)
	}
	if ci.State.Pid == 0 {
		return fmt.Errorf("the pause container has no process")
	}
	tn := h.taskNetwork(t, fmt.Sprintf("/proc/%d/ns/net", ci.State.Pid))
	res, err := h.f.cfg.Network.Setup(ctx, tn)
	if err != nil {
		return fmt.Errorf("CNI setup of the task network: %w", err)
	}
	t.AWSVPC = &task.AWSVPC{NetNS: tn.NetNS, IPv4: res.ENIIPv4, BridgeIPv4: res.BridgeIPv4}
	if ready := h.f.cfg.TaskBridgeReady; ready != nil {
		if err := ready(ctx); err != nil {
			// The task runs; its containers cannot reach their credentials or metadata.
			r.Log().Error("the task endpoint is not reachable through the task bridge", "error", err)
		}
	}
	pause.KnownStatus = task.ContainerResourcesProvisioned
	r.Log().Info("task network set up", "ipv4", res.ENIIPv4, "bridge_ipv4", res.BridgeIPv4)
	r.Commit(ctx)
	return nil
}

// teardown runs CNI DEL for the task, once; a namespace that is gone already is fine.
func (h *awsvpcHook) teardown(ctx context.Context, r *Run) {
	t := r.Task()
	v := t.AWSVPC
	if v == nil || v.TornDown || h.f.cfg.Network == nil {
		return
	}
	if err := h.f.cfg.Network.Teardown(ctx, h.taskNetwork(t, v.NetNS)); err != nil {
		r.Log().Warn("tearing down the task network failed; it is retried at the next agent start", "error", err)
		return
	}
	v.TornDown = true
	r.Log().Info("task network torn down")
	r.Commit(ctx)
}

// waitForENI waits until the task's ENI has appeared on the host, bounded by ENIWait.
func (h *awsvpcHook) waitForENI(ctx context.Context, r *Run) error {
	t, cfg := r.Task(), h.f.cfg
	eni := t.ENI
	if eni == nil || cfg.ENIs == nil || t.AWSVPC != nil {
		return nil
	}
	limit := cfg.ENIWait
	if limit <= 0 {
		limit = DefaultENIWait
	}
	waitCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t.PendingReason = "waiting for the ENI with MAC " + eni.MAC + " to appear on the host"
	r.Commit(ctx)
	err := cfg.ENIs.WaitForMAC(waitCtx, eni.MAC)
	t.PendingReason = ""
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timed out after %s waiting for the ENI with MAC %s to appear on the host", limit, eni.MAC)
	default:
		return fmt.Errorf("waiting for the ENI with MAC %s: %w", eni.MAC, err)
	}
}

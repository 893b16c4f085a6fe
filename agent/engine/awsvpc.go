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

// taskNetwork describes the task's networking for the CNI plugins.
func (w *worker) taskNetwork(netns string) (ecscni.TaskNetwork, error) {
	cfg := w.e.cfg.AWSVPC
	tn := ecscni.TaskNetwork{TaskID: CNITaskID(w.arn), NetNS: netns, BridgeIPv4: cfg.BridgeIPv4,
		AdditionalLocalRoutes: cfg.AdditionalLocalRoutes, BlockIMDS: cfg.BlockIMDS, LocalSubnet: cfg.LocalSubnet}
	if eni := w.t.ENI; eni != nil {
		addr := eni.IPv4.Addr()
		tn.ENI = &ecscni.ENI{MAC: eni.MAC,
			IPv4:    cnitypes.IPNet{IP: net.IP(addr.AsSlice()), Mask: net.CIDRMask(eni.IPv4.Bits(), addr.BitLen())},
			Gateway: net.IP(eni.Gateway.AsSlice()), DNSServers: eni.DNSServers, SearchDomains: eni.SearchDomains}
	}
	return tn, nil
}

// setupNetwork runs CNI ADD against the pause container's namespace; only then is the pause
// container RESOURCES_PROVISIONED and may the task's containers join it. Setting up a namespace that
// is set up already returns the recorded result, so a restored task passes through here safely.
func (w *worker) setupNetwork(ctx context.Context, pause *task.Container) error {
	if err := w.waitForENI(ctx); err != nil {
		return err
	}
	ci, err := w.e.docker.InspectContainer(ctx, pause.DockerID)
	if err != nil {
		return fmt.Errorf("inspect the pause container: %w", err)
	}
	if ci.State.Pid == 0 {
		return fmt.Errorf("the pause container has no process")
	}
	tn, err := w.taskNetwork(fmt.Sprintf("/proc/%d/ns/net", ci.State.Pid))
	if err != nil {
		return err
	}
	res, err := w.e.cfg.AWSVPC.Network.Setup(ctx, tn)
	if err != nil {
		return fmt.Errorf("CNI setup of the task network: %w", err)
	}
	w.t.AWSVPC = &task.AWSVPC{NetNS: tn.NetNS, IPv4: res.ENIIPv4, BridgeIPv4: res.BridgeIPv4}
	if ready := w.e.cfg.AWSVPC.TaskBridgeReady; ready != nil {
		if err := ready(ctx); err != nil {
			// The task runs; its containers cannot reach their credentials or metadata.
			w.log.Error("the task endpoint is not reachable through the task bridge", "error", err)
		}
	}
	pause.KnownStatus = task.ContainerResourcesProvisioned
	w.log.Info("task network set up", "ipv4", res.ENIIPv4, "bridge_ipv4", res.BridgeIPv4)
	w.commit(ctx)
	return nil
}

// teardownNetwork runs CNI DEL for the task, once; a namespace that is gone already is fine.
func (w *worker) teardownNetwork(ctx context.Context) {
	v := w.t.AWSVPC
	if v == nil || v.TornDown || w.e.cfg.AWSVPC.Network == nil {
		return
	}
	tn, err := w.taskNetwork(v.NetNS)
	if err == nil {
		err = w.e.cfg.AWSVPC.Network.Teardown(ctx, tn)
	}
	if err != nil {
		w.log.Warn("tearing down the task network failed; it is retried at the next agent start", "error", err)
		return
	}
	v.TornDown = true
	w.log.Info("task network torn down")
	w.commit(ctx)
}

// waitForENI waits until the task's ENI has appeared on the host, bounded by ENIWait.
func (w *worker) waitForENI(ctx context.Context) error {
	eni, cfg := w.t.ENI, w.e.cfg.AWSVPC
	if eni == nil || cfg.ENIs == nil || w.t.AWSVPC != nil {
		return nil
	}
	limit := cfg.ENIWait
	if limit <= 0 {
		limit = DefaultENIWait
	}
	waitCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	w.t.PendingReason = "waiting for the ENI with MAC " + eni.MAC + " to appear on the host"
	w.commit(ctx)
	err := cfg.ENIs.WaitForMAC(waitCtx, eni.MAC)
	w.t.PendingReason = ""
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timed out after %s waiting for the ENI with MAC %s to appear on the host", limit, eni.MAC)
	default:
		return fmt.Errorf("waiting for the ENI with MAC %s: %w", eni.MAC, err)
	}
}

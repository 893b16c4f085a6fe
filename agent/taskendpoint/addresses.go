package taskendpoint

import (
	"net/netip"
	"slices"

	"github.com/berth-agent/berth/agent/task"
)

// ownsAddress reports whether ip is one of t's current addresses, those a request from t's
// containers comes from: while t is not stopped, an awsvpc task's task-bridge or ENI address until
// its network is torn down, and the address on a Docker network of each of its running containers. A
// stopped container's last address is not current: Docker gives it to the next container it starts.
func ownsAddress(t *task.Task, ip netip.Addr) bool {
	if t == nil || t.KnownStatus == task.TaskStopped || !ip.IsValid() {
		return false
	}
	want := ip.Unmap().String()
	if t.NetworkMode == task.NetworkAWSVPC && t.AWSVPC != nil && !t.AWSVPC.TornDown &&
		(t.AWSVPC.BridgeIPv4 == want || t.AWSVPC.IPv4 == want) {
		return true
	}
	for _, c := range t.Containers {
		if c.KnownStatus < task.ContainerRunning || c.KnownStatus >= task.ContainerStopped {
			continue
		}
		for _, n := range c.Networks {
			if slices.Contains(n.IPv4Addresses, want) {
				return true
			}
		}
	}
	return false
}

// byAddress returns the one task that has ip as a current address, and how many tasks have it: a
// task only when exactly one does. Two are never guessed between: an answer for the wrong one would
// show one task another's metadata.
func (h *Handler) byAddress(ip netip.Addr) (*task.Task, int) {
	var found *task.Task
	n := 0
	for _, t := range h.tasks.Tasks() {
		if ownsAddress(t, ip) {
			found = t
			n++
		}
	}
	if n != 1 {
		return nil, n
	}
	return found, n
}

// binding is what binding credentials to their task says of one request.
type binding int

const (
	bindServe  binding = iota // answered as the ECS agent does
	bindRefuse                // not the task's: answered as an ID nobody holds
	bindNotYet                // the task is starting a container whose address is not known yet: 503
)

// binding decides whether a credentials request from src may have the credentials of holder, the
// task that holds its ID (nil: no task does). With BindCredentials, a task that is not on the host's
// network has its credentials answered only to its own current addresses (ownsAddress) and to the
// host; an ID no task holds is answered to the host only. A container that Docker has just started
// asks before the engine has read its address back: while the task has one (startingAddress), the
// answer is the ECS agent's 503 for credentials not there yet, which SDKs retry.
func (h *Handler) binding(holder *task.Task, src netip.Addr, srcOK bool) binding {
	switch {
	case !h.bind:
		return bindServe
	case holder != nil && holder.NetworkMode == task.NetworkHost:
		return bindServe
	case srcOK && ownsAddress(holder, src):
		return bindServe
	case srcOK && h.isHost(src):
		return bindServe
	case holder != nil && holder.KnownStatus != task.TaskStopped &&
		slices.ContainsFunc(holder.Containers, func(c *task.Container) bool { return startingAddress(holder, c) }):
		return bindNotYet
	}
	return bindRefuse
}

// startingAddress reports whether c is a container whose address the model does not have yet though
// Docker may already have given it one: due to run and not known running (Docker may be starting
// it), running but with no address read back yet, or restarted in place and not read back since (RestartedAt
// after the StartedAt of its last run). An awsvpc task's containers have no address of their own:
// the task's is known before they start.
func startingAddress(t *task.Task, c *task.Container) bool {
	if c.Pause || c.DesiredStatus != task.ContainerRunning {
		return false
	}
	// Before it runs: the engine publishes what it created and started only once it has read the
	// container back, so a process Docker started may ask while the model still says NONE.
	return c.KnownStatus < task.ContainerRunning ||
		c.KnownStatus == task.ContainerRunning && (t.NetworkMode != task.NetworkAWSVPC && !hasAddress(c) || c.RestartedAt.After(c.StartedAt))
}

// hasAddress reports whether the model holds an address of c on a Docker network.
func hasAddress(c *task.Container) bool {
	return slices.ContainsFunc(c.Networks, func(n task.Network) bool {
		return slices.ContainsFunc(n.IPv4Addresses, func(a string) bool { return a != "" })
	})
}

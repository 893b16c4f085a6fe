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

package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// Resources is what the host offers tasks: CPU units (1024 per core), memory in MiB, and the host
// ports no task may take.
type Resources struct {
	CPU         int
	MemoryMiB   int
	ReservedTCP []uint16
	ReservedUDP []uint16
}

// need is what one task takes from the host.
type need struct {
	cpu, mem  int
	ports     []hostPort
	exclusive string // a resource only one task may hold at a time, or ""
}

type hostPort struct {
	port  uint16
	proto string
}

func (p hostPort) String() string { return fmt.Sprintf("%d/%s", p.port, p.proto) }

// needOf computes a task's requirement: its task-level cpu and memory when set, else the sum over its
// containers (memory, or memoryReservation when no hard limit is set), and the host ports it binds.
// It fails, naming the container and field, for a negative cpu or memory, a memory whose byte value
// does not fit an int64, or a sum that overflows: such a task must be refused, and a wrapped sum
// would admit it.
func needOf(t *task.Task) (need, error) {
	var n need
	if t.CPU < 0 {
		return need{}, fmt.Errorf("task cpu %d is negative", t.CPU)
	}
	if _, err := mibToBytes(t.Memory); err != nil {
		return need{}, fmt.Errorf("task memory: %w", err)
	}
	for _, c := range t.Containers {
		if c.CPU < 0 {
			return need{}, fmt.Errorf("container %q: cpu %d is negative", c.Name, c.CPU)
		}
		for _, f := range []struct {
			name string
			mib  int
		}{{"memory", c.Memory}, {"memoryReservation", c.MemoryReservation}} {
			if _, err := mibToBytes(f.mib); err != nil {
				return need{}, fmt.Errorf("container %q: %s: %w", c.Name, f.name, err)
			}
		}
		mem := c.Memory
		if mem == 0 {
			mem = c.MemoryReservation
		}
		var ok1, ok2 bool
		n.cpu, ok1 = addInts(n.cpu, c.CPU)
		n.mem, ok2 = addInts(n.mem, mem)
		if !ok1 || !ok2 {
			return need{}, fmt.Errorf("container %q: the task's cpu or memory summed over its containers overflows", c.Name)
		}
		for _, pm := range c.PortMappings {
			port := pm.HostPort
			switch t.NetworkMode {
			case task.NetworkHost:
				port = pm.ContainerPort
			case task.NetworkBridge:
			default:
				port = 0
			}
			if port != 0 {
				n.ports = append(n.ports, hostPort{port: port, proto: protocol(pm.Protocol)})
			}
		}
	}
	if t.CPU > 0 {
		n.cpu = t.CPU
	}
	if t.Memory > 0 {
		n.mem = t.Memory
	}
	return n, nil
}

// addInts returns a+b for non-negative a and b, and false when the sum overflows.
func addInts(a, b int) (int, bool) {
	if b > math.MaxInt-a {
		return 0, false
	}
	return a + b, true
}

// mibToBytes converts a size in MiB to bytes. It fails for a negative size or one whose byte value
// does not fit an int64, never wrapping.
func mibToBytes(mib int) (int64, error) {
	if mib < 0 || int64(mib) > math.MaxInt64>>20 {
		return 0, fmt.Errorf("%d MiB is out of range 0-%d MiB", mib, int64(math.MaxInt64>>20))
	}
	return int64(mib) << 20, nil
}

// resourceQueue hands out host resources in FIFO order: a task that does not fit waits, and so does
// every task behind it, so a large task is never starved by small ones.
type resourceQueue struct {
	mu       sync.Mutex
	total    Resources
	usedCPU  int
	usedMem  int
	ports    map[hostPort]string // port → task ARN holding it
	sole     map[string]string   // exclusive resource → task ARN holding it
	held     map[string]need     // task ARN → what it holds
	queue    []*waiter
	reserved set.Set[hostPort]
}

type waiter struct {
	arn     string
	n       need
	ready   chan struct{}
	changed chan struct{} // poked when reason changes
	reason  string        // why it waits, for introspection
}

// setReason records why w waits and wakes its Acquire to report it. Caller holds q.mu.
func (w *waiter) setReason(reason string) {
	if w.reason == reason {
		return
	}
	w.reason = reason
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func newResourceQueue(total Resources) *resourceQueue {
	q := &resourceQueue{total: total, ports: map[hostPort]string{}, sole: map[string]string{}, held: map[string]need{}}
	for _, p := range total.ReservedTCP {
		q.reserved.Add(hostPort{p, "tcp"})
	}
	for _, p := range total.ReservedUDP {
		q.reserved.Add(hostPort{p, "udp"})
	}
	return q
}

// impossible reports a need the host can never meet, so the task fails instead of waiting forever.
func (q *resourceQueue) impossible(n need) error {
	switch {
	case n.cpu < 0 || n.mem < 0: // needOf never makes one; a negative need would free what others hold
		return fmt.Errorf("task needs %d CPU units and %d MiB of memory: negative", n.cpu, n.mem)
	case n.cpu > q.total.CPU:
		return fmt.Errorf("task needs %d CPU units; the host has %d", n.cpu, q.total.CPU)
	case n.mem > q.total.MemoryMiB:
		return fmt.Errorf("task needs %d MiB of memory; the host offers %d", n.mem, q.total.MemoryMiB)
	}
	var seen set.Set[hostPort]
	for _, p := range n.ports {
		if q.reserved.Has(p) {
			return fmt.Errorf("host port %s is reserved (ECS_RESERVED_PORTS)", p)
		}
		if seen.Has(p) {
			return fmt.Errorf("host port %s is bound twice by the task", p)
		}
		seen.Add(p)
	}
	return nil
}

// shortfall says why n does not fit now, or "" when it does. Caller holds q.mu.
func (q *resourceQueue) shortfall(n need) string {
	var why []string
	if q.usedCPU+n.cpu > q.total.CPU {
		why = append(why, fmt.Sprintf("CPU %d of %d units free, %d needed", q.total.CPU-q.usedCPU, q.total.CPU, n.cpu))
	}
	if q.usedMem+n.mem > q.total.MemoryMiB {
		why = append(why, fmt.Sprintf("memory %d of %d MiB free, %d needed", q.total.MemoryMiB-q.usedMem, q.total.MemoryMiB, n.mem))
	}
	for _, p := range n.ports {
		if holder, ok := q.ports[p]; ok {
			why = append(why, fmt.Sprintf("host port %s is used by task %s", p, holder))
		}
	}
	if holder, ok := q.sole[n.exclusive]; ok && n.exclusive != "" {
		why = append(why, fmt.Sprintf("%s is held by task %s", n.exclusive, holder))
	}
	return strings.Join(why, "; ")
}

// Acquire blocks until the task's resources are granted in FIFO order, calling waiting (on the caller's
// goroutine) with the reason whenever it has to wait and again whenever that reason changes. It fails
// at once for a need the host can never meet, and with ctx's error when ctx ends first, leaving the
// queue. Acquiring twice for one ARN is a no-op.
func (q *resourceQueue) Acquire(ctx context.Context, arn string, n need, waiting func(reason string)) error {
	if err := q.impossible(n); err != nil {
		return err
	}
	q.mu.Lock()
	if _, ok := q.held[arn]; ok {
		q.mu.Unlock()
		return nil
	}
	w := &waiter{arn: arn, n: n, ready: make(chan struct{}), changed: make(chan struct{}, 1)}
	q.queue = append(q.queue, w)
	q.grantLocked()
	q.mu.Unlock()

	reported := ""
	for {
		select {
		case <-w.ready:
			return nil
		default:
		}
		q.mu.Lock()
		reason := w.reason
		q.mu.Unlock()
		if reason != "" && reason != reported {
			waiting(reason)
			reported = reason
		}
		select {
		case <-w.ready:
			return nil
		case <-w.changed:
		case <-ctx.Done():
			q.abandon(w)
			return ctx.Err()
		}
	}
}

// abandon takes a waiter whose caller gave up out of the queue, or gives back what it was granted.
func (q *resourceQueue) abandon(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.ready: // granted while cancelling: give it back
		q.releaseLocked(w.arn)
	default:
		q.queue = slices.DeleteFunc(q.queue, func(x *waiter) bool { return x == w })
		q.grantLocked()
	}
}

// grantLocked grants waiters from the head of the queue while they fit. Caller holds q.mu.
func (q *resourceQueue) grantLocked() {
	for len(q.queue) > 0 {
		w := q.queue[0]
		if why := q.shortfall(w.n); why != "" {
			w.setReason("waiting for host resources: " + why)
			for i, other := range q.queue[1:] {
				other.setReason(fmt.Sprintf("waiting for host resources: %d task(s) ahead in the queue", i+1))
			}
			return
		}
		q.queue = q.queue[1:]
		q.usedCPU += w.n.cpu
		q.usedMem += w.n.mem
		for _, p := range w.n.ports {
			q.ports[p] = w.arn
		}
		if w.n.exclusive != "" {
			q.sole[w.n.exclusive] = w.arn
		}
		q.held[w.arn] = w.n
		close(w.ready)
	}
}

// Release returns a task's resources and wakes the queue. Releasing what is not held is a no-op.
func (q *resourceQueue) Release(arn string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(arn)
}

func (q *resourceQueue) releaseLocked(arn string) {
	n, ok := q.held[arn]
	if !ok {
		return
	}
	delete(q.held, arn)
	q.usedCPU -= n.cpu
	q.usedMem -= n.mem
	for _, p := range n.ports {
		delete(q.ports, p)
	}
	if n.exclusive != "" {
		delete(q.sole, n.exclusive)
	}
	q.grantLocked()
}

package dockerstats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/kernelstats"
)

// fakeDocker answers inspects from its containers, by ID, and counts them.
type fakeDocker struct {
	mu       sync.Mutex
	byID     map[string]*docker.Container
	inspects map[string]int
}

var _ Docker = (*fakeDocker)(nil)

func (f *fakeDocker) InspectContainer(_ context.Context, id string) (*docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects[id]++
	c, ok := f.byID[id]
	if !ok {
		return nil, &dockerclient.NotFoundError{Kind: "container", Name: id, Err: errors.New("no such container")}
	}
	cp := *c
	return &cp, nil
}

// run makes container id running as pid in network mode mode.
func (f *fakeDocker) run(id string, pid int, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byID[id] = &docker.Container{ID: id, Name: "/name-" + id, State: docker.State{Running: pid > 0, Pid: pid},
		HostConfig: &docker.HostConfig{NetworkMode: mode}}
}

func (f *fakeDocker) inspected(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inspects[id]
}

// fakeKernel hands out handles whose readings grow by fixed steps on each read: CPU by 10 ms,
// received bytes by 1000 and sent bytes by 500 on eth0 when the handle reads networks.
type fakeKernel struct {
	clock clockwork.Clock

	mu      sync.Mutex
	gone    map[int]bool // pids whose process is gone
	opened  []*fakeHandle
	refused error // Open's answer when set
}

var _ Kernel = (*fakeKernel)(nil)

func (k *fakeKernel) Open(pid int, id string, opts kernelstats.OpenOptions) (Handle, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refused != nil {
		return nil, k.refused
	}
	h := &fakeHandle{k: k, pid: pid, id: id, opts: opts}
	k.opened = append(k.opened, h)
	return h, nil
}

// handles returns the handles opened, in order.
func (k *fakeKernel) handles() []*fakeHandle {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*fakeHandle(nil), k.opened...)
}

func (k *fakeKernel) kill(pid int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gone[pid] = true
}

type fakeHandle struct {
	k    *fakeKernel
	pid  int
	id   string
	opts kernelstats.OpenOptions

	// guarded by k.mu
	reads   []bool // the detail of each read
	closed  bool
	counter uint64
}

func (h *fakeHandle) Read(detail bool) (kernelstats.Reading, error) {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if h.closed {
		return kernelstats.Reading{}, fmt.Errorf("read of closed handle of %s", h.id)
	}
	if h.k.gone[h.pid] {
		return kernelstats.Reading{}, fmt.Errorf("read /proc/%d/net/dev: %w", h.pid, kernelstats.ErrGone)
	}
	h.reads = append(h.reads, detail)
	h.counter++
	r := kernelstats.Reading{Read: h.k.clock.Now(), Detail: detail}
	r.CPU.CPUUsage.TotalUsage = h.counter * uint64(10*time.Millisecond)
	r.Memory.Usage = 1 << 20
	if detail {
		r.CPU.SystemUsage = h.counter * uint64(time.Second)
		r.CPU.OnlineCPUs = 2
		r.Pids.Current = 1
	}
	if h.opts.Networks {
		r.Networks = map[string]dockerclient.NetworkStats{"eth0": {RxBytes: 1000 * h.counter, TxBytes: 500 * h.counter}}
	}
	return r, nil
}

func (h *fakeHandle) Close() error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	h.closed = true
	return nil
}

func (h *fakeHandle) details() []bool {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return append([]bool(nil), h.reads...)
}

func (h *fakeHandle) isClosed() bool {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return h.closed
}

// Package dockerstats serves containers' stats in the Docker Engine's stats shape, read from the
// kernel (agent/kernelstats: the container's cgroup and network namespace) when someone asks, for
// the task metadata endpoint's /stats and /task/stats and for telemetry. Nothing is read while
// nobody asks, and the Docker Engine serves no stats stream.
//
// A container is resolved once, by inspecting it (its init process, name and network mode), into a
// kernelstats.Handle kept while it is read; each ask reads the kernel again unless the latest
// reading is younger than Config.MinInterval, so any number of readers cost at most one reading per
// container per MinInterval. A reading carries the one before it as Docker's precpu_stats and
// preread, and, as ECS's task metadata v4, network_rate_stats computed from the two.
//
//	first ask ─inspect─► handle ─read─► reading ◄─read (older than MinInterval)── later asks
//	                        │
//	                        └─ process gone (stopped, or restarted: inspect again) ─► stopped ─ StoppedTTL ─► forgotten
//	any entry ── nobody asked for IdleTimeout, or Close ─► forgotten (handle closed)
//
// A stopped entry answers its error at once until StoppedTTL passes, without asking Docker again.
// Memory is bounded by the containers asked for within IdleTimeout.
package dockerstats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/kernelstats"
	"github.com/berth-agent/berth/agent/logger"
)

// Docker is the part of the Docker client the cache uses: a container is inspected once, to find
// its init process, name and network mode.
type Docker interface {
	// InspectContainer returns the container; a missing one is an errdefs.ErrNotFound.
	InspectContainer(ctx context.Context, id string) (*docker.Container, error)
}

var _ Docker = (*dockerclient.Client)(nil)

// Kernel opens containers' counters; FromKernel(kernelstats.Reader) is the real one.
type Kernel interface {
	// Open resolves the container id whose init process is pid (see kernelstats.Reader.Open).
	Open(pid int, id string, opts kernelstats.OpenOptions) (Handle, error)
}

// Handle reads one container's counters (see kernelstats.Reader.Read); a read fails with
// kernelstats.ErrGone once its process is gone.
type Handle interface {
	Read(detail bool) (kernelstats.Reading, error)
	Close() error
}

// FromKernel is the Kernel reading through r.
func FromKernel(r *kernelstats.Reader) Kernel { return readerKernel{r} }

type readerKernel struct{ r *kernelstats.Reader }

func (k readerKernel) Open(pid int, id string, opts kernelstats.OpenOptions) (Handle, error) {
	h, err := k.r.Open(pid, id, opts)
	if err != nil {
		return nil, err
	}
	return readerHandle{k.r, h}, nil
}

type readerHandle struct {
	r *kernelstats.Reader
	h *kernelstats.Handle
}

func (h readerHandle) Read(detail bool) (kernelstats.Reading, error) { return h.r.Read(h.h, detail) }
func (h readerHandle) Close() error                                  { return h.h.Close() }

// ErrClosed: the cache was closed. An errdefs.ErrFailedPrecondition.
var ErrClosed = errdefs.New(errdefs.ErrFailedPrecondition, "container stats cache closed")

// Config configures a Cache; zero fields take the defaults in parentheses.
type Config struct {
	// MinInterval is the age below which the latest reading of a container is served as it is
	// (900 ms: telemetry asks once a second, and a tick that comes a little early must still get
	// a new reading).
	MinInterval time.Duration
	// IdleTimeout forgets a container nobody asked for this long, closing its handle (60 s).
	IdleTimeout time.Duration
	// StoppedTTL is how long a container found gone or not running is remembered: asks meanwhile
	// fail at once, without asking Docker (10 s).
	StoppedTTL time.Duration
	// Clock times readings, idleness and stopped entries; nil is the wall clock.
	Clock clockwork.Clock
	// Logger receives the cache's records; nil discards them.
	Logger *logger.Logger
	// NetNSIgnore names the interfaces of an awsvpc task's namespace left out of its containers'
	// networks besides the loopback (Berth's task bridge, which the ECS agent leaves out too, being a
	// veth).
	NetNSIgnore []string
}

func (c Config) withDefaults() Config {
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.MinInterval, 900 * time.Millisecond}, {&c.IdleTimeout, time.Minute}, {&c.StoppedTTL, 10 * time.Second},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = logger.Nop()
	}
	return c
}

// Cache holds the latest readings of the containers asked for recently; it is safe for concurrent
// use. Close it to close their handles.
type Cache struct {
	docker Docker
	kernel Kernel
	cfg    Config
	log    *logger.Logger

	mu      sync.Mutex // guards closed, entries and sweeper; taken before an entry's mu
	closed  bool
	entries map[string]*entry
	sweeper clockwork.Timer // the next sweep of idle entries while there are entries; nil when none
}

// New returns a Cache reading through kernel, inspecting containers with docker. A nil kernel (the
// host's cgroups could not be found) makes every ask fail with an errdefs.ErrUnavailable saying so.
func New(docker Docker, kernel Kernel, cfg Config) *Cache {
	cfg = cfg.withDefaults()
	return &Cache{docker: docker, kernel: kernel, cfg: cfg, log: cfg.Logger, entries: map[string]*entry{}}
}

// entry is one container's handle and latest readings.
type entry struct {
	id string

	mu       sync.Mutex
	h        Handle              // nil until resolved, and once gone
	name     string              // the container's name, without Docker's leading "/"
	netns    string              // the awsvpc namespace the handle was opened for ("" for none)
	cur, pre kernelstats.Reading // the latest reading and the one before; cur.Read zero before the first
	detailed time.Time           // the last Stats ask: readings are read with detail for IdleTimeout after
	raw      json.RawMessage     // cur's Docker JSON, made on the first ask for it
	err      error               // why the container has no reading: it is gone or not running
	errUntil time.Time           // when err is forgotten
	lastAsk  time.Time
	forgot   bool // removed from the cache: a reader holding it must not use its handle
}

// Stats returns Docker's stats object of container dockerID, as ECS's task metadata v4 serves it:
// a reading no older than Config.MinInterval, with precpu_stats and preread from the reading
// before it (Docker's zero values on the first) and network_rate_stats once two readings with
// networks were taken. A missing container is an errdefs.ErrNotFound, one not running a
// dockerclient.ErrNotRunning, a failure to reach Docker its error (retriable). The caller must not
// modify the result: every reader of a reading shares it.
//
// netns, when not empty, is the network namespace of the container's awsvpc task: its interfaces,
// but the loopback and Config.NetNSIgnore, are the container's networks (Docker's stats of it have
// none, its network being its pause container's).
func (c *Cache) Stats(ctx context.Context, dockerID, netns string) (json.RawMessage, error) {
	e, err := c.get(dockerID)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.detailed = c.cfg.Clock.Now()
	if err := c.refresh(ctx, e, netns); err != nil {
		return nil, err
	}
	if e.raw == nil {
		var pre *kernelstats.Reading
		if !e.pre.Read.IsZero() {
			pre = &e.pre
		}
		e.raw = withNetworkRate(kernelstats.DockerJSON(e.id, e.name, e.cur, pre), e.pre, e.cur)
	}
	return e.raw, nil
}

// Sample is Stats' reading in decoded form, for telemetry, which asks every
// second for every running container: unless someone also asks Stats for the container, its
// readings skip what only the JSON shows. The same rules and netns apply.
func (c *Cache) Sample(ctx context.Context, dockerID, netns string) (dockerclient.StatsSample, error) {
	e, err := c.get(dockerID)
	if err != nil {
		return dockerclient.StatsSample{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := c.refresh(ctx, e, netns); err != nil {
		return dockerclient.StatsSample{}, err
	}
	var pre *kernelstats.Reading
	if !e.pre.Read.IsZero() {
		pre = &e.pre
	}
	return kernelstats.Sample(e.cur, pre), nil
}

// Close closes every handle; every later ask fails with ErrClosed. It waits for the asks being
// answered, and is idempotent.
func (c *Cache) Close() {
	c.mu.Lock()
	entries := c.entries
	c.closed, c.entries = true, map[string]*entry{}
	if c.sweeper != nil {
		c.sweeper.Stop()
		c.sweeper = nil
	}
	c.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		e.forget()
		e.mu.Unlock()
	}
}

// get returns dockerID's entry, adding one when there is none, and records the ask.
func (c *Cache) get(dockerID string) (*entry, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("stats of container %q: %w", dockerID, ErrClosed)
	}
	e := c.entries[dockerID]
	if e == nil {
		e = &entry{id: dockerID}
		c.entries[dockerID] = e
		if c.sweeper == nil {
			c.sweeper = c.cfg.Clock.AfterFunc(c.cfg.IdleTimeout, c.sweep)
		}
	}
	e.lastAsk = now // read under c.mu only (by sweep), so e.mu is not needed
	return e, nil
}

// sweep forgets the entries nobody asked for within IdleTimeout, closing their handles (a handle
// holds its container's network namespace), and comes back while entries are left. An entry whose
// ask is still being answered (an inspect that outlived IdleTimeout) is left to a later sweep.
func (c *Cache) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweeper = nil
	if c.closed {
		return
	}
	now := c.cfg.Clock.Now()
	defer func() {
		if len(c.entries) > 0 {
			c.sweeper = c.cfg.Clock.AfterFunc(c.cfg.IdleTimeout/2, c.sweep)
		}
	}()
	for id, e := range c.entries {
		if now.Sub(e.lastAsk) >= c.cfg.IdleTimeout && e.mu.TryLock() {
			e.forget()
			e.mu.Unlock()
			delete(c.entries, id)
			c.log.Debug("container stats forgotten: idle", "docker_id", id)
		}
	}
}

// forget closes e's handle for good: a reader that got e before it was removed from the cache
// gets ErrClosed. The caller holds e.mu.
func (e *entry) forget() {
	e.forgot = true
	e.close()
}

// close closes e's handle; the caller holds e.mu.
func (e *entry) close() {
	if e.h != nil {
		_ = e.h.Close()
		e.h = nil
	}
}

// refresh makes e.cur a reading no older than MinInterval, with detail when Stats asked within
// IdleTimeout, resolving the container when needed; the caller holds e.mu.
func (c *Cache) refresh(ctx context.Context, e *entry, netns string) error {
	now := c.cfg.Clock.Now()
	detail := !e.detailed.IsZero() && now.Sub(e.detailed) < c.cfg.IdleTimeout
	if e.forgot {
		return fmt.Errorf("stats of container %q: %w", e.id, ErrClosed)
	}
	if e.err != nil {
		if now.Before(e.errUntil) {
			return e.err
		}
		e.err = nil
	}
	fresh := !e.cur.Read.IsZero() && now.Sub(e.cur.Read) < c.cfg.MinInterval
	if fresh && (e.cur.Detail || !detail) && netns == e.netns {
		return nil
	}
	if c.kernel == nil {
		return fmt.Errorf("stats of container %q: %w", e.id, errUnsupported)
	}
	// A handle opened for another namespace (the task's awsvpc network was set up since) is
	// opened again; so is one whose process is gone, once: the container may have restarted.
	if e.h != nil && netns != e.netns {
		e.close()
	}
	for attempt := 0; ; attempt++ {
		if e.h == nil {
			if err := c.resolve(ctx, e, netns); err != nil {
				return c.fail(e, err, now)
			}
		}
		r, err := e.h.Read(detail)
		if err == nil {
			// The reading before becomes precpu_stats only when it has what this one has: none
			// after one without detail (Docker's zero values, as on a stream's first sample), and no
			// network rate across a change of networks.
			if (r.Detail && !e.cur.Detail) || (r.Networks == nil) != (e.cur.Networks == nil) {
				e.cur = kernelstats.Reading{}
			}
			e.pre, e.cur, e.raw = e.cur, r, nil
			return nil
		}
		e.close()
		if !errors.Is(err, kernelstats.ErrGone) || attempt > 0 {
			return c.fail(e, fmt.Errorf("stats of container %q: %w", e.id, err), now)
		}
		// Its counters start again with the next process: no predecessor across the two.
		e.cur = kernelstats.Reading{}
	}
}

// fail records err as e's answer for StoppedTTL when it says the container is gone or not
// running, and returns it.
func (c *Cache) fail(e *entry, err error, now time.Time) error {
	if errdefs.IsNotFound(err) || errors.Is(err, dockerclient.ErrNotRunning) {
		e.err, e.errUntil = err, now.Add(c.cfg.StoppedTTL)
		e.pre, e.cur, e.raw = kernelstats.Reading{}, kernelstats.Reading{}, nil
		c.log.Debug("container stats: container not running", "docker_id", e.id, "error", err)
	}
	return err
}

// resolve inspects e's container and opens a handle on its init process; the caller holds e.mu.
func (c *Cache) resolve(ctx context.Context, e *entry, netns string) error {
	ctr, err := c.docker.InspectContainer(ctx, e.id)
	if err != nil {
		return err
	}
	if !ctr.State.Running || ctr.State.Pid <= 0 {
		return fmt.Errorf("stats of container %q: %w", e.id, dockerclient.ErrNotRunning)
	}
	opts := kernelstats.OpenOptions{Networks: hasOwnNetwork(ctr.HostConfig)}
	if netns != "" {
		opts = kernelstats.OpenOptions{Networks: true, IgnoreInterfaces: c.cfg.NetNSIgnore}
	}
	h, err := c.kernel.Open(ctr.State.Pid, ctr.ID, opts)
	if err != nil {
		return fmt.Errorf("stats of container %q: %w", e.id, err)
	}
	e.h, e.name, e.netns = h, strings.TrimPrefix(ctr.Name, "/"), netns
	return nil
}

// hasOwnNetwork reports whether a container of this host config has networks Docker's stats show:
// not in network mode host or none, nor sharing another container's namespace.
func hasOwnNetwork(hc *docker.HostConfig) bool {
	if hc == nil {
		return true
	}
	mode := hc.NetworkMode
	return mode != "host" && mode != "none" && !strings.HasPrefix(mode, "container:")
}

// errUnsupported is the answer when the host's cgroups cannot be read (New's kernel was nil). An
// errdefs.ErrUnavailable.
var errUnsupported = errdefs.New(errdefs.ErrUnavailable, "container stats unavailable: the host's cgroup hierarchies were not found")

// networkRate is ECS's network_rate_stats: bytes per second over every interface between two
// readings.
type networkRate struct {
	RxBytesPerSec float64 `json:"rx_bytes_per_sec"`
	TxBytesPerSec float64 `json:"tx_bytes_per_sec"`
}

// totals sums the received and sent bytes of every interface of r.
func totals(r kernelstats.Reading) (rx, tx uint64) {
	for _, n := range r.Networks {
		rx += n.RxBytes
		tx += n.TxBytes
	}
	return rx, tx
}

// withNetworkRate returns the stats object raw with network_rate_stats added, computed from the
// reading before (prev) and this one (cur). raw is returned as it is when there is no rate to tell:
// no reading before, no networks (network mode host or none), or totals that went down (the
// container's network was set up anew).
func withNetworkRate(raw []byte, prev, cur kernelstats.Reading) json.RawMessage {
	if prev.Read.IsZero() || prev.Networks == nil || cur.Networks == nil {
		return raw
	}
	prx, ptx := totals(prev)
	crx, ctx := totals(cur)
	secs := cur.Read.Sub(prev.Read).Seconds()
	if crx < prx || ctx < ptx || secs <= 0 {
		return raw
	}
	rate, err := json.Marshal(networkRate{RxBytesPerSec: float64(crx-prx) / secs, TxBytesPerSec: float64(ctx-ptx) / secs})
	obj := bytes.TrimSpace(raw)
	if err != nil || len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return raw
	}
	const key = `"network_rate_stats":`
	out := make([]byte, 0, len(obj)+1+len(key)+len(rate))
	out = append(out, obj[:len(obj)-1]...)
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(out, key...)
	out = append(out, rate...)
	return append(out, '}')
}

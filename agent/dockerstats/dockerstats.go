// Package dockerstats serves Docker's stats of containers from one stats stream per container,
// shared by every reader, so that the task metadata endpoint's /stats and /task/stats answer from
// memory instead of asking Docker on every request.
//
// The first Stats call for a container starts its stream (dockerclient's ContainerStats) and waits
// for its first sample, which the Engine sends at its next collection tick (it collects every
// second); later calls get the latest sample at once. A sample served carries network_rate_stats,
// as ECS's task metadata v4 does, computed from it and the sample before (so not the first, nor any
// of a container without networks).
//
//	first Stats ─► starting ──first sample──► serving ──stream dropped──► reopening (backoff)
//	                                            ▲                              │
//	                                            └───────── next sample ────────┘
//
//	any state ── container gone or not running ─► stopped ── StoppedTTL ─► removed
//	any state ── nobody read for IdleTimeout, or Close ───────────────────► removed
//
// While a dropped stream reopens, the latest sample is still served; once a reopening fails, its
// error is, until a sample arrives. A stopped entry answers its error at once until it is removed;
// the next Stats call after that starts a new entry. An entry holds one sample, so memory is
// bounded by the containers read within IdleTimeout.
package dockerstats

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
)

// Docker is the part of the Docker client the cache uses.
type Docker interface {
	// ContainerStats calls fn with each sample of the container's stats stream until ctx ends or the
	// stream does; it never returns nil. A non-retriable error (errdefs.IsRetriable) means the
	// container is gone or not running.
	ContainerStats(ctx context.Context, id string, fn func(dockerclient.StatsSample) error) error
}

var _ Docker = (*dockerclient.Client)(nil)

var (
	// ErrClosed: the cache was closed. An errdefs.ErrFailedPrecondition.
	ErrClosed = errdefs.New(errdefs.ErrFailedPrecondition, "container stats cache closed")
	// ErrNoSample: no sample of the container arrived within Config.FirstSampleWait (or before its
	// stream closed). An errdefs.ErrUnavailable; a later call may succeed.
	ErrNoSample = errdefs.New(errdefs.ErrUnavailable, "no stats sample yet")
)

// Config configures a Cache; zero fields take the defaults in parentheses.
type Config struct {
	// IdleTimeout closes the stream of a container no Stats call asked for this long (60 s).
	IdleTimeout time.Duration
	// FirstSampleWait bounds how long a Stats call waits for a container's first sample (1 s).
	FirstSampleWait time.Duration
	// StoppedTTL is how long a container found gone or not running is remembered: Stats calls
	// meanwhile fail at once, without asking Docker (10 s).
	StoppedTTL time.Duration
	// BackoffMin and BackoffMax bound the wait before reopening a dropped stream (250 ms, 10 s).
	BackoffMin time.Duration
	BackoffMax time.Duration
	// Clock times idleness, waits and backoff; nil is the wall clock.
	Clock clockwork.Clock
	// Logger receives the cache's records; nil discards them.
	Logger *logger.Logger
	// NetNSIgnore names the interfaces of an awsvpc task's namespace left out of its containers'
	// networks besides the loopback (Berth's task bridge, which the ECS agent leaves out too, being a
	// veth).
	NetNSIgnore []string
	// ProcRoot is where /proc is mounted ("/proc"): a task's namespace /proc/PID/ns/net is read as
	// ProcRoot/PID/net/dev.
	ProcRoot string
}

func (c Config) withDefaults() Config {
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.IdleTimeout, time.Minute}, {&c.FirstSampleWait, time.Second}, {&c.StoppedTTL, 10 * time.Second},
		{&c.BackoffMin, 250 * time.Millisecond}, {&c.BackoffMax, 10 * time.Second},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	c.BackoffMax = max(c.BackoffMax, c.BackoffMin)
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = logger.Nop()
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	return c
}

// Cache holds the latest stats sample of each container read recently; it is safe for concurrent
// use. Close it to end its streams.
type Cache struct {
	docker  Docker
	cfg     Config
	log     *logger.Logger
	netSkip map[string]bool // Config.NetNSIgnore

	ctx    context.Context // parent of every entry's streams; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the entries' goroutines

	mu      sync.Mutex // guards closed, entries and each entry's timer; taken before an entry's mu
	closed  bool
	entries map[string]*entry
}

// New returns a Cache reading stats from docker; it starts nothing until the first Stats call.
func New(docker Docker, cfg Config) *Cache {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	skip := make(map[string]bool, len(cfg.NetNSIgnore))
	for _, name := range cfg.NetNSIgnore {
		skip[name] = true
	}
	return &Cache{docker: docker, cfg: cfg, log: cfg.Logger, netSkip: skip, ctx: ctx, cancel: cancel,
		entries: map[string]*entry{}}
}

// entry is one container's stream and latest sample.
type entry struct {
	id     string
	cancel context.CancelFunc // ends the entry's streams
	timer  clockwork.Timer    // the idle check while live, the removal once stopped; guarded by Cache.mu

	mu       sync.Mutex
	sample   dockerclient.StatsSample // the latest sample, its JSON as served; JSON nil until the first, and once stopped
	last     point                    // the latest sample's read time and network totals
	err      error                    // why there is no sample: the latest failure, or the end once done
	done     bool                     // stopped, idle or closed: the entry's goroutines are ending
	expires  time.Time                // when a stopped entry is forgotten
	lastRead time.Time                // when Stats last asked for the entry
	netDev   string                   // the task namespace's net/dev its networks are read from; "": Docker's
	changed  chan struct{}            // closed and replaced whenever sample or err changes
}

// point is what the network rate of the next sample is computed from.
type point struct {
	read   time.Time
	hasNet bool
	rx, tx uint64 // totals over every interface
}

// Stats returns Docker's stats object of container dockerID, as ECS's task metadata v4 serves it:
// the latest sample of the container's stream, with network_rate_stats once two samples with
// networks were seen. The first call for a container starts its stream and waits for a sample, up
// to Config.FirstSampleWait (then ErrNoSample) or until ctx ends; later calls answer at once. A
// missing container is an errdefs.ErrNotFound, one not running a dockerclient.ErrNotRunning, a
// failure to reach Docker its error (retriable). The caller must not modify the result: every
// reader of a sample shares it.
//
// netns, when not empty, is the network namespace of the container's awsvpc task, /proc/PID/ns/net:
// from the next sample on, the container's networks (and so its network_rate_stats) are the
// namespace's interfaces, read when each sample arrives, instead of Docker's, which has none. A
// namespace of another form, or one that cannot be read, leaves Docker's.
func (c *Cache) Stats(ctx context.Context, dockerID, netns string) (json.RawMessage, error) {
	s, err := c.Sample(ctx, dockerID, netns)
	return s.JSON, err
}

// inNetNS returns s with the networks of e's task namespace, when e has one and it can be read.
func (c *Cache) inNetNS(e *entry, s dockerclient.StatsSample) dockerclient.StatsSample {
	e.mu.Lock()
	dev := e.netDev
	e.mu.Unlock()
	if dev == "" {
		return s
	}
	b, err := os.ReadFile(dev)
	if err == nil {
		var nets map[string]dockerclient.NetworkStats
		if nets, err = parseNetDev(b, c.netSkip); err == nil {
			s.Networks = nets
			s.JSON = withNetworks(s.JSON, nets)
			return s
		}
	}
	c.log.Debug("task network namespace counters unavailable", "docker_id", e.id, "path", dev, "error", err)
	return s
}

// Sample is Stats with the sample's counters, decoded once where the stream is read: what telemetry
// reads every second, without decoding the JSON again. The same rules, netns and sharing apply.
func (c *Cache) Sample(ctx context.Context, dockerID, netns string) (dockerclient.StatsSample, error) {
	e, err := c.get(dockerID)
	if err != nil {
		return dockerclient.StatsSample{}, err
	}
	if netns != "" {
		if dev, ok := netDevOf(c.cfg.ProcRoot, netns); ok {
			e.mu.Lock()
			e.netDev = dev
			e.mu.Unlock()
		}
	}
	sample, changed, err := e.read()
	if sample.JSON != nil || err != nil {
		return sample, err
	}
	timer := c.cfg.Clock.NewTimer(c.cfg.FirstSampleWait)
	defer timer.Stop()
	for {
		select {
		case <-changed:
		case <-timer.Chan():
			return dockerclient.StatsSample{}, fmt.Errorf("stats of container %q: %w within %v", dockerID, ErrNoSample, c.cfg.FirstSampleWait)
		case <-ctx.Done():
			return dockerclient.StatsSample{}, fmt.Errorf("stats of container %q: %w", dockerID, context.Cause(ctx))
		}
		if sample, changed, err = e.read(); sample.JSON != nil || err != nil {
			return sample, err
		}
	}
}

// Close ends every stream and waits for them; Stats calls waiting for a first sample and every
// later call fail with ErrClosed. It is idempotent.
func (c *Cache) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for id, e := range c.entries {
			e.timer.Stop()
			e.end(fmt.Errorf("stats of container %q: %w", id, ErrClosed))
			delete(c.entries, id)
		}
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// get returns dockerID's entry, starting one when there is none, and records the read.
func (c *Cache) get(dockerID string) (*entry, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("stats of container %q: %w", dockerID, ErrClosed)
	}
	e := c.entries[dockerID]
	if e != nil && e.expired(now) {
		c.remove(e)
		e = nil
	}
	if e == nil {
		e = c.start(dockerID, now)
	}
	e.mu.Lock()
	e.lastRead = now
	e.mu.Unlock()
	return e, nil
}

// start adds an entry for dockerID and starts its stream; the caller holds c.mu.
func (c *Cache) start(dockerID string, now time.Time) *entry {
	ctx, cancel := context.WithCancel(c.ctx)
	e := &entry{id: dockerID, cancel: cancel, lastRead: now, changed: make(chan struct{})}
	e.timer = c.cfg.Clock.AfterFunc(c.cfg.IdleTimeout, func() { c.checkIdle(e) })
	c.entries[dockerID] = e
	c.wg.Add(1)
	go c.stream(ctx, e)
	c.log.Debug("container stats stream started", "docker_id", dockerID)
	return e
}

// remove forgets e if it is still dockerID's entry; the caller holds c.mu.
func (c *Cache) remove(e *entry) {
	if c.entries[e.id] == e {
		delete(c.entries, e.id)
	}
}

// checkIdle ends e when nobody asked for it for IdleTimeout, else checks again when that may be so.
func (c *Cache) checkIdle(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.mu.Lock()
	idle, done := c.cfg.Clock.Since(e.lastRead), e.done
	e.mu.Unlock()
	if done {
		return
	}
	if idle < c.cfg.IdleTimeout {
		e.timer.Reset(c.cfg.IdleTimeout - idle)
		return
	}
	c.remove(e)
	e.end(fmt.Errorf("stats of container %q: %w: its stream closed after %v unread", e.id, ErrNoSample, c.cfg.IdleTimeout))
	c.log.Debug("container stats stream closed: idle", "docker_id", e.id, "idle", idle)
}

// stopped ends e with err, a sign that its container is gone or not running, and keeps it as a
// record of that for StoppedTTL.
func (c *Cache) stopped(e *entry, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.mu.Lock()
	if e.done {
		e.mu.Unlock()
		return
	}
	e.done = true
	e.sample, e.err = dockerclient.StatsSample{}, err
	e.expires = c.cfg.Clock.Now().Add(c.cfg.StoppedTTL)
	e.broadcast()
	e.mu.Unlock()
	e.cancel()
	if c.entries[e.id] == e {
		e.timer.Stop()
		e.timer = c.cfg.Clock.AfterFunc(c.cfg.StoppedTTL, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.remove(e)
		})
	}
	c.log.Debug("container stats stream ended", "docker_id", e.id, "error", err)
}

// stream runs e's stats stream until ctx ends or the container is gone, reopening it with backoff
// when it drops.
func (c *Cache) stream(ctx context.Context, e *entry) {
	defer c.wg.Done()
	backoff := retry.NewExponentialBackoff(c.cfg.BackoffMin, c.cfg.BackoffMax, 0.2, 2)
	failures := 0
	for {
		got := false
		err := c.docker.ContainerStats(ctx, e.id, func(s dockerclient.StatsSample) error {
			got = true
			e.offer(c.inNetNS(e, s))
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if !errdefs.IsRetriable(err) {
			c.stopped(e, err)
			return
		}
		if got {
			// The latest sample stays served while the stream reopens.
			backoff.Reset()
			failures = 0
			c.log.Debug("container stats stream dropped; reopening", "docker_id", e.id, "error", err)
		} else {
			e.fail(err)
			if failures++; failures == 1 {
				c.log.Warn("cannot open container stats stream; retrying", "docker_id", e.id, "error", err)
			}
		}
		if retry.Sleep(ctx, c.cfg.Clock, backoff.Duration()) != nil {
			return
		}
	}
}

// read returns the latest sample, a channel closed when it changes, and why there is no sample.
func (e *entry) read() (dockerclient.StatsSample, <-chan struct{}, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sample, e.changed, e.err
}

// expired reports whether e is a stopped entry to forget.
func (e *entry) expired(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// offer makes s the latest sample, unless it was read no later than the latest one: a rate needs
// time between two samples, and an older sample must not replace a newer one.
func (e *entry) offer(s dockerclient.StatsSample) {
	cur := point{read: s.Read, hasNet: s.Networks != nil}
	for _, n := range s.Networks {
		cur.rx += n.RxBytes
		cur.tx += n.TxBytes
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done || (!e.last.read.IsZero() && !s.Read.After(e.last.read)) {
		return
	}
	s.JSON = withNetworkRate(s.JSON, e.last, cur)
	e.sample = s
	e.last = cur
	e.err = nil
	e.broadcast()
}

// fail records err as why there is no sample while the stream is reopened.
func (e *entry) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	e.sample, e.err = dockerclient.StatsSample{}, err
	e.broadcast()
}

// end marks e done for an idle close or Close: readers keep the latest sample, if any, else get
// err. The caller holds the Cache's mu.
func (e *entry) end(err error) {
	e.mu.Lock()
	if !e.done {
		e.done = true
		if e.sample.JSON == nil {
			e.err = err
		}
		e.broadcast()
	}
	e.mu.Unlock()
	e.cancel()
}

// broadcast wakes the readers waiting for a change; the caller holds e.mu.
func (e *entry) broadcast() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// networkRate is ECS's network_rate_stats: bytes per second over every interface between two
// samples.
type networkRate struct {
	RxBytesPerSec float64 `json:"rx_bytes_per_sec"`
	TxBytesPerSec float64 `json:"tx_bytes_per_sec"`
}

// withNetworkRate returns the stats object raw with network_rate_stats added, computed from the
// totals of the sample before (prev) and of this one (cur). raw is returned as it is when there is
// no rate to tell: no sample before, no networks (network mode host or none), or totals that went
// down (the container's network was set up anew).
func withNetworkRate(raw json.RawMessage, prev, cur point) json.RawMessage {
	if prev.read.IsZero() || !prev.hasNet || !cur.hasNet || cur.rx < prev.rx || cur.tx < prev.tx {
		return raw
	}
	secs := cur.read.Sub(prev.read).Seconds()
	if secs <= 0 {
		return raw
	}
	rate, err := json.Marshal(networkRate{
		RxBytesPerSec: float64(cur.rx-prev.rx) / secs,
		TxBytesPerSec: float64(cur.tx-prev.tx) / secs,
	})
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

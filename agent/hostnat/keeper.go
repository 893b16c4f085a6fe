package hostnat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
)

// DefaultCheckInterval is how often a Keeper checks the NAT while it is in place.
const DefaultCheckInterval = 30 * time.Second

// retryMin is the first wait before a Keeper checks again after a failed Ensure; the wait doubles
// up to the check interval while the NAT stays out of place.
const retryMin = time.Second

// errNotChecked is a Keeper's error before its first Ensure has finished.
var errNotChecked = errdefs.New(errdefs.ErrUnavailable, "task endpoint NAT not checked yet")

// ops are the operations a Keeper runs on a host.
type ops interface {
	install(ctx context.Context, cfg Config) error
	check(ctx context.Context, cfg Config) error
	secure(ctx context.Context, cfg Config) ([]string, error)
	recorded(cfg Config) ([]string, error)
	present(bridge string) bool
}

var (
	_ ops = (*host)(nil)
	_ ops = system{}
)

// system is the host this process runs in (the calling thread's network namespace), one operation
// of this process at a time.
type system struct{}

func (system) install(ctx context.Context, cfg Config) error { return Install(ctx, cfg) }

func (system) check(ctx context.Context, cfg Config) error { return Check(ctx, cfg) }

func (system) secure(ctx context.Context, cfg Config) ([]string, error) {
	serial.Lock()
	defer serial.Unlock()
	h, err := newHost(cfg)
	if err != nil {
		// Without a working iptables no guard is in force anywhere.
		h = &host{sys: procLocalnet{root: "/proc/sys"}}
	}
	return h.secure(ctx, cfg)
}

func (system) recorded(cfg Config) ([]string, error) {
	serial.Lock()
	defer serial.Unlock()
	h, err := newHost(cfg)
	if err != nil {
		return nil, err
	}
	return h.recorded(cfg)
}

func (system) present(bridge string) bool {
	return (&host{sys: procLocalnet{root: "/proc/sys"}}).present(bridge)
}

// KeeperConfig configures a Keeper.
type KeeperConfig struct {
	// NAT is what to keep in place. Its TaskBridges are served while they exist (the awsvpc task
	// bridge exists once the first awsvpc task has made it) and left out while they do not.
	NAT Config
	// Interval is the time between checks while the NAT is in place; zero means DefaultCheckInterval.
	Interval time.Duration
	// Clock is the Keeper's clock; nil means the real one.
	Clock clockwork.Clock
	// Logger gets the Keeper's state changes; nil means none.
	Logger *logger.Logger
}

// Keeper keeps the task endpoint's NAT true while the agent runs: Run checks it every interval and,
// when a rule or setting is missing (a firewall reload, an operator's flush, a bridge made again),
// installs it again at once; while that fails it checks again sooner, from one second, doubling up
// to the interval. When an install fails and the guard (ChainGuard) is not in force on a bridge,
// route_localnet is turned off there, whoever turned it on: it never stays on without the guard
// while the agent runs. Err and Missing tell whether the NAT is in place, for the agent's health and
// for tasks whose credentials requests need it.
//
// A Keeper acts in the network namespace of the threads its methods run on, as Install does (the
// agent's is the host's). Its methods are safe for concurrent use; Ensure runs one at a time.
type Keeper struct {
	nat      Config
	interval time.Duration
	clock    clockwork.Clock
	log      *logger.Logger
	ops      ops

	ensuring sync.Mutex // one Ensure at a time; guards owned
	owned    []string   // bridges whose route_localnet Install was seen to turn on (Config.owned)

	mu      sync.Mutex
	extra   []string      // task bridges added with AddTaskBridge, beyond nat.TaskBridges
	err     error         // why the NAT is not in place at the last Ensure; nil when it is
	changed chan struct{} // closed, and replaced, whenever err changes
}

// NewKeeper returns a Keeper of cfg. The NAT counts as not in place until the first Ensure.
func NewKeeper(cfg KeeperConfig) *Keeper {
	k := &Keeper{nat: cfg.NAT, interval: cfg.Interval, clock: cfg.Clock, log: cfg.Logger, ops: system{},
		err: errNotChecked, changed: make(chan struct{})}
	if k.interval <= 0 {
		k.interval = DefaultCheckInterval
	}
	if k.clock == nil {
		k.clock = clockwork.NewRealClock()
	}
	if k.log == nil {
		k.log = logger.Nop()
	}
	return k
}

// config is the NAT to keep now: the Docker bridge and the task bridges that exist.
func (k *Keeper) config() Config {
	k.mu.Lock()
	wanted := append(slices.Clone(k.nat.TaskBridges), k.extra...)
	k.mu.Unlock()
	cfg := k.nat
	cfg.TaskBridges = nil
	for _, b := range wanted {
		if k.ops.present(b) {
			cfg.TaskBridges = append(cfg.TaskBridges, b)
		}
	}
	return cfg
}

// Ensure checks the NAT and, when something is missing or cannot be read, installs it again; when
// that fails too, it turns route_localnet off on each bridge where the guard is not in force. It
// returns nil when the NAT is in place, else why not, and records the outcome for Err and Missing
// (not when ctx ended first: the agent is stopping).
func (k *Keeper) Ensure(ctx context.Context) error {
	k.ensuring.Lock()
	defer k.ensuring.Unlock()
	cfg := k.config()
	cfg.owned = k.owned
	missing := k.ops.check(ctx, cfg)
	var err error
	if missing != nil {
		err = k.ops.install(ctx, cfg)
	}
	var off []string
	if err == nil {
		// A failure to read the records only leaves owned as it was.
		if rec, rerr := k.ops.recorded(cfg); rerr == nil {
			for _, b := range rec {
				if !slices.Contains(k.owned, b) {
					k.owned = append(k.owned, b)
				}
			}
		}
	} else {
		// Run even when ctx has ended: a rollback may have left route_localnet on without the guard.
		var serr error
		off, serr = k.ops.secure(context.WithoutCancel(ctx), cfg)
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("turn route_localnet off where the guard is missing: %w", serr))
		}
	}
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	k.record(missing, err, off)
	return err
}

// record keeps err as the NAT's state and logs what changed: missing is what the check found, off
// the bridges whose route_localnet was turned off.
func (k *Keeper) record(missing, err error, off []string) {
	k.mu.Lock()
	prev := k.err
	k.err = err
	changed := (prev == nil) != (err == nil) || prev != nil && err != nil && prev.Error() != err.Error()
	if changed {
		close(k.changed)
		k.changed = make(chan struct{})
	}
	k.mu.Unlock()

	for _, b := range off {
		k.log.Warn("route_localnet turned off: the rule that keeps containers off the host's loopback is not in place",
			"bridge", b)
	}
	switch {
	case err != nil && changed:
		k.log.Error("containers cannot reach the task endpoint at "+EndpointIP+" (credentials, metadata); tasks with a role wait, and the agent tries again",
			"error", err)
	case err == nil && prev == nil && missing != nil:
		k.log.Warn("the task endpoint's NAT had lost a rule or setting; it is installed again", "error", missing)
	case err == nil && prev != nil:
		k.log.Info("task endpoint reachable from containers", "address", fmt.Sprintf("%s:%d", EndpointIP, EndpointPort),
			"listen", fmt.Sprintf("127.0.0.1:%d", ListenPort), "host_network", k.nat.HostNetwork,
			"remove_with", "berth cleanup-task-endpoint-nat")
	}
}

// Run calls Ensure every interval until ctx ends, and sooner while the NAT is not in place. Its
// first Ensure comes one wait after it starts: the agent calls Ensure itself before it starts any
// task.
func (k *Keeper) Run(ctx context.Context) {
	retry := retryMin
	for {
		wait := k.interval
		if k.Err() != nil {
			wait, retry = min(retry, k.interval), min(2*retry, k.interval)
		} else {
			retry = retryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-k.clock.After(wait):
		}
		_ = k.Ensure(ctx)
	}
}

// AddTaskBridge adds bridge, which must exist, to the bridges served from now on and installs its
// rules at once; it returns Ensure's error. A bridge that goes away is left out until it is back.
func (k *Keeper) AddTaskBridge(ctx context.Context, bridge string) error {
	k.mu.Lock()
	wanted := append(slices.Clone(k.nat.TaskBridges), k.extra...)
	if !slices.Contains(wanted, bridge) {
		probe := k.nat
		probe.TaskBridges = append(wanted, bridge)
		if _, err := probe.bridges(); err != nil {
			k.mu.Unlock()
			return fmt.Errorf("add task bridge to the task endpoint NAT: %w", err)
		}
		k.extra = append(k.extra, bridge)
	}
	k.mu.Unlock()
	if !k.ops.present(bridge) {
		return fmt.Errorf("add task bridge to the task endpoint NAT: bridge %q: %w", bridge,
			errdefs.New(errdefs.ErrNotFound, "no such interface"))
	}
	return k.Ensure(ctx)
}

// Err returns nil when the NAT was in place at the last Ensure, else why not.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Missing returns why containers' requests to the task endpoint cannot rely on the NAT now ("" when
// they can), and a channel closed once that has changed.
func (k *Keeper) Missing() (reason string, changed <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		return "", k.changed
	}
	return "waiting for the task endpoint's NAT at " + EndpointIP + ", which the task's credentials need: " + k.err.Error(), k.changed
}

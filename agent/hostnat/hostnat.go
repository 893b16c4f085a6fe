// Package hostnat makes the task endpoint, which the agent serves on 127.0.0.1:51679, reachable
// from containers at 169.254.170.2:80, as ecs-init does for the Amazon ECS agent:
//
//   - nat PREROUTING → BERTH-TASK-ENDPOINT: per bridge (the Docker bridge, and awsvpc task bridges),
//     DNAT of tcp to 169.254.170.2:80 arriving on it to 127.0.0.1:51679, with
//     net.ipv4.conf.<bridge>.route_localnet=1, without which the kernel drops a packet DNATed to
//     loopback;
//   - filter INPUT (first) → BERTH-TASK-ENDPOINT: per bridge, DROP of a new connection to 127.0.0.0/8
//     that was not DNATed, so that route_localnet opens only the endpoint and not every service
//     bound to the host's loopback (ecs-init's localhost traffic filter);
//   - only with Config.HostNetwork (ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST): nat OUTPUT →
//     BERTH-TASK-ENDPOINT-HOST: REDIRECT of the host's own tcp to 169.254.170.2:80 to port 51679.
//     The host needs a route covering 169.254.170.2 (the default route does), as the kernel picks
//     a route before the OUTPUT chain runs.
//
// Everything acts on the network namespace of the calling thread: iptables runs as a child of that
// thread, and /proc/sys/net is that thread's. The agent calls it from the host namespace; to act on
// another one, call it inside ns.WithNetNSPath, as the tests do.
//
// Install, Remove and Check of one process run one at a time; two processes must not run them on
// one namespace at once: iptables serializes each command, not a sequence of them. A process killed in the middle of
// Install leaves a part of the rules, all in our chains or jumping to them: the next Install
// completes them, Remove deletes them.
//
// For the agent's wiring: call Install once the endpoint listens on 127.0.0.1:51679, and again
// (it is cheap when everything is there: a few `iptables -C`) once a task bridge that did not exist
// yet has been made, since Install needs every bridge it names to exist and route_localnet dies
// with its interface; Check tells whether a container may rely on 169.254.170.2 now.
// `berth cleanup-task-endpoint-nat` is Remove.
package hostnat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"sync"

	goiptables "github.com/coreos/go-iptables/iptables"

	"github.com/berth-agent/berth/agent/errdefs"
)

// serial runs one Install, Remove or Check of this process at a time: awsvpc tasks set up
// concurrently each ask for their bridge.
var serial sync.Mutex

// DefaultDockerBridge is the Docker bridge when Config.DockerBridge is empty.
const DefaultDockerBridge = "docker0"

// lockWait is how many seconds an iptables command waits for the xtables lock another program holds.
const lockWait = 10

// Config says which traffic reaches the task endpoint.
type Config struct {
	// DockerBridge is the bridge of bridge-mode containers; empty means DefaultDockerBridge.
	DockerBridge string
	// TaskBridges are further bridges whose containers reach the endpoint the same way (the
	// awsvpc task bridge). Each must exist when Install runs.
	TaskBridges []string
	// HostNetwork also redirects the host's own traffic, for host-network tasks
	// (ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST=true).
	HostNetwork bool
	// IptablesPath is the iptables binary; empty means "iptables" looked up in PATH.
	IptablesPath string

	// owned are bridges whose route_localnet a Keeper saw recorded as turned on by Install: Install
	// records them as its own again when the record went (a flush) and the setting stayed on.
	owned []string
}

// ErrNotInstalled is wrapped by Check's error when a rule or setting is missing; it is of class
// errdefs.ErrNotFound.
var ErrNotInstalled = errdefs.New(errdefs.ErrNotFound, "task endpoint NAT is not installed")

// ErrNoIptables is wrapped by every function's error when the iptables binary is missing; it is of
// class errdefs.ErrFailedPrecondition.
var ErrNoIptables = errdefs.New(errdefs.ErrFailedPrecondition,
	"iptables not found: install it (Debian package iptables; scripts/provision.sh does)")

// ifname is what Install accepts as a bridge name: a Linux interface name (at most 15 bytes) that
// iptables reads literally (no "+" wildcard, no "!").
var ifname = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$`)

// bridges returns the bridges of c, the Docker bridge first. It wraps errdefs.ErrInvalidArgument
// for a name that is not an interface name, or one named twice.
func (c Config) bridges() ([]string, error) {
	docker := c.DockerBridge
	if docker == "" {
		docker = DefaultDockerBridge
	}
	out := append([]string{docker}, c.TaskBridges...)
	for i, b := range out {
		if !ifname.MatchString(b) {
			return nil, fmt.Errorf("bridge %q: %w", b, errdefs.New(errdefs.ErrInvalidArgument, "not an interface name"))
		}
		if slices.Contains(out[:i], b) {
			return nil, fmt.Errorf("bridge %q: %w", b, errdefs.New(errdefs.ErrInvalidArgument, "named twice"))
		}
	}
	return out, nil
}

// iptables is what this package asks of go-iptables.
type iptables interface {
	Exists(table, chain string, rulespec ...string) (bool, error)
	Append(table, chain string, rulespec ...string) error
	Insert(table, chain string, pos int, rulespec ...string) error
	Delete(table, chain string, rulespec ...string) error
	NewChain(table, chain string) error
	ChainExists(table, chain string) (bool, error)
	ClearAndDeleteChain(table, chain string) error
	List(table, chain string) ([]string, error)
}

var _ iptables = (*goiptables.IPTables)(nil)

// host is where the rules go: iptables and route_localnet, and, in tests, a hook called before each
// change that fails it when it returns an error.
type host struct {
	ipt  iptables
	sys  localnet
	hook func(step string) error
}

// newHost opens the real iptables of cfg. It wraps ErrNoIptables when the binary is missing.
func newHost(cfg Config) (*host, error) {
	path := cfg.IptablesPath
	if path == "" {
		path = "iptables"
	}
	if _, err := exec.LookPath(path); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoIptables, err)
	}
	ipt, err := goiptables.New(goiptables.Path(path), goiptables.Timeout(lockWait))
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	return &host{ipt: ipt, sys: procLocalnet{root: "/proc/sys"}}, nil
}

// Install puts in place every rule and setting cfg asks for. It is idempotent: rules already there
// are left as they are, never added twice. Rules of ours that cfg no longer asks for (a bridge no
// longer named, the host REDIRECT once HostNetwork is off) are removed at the end.
//
// It is all or nothing: when a step fails, what this call added is taken away again and the error
// names the step (and any undo that failed too). Stale rules it had already removed stay removed.
// Every bridge must exist; a missing one wraps errdefs.ErrNotFound and changes nothing.
func Install(ctx context.Context, cfg Config) error {
	serial.Lock()
	defer serial.Unlock()
	h, err := newHost(cfg)
	if err != nil {
		return fmt.Errorf("install task endpoint NAT: %w", err)
	}
	return h.install(ctx, cfg)
}

// Remove deletes every rule and chain of ours, whichever bridges cfg names (cfg only says how to run
// iptables), and turns route_localnet off again on each bridge where Install turned it on (the DNAT
// rule of that bridge records it) and that still exists. It is idempotent: nothing installed is no
// error. On failure it stops at the step it names and may be called again.
//
// It is meant for `berth cleanup-task-endpoint-nat`.
func Remove(ctx context.Context, cfg Config) error {
	serial.Lock()
	defer serial.Unlock()
	h, err := newHost(cfg)
	if err != nil {
		return fmt.Errorf("remove task endpoint NAT: %w", err)
	}
	if err := h.remove(ctx); err != nil {
		return fmt.Errorf("remove task endpoint NAT: %w", err)
	}
	return nil
}

// Check returns nil when every rule and setting cfg asks for is in place, an error wrapping
// ErrNotInstalled naming the first one missing, or another error when it could not look.
// Rules of ours that cfg does not ask for do not count.
func Check(ctx context.Context, cfg Config) error {
	serial.Lock()
	defer serial.Unlock()
	h, err := newHost(cfg)
	if err != nil {
		return fmt.Errorf("check task endpoint NAT: %w", err)
	}
	if err := h.check(ctx, cfg); err != nil {
		return fmt.Errorf("check task endpoint NAT: %w", err)
	}
	return nil
}

// Installed reports whether Check finds everything in place; err is Check's when it could not look.
func Installed(ctx context.Context, cfg Config) (bool, error) {
	err := Check(ctx, cfg)
	if errors.Is(err, ErrNotInstalled) {
		return false, nil
	}
	return err == nil, err
}

// txn runs the steps of one Install and remembers how to undo each.
type txn struct {
	ctx   context.Context
	h     *host
	owned []string // Config.owned
	undo  []undoStep
}

type undoStep struct {
	step string
	fn   func() error
}

// do runs act as the named step, then records undo (when not nil) for rollback.
func (t *txn) do(step string, act, undo func() error) error {
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	if t.h.hook != nil {
		if err := t.h.hook(step); err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
	}
	if err := act(); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	if undo != nil {
		t.undo = append(t.undo, undoStep{step, undo})
	}
	return nil
}

// rollback undoes the recorded steps, last first. It goes on past a failure and returns them all.
func (t *txn) rollback() error {
	var errs []error
	for i := len(t.undo) - 1; i >= 0; i-- {
		if err := t.undo[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", t.undo[i].step, err))
		}
	}
	t.undo = nil
	return errors.Join(errs...)
}

func (h *host) install(ctx context.Context, cfg Config) (err error) {
	bridges, err := cfg.bridges()
	if err != nil {
		return fmt.Errorf("install task endpoint NAT: %w", err)
	}
	t := &txn{ctx: ctx, h: h, owned: cfg.owned}
	defer func() {
		if err != nil {
			if uerr := t.rollback(); uerr != nil {
				err = errors.Join(err, uerr)
			}
			err = fmt.Errorf("install task endpoint NAT: %w", err)
		}
	}()

	// Read every bridge's route_localnet first: a missing bridge changes nothing.
	on := map[string]bool{}
	for _, b := range bridges {
		if on[b], err = h.sys.get(b); err != nil {
			return fmt.Errorf("read net.ipv4.conf.%s.route_localnet: %w", b, err)
		}
	}

	// The guard is in force before route_localnet is turned on anywhere.
	if err = t.ensureChain("filter", ChainGuard); err != nil {
		return err
	}
	for _, b := range bridges {
		if err = t.ensureRule(guardRule(b)); err != nil {
			return err
		}
	}
	if err = t.ensureJump(guardJump()); err != nil {
		return err
	}

	if err = t.ensureChain("nat", ChainNAT); err != nil {
		return err
	}
	for _, b := range bridges {
		if err = t.ensureBridge(b, on[b]); err != nil {
			return err
		}
	}
	if cfg.HostNetwork {
		if err = t.ensureChain("nat", ChainHost); err != nil {
			return err
		}
		if err = t.ensureRule(redirectRule()); err != nil {
			return err
		}
	}

	// The jumps last: traffic is sent through a chain only once it is complete.
	if err = t.ensureJump(natJump()); err != nil {
		return err
	}
	if cfg.HostNetwork {
		if err = t.ensureJump(hostJump()); err != nil {
			return err
		}
	}
	return t.prune(bridges, cfg.HostNetwork)
}

// ensureChain creates table/chain unless it exists.
func (t *txn) ensureChain(table, chain string) error {
	ok, err := t.h.ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("look for chain %s/%s: %w", table, chain, err)
	}
	if ok {
		return nil
	}
	ipt := t.h.ipt
	return t.do("create chain "+table+"/"+chain,
		func() error { return ipt.NewChain(table, chain) },
		func() error { return ipt.ClearAndDeleteChain(table, chain) })
}

// ensureRule appends r to its chain unless it is there.
func (t *txn) ensureRule(r rule) error {
	ok, err := t.h.ipt.Exists(r.table, r.chain, r.spec...)
	if err != nil {
		return fmt.Errorf("look for rule %s: %w", r, err)
	}
	if ok {
		return nil
	}
	ipt := t.h.ipt
	return t.do("add rule "+r.String(),
		func() error { return ipt.Append(r.table, r.chain, r.spec...) },
		func() error { return ipt.Delete(r.table, r.chain, r.spec...) })
}

// ensureJump adds j unless it is there; its target chain exists already.
func (t *txn) ensureJump(j jump) error {
	ok, err := t.h.ipt.Exists(j.table, j.chain, j.spec...)
	if err != nil {
		return fmt.Errorf("look for rule %s: %w", j.rule, err)
	}
	if ok {
		return nil
	}
	ipt := t.h.ipt
	return t.do("add rule "+j.rule.String(),
		func() error {
			if j.first {
				return ipt.Insert(j.table, j.chain, 1, j.spec...)
			}
			return ipt.Append(j.table, j.chain, j.spec...)
		},
		func() error { return ipt.Delete(j.table, j.chain, j.spec...) })
}

// ensureBridge puts in place the DNAT rule of bridge and turns route_localnet on; wasOn is the
// setting found. The rule records a change this call makes, and keeps a record an earlier Install
// made, in the chain or in Config.owned (the setting it found on is then its own).
func (t *txn) ensureBridge(bridge string, wasOn bool) error {
	ipt := t.h.ipt
	plain, marked := dnatRule(bridge, false), dnatRule(bridge, true)
	hasPlain, err := ipt.Exists(plain.table, plain.chain, plain.spec...)
	if err != nil {
		return fmt.Errorf("look for rule %s: %w", plain, err)
	}
	hasMarked, err := ipt.Exists(marked.table, marked.chain, marked.spec...)
	if err != nil {
		return fmt.Errorf("look for rule %s: %w", marked, err)
	}
	mark := !wasOn || hasMarked || slices.Contains(t.owned, bridge)
	want := plain
	if mark {
		want = marked
	}
	if err := t.ensureRule(want); err != nil {
		return err
	}
	if hasPlain && mark {
		// The setting was on when an earlier Install came and is off now (the bridge was made
		// again): from now on it is ours to restore.
		if err := t.do("delete rule "+plain.String(),
			func() error { return ipt.Delete(plain.table, plain.chain, plain.spec...) },
			func() error { return ipt.Append(plain.table, plain.chain, plain.spec...) }); err != nil {
			return err
		}
	}
	if wasOn {
		return nil
	}
	sys := t.h.sys
	return t.do("set net.ipv4.conf."+bridge+".route_localnet=1",
		func() error { return sys.set(bridge, true) },
		func() error { return sys.set(bridge, false) })
}

// prune removes the rules of ours that cfg no longer asks for. These steps have no undo.
func (t *txn) prune(bridges []string, hostNetwork bool) error {
	ipt := t.h.ipt
	stale, err := listedBridges(ipt, "nat", ChainNAT)
	if err != nil {
		return err
	}
	for _, b := range slices.Sorted(maps.Keys(stale)) {
		if slices.Contains(bridges, b) {
			continue
		}
		if err := t.dropBridge(b, stale[b]); err != nil {
			return err
		}
	}
	guarded, err := listedBridges(ipt, "filter", ChainGuard)
	if err != nil {
		return err
	}
	for _, b := range slices.Sorted(maps.Keys(guarded)) {
		if slices.Contains(bridges, b) {
			continue
		}
		r := guardRule(b)
		if err := t.do("delete rule "+r.String(), func() error { return deleteAll(ipt, r) }, nil); err != nil {
			return err
		}
	}
	if hostNetwork {
		return nil
	}
	ok, err := ipt.ChainExists("nat", ChainHost)
	if err != nil {
		return fmt.Errorf("look for chain nat/%s: %w", ChainHost, err)
	}
	if !ok {
		return nil
	}
	j := hostJump()
	if err := t.do("delete rule "+j.rule.String(), func() error { return deleteAll(ipt, j.rule) }, nil); err != nil {
		return err
	}
	return t.do("delete chain nat/"+ChainHost, func() error { return ipt.ClearAndDeleteChain("nat", ChainHost) }, nil)
}

// dropBridge turns route_localnet off again on bridge when recorded says Install turned it on,
// then deletes the bridge's DNAT rule (the record goes last).
func (t *txn) dropBridge(bridge string, recorded bool) error {
	if recorded {
		on, err := t.h.sys.get(bridge)
		switch {
		case errdefs.IsNotFound(err):
			// The bridge is gone, and its setting with it.
		case err != nil:
			return fmt.Errorf("read net.ipv4.conf.%s.route_localnet: %w", bridge, err)
		case on:
			sys := t.h.sys
			if err := t.do("restore net.ipv4.conf."+bridge+".route_localnet=0",
				func() error { return sys.set(bridge, false) }, nil); err != nil {
				return err
			}
		}
	}
	ipt := t.h.ipt
	for _, r := range []rule{dnatRule(bridge, true), dnatRule(bridge, false)} {
		if err := t.do("delete rule "+r.String(), func() error { return deleteAll(ipt, r) }, nil); err != nil {
			return err
		}
	}
	return nil
}

// listedBridges returns the bridges the rules of table/chain match, each with whether its rule
// records that Install turned route_localnet on. A chain that does not exist has none.
func listedBridges(ipt iptables, table, chain string) (map[string]bool, error) {
	ok, err := ipt.ChainExists(table, chain)
	if err != nil {
		return nil, fmt.Errorf("look for chain %s/%s: %w", table, chain, err)
	}
	out := map[string]bool{}
	if !ok {
		return out, nil
	}
	lines, err := ipt.List(table, chain)
	if err != nil {
		return nil, fmt.Errorf("list chain %s/%s: %w", table, chain, err)
	}
	for _, line := range lines {
		if l, ok := parseListed(line); ok && l.iface != "" {
			out[l.iface] = out[l.iface] || l.comment == labelSetLocalnet
		}
	}
	return out, nil
}

// deleteAll deletes every copy of r; none is no error.
func deleteAll(ipt iptables, r rule) error {
	for {
		ok, err := ipt.Exists(r.table, r.chain, r.spec...)
		if err != nil || !ok {
			return err
		}
		if err := ipt.Delete(r.table, r.chain, r.spec...); err != nil {
			return err
		}
	}
}

func (h *host) remove(ctx context.Context) error {
	t := &txn{ctx: ctx, h: h}
	ipt := h.ipt
	// The jumps first, so no packet goes through a chain being emptied; a jump whose target is gone
	// cannot exist (iptables refuses to delete a chain still jumped to).
	for _, j := range []jump{natJump(), hostJump(), guardJump()} {
		ok, err := ipt.ChainExists(j.table, j.target)
		if err != nil {
			return fmt.Errorf("look for chain %s/%s: %w", j.table, j.target, err)
		}
		if !ok {
			continue
		}
		if err := t.do("delete rule "+j.rule.String(), func() error { return deleteAll(ipt, j.rule) }, nil); err != nil {
			return err
		}
	}
	// route_localnet before the DNAT rules that record it: a failure leaves the record for the next
	// call.
	recorded, err := listedBridges(ipt, "nat", ChainNAT)
	if err != nil {
		return err
	}
	for _, b := range slices.Sorted(maps.Keys(recorded)) {
		if err := t.dropBridge(b, recorded[b]); err != nil {
			return err
		}
	}
	for _, c := range []struct{ table, chain string }{{"nat", ChainNAT}, {"nat", ChainHost}, {"filter", ChainGuard}} {
		ok, err := ipt.ChainExists(c.table, c.chain)
		if err != nil {
			return fmt.Errorf("look for chain %s/%s: %w", c.table, c.chain, err)
		}
		if !ok {
			continue
		}
		if err := t.do("delete chain "+c.table+"/"+c.chain,
			func() error { return ipt.ClearAndDeleteChain(c.table, c.chain) }, nil); err != nil {
			return err
		}
	}
	return nil
}

func (h *host) check(ctx context.Context, cfg Config) error {
	bridges, err := cfg.bridges()
	if err != nil {
		return err
	}
	ipt := h.ipt
	chains := []struct{ table, chain string }{{"filter", ChainGuard}, {"nat", ChainNAT}}
	if cfg.HostNetwork {
		chains = append(chains, struct{ table, chain string }{"nat", ChainHost})
	}
	for _, c := range chains {
		ok, err := ipt.ChainExists(c.table, c.chain)
		if err != nil {
			return fmt.Errorf("look for chain %s/%s: %w", c.table, c.chain, err)
		}
		if !ok {
			return fmt.Errorf("%w: no chain %s/%s", ErrNotInstalled, c.table, c.chain)
		}
	}
	want := []rule{guardJump().rule, natJump().rule}
	if cfg.HostNetwork {
		want = append(want, hostJump().rule, redirectRule())
	}
	for _, b := range bridges {
		want = append(want, guardRule(b))
	}
	for _, r := range want {
		if err := ctx.Err(); err != nil {
			return err
		}
		ok, err := ipt.Exists(r.table, r.chain, r.spec...)
		if err != nil {
			return fmt.Errorf("look for rule %s: %w", r, err)
		}
		if !ok {
			return fmt.Errorf("%w: no rule %s", ErrNotInstalled, r)
		}
	}
	for _, b := range bridges {
		found := false
		for _, r := range []rule{dnatRule(b, false), dnatRule(b, true)} {
			ok, err := ipt.Exists(r.table, r.chain, r.spec...)
			if err != nil {
				return fmt.Errorf("look for rule %s: %w", r, err)
			}
			found = found || ok
		}
		if !found {
			return fmt.Errorf("%w: no rule %s", ErrNotInstalled, dnatRule(b, false))
		}
		on, err := h.sys.get(b)
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %w", ErrNotInstalled, err)
		}
		if err != nil {
			return fmt.Errorf("read net.ipv4.conf.%s.route_localnet: %w", b, err)
		}
		if !on {
			return fmt.Errorf("%w: net.ipv4.conf.%s.route_localnet is 0", ErrNotInstalled, b)
		}
	}
	return nil
}

// guarded reports whether the guard is in force for bridge: its chain, the jump to it from INPUT and
// its rule for bridge are all there. A failure to look counts as not in force.
func (h *host) guarded(bridge string) bool {
	if h.ipt == nil {
		return false
	}
	for _, r := range []rule{guardJump().rule, guardRule(bridge)} {
		if ok, err := h.ipt.Exists(r.table, r.chain, r.spec...); err != nil || !ok {
			return false
		}
	}
	return true
}

// secure turns route_localnet off on every bridge of cfg where it is on while the guard is not in
// force, whoever turned it on: without the guard it opens the host's loopback to the bridge. It returns
// the bridges it turned off; a bridge that does not exist has no setting to turn off.
func (h *host) secure(ctx context.Context, cfg Config) ([]string, error) {
	bridges, err := cfg.bridges()
	if err != nil {
		return nil, err
	}
	var off []string
	var errs []error
	for _, b := range bridges {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		if h.guarded(b) {
			continue
		}
		on, err := h.sys.get(b)
		switch {
		case errdefs.IsNotFound(err):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("read net.ipv4.conf.%s.route_localnet: %w", b, err))
			continue
		case !on:
			continue
		}
		if err := h.sys.set(b, false); err != nil {
			errs = append(errs, fmt.Errorf("set net.ipv4.conf.%s.route_localnet=0: %w", b, err))
			continue
		}
		off = append(off, b)
	}
	return off, errors.Join(errs...)
}

// recorded returns the bridges whose DNAT rule records that Install turned route_localnet on.
func (h *host) recorded(Config) ([]string, error) {
	listed, err := listedBridges(h.ipt, "nat", ChainNAT)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range slices.Sorted(maps.Keys(listed)) {
		if listed[b] {
			out = append(out, b)
		}
	}
	return out, nil
}

// present reports whether bridge exists.
func (h *host) present(bridge string) bool {
	_, err := h.sys.get(bridge)
	return !errdefs.IsNotFound(err)
}

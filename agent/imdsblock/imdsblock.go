// Package imdsblock makes the EC2 instance metadata service (169.254.169.254) unreachable from
// bridge-mode containers, as ECS's documentation asks operators to do by hand
// ("iptables --insert DOCKER-USER 1 --in-interface docker+ --destination 169.254.169.254/32 --jump DROP"):
//
//	filter DOCKER-USER (first): -d 169.254.169.254/32 -i <Docker bridge> -m comment --comment berth-bridge-imds-block -j DROP
//
// The Docker Engine makes DOCKER-USER and jumps to it first from FORWARD, and leaves its rules alone
// across its restarts; a packet a bridge container sends to the instance metadata service is
// forwarded, so it meets the rule, established connections included. The comment labels the rule:
// Install and Remove find the rules of ours by it.
//
// The rule acts on the network namespace of the calling thread (the host's, for the agent). Install,
// Remove and Check are not meant to run concurrently on one host: iptables serializes each command,
// not a sequence of them; the agent calls them from one goroutine at a time.
package imdsblock

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	goiptables "github.com/coreos/go-iptables/iptables"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Address is the instance metadata service's IPv4 address.
const Address = "169.254.169.254"

// DefaultDockerBridge is the Docker bridge when Config.DockerBridge is empty.
const DefaultDockerBridge = "docker0"

// chain is Docker's chain for its users' rules, and label the comment of ours.
const (
	table = "filter"
	chain = "DOCKER-USER"
	label = "berth-bridge-imds-block"
)

// lockWait is how many seconds an iptables command waits for the xtables lock another program holds.
const lockWait = 10

// Config says which bridge's containers are blocked.
type Config struct {
	// DockerBridge is the bridge of bridge-mode containers; empty means DefaultDockerBridge.
	DockerBridge string
	// IptablesPath is the iptables binary; empty means "iptables" looked up in PATH.
	IptablesPath string
}

// ErrNotInstalled is wrapped by Check's error when the rule is missing or something before it in
// DOCKER-USER may accept the traffic first; it is of class errdefs.ErrNotFound.
var ErrNotInstalled = errdefs.New(errdefs.ErrNotFound, "the instance metadata block for bridge tasks is not in place")

// ErrNoDockerUser is wrapped by Install's error when the DOCKER-USER chain does not exist: the
// Docker Engine manages no iptables rules ("iptables": false) or has not started. It is of class
// errdefs.ErrFailedPrecondition.
var ErrNoDockerUser = errdefs.New(errdefs.ErrFailedPrecondition,
	"iptables chain DOCKER-USER does not exist: the Docker Engine must manage iptables (its \"iptables\" setting true) for the block to apply")

// ErrNoIptables is wrapped by every function's error when the iptables binary is missing; it is of
// class errdefs.ErrFailedPrecondition.
var ErrNoIptables = errdefs.New(errdefs.ErrFailedPrecondition,
	"iptables not found: install it (Debian package iptables; scripts/provision.sh does)")

// iptables is what this package asks of go-iptables.
type iptables interface {
	ChainExists(table, chain string) (bool, error)
	List(table, chain string) ([]string, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	DeleteById(table, chain string, id int) error
}

var _ iptables = (*goiptables.IPTables)(nil)

// open returns the real iptables of cfg. It wraps ErrNoIptables when the binary is missing.
func open(cfg Config) (iptables, error) {
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
	return ipt, nil
}

// ifname is what Config takes as a bridge name: a Linux interface name (at most 15 bytes) that
// iptables reads literally (no "+" wildcard, no "!").
var ifname = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$`)

// bridge is cfg's bridge, checked to be an interface name iptables reads literally.
func (c Config) bridge() (string, error) {
	b := c.DockerBridge
	if b == "" {
		b = DefaultDockerBridge
	}
	if !ifname.MatchString(b) {
		return "", fmt.Errorf("bridge %q: %w", b, errdefs.New(errdefs.ErrInvalidArgument, "not an interface name"))
	}
	return b, nil
}

// spec is the rule for bridge, as Insert takes it.
func spec(bridge string) []string {
	return []string{"-d", Address + "/32", "-i", bridge, "-m", "comment", "--comment", label, "-j", "DROP"}
}

// Install puts the rule first in DOCKER-USER unless it is in place already (see Check), and then
// removes every other rule of ours there (a copy further down, one for a bridge no longer named).
// It is idempotent. It wraps ErrNoDockerUser when the chain does not exist and changes nothing.
func Install(ctx context.Context, cfg Config) error {
	return withIptables(cfg, "install", install)
}

// Check returns nil when the rule is in DOCKER-USER with nothing before it that may accept the
// traffic, an error wrapping ErrNotInstalled when it is not (or the chain is missing), or another
// error when it could not look.
func Check(ctx context.Context, cfg Config) error {
	return withIptables(cfg, "check", check)
}

// withIptables opens iptables for cfg and runs do with it; an error of either says what was done.
func withIptables(cfg Config, what string, do func(iptables, Config) error) error {
	ipt, err := open(cfg)
	if err == nil {
		err = do(ipt, cfg)
	}
	if err != nil {
		return fmt.Errorf("%s the instance metadata block: %w", what, err)
	}
	return nil
}

// Remove deletes every rule of ours from DOCKER-USER, whichever bridge it names. It is idempotent:
// no rule, no chain or no iptables binary is no error, as there is then nothing to remove.
func Remove(ctx context.Context, cfg Config) error {
	ipt, err := open(cfg)
	if errors.Is(err, ErrNoIptables) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the instance metadata block: %w", err)
	}
	if err := remove(ipt); err != nil {
		return fmt.Errorf("remove the instance metadata block: %w", err)
	}
	return nil
}

// Keep checks the rule every interval until ctx ends and installs it again whenever it is not in
// place (after a firewall reload, say). report is called with nil when the rule was put back, and
// with the error when checking or putting it back failed, the same error once until it changes.
func Keep(ctx context.Context, cfg Config, clock clockwork.Clock, every time.Duration, report func(error)) {
	keep(ctx, clock, every, func(ctx context.Context) error { return Check(ctx, cfg) },
		func(ctx context.Context) error { return Install(ctx, cfg) }, report)
}

func keep(ctx context.Context, clock clockwork.Clock, every time.Duration, check, install func(context.Context) error, report func(error)) {
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-clock.After(every):
		}
		err := check(ctx)
		if errors.Is(err, ErrNotInstalled) {
			if err = install(ctx); err == nil {
				report(nil)
			}
		}
		if err == nil {
			last = ""
			continue
		}
		if ctx.Err() == nil && err.Error() != last {
			report(err)
		}
		last = err.Error()
	}
}

// rule is one rule of DOCKER-USER as `iptables -S` prints it, with its position (1 the first).
type rule struct {
	id     int
	fields map[string]string // option → value: -d, -i, -j, -m, --comment
}

// ours reports whether r carries our label.
func (r rule) ours() bool {
	return r.fields["--comment"] == label || r.fields["--comment"] == `"`+label+`"`
}

// harmless reports whether r lets the packet go on to the rules after it, or drops it.
func (r rule) harmless() bool {
	switch r.fields["-j"] {
	case "", "DROP", "REJECT", "LOG":
		return true
	}
	return false
}

// wanted reports whether r is exactly the rule for bridge.
func (r rule) wanted(bridge string) bool {
	want := spec(bridge)
	if len(r.fields) != len(want)/2 {
		return false
	}
	for i := 0; i < len(want); i += 2 {
		if v := strings.Trim(r.fields[want[i]], `"`); v != want[i+1] {
			return false
		}
	}
	return true
}

// rules lists DOCKER-USER; ok is false when the chain does not exist.
func rules(ipt iptables) (out []rule, ok bool, err error) {
	exists, err := ipt.ChainExists(table, chain)
	if err != nil || !exists {
		return nil, false, err
	}
	lines, err := ipt.List(table, chain)
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", chain, err)
	}
	for _, line := range lines {
		words := strings.Fields(line)
		if len(words) < 2 || words[0] != "-A" {
			continue // -N DOCKER-USER, -P
		}
		r := rule{id: len(out) + 1, fields: map[string]string{}}
		for i := 2; i < len(words); i++ {
			if strings.HasPrefix(words[i], "-") && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				r.fields[words[i]] = words[i+1]
				i++
			} else {
				r.fields[words[i]] = ""
			}
		}
		out = append(out, r)
	}
	return out, true, nil
}

// inPlace returns the position of the wanted rule when it is there with only harmless rules before
// it, else 0.
func inPlace(rs []rule, bridge string) int {
	for _, r := range rs {
		if r.wanted(bridge) {
			return r.id
		}
		if !r.harmless() {
			return 0
		}
	}
	return 0
}

func check(ipt iptables, cfg Config) error {
	bridge, err := cfg.bridge()
	if err != nil {
		return err
	}
	rs, ok, err := rules(ipt)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: %w", ErrNotInstalled, ErrNoDockerUser)
	case inPlace(rs, bridge) == 0:
		return fmt.Errorf("%w: no rule dropping %s from %s first in %s", ErrNotInstalled, Address, bridge, chain)
	}
	return nil
}

func install(ipt iptables, cfg Config) error {
	bridge, err := cfg.bridge()
	if err != nil {
		return err
	}
	rs, ok, err := rules(ipt)
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrNoDockerUser
	}
	keep := inPlace(rs, bridge)
	if keep == 0 {
		// First, before any copy further down goes: the traffic is never let through meanwhile.
		if err := ipt.Insert(table, chain, 1, spec(bridge)...); err != nil {
			return fmt.Errorf("insert the rule in %s: %w", chain, err)
		}
		keep = 1
		if rs, _, err = rules(ipt); err != nil {
			return err
		}
	}
	return deleteOurs(ipt, rs, keep)
}

// remove deletes every rule of ours; the chain missing is no error.
func remove(ipt iptables) error {
	rs, ok, err := rules(ipt)
	if err != nil || !ok {
		return err
	}
	return deleteOurs(ipt, rs, 0)
}

// deleteOurs deletes every rule of ours in rs but the one at position keep, from the last up so
// that the positions of the others do not move.
func deleteOurs(ipt iptables, rs []rule, keep int) error {
	for _, r := range slices.Backward(rs) {
		if r.ours() && r.id != keep {
			if err := ipt.DeleteById(table, chain, r.id); err != nil {
				return fmt.Errorf("delete rule %d of %s: %w", r.id, chain, err)
			}
		}
	}
	return nil
}

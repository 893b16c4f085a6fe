package faultinject

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// iptablesWait is iptables' -w, as the ECS agent passes it: seconds to wait for the xtables lock.
const iptablesWait = "5"

// The two iptables tools, IPv4's and IPv6's, and what matches every address of each. Berth's tasks
// have IPv4 networks only, so ip6tables failures are logged and let be, as the ECS agent does for
// tasks that are not IPv6-only.
var families = []struct {
	tool, all string
	v6        bool
}{
	{"iptables", "0.0.0.0/0", false},
	{"ip6tables", "::/0", true},
}

// chainPattern matches the names of the chains black holes make.
var chainPattern = regexp.MustCompile(`^(ingress|egress)-(tcp|udp)-[0-9]{1,5}$`)

// chainOf returns the chain of a black hole and the built-in chain it is jumped to from.
func chainOf(f taskendpoint.BlackholePort) (chain, builtin string) {
	builtin = "INPUT"
	if f.TrafficType == "egress" {
		builtin = "OUTPUT"
	}
	return f.TrafficType + "-" + f.Protocol + "-" + strconv.Itoa(int(f.Port)), builtin
}

// StartBlackholePort drops the task's f traffic, but for f.SourcesToFilter. A black hole of the same
// chain that runs already is left as it is. What a failed start made is removed.
func (inj *Injector) StartBlackholePort(ctx context.Context, t *task.Task, f taskendpoint.BlackholePort) error {
	tg, err := inj.targetOf(t)
	if err != nil {
		return err
	}
	defer inj.lock(tg.netns)()
	running, err := inj.blackholeRunning(ctx, tg, f)
	if err != nil || running {
		return err
	}
	chain, builtin := chainOf(f)
	port := strconv.Itoa(int(f.Port))
	for _, fam := range families {
		cmds := [][]string{{"-N", chain}}
		for _, src := range f.SourcesToFilter {
			if isV6(src) == fam.v6 {
				cmds = append(cmds, []string{"-A", chain, "-p", f.Protocol, "-d", src, "--dport", port, "-j", "ACCEPT"})
			}
		}
		cmds = append(cmds,
			[]string{"-A", chain, "-p", f.Protocol, "-d", fam.all, "--dport", port, "-j", "DROP"},
			[]string{"-I", builtin, "-j", chain})
		for _, c := range cmds {
			_, err := inj.run(ctx, tg.netns, "", fam.tool, append([]string{"-w", iptablesWait}, c...)...)
			if err != nil && fam.v6 && ctx.Err() == nil {
				inj.log.Debug("ip6tables failed; the black hole holds for IPv4", "task_arn", tg.arn, "chain", chain, "error", err)
				break
			}
			if err != nil {
				inj.removeChain(context.WithoutCancel(ctx), tg, chain, builtin)
				return fmt.Errorf("start black hole %s: %w", chain, err)
			}
		}
	}
	inj.record(tg.arn, func(s *startedFaults) { s.blackholes[chain] = builtin })
	inj.log.Info("black hole started", "task_arn", tg.arn, "chain", chain, "netns", tg.netns)
	return nil
}

// StopBlackholePort removes the black hole of f's chain; one that does not run is not an error.
func (inj *Injector) StopBlackholePort(ctx context.Context, t *task.Task, f taskendpoint.BlackholePort) error {
	tg, err := inj.targetOf(t)
	if err != nil {
		return err
	}
	defer inj.lock(tg.netns)()
	running, err := inj.blackholeRunning(ctx, tg, f)
	if err != nil {
		return err
	}
	chain, builtin := chainOf(f)
	if running {
		if err := inj.removeChain(ctx, tg, chain, builtin); err != nil {
			return fmt.Errorf("stop black hole %s: %w", chain, err)
		}
		inj.log.Info("black hole stopped", "task_arn", tg.arn, "chain", chain, "netns", tg.netns)
	}
	inj.record(tg.arn, func(s *startedFaults) { delete(s.blackholes, chain) })
	return nil
}

// BlackholePortRunning reports whether f's black hole runs: whether its IPv4 chain drops f's port,
// as the ECS agent checks it.
func (inj *Injector) BlackholePortRunning(ctx context.Context, t *task.Task, f taskendpoint.BlackholePort) (bool, error) {
	tg, err := inj.targetOf(t)
	if err != nil {
		return false, err
	}
	defer inj.lock(tg.netns)()
	return inj.blackholeRunning(ctx, tg, f)
}

// blackholeRunning is BlackholePortRunning with the namespace locked.
func (inj *Injector) blackholeRunning(ctx context.Context, tg target, f taskendpoint.BlackholePort) (bool, error) {
	chain, _ := chainOf(f)
	_, err := inj.run(ctx, tg.netns, "", "iptables", "-w", iptablesWait, "-C", chain, "-p", f.Protocol, "--dport", strconv.Itoa(int(f.Port)), "-j", "DROP")
	switch {
	case err == nil:
		return true, nil
	case isExit(err) && ctx.Err() == nil:
		return false, nil
	}
	return false, fmt.Errorf("check black hole %s: %w", chain, err)
}

// removeChain removes a black hole's chain from both families: the jump to it, its rules, itself.
// Every step is tried; the first IPv4 failure is returned (a chain that is not there is not one).
func (inj *Injector) removeChain(ctx context.Context, tg target, chain, builtin string) error {
	var first error
	for _, fam := range families {
		for _, c := range [][]string{{"-D", builtin, "-j", chain}, {"-F", chain}, {"-X", chain}} {
			_, err := inj.run(ctx, tg.netns, "", fam.tool, append([]string{"-w", iptablesWait}, c...)...)
			if err != nil && !fam.v6 && !isExit(err) && first == nil {
				first = err
			}
		}
	}
	return first
}

// sweepChains removes every black hole chain in the namespace, whoever made it, from both families.
func (inj *Injector) sweepChains(ctx context.Context, tg target) (int, error) {
	removed := 0
	for _, fam := range families {
		out, err := inj.run(ctx, tg.netns, "", fam.tool, "-w", iptablesWait, "-S")
		if err != nil {
			if fam.v6 {
				continue
			}
			return removed, fmt.Errorf("list chains: %w", err)
		}
		jumps := map[string][]string{} // chain → the built-in chains that jump to it
		var chains []string
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "-N" && chainPattern.MatchString(f[1]):
				chains = append(chains, f[1])
			case len(f) == 4 && f[0] == "-A" && (f[1] == "INPUT" || f[1] == "OUTPUT") && f[2] == "-j" && chainPattern.MatchString(f[3]):
				jumps[f[3]] = append(jumps[f[3]], f[1])
			}
		}
		for _, chain := range chains {
			for _, builtin := range jumps[chain] {
				if _, err := inj.run(ctx, tg.netns, "", fam.tool, "-w", iptablesWait, "-D", builtin, "-j", chain); err != nil {
					return removed, fmt.Errorf("remove chain %s: %w", chain, err)
				}
			}
			for _, c := range [][]string{{"-F", chain}, {"-X", chain}} {
				if _, err := inj.run(ctx, tg.netns, "", fam.tool, append([]string{"-w", iptablesWait}, c...)...); err != nil {
					return removed, fmt.Errorf("remove chain %s: %w", chain, err)
				}
			}
			removed++
		}
	}
	return removed, nil
}

// isV6 reports whether an address or CIDR block (validated already) is IPv6's.
func isV6(s string) bool {
	if ip := net.ParseIP(s); ip != nil {
		return ip.To4() == nil
	}
	ip, _, err := net.ParseCIDR(s)
	return err == nil && ip.To4() == nil
}

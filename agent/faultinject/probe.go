package faultinject

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// probeTimeout bounds each of the probe's commands.
const probeTimeout = 10 * time.Second

// Support is whether the host has what every fault needs, and when not, why.
type Support struct {
	Available bool
	Reason    string // empty when Available
}

// Probe checks the host as the ECS agent does before it advertises ecs.capability.fault-injection
// (agent/app/agent_capability_unix.go), but by trying rather than by asking modinfo: iptables, tc and
// nsenter are installed, iptables works, and tc can build a netem tree (a prio root with a netem
// band) in a throwaway network namespace, which goes with the command.
func Probe(ctx context.Context) Support {
	return probe(ctx, exec.LookPath, runInNetns)
}

func probe(ctx context.Context, lookPath func(string) (string, error), run runFunc) Support {
	for _, tool := range []string{"iptables", "tc", "nsenter", "unshare"} {
		if _, err := lookPath(tool); err != nil {
			return Support{Reason: fmt.Sprintf("%s is not installed: %v", tool, err)}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := run(ctx, "", "", "unshare", "--net", "--", "iptables", "-w", iptablesWait, "-S"); err != nil {
		return Support{Reason: fmt.Sprintf("iptables does not work: %v", err)}
	}
	batch := strings.Join([]string{
		"qdisc add dev lo root handle 1: prio " + priomap,
		"qdisc add dev lo parent 1:1 handle 10: netem delay 1ms 1ms",
		"qdisc add dev lo parent 1:2 handle 20: netem loss 1%",
	}, "\n") + "\n"
	if _, err := run(ctx, "", batch, "unshare", "--net", "--", "tc", "-batch", "-"); err != nil {
		return Support{Reason: fmt.Sprintf("tc cannot add the prio and netem qdiscs faults need (is sch_netem in the kernel?): %v", err)}
	}
	return Support{Available: true}
}

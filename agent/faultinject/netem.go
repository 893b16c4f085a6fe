package faultinject

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// priomap sends every priority to band 3 of a prio qdisc, as the ECS agent's tree does.
const priomap = "priomap 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"

// flowHash is the flow filter that spreads flows over ten bands.
const flowHash = "flow hash keys src,dst,proto,proto-src,proto-dst divisor 10"

// StartNetem starts a latency or packet-loss fault on each of the task's interfaces. It fails with
// ErrLatencyRunning or ErrPacketLossRunning when either runs; what a failed start made is removed.
func (inj *Injector) StartNetem(ctx context.Context, t *task.Task, f taskendpoint.Netem) error {
	tg, err := inj.targetOf(t)
	if err != nil {
		return err
	}
	defer inj.lock(tg.netns)()
	latency, loss, err := inj.netemRunning(ctx, tg)
	switch {
	case err != nil:
		return err
	case latency:
		return taskendpoint.ErrLatencyRunning
	case loss:
		return taskendpoint.ErrPacketLossRunning
	}
	for i, iface := range tg.ifaces {
		if err := inj.startNetemOn(ctx, tg, iface, f); err != nil {
			for _, done := range tg.ifaces[:i] {
				inj.removeTree(context.WithoutCancel(ctx), tg, done)
			}
			return fmt.Errorf("start %s on %s: %w", f.Kind, iface, err)
		}
	}
	inj.record(tg.arn, func(s *startedFaults) { s.netem = true })
	inj.log.Info("netem fault started", "task_arn", tg.arn, "fault", string(f.Kind), "netns", tg.netns, "interfaces", tg.ifaces)
	return nil
}

// startNetemOn builds the fault's tree on one interface: the root first, then the rest in one tc
// batch; a failure after the root removes the root, and the tree with it.
func (inj *Injector) startNetemOn(ctx context.Context, tg target, iface string, f taskendpoint.Netem) error {
	if _, err := inj.run(ctx, tg.netns, "", "tc", strings.Fields("qdisc add dev "+iface+" root handle 1: prio "+priomap)...); err != nil {
		return err
	}
	if _, err := inj.run(ctx, tg.netns, netemBatch(iface, f), "tc", "-batch", "-"); err != nil {
		inj.removeTree(context.WithoutCancel(ctx), tg, iface)
		return err
	}
	return nil
}

// netemBatch returns the tc commands, one a line, that build the fault's tree below the root, as the
// ECS agent builds it.
func netemBatch(iface string, f taskendpoint.Netem) string {
	var b strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	line("qdisc add dev %s parent 1:1 handle 10: prio bands 10 %s", iface, priomap)
	for i := range 10 {
		line("qdisc add dev %s parent 10:%x handle %d: prio bands 10 %s", iface, i+1, 100+i, priomap)
	}
	args := fmt.Sprintf("delay %dms %dms", f.DelayMilliseconds, f.JitterMilliseconds)
	if f.Kind == taskendpoint.NetemPacketLoss {
		args = fmt.Sprintf("loss %d%%", f.LossPercent)
	}
	for i := range f.FlowsPercent {
		line("qdisc add dev %s parent %d:%x handle %d: netem %s", iface, 100+i/10, i%10+1, 200+i, args)
	}
	match := func(addr string) string {
		if isV6(addr) {
			return "ip6 dst " + addr
		}
		return "ip dst " + addr
	}
	for _, src := range f.SourcesToFilter {
		line("filter add dev %s protocol all parent 1:0 prio 1 u32 match %s flowid 1:3", iface, match(src))
	}
	for _, src := range f.Sources {
		line("filter add dev %s protocol all parent 1:0 prio 2 u32 match %s flowid 1:1", iface, match(src))
	}
	line("filter add dev %s protocol all parent 10: handle 1 prio 2 %s baseclass 10:1", iface, flowHash)
	for i := range 10 {
		line("filter add dev %s protocol all parent %d: handle %d prio 2 %s baseclass %d:1", iface, 100+i, i+1, flowHash, 100+i)
	}
	return b.String()
}

// StopNetem removes the task's fault of this kind from its interfaces; none running is not an
// error.
func (inj *Injector) StopNetem(ctx context.Context, t *task.Task, kind taskendpoint.NetemKind) error {
	tg, err := inj.targetOf(t)
	if err != nil {
		return err
	}
	defer inj.lock(tg.netns)()
	latency, loss, err := inj.netemRunning(ctx, tg)
	if err != nil {
		return err
	}
	if (kind == taskendpoint.NetemLatency && latency) || (kind == taskendpoint.NetemPacketLoss && loss) {
		for _, iface := range tg.ifaces {
			if err := inj.removeTree(ctx, tg, iface); err != nil {
				return fmt.Errorf("stop %s on %s: %w", kind, iface, err)
			}
		}
		inj.log.Info("netem fault stopped", "task_arn", tg.arn, "fault", string(kind), "netns", tg.netns)
	}
	inj.record(tg.arn, func(s *startedFaults) { s.netem = false })
	return nil
}

// NetemRunning reports which netem fault runs on the task's interfaces.
func (inj *Injector) NetemRunning(ctx context.Context, t *task.Task) (latency, loss bool, err error) {
	tg, err := inj.targetOf(t)
	if err != nil {
		return false, false, err
	}
	defer inj.lock(tg.netns)()
	return inj.netemRunning(ctx, tg)
}

// netemRunning is NetemRunning with the namespace locked: it reads the first netem band (100:1) of
// each interface, as the ECS agent does; a netem qdisc with random loss is a packet-loss fault, any
// other a latency fault.
func (inj *Injector) netemRunning(ctx context.Context, tg target) (latency, loss bool, err error) {
	for _, iface := range tg.ifaces {
		out, err := inj.run(ctx, tg.netns, "", "tc", "-j", "q", "show", "dev", iface, "parent", "100:1")
		if err != nil {
			return false, false, fmt.Errorf("check netem faults on %s: %w", iface, err)
		}
		qdiscs, err := parseQdiscs(out)
		if err != nil {
			return false, false, fmt.Errorf("check netem faults on %s: %w", iface, err)
		}
		for _, q := range qdiscs {
			if q.Kind != "netem" || q.Options == nil {
				continue
			}
			if _, ok := q.Options["loss-random"]; ok {
				loss = true
			} else {
				latency = true
			}
		}
	}
	return latency && !loss, loss, nil
}

// qdisc is one entry of tc -j qdisc show.
type qdisc struct {
	Kind    string                     `json:"kind"`
	Handle  string                     `json:"handle"`
	Parent  string                     `json:"parent"`
	Options map[string]json.RawMessage `json:"options"`
}

// parseQdiscs decodes tc -j qdisc show's output; no output is no qdisc.
func parseQdiscs(out []byte) ([]qdisc, error) {
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil, nil
	}
	var qs []qdisc
	if err := json.Unmarshal(out, &qs); err != nil {
		return nil, fmt.Errorf("tc output: %w", err)
	}
	return qs, nil
}

// removeTree removes the fault's tree from one interface: its second layer, then its root, as the
// ECS agent does; either not being there is not an error.
func (inj *Injector) removeTree(ctx context.Context, tg target, iface string) error {
	var first error
	for _, c := range []string{"qdisc del dev " + iface + " parent 1:1 handle 10:", "qdisc del dev " + iface + " root handle 1: prio"} {
		if _, err := inj.run(ctx, tg.netns, "", "tc", strings.Fields(c)...); err != nil && !isExit(err) && first == nil {
			first = err
		}
	}
	return first
}

// sweepTree removes a fault's tree from an interface when it has one: a prio 10: below the root's
// band 1:1, the shape only a fault makes.
func (inj *Injector) sweepTree(ctx context.Context, tg target, iface string) (bool, error) {
	out, err := inj.run(ctx, tg.netns, "", "tc", "-j", "q", "show", "dev", iface, "parent", "1:1")
	if err != nil {
		return false, fmt.Errorf("list qdiscs of %s: %w", iface, err)
	}
	qdiscs, err := parseQdiscs(out)
	if err != nil {
		return false, err
	}
	for _, q := range qdiscs {
		if q.Kind == "prio" && q.Handle == "10:" {
			return true, inj.removeTree(ctx, tg, iface)
		}
	}
	return false, nil
}

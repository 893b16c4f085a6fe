package faultinject

import (
	"context"
	"slices"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// Name names the feature in logs.
func (inj *Injector) Name() string { return "fault injection" }

// TaskHook returns the stop hook of a task that allows faults; nil for the others. A restored
// awsvpc task's namespace is noted for RemoveLeftovers.
func (inj *Injector) TaskHook(t *task.Task) engine.TaskHook {
	if !t.EnableFaultInjection {
		return nil
	}
	if ns := t.NetworkNamespace(); ns != "" {
		inj.mu.Lock()
		inj.restored[t.Arn] = ns
		inj.mu.Unlock()
	}
	return &taskHook{inj: inj}
}

// taskHook removes a task's faults as it stops, and at its cleanup what a request that raced the
// stop started after that.
type taskHook struct {
	inj  *Injector
	done bool
}

var (
	_ engine.StopHook    = (*taskHook)(nil)
	_ engine.CleanupHook = (*taskHook)(nil)
)

// BeforeStop removes the task's faults before its first containers stop (an awsvpc task's
// namespace goes with its pause container, which stops last).
func (h *taskHook) BeforeStop(ctx context.Context, r *engine.Run, _ []*task.Container) {
	if h.done {
		return
	}
	h.done = true
	h.inj.removeTaskFaults(ctx, r.Task(), r.Log())
}

// Stopped does nothing more: BeforeStop removed the faults.
func (h *taskHook) Stopped(context.Context, *engine.Run) {}

// Cleanup removes the faults a request started after BeforeStop (it passed the task endpoint's checks
// before the stop began), so that nothing of them outlives the task: not a fault in the host's
// namespace, nor the record of one.
func (h *taskHook) Cleanup(ctx context.Context, r *engine.Run) {
	h.inj.removeLateFaults(ctx, r.Task(), r.Log())
}

// removeLateFaults removes the faults the agent started for the task since removeTaskFaults, if any.
func (inj *Injector) removeLateFaults(ctx context.Context, t *task.Task, log *logger.Logger) {
	inj.mu.Lock()
	_, late := inj.started[t.Arn]
	inj.mu.Unlock()
	if late {
		inj.removeTaskFaults(ctx, t, log)
	}
}

// removeTaskFaults removes what the agent started for the task: in an awsvpc task's own namespace,
// every fault (a sweep; nothing once the namespace is torn down, which took them); in the host's,
// shared with the host and other tasks, the faults this task started.
func (inj *Injector) removeTaskFaults(ctx context.Context, t *task.Task, log *logger.Logger) {
	inj.mu.Lock()
	started := inj.started[t.Arn]
	delete(inj.started, t.Arn)
	inj.mu.Unlock()
	if t.NetworkMode == task.NetworkAWSVPC && t.NetworkNamespace() == "" {
		return // torn down already: the faults went with the namespace
	}
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	tg, err := inj.targetOf(t)
	if err != nil {
		if started != nil {
			log.Warn("the task's faults cannot be removed", "error", err)
		}
		return
	}
	if t.NetworkMode == task.NetworkAWSVPC {
		if err := inj.sweep(ctx, tg); err != nil {
			log.Warn("the task's faults could not all be removed; its namespace goes with it", "error", err)
		}
		return
	}
	if started == nil {
		return
	}
	unlock := inj.lock(tg.netns)
	defer unlock()
	for chain, builtin := range started.blackholes {
		if err := inj.removeChain(ctx, tg, chain, builtin); err != nil {
			log.Warn("a black hole of the task could not be removed", "chain", chain, "error", err)
		}
	}
	if started.netem {
		for _, iface := range tg.ifaces {
			if err := inj.removeTree(ctx, tg, iface); err != nil {
				log.Warn("a netem fault of the task could not be removed", "interface", iface, "error", err)
			}
		}
	}
	log.Info("the task's faults are removed")
}

// sweep removes every fault from a target's namespace and interfaces, with it locked.
func (inj *Injector) sweep(ctx context.Context, tg target) error {
	defer inj.lock(tg.netns)()
	chains, err := inj.sweepChains(ctx, tg)
	trees := 0
	for _, iface := range tg.ifaces {
		removed, terr := inj.sweepTree(ctx, tg, iface)
		if removed {
			trees++
		}
		if err == nil {
			err = terr
		}
	}
	if chains > 0 || trees > 0 {
		inj.log.Info("faults removed", "task_arn", tg.arn, "netns", tg.netns, "chains", chains, "netem_trees", trees)
	}
	return err
}

// RemoveLeftovers removes at agent start the faults an earlier agent left: in the host's namespace
// (host-mode tasks'), and in the namespaces of the restored awsvpc tasks that allow faults and are
// still known. Faults do not survive an agent restart.
func (inj *Injector) RemoveLeftovers(ctx context.Context, known []string) {
	inj.mu.Lock()
	restored := inj.restored
	inj.restored = map[string]string{}
	inj.mu.Unlock()
	if iface, err := inj.hostIface(); err != nil {
		inj.log.Warn("faults in the host's namespace cannot be looked for", "error", err)
	} else {
		sctx, cancel := context.WithTimeout(ctx, hookTimeout)
		if err := inj.sweep(sctx, target{netns: inj.hostNetNS, ifaces: []string{iface}}); err != nil {
			inj.log.Warn("faults an earlier agent left in the host's namespace could not all be removed", "error", err)
		}
		cancel()
	}
	for arn, ns := range restored {
		if !slices.Contains(known, arn) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, hookTimeout)
		if err := inj.sweep(sctx, target{arn: arn, netns: ns, ifaces: []string{AWSVPCInterface}}); err != nil {
			inj.log.Warn("faults an earlier agent left in a task's namespace could not all be removed", "task_arn", arn, "netns", ns, "error", err)
		}
		cancel()
	}
}

package app

import (
	"context"

	"github.com/berth-agent/berth/agent/faultinject"
	"github.com/berth-agent/berth/agent/logger"
)

// newFaultInjection returns the fault injector the engine (its stop hook and recovery) and the task
// endpoint (its fault routes) share, and whether the host has what every fault needs, which
// ecs.capability.fault-injection advertises. Without it the routes still answer: a black hole
// needs iptables only, and latency and packet loss fail as the ECS agent's do.
func newFaultInjection(ctx context.Context, log *logger.Logger) (*faultinject.Injector, bool) {
	log = log.With("component", "fault_injection")
	support := faultinject.Probe(ctx)
	if !support.Available {
		log.Warn("ecs.capability.fault-injection is not advertised: the host lacks what network faults need", "reason", support.Reason)
	}
	return faultinject.New(faultinject.Config{Logger: log}), support.Available
}

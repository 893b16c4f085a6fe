// Command soak is Berth's chaos soak (make soak; not part of make test's full run, which runs a
// one-minute version, TestIntegrationSoakShort). For -duration it launches a task every
// -launch-every through an ECS stand-in on loopback (scripts/internal/ecsstandin: agent/localcp
// served in this process behind a front) and stops the oldest beyond -running, while
//   - the real berth binary (built as make build does, run in ecs mode against the stand-in) is
//     SIGKILLed and started again every -kill-min..-kill-max,
//   - dockerd is restarted -docker-restarts times (as the integration tests restart it),
//   - dockerd is stopped -engine-outages times for -outage-for while the agent creates the
//     containers of -outage-burst tasks launched at once (see engineOutages),
//   - the agent's control-plane connections are cut about every -cut-every (the ACS websocket
//     closed and refused, ECS API connections reset before or after the control plane saw them).
//
// Then it stops launching, waits (at most -settle) until the end state holds, and prints a table:
// every task's control-plane status against Docker, duplicate and orphan containers, the tasks
// launched into an Engine outage that failed by it or left an orphan or a duplicate, state changes
// lost or repeated in a way that would confuse ECS (see ledger), agent panics, and the agent's RSS
// at comparable moments (each incarnation at age 10 s). It exits 1 when any row that must be 0 is
// not. Only the run's own containers (its cluster label) are ever removed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	o := defaultOptions()
	flag.DurationVar(&o.duration, "duration", o.duration, "how long tasks are launched and chaos goes on")
	flag.DurationVar(&o.killMin, "kill-min", o.killMin, "shortest time between two SIGKILLs of the agent")
	flag.DurationVar(&o.killMax, "kill-max", o.killMax, "longest time between two SIGKILLs of the agent")
	flag.IntVar(&o.dockerRestarts, "docker-restarts", o.dockerRestarts, "dockerd restarts, spread evenly over -duration")
	flag.IntVar(&o.engineOutages, "engine-outages", o.engineOutages, "Docker Engine stops during creates, spread evenly over -duration")
	flag.DurationVar(&o.outageFor, "outage-for", o.outageFor, "how long each Engine stop during creates lasts (keep it below the agent's create and start timeouts, 4m and 3m)")
	flag.IntVar(&o.outageBurst, "outage-burst", o.outageBurst, "tasks launched at once into each Engine stop during creates")
	flag.DurationVar(&o.launchEvery, "launch-every", o.launchEvery, "one RunTask every this long")
	flag.IntVar(&o.running, "running", o.running, "tasks kept running: beyond this the oldest is stopped")
	flag.DurationVar(&o.cutEvery, "cut-every", o.cutEvery, "mean time between control-plane cuts (0: none)")
	flag.DurationVar(&o.settle, "settle", o.settle, "longest wait for the end state after the chaos")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (agent log and outputs, state)")
	flag.Parse()
	if o.killMin < o.memAge+time.Second || o.killMax < o.killMin {
		fmt.Fprintf(os.Stderr, "soak: need %s < -kill-min <= -kill-max\n", o.memAge+time.Second)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
	rep.print(os.Stdout)
	if rep.failed() {
		fmt.Println("soak: FAILED")
		os.Exit(1)
	}
	fmt.Println("soak: ok")
}

// defaultOptions are make soak's: ten minutes.
func defaultOptions() options {
	return options{
		duration:       10 * time.Minute,
		killMin:        15 * time.Second,
		killMax:        30 * time.Second,
		dockerRestarts: 2,
		engineOutages:  2,
		outageFor:      5 * time.Second,
		outageBurst:    3,
		launchEvery:    2 * time.Second,
		running:        8,
		cutEvery:       40 * time.Second,
		memAge:         10 * time.Second,
		settle:         4 * time.Minute,
		out:            os.Stderr,
	}
}

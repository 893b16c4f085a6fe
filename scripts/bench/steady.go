package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth-agent/berth/scripts/internal/agentproc"
	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// steadySizes are the tasks the ecs section keeps running: idle of them for the idle windows, then
// loaded in all for the latency samples.
type steadySizes struct{ idle, loaded int }

// parseSteady reads "50,200": the tasks running in the idle windows, then during the latency samples.
func parseSteady(s string) (steadySizes, error) {
	a, b, ok := strings.Cut(s, ",")
	idle, err1 := strconv.Atoi(strings.TrimSpace(a))
	loaded, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || idle < 1 || loaded < idle {
		return steadySizes{}, fmt.Errorf("-ecs-steady: %q is not IDLE,LOADED with 1 <= IDLE <= LOADED", s)
	}
	return steadySizes{idle, loaded}, nil
}

// steadyState runs s.idle tasks and measures the idle agent and Engine over two windows, then runs
// more tasks up to s.loaded and samples the latency of the agent's APIs; then stops them all.
func (r *ecsRun) steadyState(ctx context.Context, s steadySizes, window time.Duration) error {
	telemetry, err := r.telemetryEndpoint(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeoutCause(ctx, time.Minute, errors.New("a minute"))
	tcsErr := r.cp.Telemetry.WaitSession(wctx)
	cancel()

	first, err := r.launch(ctx, s.idle)
	if err != nil {
		return fmt.Errorf("steady state, %d tasks: %w", s.idle, err)
	}
	fmt.Printf("ecs idle: %d tasks running; DiscoverPollEndpoint's telemetryEndpoint %s", s.idle, telemetry)
	if tcsErr != nil {
		fmt.Printf("; the agent opened NO TCS session within a minute (%v)\n", tcsErr)
	} else {
		opened, open := r.cp.Telemetry.Sessions()
		fmt.Printf("; TCS: %d session(s) opened, %d open\n", opened, open)
	}
	if err := r.idleWindows(ctx, first, window); err != nil {
		return err
	}
	launched := []*launchedTasks{first}
	if more := s.loaded - s.idle; more > 0 {
		second, err := r.launch(ctx, more)
		if err != nil {
			return fmt.Errorf("steady state, %d more tasks: %w", more, err)
		}
		launched = append(launched, second)
	}
	if err := r.latency(ctx, s.loaded); err != nil {
		return err
	}
	for _, l := range launched {
		if err := r.stopTasks(ctx, l); err != nil {
			return err
		}
	}
	return r.removeContainers(ctx)
}

// telemetryEndpoint asks the stand-in's DiscoverPollEndpoint, as the agent does, for the agent's
// container instance, and returns the telemetryEndpoint it answers; none is an error.
func (r *ecsRun) telemetryEndpoint(ctx context.Context) (string, error) {
	var list struct {
		ContainerInstanceArns []string `json:"containerInstanceArns"`
	}
	if err := r.cp.Call(ctx, "ListContainerInstances", map[string]any{"cluster": r.cluster}, &list); err != nil {
		return "", err
	}
	if len(list.ContainerInstanceArns) != 1 {
		return "", fmt.Errorf("cluster %s has %d container instances, not 1", r.cluster, len(list.ContainerInstanceArns))
	}
	var found struct {
		Endpoint          string `json:"endpoint"`
		TelemetryEndpoint string `json:"telemetryEndpoint"`
	}
	if err := ecsstandin.Call(ctx, r.cp.Endpoint, ecsstandin.Keys, "DiscoverPollEndpoint",
		map[string]any{"cluster": r.cluster, "containerInstance": list.ContainerInstanceArns[0]}, &found); err != nil {
		return "", err
	}
	if found.TelemetryEndpoint == "" {
		return "", errors.New("the stand-in's DiscoverPollEndpoint answers no telemetryEndpoint: the agent would run without TCS, unlike on a real host")
	}
	return found.TelemetryEndpoint, nil
}

// cpuReading is the CPU time of the agent, dockerd, and containerd with its shims at one moment.
type cpuReading struct {
	at         time.Time
	agent      int64
	dockerd    int64
	containerd map[int]int64 // pid → ticks
}

func (r *ecsRun) readCPU(dockerd int) (cpuReading, error) {
	c := cpuReading{at: time.Now(), containerd: map[int]int64{}}
	var err error
	if c.agent, err = agentproc.CPUTicks(r.agent.pid()); err != nil {
		return c, err
	}
	if c.dockerd, err = agentproc.CPUTicks(dockerd); err != nil {
		return c, fmt.Errorf("dockerd: %w", err)
	}
	pids, err := agentproc.Processes(func(comm string) bool { return strings.HasPrefix(comm, "containerd") })
	if err != nil {
		return c, err
	}
	for _, pid := range pids {
		if t, err := agentproc.CPUTicks(pid); err == nil { // a shim may have exited since
			c.containerd[pid] = t
		}
	}
	return c, nil
}

// cpuRates is CPU use over a window, in ms per second.
type cpuRates struct{ agent, dockerd, containerd float64 }

func (r *ecsRun) rates(a, b cpuReading) cpuRates {
	perSec := func(ticks int64) float64 { return float64(ticks) * 1000 / float64(r.hz) / b.at.Sub(a.at).Seconds() }
	var shims int64
	for pid, t := range b.containerd {
		if t0, ok := a.containerd[pid]; ok {
			shims += t - t0
		}
	}
	return cpuRates{agent: perSec(b.agent - a.agent), dockerd: perSec(b.dockerd - a.dockerd), containerd: perSec(shims)}
}

// cpuWindow measures CPU use over d.
func (r *ecsRun) cpuWindow(ctx context.Context, dockerd int, d time.Duration) (cpuRates, time.Time, time.Time, error) {
	a, err := r.readCPU(dockerd)
	if err != nil {
		return cpuRates{}, time.Time{}, time.Time{}, err
	}
	select {
	case <-ctx.Done():
		return cpuRates{}, time.Time{}, time.Time{}, context.Cause(ctx)
	case <-time.After(d): // the measurement window itself
	}
	b, err := r.readCPU(dockerd)
	if err != nil {
		return cpuRates{}, time.Time{}, time.Time{}, err
	}
	return r.rates(a, b), a.at, b.at, nil
}

// idleWindows measures, with the tasks of l running, the agent's and the Engine's CPU over a window
// with the agent alone and, right after it, over a window of the same length while the bench holds
// one Docker stats stream open per container, as the ECS agent does.
func (r *ecsRun) idleWindows(ctx context.Context, l *launchedTasks, window time.Duration) error {
	dockerd, err := dockerdPID()
	if err != nil {
		return err
	}
	ids, err := r.runningContainers(ctx)
	if err != nil {
		return err
	}
	if len(ids) != len(l.arns) {
		return fmt.Errorf("%d containers of this run are running, not %d", len(ids), len(l.arns))
	}
	others, err := r.otherContainers(ctx)
	if err != nil {
		return err
	}
	when := r.alignToPublishes(ctx, len(ids))
	alone, from, to, err := r.cpuWindow(ctx, dockerd, window)
	if err != nil {
		return err
	}
	published := r.cp.Telemetry.Publishes(from, to)

	sctx, closeStreams := context.WithCancel(ctx)
	wait, err := openStatsStreams(sctx, r.dc, ids)
	if err != nil {
		closeStreams()
		return err
	}
	streamed, from2, to2, err := r.cpuWindow(ctx, dockerd, window)
	closeStreams()
	if werr := wait(); err == nil && werr != nil {
		err = fmt.Errorf("stats streams: %w", werr)
	}
	if err != nil {
		return err
	}
	r.note("idle window1=%s-%s metrics_publishes=%d agent_ms_s=%.2f dockerd_ms_s=%.2f window2=%s-%s stats_streams=%d agent_ms_s=%.2f dockerd_ms_s=%.2f",
		stamp(from), stamp(to), len(published), alone.agent, alone.dockerd, stamp(from2), stamp(to2), len(ids), streamed.agent, streamed.dockerd)

	fmt.Printf("  window 1: %s with the agent alone, %s; the agent published metrics over TCS %d time(s) in it", window, when, len(published))
	if len(published) > 0 {
		fmt.Printf(" (%d tasks in the last batch)\n", published[len(published)-1].Tasks)
	} else {
		fmt.Printf("\n  the agent published NO metrics in window 1: these idle figures leave its telemetry out and are NOT a real host's idle cost\n")
	}
	fmt.Printf("  window 2: %s right after window 1, the same tasks, the bench holding %d Docker stats streams open\n", window, len(ids))
	fmt.Printf("    (GET /containers/ID/stats?stream=1, one per container, read and discarded: what Berth used to do and the ECS agent does)\n")
	fmt.Printf("  agent CPU in window 1 %.2f ms/s (utime+stime)   goal <= 3 ms/s   (window 2: %.2f ms/s)\n", alone.agent, streamed.agent)
	ratio := "n/a (no CPU counted in window 2)"
	if streamed.dockerd > 0 {
		ratio = fmt.Sprintf("%.3f", alone.dockerd/streamed.dockerd)
	}
	fmt.Printf("  Docker Engine (dockerd, pid %d) CPU: window 1 %.2f ms/s, window 2 %.2f ms/s; ratio window 1/window 2 %s   goal <= 0.25\n",
		dockerd, alone.dockerd, streamed.dockerd, ratio)
	fmt.Printf("  containerd and its shims (not in the goal): window 1 %.2f ms/s, window 2 %.2f ms/s\n", alone.containerd, streamed.containerd)
	if others > 0 {
		fmt.Printf("  %d other running container(s) on this Engine: what they ask of it counts in both windows\n", others)
	}
	return nil
}

// alignToPublishes waits, when the agent publishes metrics, until about a second before its next
// publish of at least tasks tasks is due, so that a window opened then holds as many publishes as a
// window of its length can (two in 30 s, every 20 s): the costlier alignment. It returns what it
// did, for the report.
func (r *ecsRun) alignToPublishes(ctx context.Context, tasks int) string {
	wait := func(after time.Time) (ecsstandin.MetricsPublish, error) {
		wctx, cancel := context.WithTimeoutCause(ctx, 90*time.Second, errors.New("90 s"))
		defer cancel()
		return r.cp.Telemetry.WaitPublish(wctx, after, tasks)
	}
	p1, err := wait(time.Now())
	if err != nil {
		return fmt.Sprintf("started with no publish seen (%v)", err)
	}
	p2, err := wait(p1.At)
	if err != nil {
		return fmt.Sprintf("started after one publish; no second one (%v)", err)
	}
	interval := p2.At.Sub(p1.At)
	lead := min(time.Second, interval/4)
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(p2.At.Add(interval - lead))):
	}
	return fmt.Sprintf("started %s before the next publish was due (the agent published every %s)", lead, interval.Round(100*time.Millisecond))
}

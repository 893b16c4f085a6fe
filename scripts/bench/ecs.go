package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-agent/berth/scripts/internal/agentproc"
	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// The ecs section drives the real berth binary as a process and talks to it only the way ECS does
// (ECS JSON API, ACS and TCS) and the way an operator and a task do (the introspection API, berth
// ps, the task endpoint), so it keeps working while the agent's packages change. The labels below
// are ECS's and Berth's documented container labels (README), written out rather than imported.
const (
	labelManaged   = "com.berth-agent.managed"
	labelTaskARN   = "com.amazonaws.ecs.task-arn"
	labelContainer = "com.amazonaws.ecs.container-name"
	labelFamily    = "com.amazonaws.ecs.task-definition-family"
	labelRevision  = "com.amazonaws.ecs.task-definition-version"
	labelCluster   = "com.amazonaws.ecs.cluster"
	// labelBenchRun marks every container of one ecs bench run, on both sides; cleanup removes
	// exactly those.
	labelBenchRun = "com.berth-agent.bench-run"
	ecsFamily     = "ecsbench"
	// ecsDeadline bounds the whole section; each wait inside it has its own, shorter bound. The
	// default rounds take about a quarter of it on a 2-core machine.
	ecsDeadline = 60 * time.Minute
)

// ecsSize is one task count of the ecs section and how many measured rounds each side gets.
type ecsSize struct{ tasks, rounds int }

// parseECSRounds reads "1:15,20:5,50:3": tasks:rounds, comma-separated.
func parseECSRounds(s string) ([]ecsSize, error) {
	var out []ecsSize
	for _, part := range strings.Split(s, ",") {
		n, r, ok := strings.Cut(strings.TrimSpace(part), ":")
		tasks, err1 := strconv.Atoi(n)
		rounds, err2 := strconv.Atoi(r)
		if !ok || err1 != nil || err2 != nil || tasks < 1 || rounds < 1 {
			return nil, fmt.Errorf("-ecs-rounds: %q is not tasks:rounds", part)
		}
		out = append(out, ecsSize{tasks, rounds})
	}
	return out, nil
}

// ecsOptions are the ecs section's flags.
type ecsOptions struct {
	sizes    []ecsSize
	steady   steadySizes   // tasks kept running for the idle windows and the latency samples
	window   time.Duration // length of each idle window
	keep     bool          // keep the temp dir: the agent's log, its state, the bench's timeline
	logLevel string        // the agent's ECS_LOGLEVEL
	// dataTmpfs puts the agent's ECS_DATADIR on tmpfs: a diagnostic, to see what the agent's fsyncs
	// cost next to the Engine's on the same disk. Measurements that count are taken on disk.
	dataTmpfs bool
}

// ecsRun is one run of the ecs section.
type ecsRun struct {
	benchRun
	cp       *ecsstandin.StandIn
	agent    *berthProcess
	bin      string   // the berth binary
	env      []string // the agent's environment, also that of the berth commands the bench runs
	hz       int
	launched int // tasks the agent has run, warm-up included
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// ecsResult is what one size measured.
type ecsResult struct {
	size             ecsSize
	berth, bare      []time.Duration
	agentShare       []time.Duration // merged payload sent -> last RUNNING accepted
	launchTicks      int64           // agent CPU while launching, summed over rounds
	stopTicks        int64           // agent CPU while stopping
	payloadsPerRound []int           // PayloadMessages localcp sent per berth round
	rssMiB           float64         // max VmRSS with all N tasks running
}

// ecsMode runs the ecs section; any error ends the bench with exit 1 after cleaning up.
func (b *bench) ecsMode(ctx context.Context, opts ecsOptions) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, ecsDeadline, fmt.Errorf("the ecs section took longer than %s", ecsDeadline))
	defer cancel()
	if err := b.runECS(ctx, opts); err != nil {
		fail("ecs: %v", err)
	}
}

func (b *bench) runECS(ctx context.Context, opts ecsOptions) (err error) {
	hz, err := agentproc.ClockTicks()
	if err != nil {
		return err
	}
	if _, err := b.dc.InspectImage(testImage); err != nil {
		return fmt.Errorf("the test image %s must be in the Docker Engine (make images): %w", testImage, err)
	}
	dir, err := os.MkdirTemp("", "berth-bench-ecs")
	if err != nil {
		return err
	}
	defer func() {
		if opts.keep {
			fmt.Printf("  kept %s (agent logs steady/berth.log and berth.log, bench timeline bench.log)\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	bin := filepath.Join(dir, "berth")
	if err := agentproc.Build(ctx, bin); err != nil {
		return err
	}
	cp, err := ecsstandin.Start(dir, ecsstandin.Options{})
	if err != nil {
		return fmt.Errorf("stand-in ECS endpoint: %w", err)
	}
	defer cp.Close()

	timeline, err := os.Create(filepath.Join(dir, "bench.log"))
	if err != nil {
		return err
	}
	defer timeline.Close()
	base := ecsRun{benchRun: benchRun{dc: b.dc, runID: newRunID(), family: ecsFamily, timeline: timeline}, cp: cp, hz: hz, bin: bin}
	// Whatever happens, remove every container of this run, bounded in time.
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if cerr := base.removeContainers(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()

	// The steady state has an agent of its own, so that neither part weighs on the other: its 200
	// tasks do not raise the resident memory the launch rounds read, and the rounds' stopped tasks,
	// kept for ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, do not lengthen the /v1/tasks it times.
	steady := base
	steady.cluster = "berth-bench-ecs-" + base.runID + "-steady"
	if err := steady.withAgent(ctx, filepath.Join(dir, "steady"), opts, func(ctx context.Context) error {
		return steady.steadyState(ctx, opts.steady, opts.window)
	}); err != nil {
		return err
	}
	launch := base
	launch.cluster = "berth-bench-ecs-" + base.runID
	return launch.withAgent(ctx, dir, opts, func(ctx context.Context) error { return launch.launchRounds(ctx, opts.sizes) })
}

// withAgent runs a berth process for r.cluster, its log and state under dir, waits until it is
// connected, runs a warm-up task on it and one bare container, then calls fn; then stops the agent
// and removes this run's containers.
func (r *ecsRun) withAgent(ctx context.Context, dir string, opts ecsOptions, fn func(ctx context.Context) error) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dataDir, dataWhere := filepath.Join(dir, "data"), "on disk"
	if opts.dataTmpfs {
		d, err := os.MkdirTemp("/dev/shm", "berth-bench-ecs-data")
		if err != nil {
			return fmt.Errorf("-ecs-datadir-tmpfs: %w", err)
		}
		defer os.RemoveAll(d)
		dataDir, dataWhere = d, "ON TMPFS (diagnostic: no fsync cost)"
	}
	r.env = agentEnv(dir, dataDir, r.cluster, r.cp.Endpoint, opts.logLevel)
	if err := checkMode(ctx, r.bin, r.env, "ecs"); err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if cerr := r.removeContainers(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	sessions, _, _ := r.cp.Relay.Counts()
	r.agent, err = startBerth(ctx, r.bin, dir, r.env)
	if err != nil {
		return err
	}
	defer func() {
		if serr := r.agent.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, r.agent.tail(30))
		}
	}()
	ctx, unwatch := r.agent.watch(ctx)
	defer unwatch()
	if err := r.waitReady(ctx, sessions); err != nil {
		return err
	}
	def := map[string]any{"family": ecsFamily, "containerDefinitions": []map[string]any{{
		"name": "c", "image": testImage, "memory": 16, "essential": true, "command": []string{"sleep"}, "stopTimeout": 5,
		"dockerLabels": map[string]string{labelBenchRun: r.runID}}}}
	if err := r.cp.Call(ctx, "RegisterTaskDefinition", def, nil); err != nil {
		return err
	}
	where := "on tmpfs"
	if r.cp.Tmpfs == "" {
		where = "on disk (no /dev/shm)"
	}
	fmt.Printf("ecs: berth in ecs mode (pid %d, ECS_DATADIR %s) against a stand-in ECS endpoint on 127.0.0.1 (localcp, state %s,\n",
		r.agent.pid(), dataWhere, where)
	fmt.Printf("  + ACS and TCS relays), cluster %s; one-container tasks (testapp sleep, prefer-cached)\n", r.cluster)
	// Warm-up, not measured: the agent's first task (image inspect, first worker) and the Engine's
	// first create after a quiet spell.
	if err := r.berthRound(ctx, 1, nil); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := r.bareRound(ctx, 1); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return fn(ctx)
}

// launchRounds times the launches of every size against the bare Engine and prints the rows.
func (r *ecsRun) launchRounds(ctx context.Context, sizes []ecsSize) error {
	var results []*ecsResult
	for _, s := range sizes {
		res := &ecsResult{size: s}
		berth := func() error { return r.berthRound(ctx, s.tasks, res) }
		bare := func() error {
			d, err := r.bareRound(ctx, s.tasks)
			res.bare = append(res.bare, d)
			return err
		}
		for i := range s.rounds {
			// Alternate which side goes first, so that neither always meets a warmer Engine.
			sides := []func() error{berth, bare}
			if i%2 == 1 {
				sides = []func() error{bare, berth}
			}
			for _, side := range sides {
				if err := side(); err != nil {
					if len(results) > 0 {
						fmt.Println("ecs launch: the sizes measured before the failure")
						r.print(results)
					}
					return fmt.Errorf("round %d with %d tasks: %w", i+1, s.tasks, err)
				}
			}
		}
		results = append(results, res)
	}
	idle, err := r.idleCPU(ctx, 3*time.Second)
	if err != nil {
		return err
	}
	r.print(results)
	fmt.Printf("  agent CPU while idle afterwards, with the %d tasks it ran stopped (and kept for ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION): %.1f ms/s\n",
		r.launched, idle)
	return nil
}

// idleCPU returns the agent's CPU use over window, in ms per second.
func (r *ecsRun) idleCPU(ctx context.Context, window time.Duration) (float64, error) {
	before, err := agentproc.CPUTicks(r.agent.pid())
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-time.After(window):
	}
	after, err := agentproc.CPUTicks(r.agent.pid())
	if err != nil {
		return 0, err
	}
	return float64(after-before) * 1000 / float64(r.hz) / window.Seconds(), nil
}

// waitReady waits until the agent registered with the stand-in and holds an ACS session open.
func (r *ecsRun) waitReady(ctx context.Context, sessionsBefore int) error {
	ctx, cancel := context.WithTimeoutCause(ctx, time.Minute, errors.New("berth did not register and connect to ACS within a minute"))
	defer cancel()
	for {
		var list struct {
			ContainerInstanceArns []string `json:"containerInstanceArns"`
		}
		err := r.cp.Call(ctx, "ListContainerInstances", map[string]any{"cluster": r.cluster}, &list)
		if err == nil && len(list.ContainerInstanceArns) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registration: %w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A session opened after this agent started is this agent's: the relay keeps the newest.
	for {
		if sessions, _, _ := r.cp.Relay.Counts(); sessions > sessionsBefore {
			return r.cp.Relay.WaitSession(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ACS: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// launchedTasks are tasks the agent was given in one PayloadMessage and ran.
type launchedTasks struct {
	arns, ids []string
	start     time.Time // the first RunTask call
	sentAt    time.Time // the merged PayloadMessage went to the agent
	last      time.Time // the control plane accepted the last RUNNING
	payloads  int       // PayloadMessages localcp sent for them
}

// launch runs n tasks through the agent, all in one PayloadMessage, and returns once the control
// plane accepted RUNNING for every one and DescribeTasks shows them RUNNING.
func (r *ecsRun) launch(ctx context.Context, n int) (*launchedTasks, error) {
	l := &launchedTasks{}
	r.cp.Relay.Hold()
	l.start = time.Now()
	for len(l.arns) < n {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
			Failures []struct {
				Reason string `json:"reason"`
			} `json:"failures"`
		}
		count := min(10, n-len(l.arns)) // RunTask starts at most 10 tasks per call, as in ECS
		if err := r.cp.Call(ctx, "RunTask", map[string]any{"cluster": r.cluster, "taskDefinition": ecsFamily, "count": count}, &ran); err != nil {
			return nil, err
		}
		if len(ran.Tasks) != count {
			return nil, fmt.Errorf("RunTask started %d of %d tasks: %+v", len(ran.Tasks), count, ran.Failures)
		}
		for _, t := range ran.Tasks {
			l.arns, l.ids = append(l.arns, t.TaskArn), append(l.ids, ecsstandin.TaskID(t.TaskArn))
		}
	}
	wctx, cancel := context.WithTimeoutCause(ctx, 30*time.Second, errors.New("30 s"))
	payloads, sentAt, err := r.cp.Relay.Release(wctx, l.arns)
	cancel()
	if err != nil {
		return nil, err
	}
	l.payloads, l.sentAt = payloads, sentAt
	bound := 3*time.Minute + time.Duration(n)*time.Second
	wctx, cancel = context.WithTimeoutCause(ctx, bound, fmt.Errorf("%s", bound))
	l.last, err = r.cp.States.Wait(wctx, l.ids, "RUNNING")
	cancel()
	if err != nil {
		return nil, err
	}
	if err := r.checkStatus(ctx, l.arns, "RUNNING"); err != nil {
		return nil, err
	}
	r.launched += n
	return l, nil
}

// stopTasks stops the tasks, teardownWave at a time, each wave once the control plane accepted
// STOPPED for every task of the one before.
func (r *ecsRun) stopTasks(ctx context.Context, l *launchedTasks) error {
	for i := 0; i < len(l.arns); i += teardownWave {
		arns, ids := l.arns[i:min(i+teardownWave, len(l.arns))], l.ids[i:min(i+teardownWave, len(l.ids))]
		for _, arn := range arns {
			if err := r.cp.Call(ctx, "StopTask", map[string]any{"cluster": r.cluster, "task": arn, "reason": "bench round done"}, nil); err != nil {
				return err
			}
		}
		wctx, cancel := context.WithTimeoutCause(ctx, 2*time.Minute, errors.New("2 min"))
		_, err := r.cp.States.Wait(wctx, ids, "STOPPED")
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// berthRound runs n tasks through the agent, stops them and removes their containers. res, if
// not nil, receives the measurements.
func (r *ecsRun) berthRound(ctx context.Context, n int, res *ecsResult) error {
	pid := r.agent.pid()
	cpu0, err := agentproc.CPUTicks(pid)
	if err != nil {
		return err
	}
	l, err := r.launch(ctx, n)
	if err != nil {
		return err
	}
	took := l.last.Sub(l.start)
	cpu1, err := agentproc.CPUTicks(pid)
	if err != nil {
		return err
	}
	rss, err := agentproc.ResidentMiB(pid)
	if err != nil {
		return err
	}
	if bad, err := offHostSockets(pid); err != nil || len(bad) > 0 {
		return fmt.Errorf("berth must talk to loopback only: sockets %v (%v)", bad, err)
	}
	if err := r.stopTasks(ctx, l); err != nil {
		return err
	}
	cpu2, err := agentproc.CPUTicks(pid)
	if err != nil {
		return err
	}
	r.note("berth N=%d first_runtask=%s payload_sent=%s (%d from localcp) last_running_accepted=%s took=%s cpu_ticks_launch=%d cpu_ticks_stop=%d rss_mib=%.1f tasks=%s",
		n, stamp(l.start), stamp(l.sentAt), l.payloads, stamp(l.last), took.Round(time.Millisecond), cpu1-cpu0, cpu2-cpu1, rss, strings.Join(l.ids, ","))
	if err := r.removeContainers(ctx); err != nil {
		return err
	}
	if res != nil {
		res.berth = append(res.berth, took)
		res.agentShare = append(res.agentShare, l.last.Sub(l.sentAt))
		res.launchTicks += cpu1 - cpu0
		res.stopTicks += cpu2 - cpu1
		res.payloadsPerRound = append(res.payloadsPerRound, l.payloads)
		res.rssMiB = max(res.rssMiB, rss)
	}
	return nil
}

// checkStatus confirms through DescribeTasks that the control plane shows every task in status.
func (r *ecsRun) checkStatus(ctx context.Context, arns []string, status string) error {
	ok := 0
	for batch := range slices.Chunk(arns, 100) { // DescribeTasks takes at most 100 tasks, as in ECS
		var d struct {
			Tasks []struct {
				LastStatus string `json:"lastStatus"`
			} `json:"tasks"`
		}
		if err := r.cp.Call(ctx, "DescribeTasks", map[string]any{"cluster": r.cluster, "tasks": batch}, &d); err != nil {
			return err
		}
		for _, t := range d.Tasks {
			if t.LastStatus == status {
				ok++
			}
		}
	}
	if ok != len(arns) {
		return fmt.Errorf("DescribeTasks shows %d of %d tasks %s", ok, len(arns), status)
	}
	return nil
}

// print writes the launch rows: per N the medians and their ratio, then the agent's CPU per task and
// its resident memory, each with its goal.
func (r *ecsRun) print(results []*ecsResult) {
	fmt.Println("ecs launch: N tasks in ONE PayloadMessage; timed from the first RunTask call until the control plane accepted a")
	fmt.Println("  RUNNING SubmitTaskStateChange for all N, vs creating+starting+inspecting N containers at once through the Docker")
	fmt.Println("  Engine API; alternating which side goes first")
	ms := func(ticks int64, tasks int) float64 { return float64(ticks) * 1000 / float64(r.hz) / float64(tasks) }
	fmt.Printf("  %4s %6s %12s %12s %8s %8s   %s\n", "N", "rounds", "bare median", "berth median", "ratio", "goal", "agent share: payload sent -> last RUNNING accepted (median)")
	var launchTicks, stopTicks int64
	var launched int
	bySize := map[int]*ecsResult{}
	for _, res := range results {
		goal := "<= 1.00"
		if res.size.tasks == 1 {
			goal = "<= 1.05"
		}
		mb, mk := median(res.berth), median(res.bare)
		fmt.Printf("  %4d %6d %12s %12s %8.3f %8s   %s\n", res.size.tasks, res.size.rounds, mk.Round(time.Millisecond),
			mb.Round(time.Millisecond), float64(mb)/float64(mk), goal, median(res.agentShare).Round(time.Millisecond))
		launchTicks += res.launchTicks
		stopTicks += res.stopTicks
		launched += res.size.tasks * res.size.rounds
		bySize[res.size.tasks] = res
	}
	for _, res := range results {
		tasks := res.size.tasks * res.size.rounds
		fmt.Printf("  N=%-3d berth min/max %s/%s, bare min/max %s/%s; PayloadMessages from localcp per round %v (sent to the agent as 1)\n",
			res.size.tasks, slices.Min(res.berth).Round(time.Millisecond), slices.Max(res.berth).Round(time.Millisecond),
			slices.Min(res.bare).Round(time.Millisecond), slices.Max(res.bare).Round(time.Millisecond), res.payloadsPerRound)
		fmt.Printf("        agent CPU per task: launch %.1f ms, stop %.1f ms (%d tasks)\n", ms(res.launchTicks, tasks), ms(res.stopTicks, tasks), tasks)
	}
	fmt.Printf("  agent CPU per task launched %.1f ms over %d tasks (utime+stime, CLK_TCK %d)   goal <= 4 ms\n", ms(launchTicks, launched), launched, r.hz)
	fmt.Printf("  agent CPU per task stopped  %.1f ms\n", ms(stopTicks, launched))
	if big, small := bySize[200], bySize[20]; big != nil && small != nil {
		perBig, perSmall := ms(big.launchTicks, 200*big.size.rounds), ms(small.launchTicks, 20*small.size.rounds)
		ratio := "n/a (no CPU tick counted at N=20)"
		if perSmall > 0 {
			ratio = fmt.Sprintf("%.2f", perBig/perSmall)
		}
		fmt.Printf("  agent CPU per task launched at N=200 / at N=20: %.1f / %.1f ms = %s   goal <= 1.2\n", perBig, perSmall, ratio)
	}
	for _, m := range []struct {
		tasks int
		goal  string
	}{{50, "28"}, {200, "40"}} {
		if res := bySize[m.tasks]; res != nil {
			fmt.Printf("  berth resident memory with %d tasks running %.1f MiB (VmRSS, max over rounds)   goal <= %s MiB\n", m.tasks, res.rssMiB, m.goal)
		}
	}
	sessions, received, sent := r.cp.Relay.Counts()
	opened, open := r.cp.Telemetry.Sessions()
	fmt.Printf("  over the section's two agent processes: ACS: %d session(s); %d PayloadMessages from localcp, %d to the agents. TCS: %d session(s) opened, %d open\n",
		sessions, received, sent, opened, open)
}

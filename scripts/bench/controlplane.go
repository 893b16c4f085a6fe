package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-agent/berth/agent/controlplane"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/scripts/internal/agentproc"
	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// The cp section's agent runs in local mode with ECS_CLUSTER unset, so its tasks are in ECS's
// default cluster; its task definitions carry the run's label, and only their containers are removed.
const (
	localCluster = "default"
	cpFamily     = "cpbench"
	// cpParallel tasks at once, cpParallelRounds rounds per side: the parallel rows.
	cpParallel       = 20
	cpParallelRounds = 6
	cpDeadline       = 20 * time.Minute
	// cpPoll is how often the parallel rows ask DescribeTasks whether all tasks run: often enough
	// to add at most 1 % to a round of 20, seldom enough not to be the load measured. At 10 ms the
	// polls' signing and answering, on the machine's 2 cores beside the Engine, made the round
	// 1.19x bare Docker where at 50 ms it is 1.08x; the AWS CLI's waiter polls every 6 s.
	cpPoll = 50 * time.Millisecond
)

// controlPlane measures the control plane's overhead with the real agent in local mode: one task at
// a time, RunTask returned until DescribeTasks says RUNNING, against the engine alone on the same
// one-container task in the same run; then cpParallel tasks at once, from the first RunTask call
// until DescribeTasks shows all of them RUNNING, against the bare Engine API at the same
// concurrency; then the state changes per second the reporter delivers to the embedded control
// plane. Any error ends the bench with exit 1 after cleaning up.
func (b *bench) controlPlane(ctx context.Context, rounds int) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, cpDeadline, fmt.Errorf("the cp section took longer than %s", cpDeadline))
	defer cancel()
	if err := b.runCP(ctx, rounds); err != nil {
		fail("cp: %v", err)
	}
	b.stateChangeRate(ctx)
}

// cpRun is one run of the cp section: the agent's embedded control plane, called as the AWS CLI
// does, signed with the keys the agent wrote in its data directory.
type cpRun struct {
	benchRun
	endpoint string
	keys     localauth.Keys
}

func (c *cpRun) call(ctx context.Context, op string, in, out any) error {
	return ecsstandin.Call(ctx, c.endpoint, c.keys, op, in, out)
}

func (b *bench) runCP(ctx context.Context, rounds int) (err error) {
	engineOnly := median(b.berthRoundSequential(ctx, rounds))

	dir, err := os.MkdirTemp("", "berth-bench-cp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "berth")
	if err := agentproc.Build(ctx, bin); err != nil {
		return err
	}
	dataDir := filepath.Join(dir, "data")
	env := localAgentEnv(dir, dataDir, "warn")
	if err := checkMode(ctx, bin, env, "local"); err != nil {
		return err
	}
	c := &cpRun{benchRun: benchRun{dc: b.dc, runID: newRunID(), cluster: localCluster, family: cpFamily, timeline: io.Discard},
		endpoint: "http://" + envValue(env, "ECS_LOCAL_CONTROL_PLANE_ADDR")}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if cerr := c.removeContainers(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	agent, err := startBerth(ctx, bin, dir, env)
	if err != nil {
		return err
	}
	defer func() {
		if serr := agent.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, agent.tail(30))
		}
	}()
	ctx, unwatch := agent.watch(ctx)
	defer unwatch()
	if err := c.waitRegistered(ctx, dataDir); err != nil {
		return err
	}
	def := map[string]any{"family": cpFamily, "containerDefinitions": []map[string]any{{"name": "c", "image": testImage, "memory": 16,
		"command": []string{"sleep"}, "dockerLabels": map[string]string{labelBenchRun: c.runID}}}}
	if err := c.call(ctx, "RegisterTaskDefinition", def, nil); err != nil {
		return err
	}
	var viaCP []time.Duration
	var ran []string
	for range rounds {
		arns, err := c.runTasks(ctx, 1)
		if err != nil {
			return err
		}
		start := time.Now()
		if _, err := c.waitStatus(ctx, arns, "RUNNING", 5*time.Millisecond); err != nil {
			return err
		}
		viaCP = append(viaCP, time.Since(start))
		if err := c.stopTasks(ctx, arns); err != nil {
			return err
		}
		ran = append(ran, arns...)
	}
	// The parallel rows start with every task of the sequential ones stopped and removed.
	if _, err := c.waitStatus(ctx, ran, "STOPPED", 100*time.Millisecond); err != nil {
		return err
	}
	if err := c.removeContainers(ctx); err != nil {
		return err
	}
	cp := median(viaCP)
	fmt.Printf("control plane: berth in local mode (pid %d, ECS_CLUSTER unset), %d one-container tasks, one at a time\n", agent.pid(), rounds)
	fmt.Printf("  engine alone (accepted -> RUNNING)              median %8s\n", engineOnly.Round(time.Millisecond))
	fmt.Printf("  RunTask returned -> DescribeTasks RUNNING       median %8s   (payload over ACS, engine, report back)\n", cp.Round(time.Millisecond))
	fmt.Printf("  control-plane overhead %s (ratio %.2f)\n", (cp - engineOnly).Round(time.Millisecond), float64(cp)/float64(engineOnly))

	var viaAgent, bare []time.Duration
	berthSide := func() error {
		d, err := c.parallelRound(ctx, cpParallel)
		viaAgent = append(viaAgent, d)
		return err
	}
	bareSide := func() error {
		d, err := c.bareRound(ctx, cpParallel)
		bare = append(bare, d)
		return err
	}
	for i := range cpParallelRounds {
		// Alternate which side goes first, so that neither always meets a warmer Engine.
		sides := []func() error{berthSide, bareSide}
		if i%2 == 1 {
			sides = []func() error{bareSide, berthSide}
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return fmt.Errorf("round %d with %d tasks: %w", i+1, cpParallel, err)
			}
		}
	}
	mb, mk := median(viaAgent), median(bare)
	fmt.Printf("control plane, %d tasks at once: RunTask through the agent's embedded control plane (calls of 10), from the first call\n", cpParallel)
	fmt.Printf("  until DescribeTasks (asked every %s) shows all %d RUNNING, vs creating+starting+inspecting %d containers at once through the Engine API;\n", cpPoll, cpParallel, cpParallel)
	fmt.Printf("  %d rounds each, alternating which side goes first\n", cpParallelRounds)
	fmt.Printf("  %-30s median %8s  (min %s, max %s)\n", "bare Docker Engine API", mk.Round(time.Millisecond),
		slices.Min(bare).Round(time.Millisecond), slices.Max(bare).Round(time.Millisecond))
	fmt.Printf("  %-30s median %8s  (min %s, max %s)\n", "berth, embedded control plane", mb.Round(time.Millisecond),
		slices.Min(viaAgent).Round(time.Millisecond), slices.Max(viaAgent).Round(time.Millisecond))
	fmt.Printf("  ratio berth/bare (median) %.3f   goal <= 1.05\n", float64(mb)/float64(mk))
	return nil
}

// waitRegistered waits until the agent wrote its keys and registered with its control plane.
func (c *cpRun) waitRegistered(ctx context.Context, dataDir string) error {
	ctx, cancel := context.WithTimeoutCause(ctx, 30*time.Second, errors.New("30 s"))
	defer cancel()
	for {
		var list struct {
			ContainerInstanceArns []string `json:"containerInstanceArns"`
		}
		keys, err := localauth.Load(localauth.Path(dataDir))
		if err == nil {
			c.keys = keys
			err = c.call(ctx, "ListContainerInstances", map[string]any{"cluster": c.cluster}, &list)
		}
		if err == nil && len(list.ContainerInstanceArns) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent did not register with its control plane: %w (last error: %v)", context.Cause(ctx), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runTasks starts n tasks of cpFamily, at most 10 per RunTask call as in ECS.
func (c *cpRun) runTasks(ctx context.Context, n int) ([]string, error) {
	var arns []string
	for len(arns) < n {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
			Failures []struct {
				Reason string `json:"reason"`
			} `json:"failures"`
		}
		count := min(10, n-len(arns))
		if err := c.call(ctx, "RunTask", map[string]any{"cluster": c.cluster, "taskDefinition": cpFamily, "count": count}, &ran); err != nil {
			return nil, err
		}
		if len(ran.Tasks) != count {
			return nil, fmt.Errorf("RunTask started %d of %d tasks: %+v", len(ran.Tasks), count, ran.Failures)
		}
		for _, t := range ran.Tasks {
			arns = append(arns, t.TaskArn)
		}
	}
	return arns, nil
}

// waitStatus polls DescribeTasks every poll until it shows every task of arns in status, within
// 3 minutes, and returns when it did.
func (c *cpRun) waitStatus(ctx context.Context, arns []string, status string, poll time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, 3*time.Minute, errors.New("3 min"))
	defer cancel()
	for {
		ok := 0
		for batch := range slices.Chunk(arns, 100) { // DescribeTasks takes at most 100 tasks, as in ECS
			var d struct {
				Tasks []struct {
					LastStatus string `json:"lastStatus"`
				} `json:"tasks"`
			}
			if err := c.call(ctx, "DescribeTasks", map[string]any{"cluster": c.cluster, "tasks": batch}, &d); err != nil {
				return time.Time{}, err
			}
			for _, t := range d.Tasks {
				if t.LastStatus == status {
					ok++
				}
			}
		}
		if ok == len(arns) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("DescribeTasks shows %d of %d tasks %s: %w", ok, len(arns), status, context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}

// stopTasks asks the control plane to stop each task; it does not wait.
func (c *cpRun) stopTasks(ctx context.Context, arns []string) error {
	for _, arn := range arns {
		if err := c.call(ctx, "StopTask", map[string]any{"cluster": c.cluster, "task": arn, "reason": "bench round done"}, nil); err != nil {
			return err
		}
	}
	return nil
}

// parallelRound runs n tasks at once through the control plane and returns the time from the first
// RunTask call until DescribeTasks showed all of them RUNNING; then stops them, teardownWave at a
// time, and removes their containers.
func (c *cpRun) parallelRound(ctx context.Context, n int) (time.Duration, error) {
	start := time.Now()
	arns, err := c.runTasks(ctx, n)
	if err != nil {
		return 0, err
	}
	running, err := c.waitStatus(ctx, arns, "RUNNING", cpPoll)
	if err != nil {
		return 0, err
	}
	for wave := range slices.Chunk(arns, teardownWave) {
		if err := c.stopTasks(ctx, wave); err != nil {
			return 0, err
		}
		if _, err := c.waitStatus(ctx, wave, "STOPPED", 100*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return running.Sub(start), c.removeContainers(ctx)
}

// berthRoundSequential is the engine-only time to RUNNING of one task at a time.
func (b *bench) berthRoundSequential(ctx context.Context, rounds int) []time.Duration {
	client := newPrefersCached()
	defer client.Close()
	var out []time.Duration
	for range rounds {
		out = append(out, b.berthRound(ctx, client, 1)...)
	}
	return out
}

// stateChangeRate measures how many task state changes per second the reporter delivers to the
// embedded control plane.
func (b *bench) stateChangeRate(ctx context.Context) {
	const tasks = 200
	dir, err := os.MkdirTemp("", "berth-bench-rate")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	srv, err := ecsstandin.NewControlPlane(filepath.Join(dir, "cp.db"))
	if err != nil {
		fail("%v", err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	endpoint := "http://" + ln.Addr().String()
	client, err := ecsclient.New(ctx, ecsclient.Config{Region: ecsstandin.Region, Endpoint: endpoint,
		Credentials: ecsstandin.Keys.Provider(), Cluster: benchCluster})
	if err != nil {
		fail("%v", err)
	}
	if _, err := client.RegisterContainerInstance(ctx, ecsclient.Registration{CPU: 2048, MemoryMiB: 4096, AgentVersion: "bench", DockerAPIVersion: "1.41"}); err != nil {
		fail("register: %v", err)
	}
	def := map[string]any{"family": "ratebench", "containerDefinitions": []map[string]any{{"name": "c", "image": testImage, "memory": 16}}}
	if err := ecsstandin.Call(ctx, endpoint, ecsstandin.Keys, "RegisterTaskDefinition", def, nil); err != nil {
		fail("%v", err)
	}
	var arns []string
	for len(arns) < tasks {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
		}
		if err := ecsstandin.Call(ctx, endpoint, ecsstandin.Keys, "RunTask", map[string]any{"cluster": benchCluster, "taskDefinition": "ratebench", "count": 10}, &ran); err != nil {
			fail("%v", err)
		}
		for _, t := range ran.Tasks {
			arns = append(arns, t.TaskArn)
		}
	}
	allSent := make(chan struct{})
	reporter := controlplane.NewReporter(client, &countingSentStore{want: tasks, done: allSent}, controlplane.ReporterConfig{}, logger.Nop())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reporter.Run(rctx)
	}()
	start := time.Now()
	for _, status := range []task.TaskStatus{task.TaskRunning, task.TaskStopped} {
		cs := task.ContainerRunning
		if status == task.TaskStopped {
			cs = task.ContainerStopped
		}
		for _, arn := range arns {
			code := 0
			c := &task.Container{Name: "c", KnownStatus: cs, DockerID: "bench"}
			if status == task.TaskStopped {
				c.ExitCode = &code
			}
			reporter.Report(&task.Task{Arn: arn, Family: "ratebench", Revision: 1, KnownStatus: status, DesiredStatus: task.TaskRunning, Containers: []*task.Container{c}})
		}
	}
	select {
	case <-allSent:
	case <-time.After(2 * time.Minute):
		fail("the reporter did not deliver every STOPPED within 2 minutes")
	}
	took := time.Since(start)
	cancel()
	<-done
	fmt.Printf("state changes: %d tasks reported RUNNING then STOPPED; %d submissions (a newer state supersedes an undelivered one) in %s = %.0f per second\n",
		tasks, reporter.Delivered(), took.Round(time.Millisecond), float64(reporter.Delivered())/took.Seconds())
}

// countingSentStore stands in for the agent's state: the rate bench measures delivery, not
// persistence. It closes done once want tasks have their STOPPED recorded as sent.
type countingSentStore struct {
	want    int
	stopped atomic.Int64
	done    chan struct{}
}

func (s *countingSentStore) SaveSent(_ context.Context, r state.SentRecord) error {
	if r.Task == task.TaskStopped && s.stopped.Add(1) == int64(s.want) {
		close(s.done)
	}
	return nil
}

func (s *countingSentStore) DeleteSent(context.Context, string) error { return nil }

func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

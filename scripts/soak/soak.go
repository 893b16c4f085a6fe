package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/scripts/internal/agentproc"
	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// testImage is the test app make images pushes to the local registry (FROM scratch, nothing pulled
// from outside).
const testImage = "127.0.0.1:5000/berth/testapp:latest"

// labelSoakRun marks every container of one soak run (a docker label of its task definition).
const labelSoakRun = "com.berth-agent.soak-run"

// family is the soak's task definition: two essential containers that sleep until stopped.
const family = "berthsoak"

var containerNames = []string{"app", "side"}

// stopReason is the reason of the soak's StopTask calls; the control plane keeps it as the stopped
// reason unless the agent stopped the task first.
const stopReason = "stopped by the soak"

// options are the soak's knobs; see main's flags.
type options struct {
	duration       time.Duration // how long tasks are launched and chaos goes on
	killMin        time.Duration // the agent is SIGKILLed every killMin..killMax
	killMax        time.Duration
	dockerRestarts int           // dockerd restarts, spread evenly over duration
	engineOutages  int           // Engine stops during creates, spread evenly over duration
	outageFor      time.Duration // how long each of those keeps the Engine stopped
	outageBurst    int           // tasks launched at once into each of those
	launchEvery    time.Duration // one RunTask every launchEvery
	running        int           // tasks kept running: beyond this the oldest is stopped
	cutEvery       time.Duration // mean time between control-plane disruptions (0: none)
	memAge         time.Duration // each agent's RSS is read when it has run this long
	settle         time.Duration // the longest wait for the end state
	keep           bool          // keep the work directory (agent logs, state)
	out            io.Writer     // progress lines
}

// soak is one run.
type soak struct {
	opts    options
	dc      *docker.Client
	root    string
	dir     string
	bin     string
	env     []string
	cluster string
	runID   string
	cp      *ecsstandin.StandIn
	ledger  *ledger
	watch   *dockerWatch
	start   time.Time

	mu          sync.Mutex
	cur         *agentProc
	incarnation int
	launched    []string        // task ARNs, in launch order
	stoppedBy   map[string]bool // tasks the soak stopped (StopTask)
	active      []string        // tasks launched and not yet stopped by the soak
	mem         []memSample
	unexpected  []string // agent exits the soak did not cause
	panics      int
	kills       int
	dockerdRuns []time.Duration
	cuts        int
	callErrors  int
	outages     []time.Duration // each Engine outage during creates, from the stop to the Engine answering
	outageTasks map[string]bool // tasks launched into an Engine outage

	dockerMu sync.Mutex // held by a dockerd restart or outage: never two at once
	lastErr  error

	killReq chan struct{}
	steady  chan struct{} // closed when the warm-up is over and the chaos starts
}

// memSample is one agent's VmRSS at age memAge.
type memSample struct {
	incarnation int
	rssMiB      float64
	containers  int // the run's containers running in Docker then
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.out, "%s soak: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run is the whole soak: set-up, chaos, settle, checks, clean-up. The report is valid when err is nil.
func run(ctx context.Context, opts options) (rep *report, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the soak restarts dockerd and must run as root")
	}
	dc, err := docker.NewClientFromEnv()
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if err := dc.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("the Docker Engine must answer (make provision): %w", err)
	}
	if _, err := dc.InspectImage(testImage); err != nil {
		return nil, fmt.Errorf("the test image %s must be in the Docker Engine (make images): %w", testImage, err)
	}
	root, err := repoRoot(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "berth-soak")
	if err != nil {
		return nil, err
	}
	defer func() {
		if opts.keep || err != nil {
			fmt.Fprintf(opts.out, "soak: kept %s (agent log berth.log, each agent's output agent-NN.out, state data/)\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	var id [3]byte
	_, _ = rand.Read(id[:])
	s := &soak{opts: opts, dc: dc, root: root, dir: dir, bin: filepath.Join(dir, "berth"), ledger: newLedger(),
		runID: hex.EncodeToString(id[:]), stoppedBy: map[string]bool{}, outageTasks: map[string]bool{}, killReq: make(chan struct{}), steady: make(chan struct{})}
	s.cluster = "berth-soak-" + s.runID
	s.watch = &dockerWatch{dc: dc, cluster: s.cluster, seen: map[string]*seenContainer{}}
	if err := agentproc.Build(ctx, s.bin); err != nil {
		return nil, err
	}
	s.cp, err = ecsstandin.Start(dir, ecsstandin.Options{Observe: s.ledger.observe})
	if err != nil {
		return nil, fmt.Errorf("stand-in ECS endpoint: %w", err)
	}
	defer s.cp.Close()
	s.env = s.agentEnv()

	// From here on the agent may create containers: remove every one of this run (by its cluster
	// label, so never another's), whatever happens.
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if cerr := s.watch.removeAll(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	return s.run(ctx)
}

// agentEnv is the agent's complete environment in ecs mode: nothing is inherited but PATH and
// DOCKER_HOST.
func (s *soak) agentEnv() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + s.dir,
		"ECS_CLUSTER=" + s.cluster,
		"ECS_BACKEND_HOST=" + s.cp.Endpoint,
		"AWS_CONFIG_FILE=" + filepath.Join(s.dir, "aws-config-none"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(s.dir, "aws-credentials-none"),
		"ECS_ENV_FILE=/dev/null",
		"ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_DATADIR=" + filepath.Join(s.dir, "data"),
		"ECS_LOGFILE=" + filepath.Join(s.dir, "berth.log"),
		"ECS_LOG_ROLLOVER_TYPE=none",
		"ECS_LOGLEVEL=info",
		"ECS_LOCAL_CONTROL_PLANE_ADDR=" + freeLoopback(),
		"ECS_INTROSPECTION_ADDR=" + freeLoopback(),
		"ECS_IMAGE_PULL_BEHAVIOR=prefer-cached",
		"ECS_DISABLE_IMAGE_CLEANUP=true",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1m",
		"ECS_CONTAINER_STOP_TIMEOUT=2s",
	}
	env = append(env, ecsstandin.AgentCredentialsEnv()...)
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env = append(env, "DOCKER_HOST="+h)
	}
	return env
}

func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *soak) run(ctx context.Context) (*report, error) {
	def := map[string]any{"family": family, "containerDefinitions": []map[string]any{}}
	for _, name := range containerNames {
		def["containerDefinitions"] = append(def["containerDefinitions"].([]map[string]any), map[string]any{
			"name": name, "image": testImage, "memory": 8, "essential": true, "command": []string{"sleep"}, "stopTimeout": 2,
			"dockerLabels": map[string]string{labelSoakRun: s.runID}})
	}
	if err := s.cp.Call(ctx, "RegisterTaskDefinition", def, nil); err != nil {
		return nil, err
	}

	// The watcher and the supervisor run until the checks are done; the chaos until duration ends.
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() {
		stopBG()
		bgWG.Wait()
	}()
	bgWG.Add(2)
	go func() { defer bgWG.Done(); s.watch.run(bg) }()
	first, err := s.startAgent()
	if err != nil {
		return nil, err
	}
	go func() { defer bgWG.Done(); s.supervise(bg, first) }()
	// Whatever happens, no agent outlives the run (the normal path has stopped it already).
	defer func() {
		stopBG()
		bgWG.Wait()
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		select {
		case <-cur.exited:
		default:
			_ = cur.stop()
		}
	}()
	if err := s.waitRegistered(ctx); err != nil {
		return nil, err
	}
	if err := s.warmUp(ctx); err != nil {
		return nil, err
	}
	s.logf("cluster %s, agent %d (pid %d) registered and runs %d tasks; chaos for %s: a task every %s (the oldest beyond %d stopped), SIGKILL every %s-%s, %d dockerd restart(s), control-plane cuts every ~%s",
		s.cluster, first.n, first.pid(), s.opts.running, s.opts.duration, s.opts.launchEvery, s.opts.running, s.opts.killMin, s.opts.killMax, s.opts.dockerRestarts, s.opts.cutEvery)

	s.start = time.Now()
	close(s.steady)
	end := s.start.Add(s.opts.duration)
	chaos, stopChaos := context.WithDeadline(ctx, end)
	defer stopChaos()
	var wg sync.WaitGroup
	for _, f := range []func(context.Context, time.Time){s.launch, s.killer, s.dockerd, s.engineOutages, s.disrupt} {
		wg.Add(1)
		go func() { defer wg.Done(); f(chaos, end) }()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	s.mu.Lock()
	s.logf("chaos over: %d tasks launched, %d stopped by the soak, %d kills, %d dockerd restarts, %d cuts; settling (at most %s)",
		len(s.launched), len(s.stoppedBy), s.kills, len(s.dockerdRuns), s.cuts, s.opts.settle)
	s.mu.Unlock()

	settleStart := time.Now()
	var rep *report
	err = poll(ctx, s.opts.settle, time.Second, "settle", func() bool {
		r, err := s.check(ctx)
		if err != nil {
			s.callError(fmt.Errorf("check: %w", err))
			return false
		}
		rep = r
		return r.settled()
	})
	if rep == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, fmt.Errorf("no check succeeded: %v (%w)", s.lastErr, err)
	}
	rep.settleTook = time.Since(settleStart)
	rep.settledInTime = err == nil
	stopBG()
	bgWG.Wait()
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if rss, err := agentproc.ResidentMiB(cur.pid()); err == nil {
		rep.rssEnd = rss
	}
	if err := cur.stop(); err != nil {
		rep.notes = append(rep.notes, err.Error())
	}
	s.fill(rep)
	return rep, nil
}

// waitRegistered waits until the agent registered with the stand-in and holds an ACS session open.
func (s *soak) waitRegistered(ctx context.Context) error {
	err := poll(ctx, time.Minute, 50*time.Millisecond, "the agent registers", func() bool {
		var list struct {
			ContainerInstanceArns []string `json:"containerInstanceArns"`
		}
		err := s.cp.Call(ctx, "ListContainerInstances", map[string]any{"cluster": s.cluster}, &list)
		return err == nil && len(list.ContainerInstanceArns) > 0
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return s.cp.Relay.WaitSession(wctx)
}

// warmUp launches the tasks the soak keeps running and waits until the control plane has them
// RUNNING, so the chaos starts (and the first agent is measured) under the steady load.
func (s *soak) warmUp(ctx context.Context) error {
	var ran struct {
		Tasks []struct {
			TaskArn string `json:"taskArn"`
		} `json:"tasks"`
	}
	if err := s.cp.Call(ctx, "RunTask", map[string]any{"cluster": s.cluster, "taskDefinition": family, "count": s.opts.running}, &ran); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var ids []string
	s.mu.Lock()
	for _, t := range ran.Tasks {
		s.launched = append(s.launched, t.TaskArn)
		s.active = append(s.active, t.TaskArn)
		ids = append(ids, ecsstandin.TaskID(t.TaskArn))
	}
	s.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := s.cp.States.Wait(wctx, ids, "RUNNING"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// startAgent starts the next incarnation and schedules its memory sample.
func (s *soak) startAgent() (*agentProc, error) {
	s.mu.Lock()
	s.incarnation++
	n := s.incarnation
	s.mu.Unlock()
	p, err := startAgent(s.bin, s.dir, s.env, n)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cur = p
	s.mu.Unlock()
	// Samples are comparable: each agent is measured memAge into its life under the steady load, the
	// first one memAge after the warm-up.
	go func() {
		select {
		case <-p.exited:
			return
		case <-s.steady:
		}
		select {
		case <-p.exited:
		case <-time.After(s.opts.memAge - min(s.opts.memAge, time.Since(p.started))):
			rss, err := agentproc.ResidentMiB(p.pid())
			if err == nil {
				s.mu.Lock()
				s.mem = append(s.mem, memSample{incarnation: p.n, rssMiB: rss, containers: s.watch.runningCount()})
				s.mu.Unlock()
			}
		}
	}()
	return p, nil
}

// supervise owns the agent process: it kills it on request and starts the next one, and restarts
// one that exited by itself (noting it) after a second. It returns when ctx ends, the agent running.
func (s *soak) supervise(ctx context.Context, p *agentProc) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.killReq:
			p.kill()
			s.mu.Lock()
			s.kills++
			s.mu.Unlock()
		case <-p.exited:
			if p.unexpected() {
				panicked := p.panicked()
				s.mu.Lock()
				s.unexpected = append(s.unexpected, fmt.Sprintf("agent %d exited by itself (%v) after %s:\n%s", p.n, p.waitErr, time.Since(p.started).Round(time.Second), p.tail(15)))
				if panicked {
					s.panics++
				}
				s.mu.Unlock()
				s.logf("agent %d exited by itself: %v (see %s)", p.n, p.waitErr, p.out)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		for {
			next, err := s.startAgent()
			if err == nil {
				p = next
				break
			}
			s.logf("%v; retrying", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(mrand.Int64N(int64(hi-lo)))
}

// launch runs one task every launchEvery and stops the oldest the soak runs beyond opts.running.
func (s *soak) launch(ctx context.Context, _ time.Time) {
	for sleep(ctx, s.opts.launchEvery) {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
		}
		if err := s.cp.Call(ctx, "RunTask", map[string]any{"cluster": s.cluster, "taskDefinition": family}, &ran); err != nil || len(ran.Tasks) != 1 {
			s.callError(fmt.Errorf("RunTask: %v (%d tasks)", err, len(ran.Tasks)))
			continue
		}
		s.mu.Lock()
		s.launched = append(s.launched, ran.Tasks[0].TaskArn)
		s.active = append(s.active, ran.Tasks[0].TaskArn)
		var victim string
		if len(s.active) > s.opts.running {
			victim, s.active = s.active[0], s.active[1:]
			s.stoppedBy[victim] = true
		}
		s.mu.Unlock()
		if victim != "" {
			if err := s.cp.Call(ctx, "StopTask", map[string]any{"cluster": s.cluster, "task": victim, "reason": stopReason}, nil); err != nil {
				s.callError(fmt.Errorf("StopTask: %w", err))
			}
		}
	}
}

func (s *soak) callError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callErrors++
	s.lastErr = err
}

// killer asks for a SIGKILL every killMin..killMax, but not so late that the last agent could not
// be measured (memAge) before the chaos ends.
func (s *soak) killer(ctx context.Context, end time.Time) {
	for {
		d := between(s.opts.killMin, s.opts.killMax)
		if time.Now().Add(d + s.opts.memAge + time.Second).After(end) {
			return
		}
		if !sleep(ctx, d) {
			return
		}
		select {
		case s.killReq <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
}

// dockerd restarts the Docker Engine opts.dockerRestarts times, spread evenly over the chaos.
func (s *soak) dockerd(ctx context.Context, end time.Time) {
	n := s.opts.dockerRestarts
	for i := 1; i <= n; i++ {
		at := s.start.Add(time.Duration(i) * s.opts.duration / time.Duration(n+1))
		if !sleep(ctx, time.Until(at)) {
			return
		}
		s.logf("restarting dockerd (%d of %d)", i, n)
		began := time.Now()
		// Not bounded by the chaos: a restart under way is seen through.
		s.dockerMu.Lock()
		err := restartDocker(context.WithoutCancel(ctx), s.dc, s.root)
		s.dockerMu.Unlock()
		if err != nil {
			s.callError(fmt.Errorf("restart dockerd: %w", err))
			s.logf("restarting dockerd failed: %v", err)
			return
		}
		s.mu.Lock()
		s.dockerdRuns = append(s.dockerdRuns, time.Since(began))
		s.mu.Unlock()
		s.logf("dockerd answers again after %s", time.Since(began).Round(100*time.Millisecond))
	}
}

// engineOutages stops the Docker Engine opts.engineOutages times while the agent creates containers,
// spread evenly over the chaos between the dockerd restarts: each time it launches opts.outageBurst
// tasks at once, stops dockerd as soon as Docker has made the first of their containers (the others'
// creates and starts under way or about to be), keeps it stopped for opts.outageFor and starts it
// again. Those tasks are checked apart (see check): none may fail by the outage, shorter than the
// agent's create and start timeouts, nor leave an orphan or a duplicate.
func (s *soak) engineOutages(ctx context.Context, _ time.Time) {
	n := s.opts.engineOutages
	for i := 1; i <= n; i++ {
		at := s.start.Add(time.Duration(2*i-1) * s.opts.duration / time.Duration(2*(n+1)))
		if !sleep(ctx, time.Until(at)) {
			return
		}
		if err := s.engineOutage(ctx, i, n); err != nil {
			s.callError(fmt.Errorf("engine outage: %w", err))
			s.logf("engine outage %d of %d: %v", i, n, err)
			return
		}
	}
}

// engineOutage is one of engineOutages.
func (s *soak) engineOutage(ctx context.Context, i, n int) error {
	s.dockerMu.Lock()
	defer s.dockerMu.Unlock()
	var ran struct {
		Tasks []struct {
			TaskArn string `json:"taskArn"`
		} `json:"tasks"`
	}
	if err := s.cp.Call(ctx, "RunTask", map[string]any{"cluster": s.cluster, "taskDefinition": family, "count": s.opts.outageBurst}, &ran); err != nil {
		return fmt.Errorf("RunTask: %w", err)
	}
	var arns []string
	s.mu.Lock()
	for _, t := range ran.Tasks {
		arns = append(arns, t.TaskArn)
		s.launched = append(s.launched, t.TaskArn)
		s.outageTasks[t.TaskArn] = true
	}
	s.mu.Unlock()
	// Not bounded by the chaos from here on: an outage under way is seen through.
	ctx = context.WithoutCancel(ctx)
	err := poll(ctx, 30*time.Second, 5*time.Millisecond, "Docker makes a container of the burst", func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, arn := range arns {
			list, err := s.dc.ListContainers(docker.ListContainersOptions{All: true, Context: lctx,
				Filters: map[string][]string{"label": {labelTaskARN + "=" + arn}}})
			if err == nil && len(list) > 0 {
				return true
			}
		}
		return false
	})
	if err != nil {
		return err
	}
	s.logf("stopping dockerd during the creates of %d tasks (outage %d of %d, for %s)", len(arns), i, n, s.opts.outageFor)
	began := time.Now()
	if err := stopDocker(ctx); err != nil {
		return err
	}
	sleep(ctx, s.opts.outageFor)
	if err := startDocker(ctx, s.dc, s.root); err != nil {
		return err
	}
	took := time.Since(began)
	s.mu.Lock()
	s.outages = append(s.outages, took)
	s.mu.Unlock()
	s.logf("dockerd answers again after an outage of %s", took.Round(100*time.Millisecond))
	return nil
}

// disrupt cuts the agent's control-plane connections for 1-4 s about every cutEvery.
func (s *soak) disrupt(ctx context.Context, _ time.Time) {
	if s.opts.cutEvery <= 0 {
		return
	}
	for sleep(ctx, between(s.opts.cutEvery/2, s.opts.cutEvery*3/2)) {
		s.cp.Disrupt(between(time.Second, 4*time.Second))
		s.mu.Lock()
		s.cuts++
		s.mu.Unlock()
	}
}

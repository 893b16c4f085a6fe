// Command bench measures Berth against the bare Docker Engine in one run and prints ratios: absolute
// timings on a shared machine mean little, ratios taken side by side do. `make bench` runs it after
// provisioning. Each section can be run alone with -only. Every row that has a goal prints it beside
// the figure; a missed goal does not fail the bench.
//
//	pull    Berth's pull path vs a bare Docker Engine pull of the same multi-layer image, cache cleared
//	        before every pull, alternating which goes first; then 100 pulls through a proxy that fails
//	        30 % of registry requests (503 or connection reset): success rate and mean attempts.
//	engine  time from a task accepted to all its containers RUNNING, Berth's engine vs the same
//	        containers created, started and inspected through the bare Engine API at the same
//	        concurrency: p50 and p99 for 1 task at a time and for 50 at once, and the ratios.
//	memory  resident memory of the berth binary idle and with 100 running tasks.
//	awsvpc  time to RUNNING of an awsvpc task vs the same task in bridge mode, and CNI ADD's share.
//	cp      the berth binary in local mode (ECS_CLUSTER unset), driven through its embedded control plane
//	        with the keys it writes in its data dir: RunTask returned -> DescribeTasks RUNNING, one task at
//	        a time, vs the engine alone; then 20 tasks at once, from the first RunTask call until
//	        DescribeTasks shows all 20 RUNNING, vs creating, starting and inspecting 20 containers at once
//	        through the Engine API, alternating, medians and ratio (goal <= 1.05); then the state changes
//	        per second delivered to the embedded control plane.
//	ecs     the berth binary in ecs mode (ECS_CLUSTER, AWS_DEFAULT_REGION, ECS_BACKEND_HOST, the stand-in's test
//	        credentials, no IMDS) against a stand-in ECS endpoint on loopback: agent/localcp served in
//	        this process behind a front that records each accepted SubmitTaskStateChange, relays ACS,
//	        merging the payloads of the RunTask calls (at most 10 tasks each) into one PayloadMessage,
//	        and relays TCS, counting the metrics the agent publishes. Idle and latency run on a berth
//	        process of their own, before the launch rounds' fresh one, so that neither part's tasks
//	        weigh on the other's figures. Tasks are stopped, and containers removed, 10 at a time:
//	        Docker 20.10's libnetwork can deadlock when many endpoints are torn down at once.
//	        Idle (-ecs-steady, -idle-window): with 50 tasks running and the agent connected to ACS and
//	        TCS, the agent's CPU over a 30 s window (goal <= 3 ms/s), and dockerd's over that window and
//	        over the next one while the bench holds one Docker stats stream open per container, as the
//	        ECS agent does (goal: ratio <= 0.25); a window without a metrics publish is called out.
//	        Latency: with 200 tasks running, p50 and p99 of /v1/tasks, of the task metadata endpoint's
//	        /task and /task/stats asked from inside the tasks' containers' network namespaces, and of
//	        the whole `berth ps` command (goal p99 <= 20 ms each).
//	        Launch: for N = 1, 20, 50, 200 (-ecs-rounds): time from the first RunTask call until
//	        RUNNING was accepted for all N, vs creating, starting and inspecting the same N containers
//	        at once through the Engine API; alternating, medians and ratios (goals: N=1 <= 1.05, the
//	        others <= 1.00). Also the agent's CPU per task (utime+stime from /proc; goal <= 4 ms), that
//	        at N=200 over that at N=20 (goal <= 1.2), and its VmRSS with 50 and with 200 tasks running
//	        (goals <= 28 MiB, <= 40 MiB). The agent is driven only as a process and over the wire; its
//	        containers and the bare ones carry a per-run label, and only those are removed. -ecs-keep
//	        keeps the agent's log and the bench's timeline; -ecs-datadir-tmpfs (diagnostic) puts the
//	        agent's state on tmpfs to show what its fsyncs cost.
//	endpoint the task endpoint: the agent's CPU while 50 containers each GET their /v4/<token>/task/stats
//	        once a second, against the same agent idle (goal: < 5 % of one core more), the latency of
//	        those answers and of /v4/<token>/task, next to Docker's own one-shot stats.
//
// The cp, ecs and endpoint sections run the agent, whose task endpoint listens on 127.0.0.1:51679
// (where the containers' NAT points): no other agent may run on the host meanwhile.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/dockerclient/faultproxy"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
)

func main() {
	only := flag.String("only", "", "run one section: pull, engine, memory, awsvpc, cp, ecs or endpoint")
	rounds := flag.Int("pull-rounds", 7, "measured pulls per side")
	faultPulls := flag.Int("fault-pulls", 100, "pulls through the faulty proxy")
	ecsRounds := flag.String("ecs-rounds", "1:15,20:8,50:5,200:2", "ecs section: tasks:rounds per size, comma-separated")
	ecsSteady := flag.String("ecs-steady", "50,200", "ecs section: IDLE,LOADED: tasks running in the idle windows, then during the latency samples")
	idleWindow := flag.Duration("idle-window", 30*time.Second, "ecs section: length of each idle window (the agent alone, then the bench's Docker stats streams)")
	ecsKeep := flag.Bool("ecs-keep", false, "ecs section: keep the temp dir (agent log, state, bench timeline) and print its path")
	ecsLogLevel := flag.String("ecs-loglevel", "info", "ecs section: the agent's ECS_LOGLEVEL")
	ecsDataTmpfs := flag.Bool("ecs-datadir-tmpfs", false, "ecs section, diagnostic: the agent's ECS_DATADIR on tmpfs (/dev/shm), to see what its fsyncs cost")
	endpointWindow := flag.Duration("endpoint-window", 30*time.Second, "endpoint section: how long CPU is measured, idle and polled")
	flag.Parse()
	if !slices.Contains([]string{"", "pull", "engine", "memory", "awsvpc", "cp", "ecs", "endpoint"}, *only) {
		fail("-only %q: not a section (pull, engine, memory, awsvpc, cp, ecs, endpoint)", *only)
	}
	sizes, err := parseECSRounds(*ecsRounds)
	if err != nil {
		fail("%v", err)
	}
	steady, err := parseSteady(*ecsSteady)
	if err != nil {
		fail("%v", err)
	}
	if *idleWindow <= 0 {
		fail("-idle-window %s: must be positive", *idleWindow)
	}
	ctx := context.Background()

	dc, err := docker.NewClientFromEnv()
	if err != nil {
		fail("docker client: %v", err)
	}
	if err := dc.Ping(); err != nil {
		fail("the Docker Engine must answer (run make provision): %v", err)
	}
	b := &bench{dc: dc}
	if *only == "" || *only == "pull" {
		b.pullRatio(ctx, *rounds)
		b.faultyPulls(ctx, *faultPulls)
	}
	if *only == "" || *only == "engine" {
		b.engineStart(ctx)
	}
	if *only == "" || *only == "memory" {
		b.agentMemory(ctx)
	}
	if *only == "" || *only == "awsvpc" {
		b.awsvpcStart(ctx, 10)
	}
	if *only == "" || *only == "cp" {
		b.controlPlane(ctx, 10)
	}
	if *only == "" || *only == "ecs" {
		b.ecsMode(ctx, ecsOptions{sizes: sizes, steady: steady, window: *idleWindow, keep: *ecsKeep, logLevel: *ecsLogLevel, dataTmpfs: *ecsDataTmpfs})
	}
	if *only == "" || *only == "endpoint" {
		b.taskEndpoint(ctx, *endpointWindow)
	}
}

type bench struct {
	dc *docker.Client
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func newPuller() *dockerclient.Client {
	c, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST")})
	if err != nil {
		fail("berth docker client: %v", err)
	}
	return c
}

// purge removes an image under every name so that the next pull downloads every layer again.
func (b *bench) purge(img testregistry.Image, refs ...string) {
	for _, ref := range append(refs, img.Ref, img.ID) {
		err := b.dc.RemoveImageExtended(ref, docker.RemoveImageOptions{Force: true})
		if err != nil && err != docker.ErrNoSuchImage {
			fail("remove %s: %v", ref, err)
		}
	}
}

func (b *bench) push(ctx context.Context, repo string, layers, size int) testregistry.Image {
	img, err := testregistry.BuildAndPush(ctx, b.dc, testregistry.Addr, repo, fmt.Sprintf("bench%d", time.Now().UnixNano()), layers, size)
	if err != nil {
		fail("%v", err)
	}
	b.purge(img)
	return img
}

// pullRatio times Berth's pull path and a bare Engine pull of the same image, alternating.
func (b *bench) pullRatio(ctx context.Context, rounds int) {
	const layers, size = 6, 8 << 20
	img := b.push(ctx, "berth-bench-pull", layers, size)
	defer b.purge(img)
	berth := newPuller()
	defer berth.Close()
	repo, tag, _ := strings.Cut(img.Ref[len(testregistry.Addr)+1:], ":")
	repo = testregistry.Addr + "/" + repo

	bare := func() error {
		return b.dc.PullImage(docker.PullImageOptions{Context: ctx, Repository: repo, Tag: tag, OutputStream: io.Discard}, docker.AuthConfiguration{})
	}
	viaBerth := func() error {
		_, err := berth.PullImage(ctx, img.Ref, nil)
		return err
	}
	var tBerth, tBare []time.Duration
	measure := func(pull func() error, into *[]time.Duration) {
		b.purge(img)
		start := time.Now()
		if err := pull(); err != nil {
			fail("pull %s: %v", img.Ref, err)
		}
		*into = append(*into, time.Since(start))
	}
	measure(bare, new([]time.Duration)) // warm-up: registry page cache, connections
	for i := range rounds {
		if i%2 == 0 {
			measure(viaBerth, &tBerth)
			measure(bare, &tBare)
		} else {
			measure(bare, &tBare)
			measure(viaBerth, &tBerth)
		}
	}
	mb, mk := median(tBerth), median(tBare)
	fmt.Printf("pull: %d layers, %.1f MiB compressed, %d rounds, cache cleared before every pull\n", layers, float64(img.Bytes)/(1<<20), rounds)
	fmt.Printf("  bare Docker Engine pull  median %8s  (min %s, max %s)\n", mk.Round(time.Millisecond), slices.Min(tBare).Round(time.Millisecond), slices.Max(tBare).Round(time.Millisecond))
	fmt.Printf("  Berth pull path          median %8s  (min %s, max %s)\n", mb.Round(time.Millisecond), slices.Min(tBerth).Round(time.Millisecond), slices.Max(tBerth).Round(time.Millisecond))
	fmt.Printf("  ratio Berth/bare (median) %.3f   goal <= 1.05\n", float64(mb)/float64(mk))
}

// faultyPulls runs n pulls through a proxy failing 30 % of registry requests, in 4 lanes of distinct
// images (the Puller shares concurrent pulls of one image, so lanes use different ones).
func (b *bench) faultyPulls(ctx context.Context, n int) {
	const lanes = 4
	p, err := faultproxy.Start(faultproxy.Config{Target: "http://" + testregistry.Addr, Seed: 30,
		Rules: []faultproxy.Rule{{Probability: 0.3, Faults: []faultproxy.Fault{
			faultproxy.Status(503), faultproxy.Reset(0), faultproxy.Reset(32 << 10)}}}})
	if err != nil {
		fail("fault proxy: %v", err)
	}
	defer p.Close()
	berth := newPuller()
	defer berth.Close()

	var (
		mu        sync.Mutex
		ok        int
		attempts  int
		failures  []string
		wg        sync.WaitGroup
		startedAt = time.Now()
	)
	for lane := range lanes {
		img := b.push(ctx, fmt.Sprintf("berth-bench-faulty-%d", lane), 2, 512<<10)
		ref := p.Addr() + img.Ref[len(testregistry.Addr):]
		count := n / lanes
		if lane < n%lanes {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer b.purge(img, ref)
			for range count {
				b.purge(img, ref)
				res, err := berth.PullImage(ctx, ref, nil)
				mu.Lock()
				attempts += len(res.Attempts)
				if err == nil {
					ok++
				} else {
					failures = append(failures, err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := ok + len(failures)
	fmt.Printf("faulty registry: %d pulls, 30 %% of %d registry requests failed (503 or reset; %d faults injected), %s\n",
		total, len(p.Requests()), p.Faulted(), time.Since(startedAt).Round(time.Second))
	fmt.Printf("  success rate %.1f %% (%d/%d)   goal 100 %%\n", 100*float64(ok)/float64(total), ok, total)
	fmt.Printf("  mean attempts per pull %.2f\n", float64(attempts)/float64(total))
	for i, f := range failures {
		if i == 5 {
			fmt.Printf("  … %d more failures\n", len(failures)-5)
			break
		}
		fmt.Printf("  failure: %s\n", f)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// testImage is pushed to the local registry by make images.
const testImage = "127.0.0.1:5000/berth/testapp:latest"

const benchCluster = "berth-bench"

// engineStart compares Berth's time to RUNNING with the bare Engine API's, at 1 and at 50 tasks at
// once. The image is local and the engine uses prefer-cached, so both sides do the same Docker work:
// create, start, inspect.
func (b *bench) engineStart(ctx context.Context) {
	client := newPrefersCached()
	defer client.Close()
	if _, err := client.PullImage(ctx, testImage, nil); err != nil {
		fail("the test image must be in the local registry (make images): %v", err)
	}
	fmt.Println("engine: time from task accepted to all containers RUNNING; one container per task (testapp sleep)")
	for _, c := range []struct{ concurrency, rounds int }{{1, 20}, {50, 2}} {
		var berth, bare []time.Duration
		for r := range c.rounds {
			// Alternate which side goes first, so neither always meets a warmer Engine.
			if r%2 == 0 {
				berth = append(berth, b.berthRound(ctx, client, c.concurrency)...)
				bare = append(bare, b.bareRound(ctx, c.concurrency)...)
			} else {
				bare = append(bare, b.bareRound(ctx, c.concurrency)...)
				berth = append(berth, b.berthRound(ctx, client, c.concurrency)...)
			}
		}
		bp50, bp99 := percentile(berth, 50), percentile(berth, 99)
		kp50, kp99 := percentile(bare, 50), percentile(bare, 99)
		fmt.Printf("  %2d task(s) at once, %d samples each\n", c.concurrency, len(berth))
		fmt.Printf("    bare Engine API  p50 %8s  p99 %8s\n", kp50.Round(time.Millisecond), kp99.Round(time.Millisecond))
		fmt.Printf("    Berth engine     p50 %8s  p99 %8s\n", bp50.Round(time.Millisecond), bp99.Round(time.Millisecond))
		fmt.Printf("    ratio Berth/bare p50 %.3f    p99 %.3f   goal <= 1.10\n", float64(bp50)/float64(kp50), float64(bp99)/float64(kp99))
	}
}

// newPrefersCached is a Docker client whose pulls use the local image, as both sides of a comparison do.
func newPrefersCached() *dockerclient.Client {
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	if err != nil {
		fail("docker client: %v", err)
	}
	return client
}

// berthRound adds n tasks at once to a fresh engine and returns each one's time to RUNNING.
func (b *bench) berthRound(ctx context.Context, client *dockerclient.Client, n int) []time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	eng := engine.New(engine.Config{Cluster: benchCluster, StopTimeout: 5 * time.Second, StartTimeout: time.Minute,
		CleanupWait: time.Hour, Resources: engine.Resources{CPU: 1 << 20, MemoryMiB: 1 << 20}},
		client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	var (
		mu      sync.Mutex
		added   = map[string]time.Time{}
		elapsed []time.Duration
		done    = make(chan struct{})
	)
	eng.Subscribe(engine.ChangeFunc(func(t *task.Task) {
		mu.Lock()
		defer mu.Unlock()
		start, ok := added[t.Arn]
		if !ok || t.KnownStatus != task.TaskRunning {
			return
		}
		delete(added, t.Arn)
		elapsed = append(elapsed, time.Since(start))
		if len(elapsed) == n {
			close(done)
		}
	}))
	if err := eng.Start(ctx); err != nil {
		fail("engine: %v", err)
	}
	def, err := taskdef.Parse([]byte(fmt.Sprintf(`{"family": "bench", "containerDefinitions": [{"name": "c", "image": %q, "memory": 16, "command": ["sleep"]}]}`, testImage)))
	if err != nil {
		fail("bench task definition: %v", err)
	}
	tasks := make([]*task.Task, n)
	for i := range tasks {
		tasks[i] = def.NewTask(fmt.Sprintf("arn:aws:ecs:local:000000000000:task/%s/%d-%d", benchCluster, time.Now().UnixNano(), i))
		tasks[i].Revision = 1
	}
	mu.Lock()
	for _, t := range tasks {
		added[t.Arn] = time.Now()
	}
	mu.Unlock()
	for _, t := range tasks {
		if err := eng.AddTask(ctx, t); err != nil {
			fail("add task: %v", err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		fail("berth: not every task reached RUNNING within 5 minutes")
	}
	cancel()
	eng.Wait()
	b.removeBenchContainers()
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(elapsed)
}

// bareRound creates, starts and inspects n containers at once through the Engine API.
func (b *bench) bareRound(ctx context.Context, n int) []time.Duration {
	out := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			c, err := b.dc.CreateContainer(docker.CreateContainerOptions{Context: ctx,
				Name:       fmt.Sprintf("bench-bare-%d-%d", time.Now().UnixNano(), i),
				Config:     &docker.Config{Image: testImage, Cmd: []string{"sleep"}, Labels: map[string]string{engine.LabelCluster: benchCluster}},
				HostConfig: &docker.HostConfig{Memory: 16 << 20, NetworkMode: "bridge"}})
			if err != nil {
				fail("bare create: %v", err)
			}
			if err := b.dc.StartContainerWithContext(c.ID, nil, ctx); err != nil {
				fail("bare start: %v", err)
			}
			if _, err := b.dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: c.ID, Context: ctx}); err != nil {
				fail("bare inspect: %v", err)
			}
			out[i] = time.Since(start)
		}()
	}
	wg.Wait()
	b.removeBenchContainers()
	return out
}

// removeBenchContainers removes every container either side created.
func (b *bench) removeBenchContainers() {
	list, err := b.dc.ListContainers(docker.ListContainersOptions{All: true,
		Filters: map[string][]string{"label": {engine.LabelCluster + "=" + benchCluster}}})
	if err != nil {
		fail("list bench containers: %v", err)
	}
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.dc.RemoveContainer(docker.RemoveContainerOptions{ID: c.ID, Force: true})
		}()
	}
	wg.Wait()
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

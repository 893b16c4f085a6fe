package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// timedNetwork measures CNI ADD.
type timedNetwork struct {
	next  engine.Network
	mu    sync.Mutex
	setup []time.Duration
}

func (n *timedNetwork) Setup(ctx context.Context, tn ecscni.TaskNetwork) (ecscni.Result, error) {
	start := time.Now()
	res, err := n.next.Setup(ctx, tn)
	n.mu.Lock()
	n.setup = append(n.setup, time.Since(start))
	n.mu.Unlock()
	return res, err
}

func (n *timedNetwork) Teardown(ctx context.Context, tn ecscni.TaskNetwork) error {
	return n.next.Teardown(ctx, tn)
}

// awsvpcStart compares the time to RUNNING of a single-container awsvpc task (local mode: pause
// container, CNI ADD of both network lists, then the container in the namespace) with the same task
// in bridge mode, one task at a time, alternating.
func (b *bench) awsvpcStart(ctx context.Context, rounds int) {
	plugins := os.Getenv("BERTH_CNI_PLUGINS")
	if plugins == "" {
		fail("set BERTH_CNI_PLUGINS to the CNI plugins directory (make bench does)")
	}
	stateDir, err := os.MkdirTemp("", "berth-bench-cni")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(stateDir)
	cni, err := ecscni.New(ecscni.Config{PluginDirs: []string{plugins}, StateDir: filepath.Join(stateDir, "cni")}, logger.Nop())
	if err != nil {
		fail("ecscni: %v", err)
	}
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	if err != nil {
		fail("docker client: %v", err)
	}
	defer client.Close()
	if _, err := client.InspectImage(ctx, "berth/pause:latest"); err != nil {
		fail("the pause image must be built (make images): %v", err)
	}
	subnet, _ := cnitypes.ParseCIDR(ecscni.DefaultLocalSubnet)
	network := &timedNetwork{next: cni}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eng := engine.New(engine.Config{Cluster: benchCluster, StopTimeout: 2 * time.Second, StartTimeout: time.Minute,
		CleanupWait: time.Hour, Resources: engine.Resources{CPU: 1 << 20, MemoryMiB: 1 << 20},
		AWSVPC: engine.AWSVPCConfig{Network: network, PauseImage: "berth/pause:latest", LocalSubnet: (*cnitypes.IPNet)(subnet)}},
		client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	running := make(chan string, 1)
	eng.Subscribe(engine.ChangeFunc(func(t *task.Task) {
		if t.KnownStatus == task.TaskRunning {
			select {
			case running <- t.Arn:
			default:
			}
		}
	}))
	if err := eng.Start(ctx); err != nil {
		fail("engine: %v", err)
	}
	defer func() {
		for _, t := range eng.Tasks() {
			_ = eng.StopTask(context.Background(), t.Arn, "bench done")
		}
		waitAllStopped(eng)
		cancel()
		eng.Wait()
		b.removeBenchContainers()
	}()
	one := func(mode string) time.Duration {
		def, err := taskdef.Parse([]byte(fmt.Sprintf(`{"family": "vpcbench", "networkMode": %q, "containerDefinitions": [{"name": "c", "image": %q, "memory": 16, "command": ["sleep"]}]}`, mode, testImage)))
		if err != nil {
			fail("%v", err)
		}
		t := def.NewTask(fmt.Sprintf("arn:aws:ecs:local:000000000000:task/%s/%s%d", benchCluster, mode, time.Now().UnixNano()))
		t.Revision = 1
		start := time.Now()
		if err := eng.AddTask(ctx, t); err != nil {
			fail("%v", err)
		}
		for arn := range running {
			if arn == t.Arn {
				break
			}
		}
		took := time.Since(start)
		_ = eng.StopTask(context.Background(), t.Arn, "measured")
		return took
	}
	var vpc, bridge []time.Duration
	for i := range rounds {
		if i%2 == 0 {
			vpc = append(vpc, one("awsvpc"))
			bridge = append(bridge, one("bridge"))
		} else {
			bridge = append(bridge, one("bridge"))
			vpc = append(vpc, one("awsvpc"))
		}
	}
	network.mu.Lock()
	add := median(network.setup)
	network.mu.Unlock()
	mv, mb := median(vpc), median(bridge)
	fmt.Printf("awsvpc: time to RUNNING of a one-container task, %d rounds each, local mode (no ENI)\n", rounds)
	fmt.Printf("  bridge mode  median %8s\n", mb.Round(time.Millisecond))
	fmt.Printf("  awsvpc mode  median %8s   (pause container + CNI ADD + the container)\n", mv.Round(time.Millisecond))
	fmt.Printf("  ratio awsvpc/bridge %.2f;  CNI ADD median %s = %.0f %% of the awsvpc time\n",
		float64(mv)/float64(mb), add.Round(time.Millisecond), 100*float64(add)/float64(mv))
}

// waitAllStopped waits, bounded, until every task of the engine has stopped.
func waitAllStopped(eng *engine.Engine) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		all := true
		for _, t := range eng.Tasks() {
			all = all && t.KnownStatus == task.TaskStopped
		}
		if all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/scripts/internal/agentproc"
)

// endpointContainers is how many containers poll the task endpoint at once.
const endpointContainers = 50

// taskEndpoint measures the task endpoint: the agent's CPU while 50 containers each ask for their
// task's stats once a second, against the same agent idle in the same run, and the latency of
// /task and /task/stats, next to the same 50 containers' stats read straight from the Docker Engine.
func (b *bench) taskEndpoint(ctx context.Context, window time.Duration) {
	dir, err := os.MkdirTemp("", "berth-bench-endpoint")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "berth")
	if err := agentproc.Build(context.Background(), bin); err != nil {
		fail("%v", err)
	}
	tasksDir := filepath.Join(dir, "tasks.d")
	if err := os.Mkdir(tasksDir, 0o755); err != nil {
		fail("%v", err)
	}
	intro, cp := freeLoopback(), freeLoopback()
	agent := exec.CommandContext(ctx, bin, "agent")
	agent.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
		"ECS_INTROSPECTION_ADDR="+intro, "ECS_LOCAL_CONTROL_PLANE_ADDR="+cp, "ECS_CLUSTER="+benchCluster, "ECS_LOCAL_CONTROL_PLANE=true", "ECS_STATIC_TASKS_DIR="+tasksDir,
		"ECS_DATADIR="+filepath.Join(dir, "data"), "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_LOGLEVEL=warn")
	if err := agent.Start(); err != nil {
		fail("start berth: %v", err)
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
		b.removeBenchContainers()
	}()
	for i := range endpointContainers {
		def := fmt.Sprintf(`{"family": "ep%d", "containerDefinitions": [{"name": "c", "image": %q, "memory": 8, "command": ["sleep"]}]}`, i, testImage)
		if err := os.WriteFile(filepath.Join(tasksDir, fmt.Sprintf("t%02d.json", i)), []byte(def), 0o600); err != nil {
			fail("%v", err)
		}
	}
	var ids []string
	deadline := time.Now().Add(5 * time.Minute)
	for len(ids) < endpointContainers {
		if time.Now().After(deadline) {
			fail("endpoint: %d containers did not all reach RUNNING within 5 minutes (%d did)", endpointContainers, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
		ids = runningContainers(intro)
	}

	// Each container's token, from the variable the agent gave it.
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		c, err := b.dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: id})
		if err != nil {
			fail("inspect %s: %v", id, err)
		}
		for _, kv := range c.Config.Env {
			if v, ok := strings.CutPrefix(kv, "ECS_CONTAINER_METADATA_URI_V4=http://169.254.170.2/v4/"); ok {
				tokens = append(tokens, v)
			}
		}
	}
	if len(tokens) != endpointContainers {
		fail("endpoint: %d of %d containers have a metadata URI", len(tokens), endpointContainers)
	}
	hz, err := agentproc.ClockTicks()
	if err != nil {
		fail("%v", err)
	}
	pid := agent.Process.Pid
	agentCPU := func(d time.Duration, load func(stop <-chan struct{})) float64 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if load != nil {
			wg.Add(1)
			go func() { defer wg.Done(); load(stop) }()
		}
		before, err := agentproc.CPUTicks(pid)
		if err != nil {
			fail("%v", err)
		}
		start := time.Now()
		time.Sleep(d) // the measurement window itself
		after, err := agentproc.CPUTicks(pid)
		if err != nil {
			fail("%v", err)
		}
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()
		return float64(after-before) / float64(hz) / elapsed.Seconds() * 100
	}

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (time.Duration, error) {
		start := time.Now()
		resp, err := client.Get("http://127.0.0.1:51679" + path)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return time.Since(start), nil
	}
	// Warm the shared stats streams, as a poller's first second would.
	for _, tok := range tokens {
		if _, err := get("/v4/" + tok + "/task/stats"); err != nil {
			fail("endpoint: %v", err)
		}
	}
	idle := agentCPU(window, nil)
	var mu sync.Mutex
	var statsLatency []time.Duration
	var failures int
	polling := agentCPU(window, func(stop <-chan struct{}) {
		var wg sync.WaitGroup
		for _, tok := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					d, err := get("/v4/" + tok + "/task/stats")
					mu.Lock()
					if err != nil {
						failures++
					} else {
						statsLatency = append(statsLatency, d)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})

	// /task at about 30 requests a second, a new connection each, as the ECS agent's anchor was taken.
	var taskLatency []time.Duration
	for i := range 100 {
		d, err := get("/v4/" + tokens[i%len(tokens)] + "/task")
		if err != nil {
			fail("endpoint: %v", err)
		}
		taskLatency = append(taskLatency, d)
		client.CloseIdleConnections()
		time.Sleep(33 * time.Millisecond)
	}
	// The bare Engine: the same 50 containers' stats, one-shot, straight from Docker.
	var bare []time.Duration
	for _, id := range ids[:10] {
		start := time.Now()
		if err := dockerStatsOnce(ctx, b.dc, id); err != nil {
			fail("docker stats %s: %v", id, err)
		}
		bare = append(bare, time.Since(start))
	}
	fmt.Printf("endpoint: %d containers polling /v4/<token>/task/stats once a second for %s: berth CPU %.2f %% of one core "+
		"(idle %.2f %%, +%.2f %%; goal < 5 %%), %d answers, %d failed, p50 %s p99 %s (Docker's own stats, one-shot: p50 %s, %.0fx the endpoint's p50)\n",
		endpointContainers, window, polling, idle, polling-idle, len(statsLatency), failures, percentile(statsLatency, 50), percentile(statsLatency, 99),
		percentile(bare, 50), float64(percentile(bare, 50))/float64(max(percentile(statsLatency, 50), time.Microsecond)))
	fmt.Printf("endpoint: /v4/<token>/task, 100 requests at ~30/s, new connection each: p50 %s p99 %s\n", percentile(taskLatency, 50), percentile(taskLatency, 99))
}

// runningContainers returns the Docker IDs of the agent's running containers, from /v1/tasks.
func runningContainers(intro string) []string {
	resp, err := http.Get("http://" + intro + "/v1/tasks")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body introspection.TasksResponse
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	var ids []string
	for _, t := range body.Tasks {
		for _, c := range t.Containers {
			if c.KnownStatus == "RUNNING" && c.DockerID != "" {
				ids = append(ids, c.DockerID)
			}
		}
	}
	return ids
}

// dockerStatsOnce reads one stats sample of a container from the Engine.
func dockerStatsOnce(ctx context.Context, dc *docker.Client, id string) error {
	ch := make(chan *docker.Stats, 1)
	return dc.Stats(docker.StatsOptions{ID: id, Stats: ch, Stream: false, Context: ctx, Timeout: 30 * time.Second})
}

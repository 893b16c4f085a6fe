package taskmetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/tcswire"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// statsJSON is a Docker stats object read at t0+sec: cpuNs of CPU time so far, a second after the
// previous reading with prevCPUNs.
// parseStats decodes the counters of a Docker stats object the way the kernel reader fills them.
func parseStats(raw json.RawMessage) (dockerclient.StatsSample, error) {
	type cpu struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
	}
	var f struct {
		Read        time.Time `json:"read"`
		PreRead     time.Time `json:"preread"`
		CPUStats    cpu       `json:"cpu_stats"`
		PreCPUStats cpu       `json:"precpu_stats"`
		MemoryStats struct {
			Usage uint64 `json:"usage"`
			Stats struct {
				Cache uint64 `json:"cache"`
			} `json:"stats"`
		} `json:"memory_stats"`
		Networks   map[string]dockerclient.NetworkStats `json:"networks"`
		BlkioStats struct {
			IOServiceBytesRecursive []struct {
				Op    string `json:"op"`
				Value uint64 `json:"value"`
			} `json:"io_service_bytes_recursive"`
		} `json:"blkio_stats"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return dockerclient.StatsSample{}, err
	}
	s := dockerclient.StatsSample{Read: f.Read, PreRead: f.PreRead,
		CPUTotal: time.Duration(f.CPUStats.CPUUsage.TotalUsage), PreCPUTotal: time.Duration(f.PreCPUStats.CPUUsage.TotalUsage),
		MemoryUsage: f.MemoryStats.Usage, MemoryCache: f.MemoryStats.Stats.Cache, Networks: f.Networks}
	for _, e := range f.BlkioStats.IOServiceBytesRecursive {
		switch e.Op {
		case "read", "Read":
			s.StorageRead += e.Value
		case "write", "Write":
			s.StorageWrite += e.Value
		}
	}
	return s, nil
}

func statsJSON(sec int, cpuNs, prevCPUNs, usage, cache uint64, withNet bool) json.RawMessage {
	nets := ""
	if withNet {
		nets = fmt.Sprintf(`,"networks":{"eth0":{"rx_bytes":%d,"rx_packets":10,"rx_errors":0,"rx_dropped":1,"tx_bytes":%d,"tx_packets":5,"tx_errors":0,"tx_dropped":0},
			"eth1":{"rx_bytes":100,"rx_packets":1,"tx_bytes":50,"tx_packets":1}}`, 1000*sec, 500*sec)
	}
	return json.RawMessage(fmt.Sprintf(`{"read":%q,"preread":%q,"pids_stats":{"current":3},
		"blkio_stats":{"io_service_bytes_recursive":[{"major":8,"minor":0,"op":"read","value":4096},{"major":8,"minor":0,"op":"write","value":8192},{"major":8,"minor":0,"op":"Total","value":12288}]},
		"cpu_stats":{"cpu_usage":{"total_usage":%d,"usage_in_kernelmode":1,"usage_in_usermode":2},"system_cpu_usage":99,"online_cpus":4},
		"precpu_stats":{"cpu_usage":{"total_usage":%d},"system_cpu_usage":98,"online_cpus":4},
		"memory_stats":{"usage":%d,"stats":{"cache":%d,"active_file":7},"limit":1073741824},"name":"/x","id":"abc"%s}`,
		t0.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano), t0.Add(time.Duration(sec-1)*time.Second).Format(time.RFC3339Nano),
		cpuNs, prevCPUNs, usage, cache, nets))
}

func TestConvert(t *testing.T) {
	for _, tt := range []struct {
		name    string
		raw     json.RawMessage
		mem     uint64
		cpu     float64
		network bool
	}{
		{"cgroup v1 with cache, half a core", statsJSON(2, 2_500_000_000, 2_000_000_000, 30<<20, 10<<20, true), 20 << 20, 50, true},
		{"no cache key (cgroup v2), two cores", statsJSON(2, 4_000_000_000, 2_000_000_000, 30<<20, 0, false), 30 << 20, 200, false},
		{"first sample of a stream: no CPU percent", statsJSON(1, 1_000_000_000, 0, 5<<20, 0, false), 5 << 20, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sample, err := parseStats(tt.raw)
			require.NoError(t, err)
			s, f := Convert(sample)
			assert.Equal(t, tt.mem, s.MemoryBytes)
			assert.Equal(t, tt.mem, f.MemoryBytes)
			assert.InDelta(t, tt.cpu, f.CPUPercent, 1e-9)
			assert.Equal(t, uint64(4096), s.StorageReadBytes)
			assert.Equal(t, uint64(8192), s.StorageWriteBytes)
			if tt.network {
				require.NotNil(t, s.Network)
				assert.Equal(t, uint64(2100), s.Network.RxBytes)
				assert.Equal(t, uint64(11), s.Network.RxPackets)
				assert.Equal(t, uint64(1), s.Network.RxDropped)
				assert.Equal(t, uint64(1050), s.Network.TxBytes)
			} else {
				assert.Nil(t, s.Network)
			}
		})
	}
}

type fakeTasks struct {
	mu    sync.Mutex
	tasks []*task.Task
}

func (f *fakeTasks) Tasks() []*task.Task {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tasks
}

func (f *fakeTasks) VisitRunning(visit func(t *task.Task)) {
	for _, t := range f.Tasks() {
		if t.KnownStatus == task.TaskRunning {
			visit(t)
		}
	}
}

type fakeStats struct {
	mu     sync.Mutex
	byID   map[string]json.RawMessage
	calls  int
	netnss map[string]string // the namespace each container was last sampled with
}

func (f *fakeStats) Sample(_ context.Context, id, netns string) (dockerclient.StatsSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.netnss == nil {
		f.netnss = map[string]string{}
	}
	f.netnss[id] = netns
	raw, ok := f.byID[id]
	if !ok {
		return dockerclient.StatsSample{}, fmt.Errorf("no such container %q", id)
	}
	return parseStats(raw)
}

func (f *fakeStats) set(id string, raw json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byID[id] = raw
}

func runningTask(arn string, static bool, cpu int, containers ...*task.Container) *task.Task {
	return &task.Task{Arn: arn, Family: "fam", Revision: 3, CPU: cpu, Static: static, KnownStatus: task.TaskRunning, Containers: containers}
}

func runningContainer(name, id string) *task.Container {
	return &task.Container{Name: name, DockerID: id, KnownStatus: task.ContainerRunning}
}

func TestSourceMetrics(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	web := runningContainer("web", "id-web")
	pause := &task.Container{Name: "~internal~ecs~pause", DockerID: "id-pause", KnownStatus: task.ContainerResourcesProvisioned, Pause: true}
	tasks := &fakeTasks{tasks: []*task.Task{
		runningTask("arn:task/a", false, 512, web, pause),
		runningTask("arn:task/static", true, 0, runningContainer("s", "id-static")),
	}}
	stats := &fakeStats{byID: map[string]json.RawMessage{"id-static": statsJSON(1, 1, 0, 1<<20, 0, false)}}
	src := New(tasks, stats, Config{Clock: clock})
	ctx := t.Context()

	// Three samples a second apart: 0.5 s of CPU per second on 512 units (half a vCPU) is 100 %.
	// The second is read twice and counted once.
	for i, raw := range []json.RawMessage{
		statsJSON(1, 1_000_000_000, 0, 10<<20, 0, true),
		statsJSON(2, 1_500_000_000, 1_000_000_000, 20<<20, 0, true),
		nil, // the same sample again
		statsJSON(3, 2_000_000_000, 1_500_000_000, 30<<20, 0, true),
	} {
		if raw != nil {
			stats.set("id-web", raw)
		}
		src.Sample(ctx)
		if i == 1 {
			f, ok := src.Container("id-web")
			require.True(t, ok)
			assert.InDelta(t, 50, f.CPUPercent, 1e-9, "display CPU is in percent of one vCPU")
			assert.Equal(t, uint64(20<<20), f.MemoryBytes)
		}
	}
	got := src.Metrics(clock.Now())
	require.Len(t, got, 1, "the static task is left out")
	tm := got[0]
	assert.Equal(t, "arn:task/a", tm.TaskArn)
	assert.Equal(t, "fam", tm.TaskDefinitionFamily)
	assert.Equal(t, "3", tm.TaskDefinitionVersion)
	require.Len(t, tm.ContainerMetrics, 1, "the pause container is left out")
	m := tm.ContainerMetrics[0]
	assert.Equal(t, "web", m.ContainerName)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 10, Max: 30, SampleCount: 3, Sum: 60}, m.MemoryStatsSet)
	require.NotNil(t, m.CPUStatsSet)
	assert.Equal(t, int64(2), m.CPUStatsSet.SampleCount)
	assert.InDelta(t, 100, m.CPUStatsSet.Max, 1e-9)
	require.NotNil(t, m.NetworkStatsSet)
	assert.Equal(t, int64(3100), m.NetworkStatsSet.RxBytes.Max)
	assert.InDelta(t, 1000, m.NetworkStatsSet.RxBytesPerSecond.Max, 1e-9)
	assert.Equal(t, int64(8192), m.StorageStatsSet.WriteSizeBytes.Max)

	// The next interval starts empty; a container gone is reported once more, then forgotten.
	assert.Empty(t, src.Metrics(clock.Now()))
	stats.set("id-web", statsJSON(4, 2_500_000_000, 2_000_000_000, 40<<20, 0, true))
	src.Sample(ctx)
	web.KnownStatus = task.ContainerStopped
	src.Sample(ctx)
	_, ok := src.Container("id-web")
	assert.False(t, ok, "no figures for a container that stopped")
	got = src.Metrics(clock.Now())
	require.Len(t, got, 1)
	assert.Equal(t, 40.0, got[0].ContainerMetrics[0].MemoryStatsSet.Max)
	assert.Empty(t, src.Metrics(clock.Now()))
	assert.Len(t, src.Containers(), 1, "only the static task's container is left")
}

// TestSourceSamplesAWSVPCInTheTaskNamespace: an awsvpc task's containers are sampled with the task's
// network namespace, so their TCS network stats are the namespace's interfaces, as the ECS agent
// reads them (agent/stats/engine.go, the task's network stats); others without one.
func TestSourceSamplesAWSVPCInTheTaskNamespace(t *testing.T) {
	vpc := runningTask("arn:task/vpc", false, 512, runningContainer("app", "id-vpc"))
	vpc.NetworkMode = task.NetworkAWSVPC
	vpc.AWSVPC = &task.AWSVPC{NetNS: "/proc/4242/ns/net"}
	bridge := runningTask("arn:task/bridge", false, 512, runningContainer("app", "id-bridge"))
	stats := &fakeStats{byID: map[string]json.RawMessage{"id-vpc": statsJSON(1, 1, 0, 1<<20, 0, true), "id-bridge": statsJSON(1, 1, 0, 1<<20, 0, true)}}
	src := New(&fakeTasks{tasks: []*task.Task{vpc, bridge}}, stats, Config{Clock: clockwork.NewFakeClockAt(t0)})
	src.Sample(t.Context())
	stats.mu.Lock()
	defer stats.mu.Unlock()
	assert.Equal(t, map[string]string{"id-vpc": "/proc/4242/ns/net", "id-bridge": ""}, stats.netnss)
}

// TestSourceRestartStats: a container with an enabled restart policy carries the restarts of each
// interval in restartStatsSet, zero included, as the ECS agent's does; one without it carries none.
func TestSourceRestartStats(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	web := runningContainer("web", "id-web")
	web.RestartPolicy = &task.RestartPolicy{Enabled: true}
	web.RestartCount = 2 // before the first sample: not this interval's
	plain := runningContainer("plain", "id-plain")
	tasks := &fakeTasks{tasks: []*task.Task{runningTask("arn:task/a", false, 512, web, plain)}}
	stats := &fakeStats{byID: map[string]json.RawMessage{}}
	src := New(tasks, stats, Config{Clock: clock})
	restarts := func() map[string]*tcswire.RestartStatsSet {
		out := map[string]*tcswire.RestartStatsSet{}
		for _, tm := range src.Metrics(clock.Now()) {
			for _, m := range tm.ContainerMetrics {
				out[m.ContainerName] = m.RestartStatsSet
			}
		}
		return out
	}
	count := func(n int64) *tcswire.RestartStatsSet { return &tcswire.RestartStatsSet{RestartCount: &n} }
	for i, step := range []struct {
		restartCount int
		want         int64
	}{{2, 0}, {5, 3}, {5, 0}} {
		web.RestartCount = step.restartCount
		for _, id := range []string{"id-web", "id-plain"} {
			stats.set(id, statsJSON(2*i+1, 1, 0, 1<<20, 0, false))
		}
		src.Sample(t.Context())
		for _, id := range []string{"id-web", "id-plain"} {
			stats.set(id, statsJSON(2*i+2, 2, 1, 1<<20, 0, false))
		}
		src.Sample(t.Context())
		got := restarts()
		assert.Equal(t, count(step.want), got["web"], "interval %d", i)
		assert.Nil(t, got["plain"], "interval %d: no restart policy, no restartStatsSet", i)
	}
}

func TestSourceForgetsStoppedContainersWithoutMetrics(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	c := runningContainer("web", "id-web")
	src := New(&fakeTasks{tasks: []*task.Task{runningTask("arn:task/a", false, 0, c)}},
		&fakeStats{byID: map[string]json.RawMessage{"id-web": statsJSON(1, 1, 0, 1<<20, 0, false)}}, Config{Clock: clock})
	src.Sample(t.Context())
	c.KnownStatus = task.ContainerStopped
	src.Sample(t.Context())
	clock.Advance(forgetAfter)
	src.Sample(t.Context())
	src.mu.Lock()
	defer src.mu.Unlock()
	assert.Empty(t, src.containers)
}

func TestSourceHealth(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	checked := runningContainer("web", "id-web")
	checked.HealthCheck = &task.HealthCheck{Command: []string{"CMD", "true"}}
	unchecked := runningContainer("side", "id-side")
	tasks := &fakeTasks{tasks: []*task.Task{
		runningTask("arn:task/a", false, 0, checked, unchecked),
		runningTask("arn:task/b", false, 0, runningContainer("x", "id-x")),
	}}
	src := New(tasks, &fakeStats{byID: map[string]json.RawMessage{}}, Config{Clock: clock})

	got := src.Health(clock.Now())
	require.Len(t, got, 1, "a task without a health check is left out")
	require.Len(t, got[0].Containers, 1)
	assert.Equal(t, tcswire.ContainerHealth{ContainerName: "web", HealthStatus: tcswire.HealthStatusUnknown, StatusSince: tcswire.At(t0)}, got[0].Containers[0])

	clock.Advance(time.Minute)
	checked.Health = task.HealthHealthy
	got = src.Health(clock.Now())
	assert.Equal(t, tcswire.HealthStatusHealthy, got[0].Containers[0].HealthStatus)
	assert.Equal(t, t0.Add(time.Minute), got[0].Containers[0].StatusSince.Time)
	clock.Advance(time.Minute)
	got = src.Health(clock.Now())
	assert.Equal(t, t0.Add(time.Minute), got[0].Containers[0].StatusSince.Time, "unchanged health keeps its time")
}

func TestSourceRunSamplesOnTicks(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	stats := &fakeStats{byID: map[string]json.RawMessage{"id-web": statsJSON(1, 1, 0, 1<<20, 0, false)}}
	src := New(&fakeTasks{tasks: []*task.Task{runningTask("arn:task/a", false, 0, runningContainer("web", "id-web"))}}, stats, Config{Clock: clock})
	_, ok := src.Container("id-web") // wanted from now on
	require.False(t, ok, "figures before any sample")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(DefaultSampleInterval)
	require.Eventually(t, func() bool { _, ok := src.Container("id-web"); return ok }, 5*time.Second, time.Millisecond)
	cancel()
	<-done
	assert.False(t, math.IsNaN(src.Containers()[0].CPUPercent))
}

func TestSourceSamplesOnlyWhileWanted(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	stats := &fakeStats{byID: map[string]json.RawMessage{"id-web": statsJSON(1, 1, 0, 1<<20, 0, false)}}
	src := New(&fakeTasks{tasks: []*task.Task{runningTask("arn:task/a", false, 0, runningContainer("web", "id-web"))}}, stats, Config{Clock: clock})
	ctx := t.Context()
	calls := func() int { stats.mu.Lock(); defer stats.mu.Unlock(); return stats.calls }
	tick := func() { clock.Advance(DefaultSampleInterval); src.tick(ctx) }

	for range 3 {
		tick()
	}
	assert.Zero(t, calls(), "samples taken while nobody wanted them")

	_, _ = src.Container("id-web") // a local reader (berth ps) wants them
	tick()
	assert.Equal(t, 1, calls())
	_, ok := src.Container("id-web")
	assert.True(t, ok, "figures after a tick")

	// DemandWindow after the last read, sampling stops and what was held is dropped.
	clock.Advance(DemandWindow - 2*DefaultSampleInterval)
	tick()
	assert.Equal(t, 2, calls(), "the last tick within DemandWindow of the read samples")
	tick()
	tick()
	assert.Equal(t, 2, calls(), "samples taken after the demand lapsed")
	src.mu.Lock()
	held := len(src.containers)
	src.mu.Unlock()
	assert.Zero(t, held, "containers held after the demand lapsed")

	// The TCS client's Metrics, at each publication, wants them too.
	src.Metrics(clock.Now())
	tick()
	assert.Equal(t, 3, calls())
}

func TestSourceInstanceStatusFollowsTheRuntime(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	var runtimeErr error
	src := New(&fakeTasks{}, &fakeStats{}, Config{Clock: clock, Runtime: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		_, hasDeadline := ctx.Deadline()
		require.True(t, hasDeadline, "a check is bounded")
		return runtimeErr
	}})
	status := func() tcswire.InstanceStatus {
		t.Helper()
		got := src.InstanceStatuses(clock.Now())
		require.Len(t, got, 1)
		assert.Equal(t, tcswire.InstanceStatusTypeRuntime, got[0].Type)
		return got[0]
	}
	st := status()
	assert.Equal(t, tcswire.InstanceStatusInitializing, st.Status, "before the first check")
	assert.Equal(t, t0, st.LastStatusChange.Time)

	clock.Advance(time.Second)
	src.CheckRuntime(t.Context())
	st = status()
	assert.Equal(t, tcswire.InstanceStatusOK, st.Status)
	assert.Equal(t, t0.Add(time.Second), st.LastStatusChange.Time)

	clock.Advance(time.Minute)
	mu.Lock()
	runtimeErr = fmt.Errorf("cannot connect to the Docker daemon")
	mu.Unlock()
	src.CheckRuntime(t.Context())
	clock.Advance(time.Minute)
	src.CheckRuntime(t.Context())
	st = status()
	assert.Equal(t, tcswire.InstanceStatusImpaired, st.Status)
	assert.Equal(t, t0.Add(61*time.Second), st.LastStatusChange.Time, "changed at the first failed check")
	assert.Equal(t, t0.Add(121*time.Second), st.LastUpdated.Time, "updated at the last check")

	clock.Advance(time.Minute)
	mu.Lock()
	runtimeErr = nil
	mu.Unlock()
	src.CheckRuntime(t.Context())
	st = status()
	assert.Equal(t, tcswire.InstanceStatusOK, st.Status)
	assert.Equal(t, t0.Add(181*time.Second), st.LastStatusChange.Time)

	// A check cut short by the agent's shutdown says nothing about the runtime.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	mu.Lock()
	runtimeErr = context.Canceled
	mu.Unlock()
	src.CheckRuntime(ctx)
	assert.Equal(t, tcswire.InstanceStatusOK, status().Status)
}

func TestSourceWatchRuntimeChecksAtOnceAndOnTicks(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	checks := 0
	src := New(&fakeTasks{}, &fakeStats{}, Config{Clock: clock, Runtime: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		checks++
		return nil
	}})
	count := func() int { mu.Lock(); defer mu.Unlock(); return checks }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); src.WatchRuntime(ctx) }()
	require.Eventually(t, func() bool { return count() == 1 }, 5*time.Second, time.Millisecond, "a check at once")
	assert.Equal(t, tcswire.InstanceStatusOK, src.InstanceStatuses(clock.Now())[0].Status)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(RuntimeCheckInterval)
	require.Eventually(t, func() bool { return count() == 2 }, 5*time.Second, time.Millisecond, "a check per interval")
	cancel()
	<-done
}

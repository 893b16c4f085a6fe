package dockerstats

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/kernelstats"
)

var t0 = time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)

func newTestCache(t *testing.T, cfg Config) (*Cache, *fakeDocker, *fakeKernel, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	d := &fakeDocker{byID: map[string]*docker.Container{}, inspects: map[string]int{}}
	k := &fakeKernel{clock: clock, gone: map[int]bool{}}
	cfg.Clock = clock
	c := New(d, k, cfg)
	t.Cleanup(c.Close)
	return c, d, k, clock
}

// served is the part of a served stats object the tests check.
type served struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	Read    time.Time `json:"read"`
	PreRead time.Time `json:"preread"`
	CPU     struct {
		Usage struct {
			Total uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
		System uint64 `json:"system_cpu_usage"`
	} `json:"cpu_stats"`
	PreCPU struct {
		Usage struct {
			Total uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
		System uint64 `json:"system_cpu_usage"`
	} `json:"precpu_stats"`
	Networks map[string]dockerclient.NetworkStats `json:"networks"`
	Rate     *networkRate                         `json:"network_rate_stats"`
}

func decode(t *testing.T, raw json.RawMessage) served {
	t.Helper()
	var s served
	require.NoError(t, json.Unmarshal(raw, &s), string(raw))
	return s
}

func TestManyReadersShareOneReading(t *testing.T) {
	c, d, k, _ := newTestCache(t, Config{})
	d.run("abc", 42, "bridge")
	const readers = 50
	answers := make([]json.RawMessage, readers)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := c.Stats(t.Context(), "abc", "")
			assert.NoError(t, err)
			answers[i] = raw
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, d.inspected("abc"), "inspects")
	hs := k.handles()
	require.Len(t, hs, 1)
	assert.Equal(t, 42, hs[0].pid)
	assert.Equal(t, []bool{true}, hs[0].details(), "one detailed reading for every reader")
	for _, raw := range answers {
		assert.Equal(t, string(answers[0]), string(raw))
	}
	s := decode(t, answers[0])
	assert.Equal(t, "/name-abc", s.Name)
	assert.Equal(t, "abc", s.ID)
	assert.Equal(t, t0, s.Read)
	assert.True(t, s.PreRead.IsZero(), "the first reading has no predecessor")
	assert.Zero(t, s.PreCPU.Usage.Total)
	assert.Nil(t, s.Rate, "no rate from a single reading")
}

func TestANewReadingOnceTheLatestIsOlderThanMinInterval(t *testing.T) {
	c, d, k, clock := newTestCache(t, Config{})
	d.run("abc", 42, "bridge")
	first, err := c.Stats(t.Context(), "abc", "")
	require.NoError(t, err)
	clock.Advance(899 * time.Millisecond)
	again, err := c.Stats(t.Context(), "abc", "")
	require.NoError(t, err)
	assert.Equal(t, string(first), string(again), "within MinInterval the same reading is served")
	clock.Advance(1101 * time.Millisecond) // 2 s after the first reading
	raw, err := c.Stats(t.Context(), "abc", "")
	require.NoError(t, err)
	s := decode(t, raw)
	assert.Equal(t, t0.Add(2*time.Second), s.Read)
	assert.Equal(t, t0, s.PreRead)
	assert.Equal(t, uint64(20*time.Millisecond), s.CPU.Usage.Total)
	assert.Equal(t, uint64(10*time.Millisecond), s.PreCPU.Usage.Total, "precpu_stats is the reading before")
	require.NotNil(t, s.Rate)
	assert.InDelta(t, 500.0, s.Rate.RxBytesPerSec, 1e-9, "1000 bytes more in 2 s")
	assert.InDelta(t, 250.0, s.Rate.TxBytesPerSec, 1e-9)
	assert.Equal(t, 1, d.inspected("abc"))
	assert.Len(t, k.handles()[0].details(), 2)
}

func TestTelemetryReadsWithoutDetailUntilStatsIsAsked(t *testing.T) {
	c, d, k, clock := newTestCache(t, Config{})
	d.run("abc", 42, "bridge")
	s, err := c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	assert.Equal(t, t0, s.Read)
	assert.Equal(t, 10*time.Millisecond, s.CPUTotal)
	assert.Equal(t, uint64(1000), s.Networks["eth0"].RxBytes)

	// A Stats ask after a reading without detail reads again, with detail, and shows no
	// predecessor: precpu_stats without system_cpu_usage would make clients' CPU percent wrong.
	raw, err := c.Stats(t.Context(), "abc", "")
	require.NoError(t, err)
	got := decode(t, raw)
	assert.NotZero(t, got.CPU.System)
	assert.True(t, got.PreRead.IsZero())

	// From then on, telemetry's readings have detail, so precpu_stats is whole.
	clock.Advance(time.Second)
	s, err = c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Millisecond, s.CPUTotal)
	assert.Equal(t, 20*time.Millisecond, s.PreCPUTotal)
	assert.Equal(t, t0, s.PreRead)
	// Until nobody asked Stats for IdleTimeout.
	for range 60 {
		clock.Advance(time.Second)
		_, err = c.Sample(t.Context(), "abc", "")
		require.NoError(t, err)
	}
	details := k.handles()[0].details()
	assert.Equal(t, []bool{false, true, true}, details[:3])
	assert.False(t, details[len(details)-1], "detail a minute after the last Stats ask")
}

func TestNetworksFollowTheNetworkMode(t *testing.T) {
	c, d, k, _ := newTestCache(t, Config{NetNSIgnore: []string{"task-br"}})
	d.run("bridge", 1, "bridge")
	d.run("host", 2, "host")
	d.run("none", 3, "none")
	d.run("shared", 4, "container:abc")
	d.run("awsvpc", 5, "container:pause")
	for _, id := range []string{"bridge", "host", "none", "shared"} {
		_, err := c.Sample(t.Context(), id, "")
		require.NoError(t, err, id)
	}
	_, err := c.Sample(t.Context(), "awsvpc", "/proc/99/ns/net")
	require.NoError(t, err)
	byID := map[string]kernelstats.OpenOptions{}
	for _, h := range k.handles() {
		byID[h.id] = h.opts
	}
	assert.True(t, byID["bridge"].Networks)
	assert.False(t, byID["host"].Networks)
	assert.False(t, byID["none"].Networks)
	assert.False(t, byID["shared"].Networks)
	assert.Equal(t, kernelstats.OpenOptions{Networks: true, IgnoreInterfaces: []string{"task-br"}}, byID["awsvpc"])
}

func TestARestartedContainerIsInspectedAgain(t *testing.T) {
	c, d, k, clock := newTestCache(t, Config{})
	d.run("abc", 42, "bridge")
	_, err := c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	k.kill(42)
	d.run("abc", 43, "bridge") // restarted under its restart policy
	clock.Advance(time.Second)
	s, err := c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	hs := k.handles()
	require.Len(t, hs, 2)
	assert.True(t, hs[0].isClosed(), "the old process's handle is closed")
	assert.Equal(t, 43, hs[1].pid)
	assert.True(t, s.PreRead.IsZero(), "no predecessor across processes: the counters started again")
	assert.Equal(t, 2, d.inspected("abc"))
}

func TestAStoppedContainerIsRememberedForStoppedTTL(t *testing.T) {
	c, d, k, clock := newTestCache(t, Config{StoppedTTL: 10 * time.Second})
	d.run("abc", 42, "bridge")
	_, err := c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	k.kill(42)
	d.run("abc", 0, "bridge") // exited
	clock.Advance(time.Second)
	_, err = c.Stats(t.Context(), "abc", "")
	require.ErrorIs(t, err, dockerclient.ErrNotRunning)
	assert.Equal(t, 2, d.inspected("abc"))
	clock.Advance(9 * time.Second)
	_, err = c.Stats(t.Context(), "abc", "")
	require.ErrorIs(t, err, dockerclient.ErrNotRunning)
	assert.Equal(t, 2, d.inspected("abc"), "asked again within StoppedTTL without asking Docker")
	clock.Advance(time.Second)
	d.run("abc", 44, "bridge") // started again
	_, err = c.Stats(t.Context(), "abc", "")
	require.NoError(t, err)
	assert.Equal(t, 3, d.inspected("abc"))
}

func TestErrors(t *testing.T) {
	c, d, k, _ := newTestCache(t, Config{})
	_, err := c.Stats(t.Context(), "missing", "")
	assert.True(t, errdefs.IsNotFound(err), "%v", err)

	d.run("abc", 42, "bridge")
	k.refused = errors.New("cgroup of container abc not found under /sys/fs/cgroup/memory")
	_, err = c.Stats(t.Context(), "abc", "")
	assert.ErrorContains(t, err, "cgroup of container abc not found")

	noKernel := New(d, nil, Config{})
	_, err = noKernel.Sample(t.Context(), "abc", "")
	assert.True(t, errdefs.IsUnavailable(err), "%v", err)
	assert.ErrorContains(t, err, "cgroup")
}

func TestIdleContainersAreForgotten(t *testing.T) {
	c, d, k, clock := newTestCache(t, Config{IdleTimeout: time.Minute})
	d.run("idle", 1, "bridge")
	d.run("busy", 2, "bridge")
	_, err := c.Sample(t.Context(), "idle", "")
	require.NoError(t, err)
	for range 61 {
		clock.Advance(time.Second)
		_, err = c.Sample(t.Context(), "busy", "")
		require.NoError(t, err)
	}
	held := func(id string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.entries[id]
		return ok
	}
	// The sweep runs on the clock's timer, on its own goroutine, without any further ask.
	require.Eventually(t, func() bool { return !held("idle") }, 5*time.Second, time.Millisecond, "an entry nobody asked for in a minute")
	assert.True(t, held("busy"))
	assert.True(t, k.handles()[0].isClosed(), "the idle entry's handle is closed")
	_, err = c.Sample(t.Context(), "idle", "")
	require.NoError(t, err)
	assert.Equal(t, 2, d.inspected("idle"), "asked again after being forgotten: inspected again")
}

func TestClose(t *testing.T) {
	c, d, k, _ := newTestCache(t, Config{})
	d.run("abc", 42, "bridge")
	_, err := c.Sample(t.Context(), "abc", "")
	require.NoError(t, err)
	c.Close()
	c.Close()
	assert.True(t, k.handles()[0].isClosed())
	_, err = c.Stats(t.Context(), "abc", "")
	assert.ErrorIs(t, err, ErrClosed)
}

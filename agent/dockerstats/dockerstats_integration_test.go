//go:build integration

package dockerstats

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// itPrefix starts the name of every container these tests create.
const itPrefix = "berth-dockerstats-it-"

// countingDocker counts the Docker calls the cache makes.
type countingDocker struct {
	Docker
	streams atomic.Int32
}

func (d *countingDocker) ContainerStats(ctx context.Context, id string, fn func(dockerclient.StatsSample) error) error {
	d.streams.Add(1)
	return d.Docker.ContainerStats(ctx, id, fn)
}

// itEngine returns a client of the real Docker Engine with the test image, failing the test when
// either is missing.
func itEngine(t *testing.T) *dockerclient.Client {
	t.Helper()
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	_, err = client.WaitReady(ctxWithin(t, 30*time.Second), nil)
	require.NoError(t, err, "the Docker Engine must answer (make test starts it)")
	_, err = client.PullImage(ctxWithin(t, 2*time.Minute), itImage, nil)
	require.NoError(t, err, "the test image must be in the local registry (make images pushes it)")
	return client
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// runSleeper starts a testapp container running sleep in networkMode and removes it when the test
// ends; it returns its ID.
func runSleeper(t *testing.T, client *dockerclient.Client, networkMode string) string {
	t.Helper()
	ctx := ctxWithin(t, time.Minute)
	name := fmt.Sprintf("%s%s-%d", itPrefix, networkMode, time.Now().UnixNano())
	ctr, err := client.CreateContainer(ctx, docker.CreateContainerOptions{
		Name:       name,
		Config:     &docker.Config{Image: itImage, Cmd: []string{"sleep"}, Labels: map[string]string{"com.berth-agent.test": "dockerstats"}},
		HostConfig: &docker.HostConfig{NetworkMode: networkMode},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := client.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: ctr.ID, Force: true}); err != nil {
			t.Logf("remove %s: %v", name, err)
		}
	})
	require.NoError(t, client.StartContainer(ctx, ctr.ID))
	return ctr.ID
}

// dockerFields are the fields of Docker's stats object the task metadata endpoint serves.
var dockerFields = []string{"read", "preread", "pids_stats", "blkio_stats", "num_procs", "storage_stats",
	"cpu_stats", "precpu_stats", "memory_stats", "name", "id"}

func fieldsOf(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	return m
}

// cpuTime returns the CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readTogether makes n readers ask for id's stats at the same moment and returns their answers
// and how long each took.
func readTogether(t *testing.T, cache *Cache, id string, n int) ([]json.RawMessage, []time.Duration) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([]json.RawMessage, n)
		latency = make([]time.Duration, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			answers[i], errs[i] = cache.Stats(ctxWithin(t, 5*time.Second), id, "")
			latency[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "reader %d after %v", i, latency[i])
	}
	return answers, latency
}

// checkFields checks that a served sample has Docker's fields, networks when the network mode
// gives the container its own, and its ID.
func checkFields(t *testing.T, raw json.RawMessage, id, mode string) {
	t.Helper()
	m := fieldsOf(t, raw)
	for _, f := range dockerFields {
		assert.Contains(t, m, f)
	}
	if mode == "host" {
		assert.NotContains(t, m, "networks", "no networks in network mode host")
	} else {
		assert.Contains(t, m, "networks")
	}
	assert.Contains(t, string(m["id"]), id)
}

func summary(latency []time.Duration) string {
	s := slices.Sorted(slices.Values(latency))
	return fmt.Sprintf("p50 %v, max %v", s[len(s)/2], s[len(s)-1])
}

func TestIntegrationOneStreamServesManyReaders(t *testing.T) {
	client := itEngine(t)
	const readers = 50
	for _, mode := range []string{"bridge", "host"} {
		t.Run(mode, func(t *testing.T) {
			id := runSleeper(t, client, mode)
			d := &countingDocker{Docker: client}
			// The first sample comes at the Engine's next collection tick: it collects every second,
			// so the wait for it may pass 1 s by the time of a collection. A longer FirstSampleWait
			// than the default keeps that from failing the readers waiting for it; their wait is
			// checked below.
			cache := New(d, Config{FirstSampleWait: 3 * time.Second})
			t.Cleanup(cache.Close)

			// 50 readers at once before the container has any sample: they share its first.
			answers, latency := readTogether(t, cache, id, readers)
			for i := range readers {
				checkFields(t, answers[i], id, mode)
				assert.Equal(t, string(answers[0]), string(answers[i]), "one first sample for all")
				assert.LessOrEqual(t, latency[i], 1500*time.Millisecond, "the Engine's tick (1 s) and a collection")
			}
			t.Logf("%d readers before the first sample: %s", readers, summary(latency))

			// 50 readers at once while the stream runs: each answered from memory within 1 s.
			answers, latency = readTogether(t, cache, id, readers)
			for i := range readers {
				checkFields(t, answers[i], id, mode)
				assert.LessOrEqual(t, latency[i], time.Second)
			}
			t.Logf("%d readers of a running stream: %s", readers, summary(latency))

			// Later samples replace the first; with networks, they carry network_rate_stats.
			first := string(fieldsOf(t, answers[0])["read"])
			var later map[string]json.RawMessage
			require.Eventually(t, func() bool {
				raw, err := cache.Stats(t.Context(), id, "")
				require.NoError(t, err)
				later = fieldsOf(t, raw)
				return string(later["read"]) != first
			}, 5*time.Second, 50*time.Millisecond, "a later sample of the stream")
			var precpu struct {
				System uint64 `json:"system_cpu_usage"`
			}
			require.NoError(t, json.Unmarshal(later["precpu_stats"], &precpu))
			assert.NotZero(t, precpu.System, "precpu_stats is the sample before's cpu_stats")
			if mode == "host" {
				assert.NotContains(t, later, "network_rate_stats")
			} else {
				var rate networkRate
				require.Contains(t, later, "network_rate_stats")
				require.NoError(t, json.Unmarshal(later["network_rate_stats"], &rate))
				assert.GreaterOrEqual(t, rate.RxBytesPerSec, 0.0)
			}

			// The cost: 50 readers, each reading 20 times at its own pace of one read per 10 ms.
			var wg sync.WaitGroup
			cpu0, wall0 := cpuTime(t), time.Now()
			var slowest atomic.Int64
			for range readers {
				wg.Go(func() {
					pace := time.NewTicker(10 * time.Millisecond)
					defer pace.Stop()
					for range 20 {
						t0 := time.Now()
						_, err := cache.Stats(t.Context(), id, "")
						if !assert.NoError(t, err) {
							return
						}
						el := int64(time.Since(t0))
						for s := slowest.Load(); el > s && !slowest.CompareAndSwap(s, el); s = slowest.Load() {
						}
						<-pace.C
					}
				})
			}
			wg.Wait()
			t.Logf("%d reads in %v: slowest %v, process CPU %v", readers*20, time.Since(wall0).Round(time.Millisecond),
				time.Duration(slowest.Load()), cpuTime(t)-cpu0)
			assert.Equal(t, int32(1), d.streams.Load(), "one stream for every reader")
		})
	}
}

func TestIntegrationStoppedContainerEndsItsStream(t *testing.T) {
	client := itEngine(t)
	id := runSleeper(t, client, "bridge")
	d := &countingDocker{Docker: client}
	cache := New(d, Config{StoppedTTL: time.Hour})
	t.Cleanup(cache.Close)
	_, err := cache.Stats(ctxWithin(t, 5*time.Second), id, "")
	require.NoError(t, err)

	require.NoError(t, client.StopContainer(ctxWithin(t, time.Minute), id, 0))
	require.Eventually(t, func() bool {
		_, err = cache.Stats(t.Context(), id, "")
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "stats of the stopped container to fail")
	assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
	assert.Equal(t, int32(1), d.streams.Load())

	// A container already stopped when first asked about: its stream's first sample says so.
	fresh := New(client, Config{FirstSampleWait: 3 * time.Second})
	t.Cleanup(fresh.Close)
	t0 := time.Now()
	_, err = fresh.Stats(ctxWithin(t, 5*time.Second), id, "")
	assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
	t.Logf("a stopped container's first read failed in %v", time.Since(t0))

	// A container that was never there.
	_, err = cache.Stats(ctxWithin(t, 5*time.Second), "berth-dockerstats-it-nosuch", "")
	assert.ErrorIs(t, err, dockerclient.ErrNotFound)
}

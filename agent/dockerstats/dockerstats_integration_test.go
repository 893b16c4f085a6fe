//go:build integration

package dockerstats

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/berth-agent/berth/agent/kernelstats"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// itPrefix starts the name of every container these tests create.
const itPrefix = "berth-dockerstats-it-"

// countingDocker counts the Docker calls the cache makes.
type countingDocker struct {
	Docker
	inspects atomic.Int32
}

func (d *countingDocker) InspectContainer(ctx context.Context, id string) (*docker.Container, error) {
	d.inspects.Add(1)
	return d.Docker.InspectContainer(ctx, id)
}

// itKernel is the host's real kernel reader.
func itKernel(t *testing.T) Kernel {
	t.Helper()
	r, err := kernelstats.New(kernelstats.Config{})
	require.NoError(t, err, "this host's cgroups")
	return FromKernel(r)
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

// checkFields checks that a served reading has Docker's fields, networks when the network mode
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

// dockerOwn returns the Engine's own one-shot stats object of container id.
func dockerOwn(t *testing.T, id string) map[string]json.RawMessage {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/docker.sock")
	}}}
	resp, err := client.Get("http://docker/containers/" + id + "/stats?stream=false")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return fieldsOf(t, body)
}

func TestIntegrationReadingsServeManyReaders(t *testing.T) {
	client := itEngine(t)
	const readers = 50
	for _, mode := range []string{"bridge", "host"} {
		t.Run(mode, func(t *testing.T) {
			id := runSleeper(t, client, mode)
			d := &countingDocker{Docker: client}
			cache := New(d, itKernel(t), Config{})
			t.Cleanup(cache.Close)

			// 50 readers at once: one inspect, one reading, answered within a few milliseconds
			// (no wait for an Engine's collection tick).
			answers, latency := readTogether(t, cache, id, readers)
			own := dockerOwn(t, id)
			for i := range readers {
				checkFields(t, answers[i], id, mode)
				assert.Equal(t, string(answers[0]), string(answers[i]), "one reading for all")
				assert.LessOrEqual(t, latency[i], 500*time.Millisecond)
			}
			t.Logf("%d readers at once: %s", readers, summary(latency))
			ours := fieldsOf(t, answers[0])
			for f := range own {
				assert.Contains(t, ours, f, "a member of Docker's own stats object")
			}
			for f := range ours {
				if f != "network_rate_stats" {
					assert.Contains(t, own, f, "a member Docker's own stats object lacks")
				}
			}

			// A reading a second later carries the first as precpu_stats and, with networks,
			// network_rate_stats.
			first := string(ours["read"])
			var later map[string]json.RawMessage
			require.Eventually(t, func() bool {
				raw, err := cache.Stats(t.Context(), id, "")
				require.NoError(t, err)
				later = fieldsOf(t, raw)
				return string(later["read"]) != first
			}, 5*time.Second, 50*time.Millisecond, "a later reading")
			assert.Equal(t, first, string(later["preread"]))
			var precpu struct {
				System uint64 `json:"system_cpu_usage"`
			}
			require.NoError(t, json.Unmarshal(later["precpu_stats"], &precpu))
			assert.NotZero(t, precpu.System, "precpu_stats is the reading before's cpu_stats")
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
			assert.Equal(t, int32(1), d.inspects.Load(), "one inspect for every reader and reading")
		})
	}
}

func TestIntegrationStoppedContainer(t *testing.T) {
	client := itEngine(t)
	id := runSleeper(t, client, "bridge")
	d := &countingDocker{Docker: client}
	cache := New(d, itKernel(t), Config{StoppedTTL: time.Hour})
	t.Cleanup(cache.Close)
	_, err := cache.Stats(ctxWithin(t, 5*time.Second), id, "")
	require.NoError(t, err)

	require.NoError(t, client.StopContainer(ctxWithin(t, time.Minute), id, 0))
	require.Eventually(t, func() bool {
		_, err = cache.Stats(t.Context(), id, "")
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "stats of the stopped container to fail")
	assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
	inspects := d.inspects.Load()
	_, err = cache.Stats(t.Context(), id, "")
	assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
	assert.Equal(t, inspects, d.inspects.Load(), "a stopped container is remembered: Docker is not asked again")

	// A container already stopped when first asked about.
	fresh := New(client, itKernel(t), Config{})
	t.Cleanup(fresh.Close)
	_, err = fresh.Stats(ctxWithin(t, 5*time.Second), id, "")
	assert.ErrorIs(t, err, dockerclient.ErrNotRunning)

	// A container that was never there.
	_, err = cache.Stats(ctxWithin(t, 5*time.Second), "berth-dockerstats-it-nosuch", "")
	assert.ErrorIs(t, err, dockerclient.ErrNotFound)
}

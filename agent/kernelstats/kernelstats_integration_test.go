//go:build integration

package kernelstats

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// itPrefix starts the name of every container these tests create.
const itPrefix = "berth-kernelstats-it-"

// itEngine returns a client of the real Docker Engine with the test image, failing the test when
// either is missing.
func itEngine(t testing.TB) *dockerclient.Client {
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

func ctxWithin(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// itContainer is a running test container.
type itContainer struct {
	id, name string
	pid      int
	ip       string // on the default bridge; "" in other network modes
}

// runTestapp starts a testapp container running cmd and removes it when the test ends.
func runTestapp(t testing.TB, client *dockerclient.Client, what string, cmd []string, hc *docker.HostConfig) itContainer {
	t.Helper()
	ctx := ctxWithin(t, time.Minute)
	name := fmt.Sprintf("%s%s-%d", itPrefix, what, time.Now().UnixNano())
	ctr, err := client.CreateContainer(ctx, docker.CreateContainerOptions{
		Name:       name,
		Config:     &docker.Config{Image: itImage, Cmd: cmd, Labels: map[string]string{"com.berth-agent.test": "kernelstats"}},
		HostConfig: hc,
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
	info, err := client.InspectContainer(ctx, ctr.ID)
	require.NoError(t, err)
	require.True(t, info.State.Running, "%s is running", name)
	c := itContainer{id: ctr.ID, name: name, pid: info.State.Pid}
	if info.NetworkSettings != nil {
		c.ip = info.NetworkSettings.IPAddress
	}
	return c
}

// engineStats is Docker's stats object decoded into this package's types, whose JSON names are
// Docker's.
type engineStats struct {
	Name        string                               `json:"name"`
	ID          string                               `json:"id"`
	Read        time.Time                            `json:"read"`
	PidsStats   PidsStats                            `json:"pids_stats"`
	BlkioStats  BlkioStats                           `json:"blkio_stats"`
	CPUStats    CPUStats                             `json:"cpu_stats"`
	MemoryStats MemoryStats                          `json:"memory_stats"`
	Networks    map[string]dockerclient.NetworkStats `json:"networks"`
}

// engineSocket is the Docker Engine's unix socket (DOCKER_HOST when it names one).
func engineSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		return h
	}
	return "/var/run/docker.sock"
}

// engineStatsOf gets Docker's own stats object of container id (GET /containers/ID/stats?stream=0:
// the Engine collects twice, about a second apart, and answers with the second).
func engineStatsOf(t *testing.T, id string) (json.RawMessage, engineStats) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", engineSocket())
	}}}
	req, err := http.NewRequestWithContext(ctxWithin(t, 30*time.Second), http.MethodGet, "http://docker/containers/"+id+"/stats?stream=0", nil)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var s engineStats
	require.NoError(t, json.Unmarshal(raw, &s), string(raw))
	return json.RawMessage(raw), s
}

// between checks lo <= v <= hi for a cumulative counter.
func between(t *testing.T, what string, lo, v, hi uint64) {
	t.Helper()
	assert.True(t, lo <= v && v <= hi, "%s: Docker's %d is not between ours, %d and %d", what, v, lo, hi)
}

// near checks that Docker's v lies within tol (a fraction) of the range of ours, lo and hi.
func near(t *testing.T, what string, lo, v, hi uint64, tol float64) {
	t.Helper()
	lo, hi = min(lo, hi), max(lo, hi)
	assert.True(t, float64(v) >= float64(lo)*(1-tol) && float64(v) <= float64(hi)*(1+tol),
		"%s: Docker's %d is not within %.0f%% of ours, %d..%d", what, v, tol*100, lo, hi)
}

// compareWithEngine reads c's counters, gets Docker's, reads them again, and checks Docker's
// against ours: every cumulative counter lies between our two readings, memory usage within
// memTol of them, the gauges within them, and Docker's JSON has the members and types of ours. It
// returns the two readings and Docker's.
func compareWithEngine(t *testing.T, r *Reader, h *Handle, c itContainer, memTol float64) (Reading, Reading, engineStats) {
	t.Helper()
	before, err := r.Read(h, true)
	require.NoError(t, err)
	raw, d := engineStatsOf(t, c.id)
	after, err := r.Read(h, true)
	require.NoError(t, err)
	assert.True(t, !d.Read.Before(before.Read) && !d.Read.After(after.Read), "Docker read at %v, we at %v and %v", d.Read, before.Read, after.Read)

	bc, dc, ac := before.CPU, d.CPUStats, after.CPU
	between(t, "total_usage", bc.CPUUsage.TotalUsage, dc.CPUUsage.TotalUsage, ac.CPUUsage.TotalUsage)
	between(t, "usage_in_usermode", bc.CPUUsage.UsageInUsermode, dc.CPUUsage.UsageInUsermode, ac.CPUUsage.UsageInUsermode)
	between(t, "usage_in_kernelmode", bc.CPUUsage.UsageInKernelmode, dc.CPUUsage.UsageInKernelmode, ac.CPUUsage.UsageInKernelmode)
	require.Len(t, dc.CPUUsage.PercpuUsage, len(ac.CPUUsage.PercpuUsage))
	for i := range dc.CPUUsage.PercpuUsage {
		between(t, fmt.Sprintf("percpu_usage[%d]", i), bc.CPUUsage.PercpuUsage[i], dc.CPUUsage.PercpuUsage[i], ac.CPUUsage.PercpuUsage[i])
	}
	between(t, "system_cpu_usage", bc.SystemUsage, dc.SystemUsage, ac.SystemUsage)
	between(t, "throttling periods", bc.ThrottlingData.Periods, dc.ThrottlingData.Periods, ac.ThrottlingData.Periods)
	between(t, "throttled time", bc.ThrottlingData.ThrottledTime, dc.ThrottlingData.ThrottledTime, ac.ThrottlingData.ThrottledTime)
	assert.Equal(t, dc.OnlineCPUs, ac.OnlineCPUs, "online_cpus")

	bm, dm, am := before.Memory, d.MemoryStats, after.Memory
	near(t, "memory usage", bm.Usage, dm.Usage, am.Usage, memTol)
	between(t, "max_usage", bm.MaxUsage, dm.MaxUsage, am.MaxUsage)
	between(t, "failcnt", bm.Failcnt, dm.Failcnt, am.Failcnt)
	assert.Equal(t, dm.Limit, am.Limit, "memory limit")
	assert.ElementsMatch(t, slices.Collect(maps.Keys(dm.Stats)), slices.Collect(maps.Keys(am.Stats)), "memory_stats.stats keys")
	for _, k := range []string{"pgfault", "total_pgfault", "pgpgin", "total_pgpgin"} {
		if _, ok := dm.Stats[k]; ok {
			between(t, "memory stat "+k, bm.Stats[k], dm.Stats[k], am.Stats[k])
		}
	}
	near(t, "memory stat cache", bm.Stats["cache"], dm.Stats["cache"], am.Stats["cache"], memTol)

	// pids_stats.current is a gauge: a Go program's threads come and go.
	near(t, "pids current", before.Pids.Current, d.PidsStats.Current, after.Pids.Current, 0)
	assert.Equal(t, d.PidsStats.Limit, after.Pids.Limit, "pids limit")

	for _, l := range []struct {
		name        string
		b, d, after []BlkioStatEntry
	}{
		{"io_service_bytes_recursive", before.Blkio.IoServiceBytesRecursive, d.BlkioStats.IoServiceBytesRecursive, after.Blkio.IoServiceBytesRecursive},
		{"io_serviced_recursive", before.Blkio.IoServicedRecursive, d.BlkioStats.IoServicedRecursive, after.Blkio.IoServicedRecursive},
	} {
		require.Len(t, l.d, len(l.after), l.name)
		require.Len(t, l.b, len(l.after), l.name)
		for i, e := range l.d {
			a := l.after[i]
			assert.Equal(t, [3]any{a.Major, a.Minor, a.Op}, [3]any{e.Major, e.Minor, e.Op}, "%s[%d]", l.name, i)
			between(t, fmt.Sprintf("%s[%d] %s", l.name, i, e.Op), l.b[i].Value, e.Value, a.Value)
		}
	}

	assert.ElementsMatch(t, slices.Collect(maps.Keys(d.Networks)), slices.Collect(maps.Keys(after.Networks)), "interfaces")
	for name, dn := range d.Networks {
		bn, an := before.Networks[name], after.Networks[name]
		between(t, name+" rx_bytes", bn.RxBytes, dn.RxBytes, an.RxBytes)
		between(t, name+" rx_packets", bn.RxPackets, dn.RxPackets, an.RxPackets)
		between(t, name+" tx_bytes", bn.TxBytes, dn.TxBytes, an.TxBytes)
		between(t, name+" tx_packets", bn.TxPackets, dn.TxPackets, an.TxPackets)
		between(t, name+" rx_dropped", bn.RxDropped, dn.RxDropped, an.RxDropped)
		between(t, name+" tx_dropped", bn.TxDropped, dn.TxDropped, an.TxDropped)
	}

	mine := DockerJSON(c.id, c.name, after, &before)
	var dj, mj any
	require.NoError(t, json.Unmarshal(raw, &dj))
	require.NoError(t, json.Unmarshal(mine, &mj), string(mine))
	sameShape(t, "", dj, mj)
	assert.Equal(t, "/"+c.name, d.Name)
	assert.Equal(t, c.id, d.ID)
	if t.Failed() {
		t.Logf("Docker's: %s", raw)
		t.Logf("ours:     %s", mine)
	}
	return before, after, d
}

// sameShape checks that JSON values docker and mine have the same members at every level, of the
// same JSON types. Map-valued members (memory_stats.stats, networks) must have the same keys too;
// arrays are compared element by element as far as both reach (their lengths are values, checked
// with the counters).
func sameShape(t *testing.T, path string, docker, mine any) {
	t.Helper()
	if fmt.Sprintf("%T", docker) != fmt.Sprintf("%T", mine) {
		t.Errorf("%s: Docker has a %T, we a %T", path, docker, mine)
		return
	}
	switch d := docker.(type) {
	case map[string]any:
		m := mine.(map[string]any)
		dk, mk := slices.Sorted(maps.Keys(d)), slices.Sorted(maps.Keys(m))
		if !slices.Equal(dk, mk) {
			t.Errorf("%s: Docker's members %v, ours %v", path, dk, mk)
		}
		for k, v := range d {
			if mv, ok := m[k]; ok {
				sameShape(t, path+"."+k, v, mv)
			}
		}
	case []any:
		m := mine.([]any)
		for i := range min(len(d), len(m)) {
			sameShape(t, fmt.Sprintf("%s[%d]", path, i), d[i], m[i])
		}
	}
}

// itReader returns a Reader of this host, which must be readable.
func itReader(t testing.TB) *Reader {
	t.Helper()
	r, err := New(Config{})
	require.NoError(t, err)
	return r
}

func openIt(t testing.TB, r *Reader, c itContainer, opts OpenOptions) *Handle {
	t.Helper()
	h, err := r.Open(c.pid, c.id, opts)
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

// generateTraffic GETs url in a loop until the test ends.
func generateTraffic(t *testing.T, url string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	client := &http.Client{Timeout: 5 * time.Second}
	wg.Go(func() {
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return
			}
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
}

// waitFor reads h until cond holds of a reading, failing after d.
func waitFor(t *testing.T, r *Reader, h *Handle, d time.Duration, what string, cond func(Reading) bool) Reading {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		rd, err := r.Read(h, false)
		require.NoError(t, err)
		if cond(rd) {
			return rd
		}
		require.True(t, time.Now().Before(deadline), "%s within %v", what, d)
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIntegrationMatchesDocker(t *testing.T) {
	client := itEngine(t)
	r := itReader(t)
	t.Logf("cgroup v2: %v", r.CgroupV2())

	t.Run("busy on its bridge network", func(t *testing.T) {
		c := runTestapp(t, client, "web", []string{"http", "-addr", ":8080"}, nil)
		require.NotEmpty(t, c.ip, "an address on the default bridge")
		h := openIt(t, r, c, OpenOptions{Networks: true})
		start, err := r.Read(h, false)
		require.NoError(t, err)
		generateTraffic(t, "http://"+net.JoinHostPort(c.ip, "8080")+"/echo?msg="+strings.Repeat("x", 512))
		waitFor(t, r, h, 30*time.Second, "traffic and CPU time", func(rd Reading) bool {
			return rd.Networks["eth0"].TxBytes > start.Networks["eth0"].TxBytes+1<<20 && rd.CPU.CPUUsage.TotalUsage > start.CPU.CPUUsage.TotalUsage+50_000_000
		})
		before, after, _ := compareWithEngine(t, r, h, c, 0.25)
		assert.Greater(t, after.CPU.CPUUsage.TotalUsage, before.CPU.CPUUsage.TotalUsage, "the container burns CPU")
		assert.Greater(t, after.Networks["eth0"].RxBytes, before.Networks["eth0"].RxBytes, "and receives")
	})

	t.Run("holding memory", func(t *testing.T) {
		c := runTestapp(t, client, "alloc", []string{"alloc", "-mib", "48"}, &docker.HostConfig{Memory: 256 << 20, PidsLimit: ptr(int64(64))})
		h := openIt(t, r, c, OpenOptions{Networks: true})
		waitFor(t, r, h, 30*time.Second, "48 MiB allocated", func(rd Reading) bool { return rd.Memory.Usage >= 48<<20 })
		before, after, d := compareWithEngine(t, r, h, c, 0.03)
		assert.Equal(t, uint64(256<<20), after.Memory.Limit)
		assert.Equal(t, uint64(64), after.Pids.Limit)
		assert.NotZero(t, after.Pids.Current)
		if before.Pids == after.Pids {
			assert.Equal(t, after.Pids, d.PidsStats, "a steady container's pids")
		}
	})

	t.Run("reading a file from disk", func(t *testing.T) {
		const size = 4 << 20
		dir := t.TempDir()
		blob := filepath.Join(dir, "blob")
		writeUncached(t, blob, size)
		// The kernel counts a v1 cgroup's block I/O (blkio.throttle.*) only for devices with a
		// throttle limit: one no read comes near.
		c := runTestapp(t, client, "read", []string{"read", "-path", "/data/blob", "-until", "never-there", "-wait", "0"},
			&docker.HostConfig{Binds: []string{dir + ":/data:ro"}, BlkioDeviceReadBps: []docker.BlockLimit{{Path: diskOf(t, dir), Rate: 1 << 40}}})
		h := openIt(t, r, c, OpenOptions{Networks: true})
		rd := waitFor(t, r, h, 30*time.Second, "the file read from disk", func(rd Reading) bool { return Sample(rd, nil).StorageRead >= size })
		t.Logf("block I/O read: %d bytes", Sample(rd, nil).StorageRead)
		compareWithEngine(t, r, h, c, 0.25)
	})
}

// writeUncached writes size random bytes to path and drops them from the page cache, so that the
// next reader reads them from the disk.
func writeUncached(t *testing.T, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
}

// diskOf returns the device node of the disk holding dir's filesystem (the whole disk, which is
// what a throttle limit takes).
func diskOf(t *testing.T, dir string) string {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	sys, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	require.NoError(t, err, "the test's temporary directory must be on a block device (not tmpfs)")
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		sys = filepath.Dir(sys)
	}
	uevent, err := os.ReadFile(filepath.Join(sys, "uevent"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(uevent), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			return "/dev/" + name
		}
	}
	t.Fatalf("no DEVNAME in %s/uevent", sys)
	return ""
}

func ptr[T any](v T) *T { return &v }

func TestIntegrationHostNetworkHasNoNetworks(t *testing.T) {
	client := itEngine(t)
	r := itReader(t)
	c := runTestapp(t, client, "host", []string{"sleep"}, &docker.HostConfig{NetworkMode: "host"})
	h := openIt(t, r, c, OpenOptions{})
	rd, err := r.Read(h, true)
	require.NoError(t, err)
	assert.Nil(t, rd.Networks)
	assert.Nil(t, Sample(rd, nil).Networks)
	var mine map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(DockerJSON(c.id, c.name, rd, nil), &mine))
	assert.NotContains(t, mine, "networks")
	raw, _ := engineStatsOf(t, c.id)
	var theirs map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &theirs))
	assert.NotContains(t, theirs, "networks", "Docker has none either")
}

func TestIntegrationStoppedContainerIsGone(t *testing.T) {
	client := itEngine(t)
	r := itReader(t)
	c := runTestapp(t, client, "stop", []string{"sleep"}, nil)
	other := runTestapp(t, client, "other", []string{"sleep"}, nil)
	for _, opts := range []OpenOptions{{Networks: true}, {}} {
		h := openIt(t, r, c, opts)
		_, err := r.Read(h, true)
		require.NoError(t, err)
	}
	withNets, withoutNets := openIt(t, r, c, OpenOptions{Networks: true}), openIt(t, r, c, OpenOptions{})

	// Another container's PID with this one's ID is refused.
	_, err := r.Open(other.pid, c.id, OpenOptions{})
	assert.ErrorContains(t, err, "does not name container "+c.id)

	require.NoError(t, client.StopContainer(ctxWithin(t, time.Minute), c.id, 10*time.Second))
	for _, h := range []*Handle{withNets, withoutNets} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := r.Read(h, false)
			if err != nil {
				require.ErrorIs(t, err, ErrGone)
				assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
				break
			}
			require.True(t, time.Now().Before(deadline), "ErrGone within 10 s of the stop")
			time.Sleep(20 * time.Millisecond)
		}
		_, err := r.Read(h, true)
		assert.ErrorIs(t, err, ErrGone)
	}
	_, err = r.Open(c.pid, c.id, OpenOptions{})
	assert.Error(t, err, "the stopped container's PID")
}

// cpuTime returns the CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRead reads a running container on its bridge network; cpu-ns/op is the CPU time of
// the whole process (user and system) per read.
func BenchmarkRead(b *testing.B) {
	client := itEngine(b)
	r := itReader(b)
	c := runTestapp(b, client, "bench", []string{"sleep"}, nil)
	for _, detail := range []bool{false, true} {
		b.Run(fmt.Sprintf("detail=%v", detail), func(b *testing.B) {
			h := openIt(b, r, c, OpenOptions{Networks: true})
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				if _, err := r.Read(h, detail); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

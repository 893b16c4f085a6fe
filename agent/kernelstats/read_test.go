package kernelstats

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// openFake opens the fake container of h.
func openFake(t *testing.T, h *fakeHost, opts OpenOptions) (*Reader, *Handle) {
	t.Helper()
	r := h.reader()
	hd, err := r.Open(testPID, testID, opts)
	require.NoError(t, err)
	t.Cleanup(func() { hd.Close() })
	return r, hd
}

// readAt reads hd and checks that the reading's time was taken during the read, then clears it.
func readAt(t *testing.T, r *Reader, hd *Handle, detail bool) Reading {
	t.Helper()
	before := time.Now()
	rd, err := r.Read(hd, detail)
	require.NoError(t, err)
	assert.False(t, rd.Read.Before(before) || rd.Read.After(time.Now()), "read time %v", rd.Read)
	rd.Read = time.Time{}
	return rd
}

var wantEth0 = dockerclient.NetworkStats{RxBytes: 1042, RxPackets: 11, RxErrors: 1, RxDropped: 2, TxBytes: 500, TxPackets: 5, TxErrors: 3, TxDropped: 4}

func TestReadV1(t *testing.T) {
	h := newV1Host(t)
	r, hd := openFake(t, h, OpenOptions{Networks: true, IgnoreInterfaces: []string{"eth1"}})
	bytesEntries := []BlkioStatEntry{{8, 0, "Read", 4096}, {8, 0, "Write", 8192}, {8, 0, "Sync", 8192}, {8, 0, "Async", 4096}, {8, 0, "Discard", 0}, {8, 0, "Total", 12288}}
	nets := map[string]dockerclient.NetworkStats{"eth0": wantEth0}

	assert.Equal(t, Reading{
		CPU:      CPUStats{CPUUsage: CPUUsage{TotalUsage: 123456789}},
		Memory:   MemoryStats{Usage: 4415488, Cache: 1875968},
		Blkio:    BlkioStats{IoServiceBytesRecursive: bytesEntries, IoServicedRecursive: []BlkioStatEntry{}, IoQueuedRecursive: []BlkioStatEntry{}, IoServiceTimeRecursive: []BlkioStatEntry{}, IoWaitTimeRecursive: []BlkioStatEntry{}, IoMergedRecursive: []BlkioStatEntry{}, IoTimeRecursive: []BlkioStatEntry{}, SectorsRecursive: []BlkioStatEntry{}},
		Networks: nets,
	}, readAt(t, r, hd, false))

	stats := map[string]uint64{}
	for _, k := range v1MemoryKeys {
		stats[k] = 0
	}
	for k, v := range map[string]uint64{"cache": 1875968, "rss": 1855488, "mapped_file": 1425408, "dirty": 4096, "pgpgin": 1746, "pgpgout": 835,
		"pgfault": 1762, "pgmajfault": 8, "inactive_anon": 1851392, "active_anon": 4096, "inactive_file": 720896, "active_file": 1155072,
		"hierarchical_memory_limit": 9223372036854771712, "hierarchical_memsw_limit": 9223372036854771712, "total_cache": 1875968, "total_rss": 1855488} {
		stats[k] = v
	}
	assert.Equal(t, Reading{
		Detail: true,
		CPU: CPUStats{
			CPUUsage:       CPUUsage{TotalUsage: 123456789, PercpuUsage: []uint64{100000000, 23456789}, UsageInKernelmode: 70000000, UsageInUsermode: 50000000},
			SystemUsage:    systemUsageFixture,
			OnlineCPUs:     2,
			ThrottlingData: ThrottlingData{Periods: 10, ThrottledPeriods: 2, ThrottledTime: 3000},
		},
		Memory: MemoryStats{Usage: 4415488, MaxUsage: 5000000, Stats: stats, Limit: hostBytes, Cache: 1875968},
		Blkio: BlkioStats{IoServiceBytesRecursive: bytesEntries,
			IoServicedRecursive: []BlkioStatEntry{{8, 0, "Read", 1}, {8, 0, "Write", 2}, {8, 0, "Sync", 2}, {8, 0, "Async", 1}, {8, 0, "Discard", 0}, {8, 0, "Total", 3}},
			IoQueuedRecursive:   []BlkioStatEntry{}, IoServiceTimeRecursive: []BlkioStatEntry{}, IoWaitTimeRecursive: []BlkioStatEntry{}, IoMergedRecursive: []BlkioStatEntry{}, IoTimeRecursive: []BlkioStatEntry{}, SectorsRecursive: []BlkioStatEntry{}},
		Pids:     PidsStats{Current: 7},
		Networks: nets,
	}, readAt(t, r, hd, true))

	// The files are read again, not remembered.
	h.write("sys/fs/cgroup/cpu,cpuacct/docker/"+testID+"/cpuacct.usage", "223456789\n")
	h.write("proc/4242/net/dev", netDevFixture[:len(netDevFixture)-len("  eth1:      70       1    0    0    0     0          0         0       80       1    0    0    0     0       0          0\n")])
	rd := readAt(t, r, hd, false)
	assert.Equal(t, uint64(223456789), rd.CPU.CPUUsage.TotalUsage)
	assert.Equal(t, nets, rd.Networks)
}

func TestReadV1ReusesThePageCacheFigureForAWhile(t *testing.T) {
	h := newV1Host(t)
	r, hd := openFake(t, h, OpenOptions{})
	stat := "sys/fs/cgroup/memory/docker/" + testID + "/memory.stat"
	assert.Equal(t, uint64(1875968), readAt(t, r, hd, false).Memory.Cache)
	h.write(stat, "cache 4096\n")
	h.write("sys/fs/cgroup/memory/docker/"+testID+"/memory.usage_in_bytes", "8192\n")
	rd := readAt(t, r, hd, false)
	assert.Equal(t, uint64(1875968), rd.Memory.Cache, "memory.stat read again within cacheMaxAge")
	assert.Equal(t, uint64(8192), rd.Memory.Usage, "usage is read every time")
	hd.cacheRead = hd.cacheRead.Add(-cacheMaxAge)
	assert.Equal(t, uint64(4096), readAt(t, r, hd, false).Memory.Cache, "memory.stat read again once cacheMaxAge passed")
	h.write(stat, "cache 2048\n")
	assert.Equal(t, uint64(2048), readAt(t, r, hd, true).Memory.Cache, "a reading with detail reads it every time")
	assert.Equal(t, uint64(2048), readAt(t, r, hd, false).Memory.Cache, "and refreshes the figure")
}

func TestReadV1Limits(t *testing.T) {
	h := newV1Host(t)
	mem := "sys/fs/cgroup/memory/docker/" + testID
	h.write(mem+"/memory.limit_in_bytes", "1048576\n")
	h.write(mem+"/memory.failcnt", "3\n")
	h.write("sys/fs/cgroup/pids/docker/"+testID+"/pids.max", "100\n")
	r, hd := openFake(t, h, OpenOptions{})
	rd := readAt(t, r, hd, true)
	assert.Equal(t, uint64(1048576), rd.Memory.Limit, "a limit below the host's memory")
	assert.Equal(t, uint64(3), rd.Memory.Failcnt)
	assert.Equal(t, PidsStats{Current: 7, Limit: 100}, rd.Pids)
	assert.Nil(t, rd.Networks, "no networks read")
}

func TestReadV1BlkioCFQ(t *testing.T) {
	cfqFiles := func(h *fakeHost, content string) {
		dir := "sys/fs/cgroup/blkio/docker/" + testID + "/blkio."
		for _, name := range []string{"sectors_recursive", "io_serviced_recursive", "io_queued_recursive", "io_service_time_recursive", "io_wait_time_recursive", "io_merged_recursive", "time_recursive"} {
			h.write(dir+name, content)
		}
		h.write(dir+"io_service_bytes_recursive", content)
	}
	t.Run("CFQ files with entries are read", func(t *testing.T) {
		h := newV1Host(t)
		cfqFiles(h, "8:0 Read 5\n8:0 Write 6\n8:0 Total 11\nTotal 11\n")
		h.write("sys/fs/cgroup/blkio/docker/"+testID+"/blkio.sectors_recursive", "8:0 9\n")
		r, hd := openFake(t, h, OpenOptions{})
		assert.True(t, hd.cfq)
		e := []BlkioStatEntry{{8, 0, "Read", 5}, {8, 0, "Write", 6}, {8, 0, "Total", 11}}
		assert.Equal(t, BlkioStats{IoServiceBytesRecursive: e, IoServicedRecursive: e, IoQueuedRecursive: e, IoServiceTimeRecursive: e,
			IoWaitTimeRecursive: e, IoMergedRecursive: e, IoTimeRecursive: e, SectorsRecursive: []BlkioStatEntry{{Major: 8, Minor: 0, Value: 9}}},
			readAt(t, r, hd, true).Blkio)
		assert.Equal(t, e, readAt(t, r, hd, false).Blkio.IoServiceBytesRecursive)
	})
	t.Run("empty CFQ files fall back to the throttle files", func(t *testing.T) {
		h := newV1Host(t)
		cfqFiles(h, "Total 0\n")
		r, hd := openFake(t, h, OpenOptions{})
		assert.True(t, hd.cfq)
		rd := readAt(t, r, hd, true)
		assert.Len(t, rd.Blkio.IoServiceBytesRecursive, 6)
		assert.Len(t, rd.Blkio.IoServicedRecursive, 6)
		assert.Equal(t, []BlkioStatEntry{}, rd.Blkio.SectorsRecursive)
		assert.Len(t, readAt(t, r, hd, false).Blkio.IoServiceBytesRecursive, 6)
	})
}

func TestReadV1MissingFiles(t *testing.T) {
	h := newV1Host(t)
	blkio := "sys/fs/cgroup/blkio/docker/" + testID
	h.remove(blkio + "/blkio.throttle.io_service_bytes")
	h.remove(blkio + "/blkio.throttle.io_serviced")
	mem := "sys/fs/cgroup/memory/docker/" + testID
	h.remove(mem + "/memory.max_usage_in_bytes")
	h.remove(mem + "/memory.stat")
	h.remove("sys/fs/cgroup/cpu,cpuacct/docker/" + testID + "/cpuacct.usage_percpu")
	h.remove("sys/fs/cgroup/pids/docker/" + testID)
	h.mountInfo(v1MountInfo[:len(v1MountInfo)-2]...) // pids not mounted
	r, hd := openFake(t, h, OpenOptions{})
	rd := readAt(t, r, hd, true)
	assert.Equal(t, []BlkioStatEntry{}, rd.Blkio.IoServiceBytesRecursive, "no throttle files: [], as Docker")
	assert.Equal(t, []BlkioStatEntry{}, rd.Blkio.IoServicedRecursive)
	assert.Equal(t, MemoryStats{Usage: 4415488, Limit: hostBytes}, rd.Memory)
	assert.Nil(t, rd.CPU.CPUUsage.PercpuUsage)
	assert.Equal(t, uint64(123456789), rd.CPU.CPUUsage.TotalUsage)
	assert.Equal(t, PidsStats{}, rd.Pids)
}

func TestReadV2(t *testing.T) {
	h := newV2Host(t)
	r, hd := openFake(t, h, OpenOptions{Networks: true})
	assert.Equal(t, h.path(v2Dir), hd.dirs[ctlUnified])
	io := []BlkioStatEntry{{8, 0, "read", 4096}, {8, 0, "write", 8192}, {253, 0, "read", 1}, {253, 0, "write", 0}}
	nets := map[string]dockerclient.NetworkStats{"eth0": wantEth0, "eth1": {RxBytes: 70, RxPackets: 1, TxBytes: 80, TxPackets: 1}}
	cpu := CPUStats{CPUUsage: CPUUsage{TotalUsage: 61286000, UsageInKernelmode: 41286000, UsageInUsermode: 20000000},
		ThrottlingData: ThrottlingData{Periods: 3, ThrottledPeriods: 1, ThrottledTime: 7000}}

	assert.Equal(t, Reading{CPU: cpu, Memory: MemoryStats{Usage: 4415488}, Blkio: BlkioStats{IoServiceBytesRecursive: io}, Networks: nets},
		readAt(t, r, hd, false))

	stats := map[string]uint64{}
	for _, k := range v2MemoryKeys {
		stats[k] = 0
	}
	for k, v := range map[string]uint64{"anon": 1855488, "file": 1875968, "kernel_stack": 16384, "file_mapped": 1425408, "file_dirty": 4096,
		"inactive_anon": 1851392, "active_anon": 4096, "inactive_file": 720896, "active_file": 1155072, "slab_reclaimable": 1000,
		"slab_unreclaimable": 2000, "slab": 3000, "pgfault": 1762, "pgmajfault": 8} {
		stats[k] = v
	}
	cpu.SystemUsage, cpu.OnlineCPUs = systemUsageFixture, 2
	assert.Equal(t, Reading{
		Detail:   true,
		CPU:      cpu,
		Memory:   MemoryStats{Usage: 4415488, Stats: stats, Failcnt: 2, Limit: hostBytes},
		Blkio:    BlkioStats{IoServiceBytesRecursive: io},
		Pids:     PidsStats{Current: 7, Limit: math.MaxUint64},
		Networks: nets,
	}, readAt(t, r, hd, true))
}

func TestReadV2MissingFiles(t *testing.T) {
	// A cgroup without the memory, io and pids controllers enabled has only cpu.stat's core keys.
	h := newV2Host(t)
	for name := range v2Files {
		if name != "cpu.stat" {
			h.remove(v2Dir + "/" + name)
		}
	}
	h.write(v2Dir+"/cpu.stat", "usage_usec 5\nuser_usec 3\nsystem_usec 2\n")
	r, hd := openFake(t, h, OpenOptions{})
	rd := readAt(t, r, hd, true)
	assert.Equal(t, CPUUsage{TotalUsage: 5000, UsageInUsermode: 3000, UsageInKernelmode: 2000}, rd.CPU.CPUUsage)
	assert.Len(t, rd.Memory.Stats, len(v2MemoryKeys), "Docker's keys even without memory.stat")
	rd.Memory.Stats = nil
	assert.Equal(t, MemoryStats{}, rd.Memory)
	assert.Nil(t, rd.Blkio.IoServiceBytesRecursive, "no io.stat: null, as Docker")
	assert.Equal(t, PidsStats{}, rd.Pids)
}

func TestReadMemoryLimitOfTheHost(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  uint64
	}{{"max\n", hostBytes}, {"2097153\n", hostBytes}, {"2097152\n", hostBytes}, {"1000\n", 1000}} {
		h := newV2Host(t)
		h.write(v2Dir+"/memory.max", tc.limit)
		r, hd := openFake(t, h, OpenOptions{})
		assert.Equal(t, tc.want, readAt(t, r, hd, true).Memory.Limit, tc.limit)
	}
}

func TestReadMalformedFileNamesIt(t *testing.T) {
	v1mem := "sys/fs/cgroup/memory/docker/" + testID + "/"
	v1cpu := "sys/fs/cgroup/cpu,cpuacct/docker/" + testID + "/"
	v1blkio := "sys/fs/cgroup/blkio/docker/" + testID + "/"
	for _, tc := range []struct {
		v2      bool
		file    string // under the host's root
		content string
		detail  bool
		wantErr string
	}{
		{file: v1cpu + "cpuacct.usage", content: "12x\n", wantErr: `cpuacct.usage: not an unsigned 64-bit decimal number: "12x"`},
		{file: v1cpu + "cpuacct.usage", content: "1 2\n", wantErr: `cpuacct.usage: want one value, got "1 2\n"`},
		{file: v1cpu + "cpuacct.usage", content: "", wantErr: "cpuacct.usage: not an unsigned 64-bit decimal number: empty"},
		{file: v1cpu + "cpuacct.usage", content: "18446744073709551616\n", wantErr: "overflows"},
		{file: v1mem + "memory.usage_in_bytes", content: "-1\n", wantErr: "memory.usage_in_bytes: not an unsigned"},
		{file: v1mem + "memory.stat", content: "cache 1\nrss\n", wantErr: `memory.stat line 2: want "KEY VALUE", got "rss"`},
		{file: v1mem + "memory.stat", content: "cache 1 2\n", wantErr: "memory.stat line 1: want \"KEY VALUE\""},
		{file: v1mem + "memory.stat", content: "cache x\n", detail: true, wantErr: "memory.stat line 1 (cache): not an unsigned"},
		{file: v1mem + "memory.limit_in_bytes", content: "lots\n", detail: true, wantErr: "memory.limit_in_bytes: not an unsigned"},
		{file: v1blkio + "blkio.throttle.io_service_bytes", content: "8:0 Read 1\n8:0\n", wantErr: `blkio.throttle.io_service_bytes line 2: want "MAJ:MIN [OP] VALUE", got "8:0"`},
		{file: v1blkio + "blkio.throttle.io_service_bytes", content: "8:0 Read 1 2 3\n", wantErr: "blkio.throttle.io_service_bytes line 1: want"},
		{file: v1blkio + "blkio.throttle.io_service_bytes", content: "x:0 Read 1\n", wantErr: "blkio.throttle.io_service_bytes line 1: major: not an unsigned"},
		{file: v1blkio + "blkio.throttle.io_serviced", content: "8:y Read 1\n", detail: true, wantErr: "blkio.throttle.io_serviced line 1: minor: not an unsigned"},
		{file: v1blkio + "blkio.throttle.io_serviced", content: "8:0 Read z\n", detail: true, wantErr: "blkio.throttle.io_serviced line 1: value: not an unsigned"},
		{file: v1cpu + "cpuacct.stat", content: "user 1\n", detail: true, wantErr: `cpuacct.stat: want "user" and "system" lines`},
		{file: v1cpu + "cpuacct.usage_percpu", content: "1 2 x\n", detail: true, wantErr: "cpuacct.usage_percpu line 1: not an unsigned"},
		{file: v1cpu + "cpu.stat", content: "nr_periods\n", detail: true, wantErr: "cpu.stat line 1: want"},
		{file: "sys/fs/cgroup/pids/docker/" + testID + "/pids.max", content: "unlimited\n", detail: true, wantErr: "pids.max: not an unsigned"},
		{file: "proc/stat", content: "cpu  1 2 3\n", detail: true, wantErr: "proc/stat line 1: want at least 7 counters on the cpu line, got 3"},
		{file: "proc/stat", content: "cpu  1 2 3 4 5 6 x\n", detail: true, wantErr: "proc/stat line 1: counter 7: not an unsigned"},
		{file: "proc/stat", content: "intr 1\n", detail: true, wantErr: `proc/stat: no "cpu" line at the start`},
		{file: "proc/4242/net/dev", content: "h\nh\n  eth0: 1 2 3\n", wantErr: "net/dev line 3 (eth0): counter 4: not an unsigned 64-bit decimal number: empty"},
		{file: "proc/4242/net/dev", content: "h\nh\nno colon\n", wantErr: `net/dev line 3: want "NAME: 16 counters", got "no colon"`},
		{file: "proc/4242/net/dev", content: "h\nh\neth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", wantErr: "net/dev line 3 (eth0): more than 16 counters"},
		{v2: true, file: v2Dir + "/cpu.stat", content: "usage_usec -5\n", wantErr: "cpu.stat line 1 (usage_usec): not an unsigned"},
		{v2: true, file: v2Dir + "/memory.current", content: "\n\n", wantErr: "memory.current: not an unsigned 64-bit decimal number: empty"},
		{v2: true, file: v2Dir + "/memory.current", content: "1\n2\n", wantErr: `memory.current: want one value, got "1\n2\n"`},
		{v2: true, file: v2Dir + "/io.stat", content: "8-0 rbytes=1\n", wantErr: `io.stat line 1: want "MAJ:MIN KEY=VALUE...", got "8-0 rbytes=1"`},
		{v2: true, file: v2Dir + "/io.stat", content: "8:0 rbytes\n", wantErr: "io.stat line 1: want KEY=VALUE, got \"rbytes\""},
		{v2: true, file: v2Dir + "/io.stat", content: "8:0 rbytes=1 wbytes=x\n", wantErr: "io.stat line 1 (wbytes): not an unsigned"},
		{v2: true, file: v2Dir + "/memory.stat", content: "anon 1 2\n", detail: true, wantErr: "memory.stat line 1: want"},
		{v2: true, file: v2Dir + "/memory.events", content: "oom 1.5\n", detail: true, wantErr: "memory.events line 1 (oom): not an unsigned"},
		{v2: true, file: v2Dir + "/memory.max", content: "max max\n", detail: true, wantErr: "memory.max: want one value"},
		{v2: true, file: v2Dir + "/pids.current", content: "seven\n", detail: true, wantErr: "pids.current: not an unsigned"},
	} {
		t.Run(tc.file+" "+strconv.Quote(tc.content), func(t *testing.T) {
			var h *fakeHost
			if tc.v2 {
				h = newV2Host(t)
			} else {
				h = newV1Host(t)
			}
			r, hd := openFake(t, h, OpenOptions{Networks: true})
			h.write(tc.file, tc.content)
			_, err := r.Read(hd, tc.detail)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "stats of container "+testID+" (pid 4242): ")
			assert.Contains(t, err.Error(), h.path(tc.file))
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.False(t, errors.Is(err, ErrGone), "a live process's bad file is not ErrGone: %v", err)
		})
	}
}

func TestReadGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		v2   bool
		opts OpenOptions
	}{
		{"v1 with networks", false, OpenOptions{Networks: true}},
		{"v1 without networks", false, OpenOptions{}},
		{"v2 with networks", true, OpenOptions{Networks: true}},
		{"v2 without networks", true, OpenOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newV1Host(t)
			if tc.v2 {
				h = newV2Host(t)
			}
			r, hd := openFake(t, h, tc.opts)
			_, err := r.Read(hd, false)
			require.NoError(t, err)
			h.remove("proc/4242")
			for _, detail := range []bool{false, true} {
				_, err = r.Read(hd, detail)
				require.ErrorIs(t, err, ErrGone)
				assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
				assert.Contains(t, err.Error(), "stats of container "+testID+" (pid 4242): container gone")
			}
		})
	}
	t.Run("a bad file of an exited process is ErrGone", func(t *testing.T) {
		h := newV1Host(t)
		r, hd := openFake(t, h, OpenOptions{})
		h.write("sys/fs/cgroup/memory/docker/"+testID+"/memory.stat", "half a li")
		h.remove("proc/4242")
		_, err := r.Read(hd, false)
		assert.ErrorIs(t, err, ErrGone)
	})
}

func TestReadBigFile(t *testing.T) {
	// A file larger than the first buffer is read whole; one larger than the bound is an error.
	h := newV1Host(t)
	r, hd := openFake(t, h, OpenOptions{})
	stat := v1Files["sys/fs/cgroup/memory/docker/"+testID]["memory.stat"]
	for len(stat) < 100<<10 {
		stat += "numa_foo 1\n"
	}
	h.write("sys/fs/cgroup/memory/docker/"+testID+"/memory.stat", stat+"total_unevictable 99\n")
	rd := readAt(t, r, hd, true)
	assert.Equal(t, uint64(99), rd.Memory.Stats["total_unevictable"])
	assert.Equal(t, uint64(1875968), rd.Memory.Stats["cache"])

	h.write("sys/fs/cgroup/memory/docker/"+testID+"/memory.stat", string(make([]byte, maxFileSize+1)))
	_, err := r.Read(hd, true)
	assert.ErrorContains(t, err, "memory.stat: larger than 1048576 bytes")
}

func TestDockerJSON(t *testing.T) {
	read := time.Date(2026, 12, 2, 6, 44, 24, 545317099, time.FixedZone("CET", 3600))
	t.Run("v1, later sample", func(t *testing.T) {
		h := newV1Host(t)
		r, hd := openFake(t, h, OpenOptions{Networks: true, IgnoreInterfaces: []string{"eth1"}})
		cur := readAt(t, r, hd, true)
		cur.Read = read
		pre := cur
		pre.Read = read.Add(-time.Second)
		pre.CPU.CPUUsage.TotalUsage, pre.CPU.SystemUsage = 100, 200
		got := DockerJSON(testID, "web", cur, &pre)
		want := `{"name":"/web","id":"` + testID + `","read":"2026-12-02T05:44:24.545317099Z","preread":"2026-12-02T05:44:23.545317099Z",` +
			`"pids_stats":{"current":7},` +
			`"blkio_stats":{"io_service_bytes_recursive":[{"major":8,"minor":0,"op":"Read","value":4096},{"major":8,"minor":0,"op":"Write","value":8192},{"major":8,"minor":0,"op":"Sync","value":8192},{"major":8,"minor":0,"op":"Async","value":4096},{"major":8,"minor":0,"op":"Discard","value":0},{"major":8,"minor":0,"op":"Total","value":12288}],` +
			`"io_serviced_recursive":[{"major":8,"minor":0,"op":"Read","value":1},{"major":8,"minor":0,"op":"Write","value":2},{"major":8,"minor":0,"op":"Sync","value":2},{"major":8,"minor":0,"op":"Async","value":1},{"major":8,"minor":0,"op":"Discard","value":0},{"major":8,"minor":0,"op":"Total","value":3}],` +
			`"io_queue_recursive":[],"io_service_time_recursive":[],"io_wait_time_recursive":[],"io_merged_recursive":[],"io_time_recursive":[],"sectors_recursive":[]},` +
			`"num_procs":0,"storage_stats":{},` +
			`"cpu_stats":{"cpu_usage":{"total_usage":123456789,"percpu_usage":[100000000,23456789],"usage_in_kernelmode":70000000,"usage_in_usermode":50000000},"system_cpu_usage":958090000000,"online_cpus":2,"throttling_data":{"periods":10,"throttled_periods":2,"throttled_time":3000}},` +
			`"precpu_stats":{"cpu_usage":{"total_usage":100,"percpu_usage":[100000000,23456789],"usage_in_kernelmode":70000000,"usage_in_usermode":50000000},"system_cpu_usage":200,"online_cpus":2,"throttling_data":{"periods":10,"throttled_periods":2,"throttled_time":3000}},` +
			`"memory_stats":{"usage":4415488,"max_usage":5000000,"stats":{"active_anon":4096,"active_file":1155072,"cache":1875968,"dirty":4096,"hierarchical_memory_limit":9223372036854771712,"hierarchical_memsw_limit":9223372036854771712,"inactive_anon":1851392,"inactive_file":720896,"mapped_file":1425408,"pgfault":1762,"pgmajfault":8,"pgpgin":1746,"pgpgout":835,"rss":1855488,"rss_huge":0,"total_active_anon":0,"total_active_file":0,"total_cache":1875968,"total_dirty":0,"total_inactive_anon":0,"total_inactive_file":0,"total_mapped_file":0,"total_pgfault":0,"total_pgmajfault":0,"total_pgpgin":0,"total_pgpgout":0,"total_rss":1855488,"total_rss_huge":0,"total_unevictable":0,"total_writeback":0,"unevictable":0,"writeback":0},"limit":2097152},` +
			`"networks":{"eth0":{"rx_bytes":1042,"rx_packets":11,"rx_errors":1,"rx_dropped":2,"tx_bytes":500,"tx_packets":5,"tx_errors":3,"tx_dropped":4}}}`
		assert.Equal(t, want, string(got))
	})
	t.Run("v2, first sample, no networks", func(t *testing.T) {
		h := newV2Host(t)
		r, hd := openFake(t, h, OpenOptions{})
		cur := readAt(t, r, hd, true)
		cur.Read = read
		got := DockerJSON(testID, "db", cur, nil)
		want := `{"name":"/db","id":"` + testID + `","read":"2026-12-02T05:44:24.545317099Z","preread":"0001-01-01T00:00:00Z",` +
			`"pids_stats":{"current":7,"limit":18446744073709551615},` +
			`"blkio_stats":{"io_service_bytes_recursive":[{"major":8,"minor":0,"op":"read","value":4096},{"major":8,"minor":0,"op":"write","value":8192},{"major":253,"minor":0,"op":"read","value":1},{"major":253,"minor":0,"op":"write","value":0}],` +
			`"io_serviced_recursive":null,"io_queue_recursive":null,"io_service_time_recursive":null,"io_wait_time_recursive":null,"io_merged_recursive":null,"io_time_recursive":null,"sectors_recursive":null},` +
			`"num_procs":0,"storage_stats":{},` +
			`"cpu_stats":{"cpu_usage":{"total_usage":61286000,"usage_in_kernelmode":41286000,"usage_in_usermode":20000000},"system_cpu_usage":958090000000,"online_cpus":2,"throttling_data":{"periods":3,"throttled_periods":1,"throttled_time":7000}},` +
			`"precpu_stats":{"cpu_usage":{"total_usage":0,"usage_in_kernelmode":0,"usage_in_usermode":0},"throttling_data":{"periods":0,"throttled_periods":0,"throttled_time":0}},` +
			`"memory_stats":{"usage":4415488,"stats":{"active_anon":4096,"active_file":1155072,"anon":1855488,"anon_thp":0,"file":1875968,"file_dirty":4096,"file_mapped":1425408,"file_writeback":0,"inactive_anon":1851392,"inactive_file":720896,"kernel_stack":16384,"pgactivate":0,"pgdeactivate":0,"pgfault":1762,"pglazyfree":0,"pglazyfreed":0,"pgmajfault":8,"pgrefill":0,"pgscan":0,"pgsteal":0,"shmem":0,"slab":3000,"slab_reclaimable":1000,"slab_unreclaimable":2000,"sock":0,"thp_collapse_alloc":0,"thp_fault_alloc":0,"unevictable":0,"workingset_activate":0,"workingset_nodereclaim":0,"workingset_refault":0},"failcnt":2,"limit":2097152}}`
		assert.Equal(t, want, string(got))
	})
	t.Run("a Reading without anything", func(t *testing.T) {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(DockerJSON("", "", Reading{}, nil), &m))
		assert.Equal(t, `"/"`, string(m["name"]))
		assert.NotContains(t, m, "id")
		assert.NotContains(t, m, "networks")
		assert.Equal(t, `{}`, string(m["memory_stats"]))
		assert.Equal(t, `{}`, string(m["pids_stats"]))
	})
}

func TestSample(t *testing.T) {
	read := time.Date(2026, 12, 2, 6, 44, 24, 0, time.UTC)
	nets := map[string]dockerclient.NetworkStats{"eth0": wantEth0}
	cur := Reading{Read: read, CPU: CPUStats{CPUUsage: CPUUsage{TotalUsage: 3_000_000_000}}, Memory: MemoryStats{Usage: 4096, Cache: 1024},
		Blkio: BlkioStats{IoServiceBytesRecursive: []BlkioStatEntry{
			{8, 0, "Read", 10}, {8, 0, "Write", 20}, {8, 0, "Sync", 30}, {8, 0, "Total", 30}, {253, 0, "read", 1}, {253, 0, "write", 2}}},
		Networks: nets}
	pre := Reading{Read: read.Add(-time.Second), CPU: CPUStats{CPUUsage: CPUUsage{TotalUsage: 2_500_000_000}}}
	assert.Equal(t, dockerclient.StatsSample{Read: read, PreRead: read.Add(-time.Second), CPUTotal: 3 * time.Second, PreCPUTotal: 2500 * time.Millisecond,
		MemoryUsage: 4096, MemoryCache: 1024, StorageRead: 11, StorageWrite: 22, Networks: nets}, Sample(cur, &pre))
	first := Sample(cur, nil)
	assert.True(t, first.PreRead.IsZero())
	assert.Zero(t, first.PreCPUTotal)
}

// BenchmarkDockerJSON marshals a detailed v1 reading with its previous one.
func BenchmarkDockerJSON(b *testing.B) {
	h := newV1Host(b)
	r := h.reader()
	hd, err := r.Open(testPID, testID, OpenOptions{Networks: true})
	require.NoError(b, err)
	b.Cleanup(func() { hd.Close() })
	cur, err := r.Read(hd, true)
	require.NoError(b, err)
	pre := cur
	b.ReportAllocs()
	for b.Loop() {
		DockerJSON(testID, "web", cur, &pre)
	}
}

package kernelstats

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Containers of the fake hosts.
const (
	testID    = "4999f2751d419604f6c1543600b625bf7090a006c3229ce1bc2269392dfb499a"
	otherID   = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testPID   = 4242
	hostBytes = 2048 * 1024 // MemTotal of the fake hosts' meminfo
)

// fakeHost is a temporary directory laid out as a host's /proc and cgroup mounts.
type fakeHost struct {
	t    testing.TB
	root string
}

func newFakeHost(t testing.TB) *fakeHost {
	h := &fakeHost{t: t, root: t.TempDir()}
	h.write("proc/meminfo", "MemTotal:        2048 kB\nMemFree:         1024 kB\n")
	h.write("proc/stat", procStatFixture)
	return h
}

// path returns rel under the host's root.
func (h *fakeHost) path(rel string) string { return filepath.Join(h.root, rel) }

// write writes content to rel, making its directories.
func (h *fakeHost) write(rel, content string) {
	h.t.Helper()
	p := h.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// remove removes rel and what it holds.
func (h *fakeHost) remove(rel string) {
	h.t.Helper()
	if err := os.RemoveAll(h.path(rel)); err != nil {
		h.t.Fatal(err)
	}
}

// mountInfo writes proc/self/mountinfo from lines in which ROOT stands for the host's root.
func (h *fakeHost) mountInfo(lines ...string) {
	h.write("proc/self/mountinfo", strings.ReplaceAll(strings.Join(lines, "\n")+"\n", "ROOT", h.root))
}

// process writes the process pid's cgroup file and, unless netDev is "", its net/dev.
func (h *fakeHost) process(pid int, cgroup, netDev string) {
	dir := "proc/" + strconv.Itoa(pid)
	h.write(dir+"/cgroup", cgroup)
	if netDev != "" {
		h.write(dir+"/net/dev", netDev)
	}
}

// files writes each name → content into dir.
func (h *fakeHost) files(dir string, files map[string]string) {
	for name, content := range files {
		h.write(dir+"/"+name, content)
	}
}

// reader returns a Reader of the host.
func (h *fakeHost) reader() *Reader {
	h.t.Helper()
	r, err := New(Config{ProcRoot: h.path("proc")})
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

const procStatFixture = `cpu  61057 0 15554 18587 470 0 141 556 0 0
cpu0 30312 0 7332 10206 60 0 21 276 0 0
cpu1 30744 0 8221 8381 410 0 119 280 0 0
intr 1234 0 9 0 0
ctxt 5678
btime 1700000000
`

// systemUsageFixture is procStatFixture's system CPU time: (61057+0+15554+18587+470+0+141) ticks
// of 10 ms.
const systemUsageFixture = 95809 * 10_000_000

const netDevFixture = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    1042      11    1    2    0     0          0         0      500       5    3    4    0     0       0          0
  eth1:      70       1    0    0    0     0          0         0       80       1    0    0    0     0       0          0
`

// v1MountInfo is a cgroup v1 host's mounts, cpu and cpuacct co-mounted, with the unified
// hierarchy beside them (hybrid), as systemd sets it up.
var v1MountInfo = []string{
	"22 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
	"25 22 0:20 / ROOT/sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755",
	"26 25 0:21 / ROOT/sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate",
	"27 25 0:22 / ROOT/sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd",
	"30 25 0:26 / ROOT/sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct",
	"31 25 0:27 / ROOT/sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory",
	"32 25 0:28 / ROOT/sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,blkio",
	"33 25 0:29 / ROOT/sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids",
	"34 25 0:30 / ROOT/sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,cpuset",
}

const v1CgroupFile = `12:pids:/docker/` + testID + `
11:cpuset:/docker/` + testID + `
7:blkio:/docker/` + testID + `
4:memory:/docker/` + testID + `
3:cpu,cpuacct:/docker/` + testID + `
1:name=systemd:/docker/` + testID + `
0::/docker/` + testID + `
`

// v1Files are the fake v1 container's cgroup files, by controller directory.
var v1Files = map[string]map[string]string{
	"sys/fs/cgroup/cpu,cpuacct/docker/" + testID: {
		"cpuacct.usage":        "123456789\n",
		"cpuacct.usage_percpu": "100000000 23456789 \n",
		"cpuacct.stat":         "user 5\nsystem 7\n",
		"cpu.stat":             "nr_periods 10\nnr_throttled 2\nthrottled_time 3000\nnr_bursts 0\nburst_time 0\n",
	},
	"sys/fs/cgroup/memory/docker/" + testID: {
		"memory.usage_in_bytes":     "4415488\n",
		"memory.max_usage_in_bytes": "5000000\n",
		"memory.failcnt":            "0\n",
		"memory.limit_in_bytes":     "9223372036854771712\n",
		// Some of Docker's keys (the total_ ones but two) are missing, and some the kernel has
		// that Docker does not pass on (shmem, swap) are there.
		"memory.stat": `cache 1875968
rss 1855488
rss_huge 0
shmem 0
mapped_file 1425408
dirty 4096
writeback 0
swap 0
pgpgin 1746
pgpgout 835
pgfault 1762
pgmajfault 8
inactive_anon 1851392
active_anon 4096
inactive_file 720896
active_file 1155072
unevictable 0
hierarchical_memory_limit 9223372036854771712
hierarchical_memsw_limit 9223372036854771712
total_cache 1875968
total_rss 1855488
`,
	},
	"sys/fs/cgroup/blkio/docker/" + testID: {
		"blkio.throttle.io_service_bytes": "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 8192\n8:0 Async 4096\n8:0 Discard 0\n8:0 Total 12288\nTotal 12288\n",
		"blkio.throttle.io_serviced":      "8:0 Read 1\n8:0 Write 2\n8:0 Sync 2\n8:0 Async 1\n8:0 Discard 0\n8:0 Total 3\nTotal 3\n",
	},
	"sys/fs/cgroup/pids/docker/" + testID: {
		"pids.current": "7\n",
		"pids.max":     "max\n",
	},
}

// newV1Host returns a v1 host with the fake container running as testPID.
func newV1Host(t testing.TB) *fakeHost {
	h := newFakeHost(t)
	h.mountInfo(v1MountInfo...)
	h.process(testPID, v1CgroupFile, netDevFixture)
	for dir, files := range v1Files {
		h.files(dir, files)
	}
	return h
}

// v2Dir is the fake v2 container's cgroup (systemd driver).
const v2Dir = "sys/fs/cgroup/system.slice/docker-" + testID + ".scope"

// v2Files are the fake v2 container's cgroup files.
var v2Files = map[string]string{
	"cpu.stat":       "usage_usec 61286\nuser_usec 20000\nsystem_usec 41286\nnr_periods 3\nnr_throttled 1\nthrottled_usec 7\nnr_bursts 0\nburst_usec 0\n",
	"memory.current": "4415488\n",
	"memory.max":     "max\n",
	"memory.stat": `anon 1855488
file 1875968
kernel 200000
kernel_stack 16384
pagetables 8192
sock 0
shmem 0
file_mapped 1425408
file_dirty 4096
file_writeback 0
anon_thp 0
inactive_anon 1851392
active_anon 4096
inactive_file 720896
active_file 1155072
unevictable 0
slab_reclaimable 1000
slab_unreclaimable 2000
slab 3000
pgfault 1762
pgmajfault 8
`,
	"memory.events": "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n",
	"io.stat":       "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:0 rbytes=1 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n",
	"pids.current":  "7\n",
	"pids.max":      "max\n",
}

// newV2Host returns a v2 host with the fake container running as testPID.
func newV2Host(t testing.TB) *fakeHost {
	h := newFakeHost(t)
	h.mountInfo("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
		"25 22 0:20 / ROOT/sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot")
	h.process(testPID, "0::/system.slice/docker-"+testID+".scope\n", netDevFixture)
	h.files(v2Dir, v2Files)
	return h
}

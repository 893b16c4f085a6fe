package kernelstats

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewFindsCgroupMounts(t *testing.T) {
	type mounts map[controller][]mount
	for _, tc := range []struct {
		name   string
		lines  []string
		v2     bool
		mounts mounts // with ROOT for the host's root
	}{
		{
			name:  "v1 co-mounted cpu,cpuacct beside the unified hierarchy (hybrid reads v1)",
			lines: v1MountInfo,
			mounts: mounts{
				ctlCPU:     {{"/", "ROOT/sys/fs/cgroup/cpu,cpuacct"}},
				ctlCPUAcct: {{"/", "ROOT/sys/fs/cgroup/cpu,cpuacct"}},
				ctlMemory:  {{"/", "ROOT/sys/fs/cgroup/memory"}},
				ctlBlkio:   {{"/", "ROOT/sys/fs/cgroup/blkio"}},
				ctlPids:    {{"/", "ROOT/sys/fs/cgroup/pids"}},
				ctlUnified: {{"/", "ROOT/sys/fs/cgroup/unified"}},
			},
		},
		{
			name: "v1 per-controller mounts, inside a container (mount roots not /), escaped names",
			lines: []string{
				"1581 1580 0:31 /docker/b3rth /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu",
				"1582 1580 0:32 /docker/b3rth /sys/fs/cgroup/cpuacct ro,nosuid master:5 master:6 - cgroup cgroup rw,cpuacct",
				`1583 1580 0:33 /my\040group /sys/fs/cgroup/mem\134ory rw - cgroup cgroup rw,memory`,
				"1584 1580 0:34 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio",
			},
			mounts: mounts{
				ctlCPU:     {{"/docker/b3rth", "/sys/fs/cgroup/cpu"}},
				ctlCPUAcct: {{"/docker/b3rth", "/sys/fs/cgroup/cpuacct"}},
				ctlMemory:  {{"/my group", `/sys/fs/cgroup/mem\ory`}},
			},
		},
		{
			name:   "v2 only",
			lines:  []string{"25 22 0:20 / ROOT/sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate", "26 22 0:5 / /dev rw - devtmpfs udev rw"},
			v2:     true,
			mounts: mounts{ctlUnified: {{"/", "ROOT/sys/fs/cgroup"}}},
		},
		{
			name: "a hierarchy mounted twice keeps both, in order",
			lines: []string{
				"31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
				"90 80 0:27 /docker /var/lib/x/memory rw - cgroup cgroup rw,memory",
			},
			mounts: mounts{ctlMemory: {{"/", "/sys/fs/cgroup/memory"}, {"/docker", "/var/lib/x/memory"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			h.mountInfo(tc.lines...)
			r := h.reader()
			assert.Equal(t, tc.v2, r.CgroupV2())
			for c := range numControllers {
				var want []mount
				for _, m := range tc.mounts[c] {
					if len(m.point) >= 4 && m.point[:4] == "ROOT" {
						m.point = h.root + m.point[4:]
					}
					want = append(want, m)
				}
				assert.Equal(t, want, r.mounts[c], "controller %d", c)
			}
			assert.Equal(t, uint64(hostBytes), r.machineMemory)
		})
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(h *fakeHost)
		wantErr string // with ROOT for the host's root
	}{
		{"no mountinfo", func(h *fakeHost) { h.remove("proc/self/mountinfo") }, "cgroup mounts: open ROOT/proc/self/mountinfo"},
		{"no separator", func(h *fakeHost) {
			h.mountInfo(v1MountInfo[0], "31 25 0:27 / /sys/fs/cgroup/memory rw cgroup cgroup rw,memory")
		}, "ROOT/proc/self/mountinfo line 2: want"},
		{"nothing after the separator", func(h *fakeHost) { h.mountInfo("31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup") }, "mountinfo line 1: want"},
		{"a bad escape", func(h *fakeHost) { h.mountInfo(`31 25 0:27 / /sys/fs/cgroup/mem\9ory rw - cgroup cgroup rw,memory`) }, `mountinfo line 1: path "/sys/fs/cgroup/mem\\9ory": bad escape`},
		{"a truncated escape", func(h *fakeHost) { h.mountInfo(`31 25 0:27 /\04 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory`) }, "mountinfo line 1: path \"/\\\\04\": truncated escape"},
		{"no cgroup mounts", func(h *fakeHost) {
			h.mountInfo(v1MountInfo[0], "27 25 0:22 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd")
		}, "ROOT/proc/self/mountinfo: no cgroup mount of cpu, cpuacct, memory, blkio or pids (v1) nor of cgroup2"},
		{"no meminfo", func(h *fakeHost) { h.mountInfo(v1MountInfo...); h.remove("proc/meminfo") }, "host memory: open ROOT/proc/meminfo"},
		{"no MemTotal", func(h *fakeHost) { h.mountInfo(v1MountInfo...); h.write("proc/meminfo", "MemFree: 1 kB\n") }, "ROOT/proc/meminfo: no MemTotal line"},
		{"MemTotal not in kB", func(h *fakeHost) { h.mountInfo(v1MountInfo...); h.write("proc/meminfo", "MemTotal: 1 MB\n") }, `ROOT/proc/meminfo line 1: want "MemTotal: N kB", got "MemTotal: 1 MB"`},
		{"MemTotal overflows", func(h *fakeHost) {
			h.mountInfo(v1MountInfo...)
			h.write("proc/meminfo", "MemTotal: 18446744073709551615 kB\n")
		}, "ROOT/proc/meminfo line 1: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			tc.setup(h)
			_, err := New(Config{ProcRoot: h.path("proc")})
			require.Error(t, err)
			assert.Contains(t, err.Error(), replaceRoot(tc.wantErr, h.root))
		})
	}
}

func TestNewReadsTheMountInfoItIsGiven(t *testing.T) {
	h := newFakeHost(t)
	h.write("elsewhere", "25 22 0:20 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	r, err := New(Config{ProcRoot: h.path("proc"), MountInfo: h.path("elsewhere")})
	require.NoError(t, err)
	assert.True(t, r.CgroupV2())
	_, err = New(Config{ProcRoot: h.path("proc"), MountInfo: h.path("nowhere")})
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

// replaceRoot replaces ROOT in s with root.
func replaceRoot(s, root string) string { return strings.ReplaceAll(s, "ROOT", root) }

package taskcgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

const taskID = "0123456789abcdef0123456789abcdef"

func TestNewRefusesBadConfig(t *testing.T) {
	l, v1 := v2Layout(t), v1Layout(t)
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"empty root", Config{Root: ""}, "Root"},
		{"relative root", Config{Root: "ecs"}, "Root"},
		{"slash root", Config{Root: "/"}, "Root"},
		{"unclean root", Config{Root: "/ecs/"}, "Root"},
		{"dot-dot root", Config{Root: "/x/../ecs"}, "Root"},
		{"period too short", Config{Root: "/ecs", CPUPeriod: 7 * time.Millisecond}, "CPUPeriod"},
		{"period too long", Config{Root: "/ecs", CPUPeriod: 101 * time.Millisecond}, "CPUPeriod"},
		{"period not whole µs", Config{Root: "/ecs", CPUPeriod: 8*time.Millisecond + 1}, "CPUPeriod"},
		{"relative FS", Config{Root: "/ecs", FS: "sys/fs/cgroup"}, "FS"},
		{"FS a v1 hierarchy", Config{Root: "/ecs", FS: v1.fs + "/memory"}, "FS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.cfg.FS == "" {
				c.cfg.FS = l.fs
			}
			ops := l.ops
			if strings.HasPrefix(c.cfg.FS, v1.fs) {
				ops = v1.ops
			}
			_, err := newManager(c.cfg, ops)
			require.Error(t, err)
			assert.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			assert.Contains(t, err.Error(), "Config."+c.field)
		})
	}
}

func TestNewDetectsVersion(t *testing.T) {
	v1, v2 := v1Layout(t), v2Layout(t)
	m1, m2 := v1.manager(t), v2.manager(t)
	assert.Equal(t, 1, m1.Version())
	assert.Equal(t, 2, m2.Version())

	var names []string
	for _, h := range m1.hierarchies {
		names = append(names, filepath.Base(h))
	}
	assert.Equal(t, []string{"cpu", "cpuacct", "cpuset", "devices", "memory", "pids", "systemd", "unified"}, names,
		"every v1 hierarchy, and hybrid mode's cgroup2 one")
}

func TestNewV1NeedsCPUAndMemory(t *testing.T) {
	l := v1Layout(t)
	require.NoError(t, os.RemoveAll(filepath.Join(l.fs, "memory")))
	_, err := newManager(Config{Root: "/ecs", FS: l.fs}, l.ops)
	require.Error(t, err)
	assert.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
}

// TestPIDsLimitNeedsThePidsController: on v1 without a pids hierarchy a task with a pids limit is
// refused, naming the controller, and nothing is made; tasks without one still get cgroups.
func TestPIDsLimitNeedsThePidsController(t *testing.T) {
	l := v1Layout(t)
	require.NoError(t, os.RemoveAll(filepath.Join(l.fs, "pids")))
	m := l.manager(t)
	_, err := m.Create(taskID, Limits{PIDs: 10})
	require.Error(t, err)
	assert.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	assert.Contains(t, err.Error(), "pids controller")
	assert.False(t, l.exists(t, "memory/ecs/"+taskID))
	_, err = m.Create(taskID, Limits{MemoryMiB: 8})
	require.NoError(t, err)
}

func TestNewV1CoMountedHierarchy(t *testing.T) {
	l := v1Layout(t)
	// Make cpu and cpuacct one hierarchy "cpu,cpuacct" with links to it, as most distributions do.
	both := filepath.Join(l.fs, "cpu,cpuacct")
	require.NoError(t, os.Rename(filepath.Join(l.fs, "cpu"), both))
	require.NoError(t, os.RemoveAll(filepath.Join(l.fs, "cpuacct")))
	require.NoError(t, os.Symlink("cpu,cpuacct", filepath.Join(l.fs, "cpu")))
	require.NoError(t, os.Symlink("cpu,cpuacct", filepath.Join(l.fs, "cpuacct")))
	l.ops.magic[both] = l.ops.magic[filepath.Join(l.fs, "memory")]

	m := l.manager(t)
	_, err := m.Create(taskID, Limits{CPUUnits: 512})
	require.NoError(t, err)
	assert.Equal(t, "50000", l.read(t, "cpu,cpuacct/ecs/"+taskID+"/cpu.cfs_quota_us"))
	require.NoError(t, m.Remove(taskID))
	assert.False(t, l.exists(t, "cpu,cpuacct/ecs/"+taskID))
}

func TestCreateV1(t *testing.T) {
	cases := []struct {
		name   string
		period time.Duration
		limits Limits
		want   map[string]string // file under the task cgroup, in its hierarchy → content
	}{
		{"cpu and memory", 0, Limits{CPUUnits: 512, MemoryMiB: 64},
			map[string]string{"cpu/cpu.cfs_period_us": "100000", "cpu/cpu.cfs_quota_us": "50000",
				"cpu/cpu.shares": "", "memory/memory.limit_in_bytes": "67108864"}},
		{"two vCPU at 10ms", 10 * time.Millisecond, Limits{CPUUnits: 2048},
			map[string]string{"cpu/cpu.cfs_period_us": "10000", "cpu/cpu.cfs_quota_us": "20000",
				"memory/memory.limit_in_bytes": ""}},
		{"quota at least 1ms", 8 * time.Millisecond, Limits{CPUUnits: 64},
			map[string]string{"cpu/cpu.cfs_period_us": "8000", "cpu/cpu.cfs_quota_us": "1000"}},
		{"shares from containers", 0, Limits{ContainerCPUUnits: 700, MemoryMiB: 1},
			map[string]string{"cpu/cpu.shares": "700", "cpu/cpu.cfs_quota_us": "", "memory/memory.limit_in_bytes": "1048576"}},
		{"shares at least 2", 0, Limits{},
			map[string]string{"cpu/cpu.shares": "2", "memory/memory.limit_in_bytes": ""}},
		{"shares at most 262144", 0, Limits{ContainerCPUUnits: 1 << 20},
			map[string]string{"cpu/cpu.shares": "262144"}},
		{"pids limit", 0, Limits{PIDs: 100}, map[string]string{"pids/pids.max": "100"}},
		{"no pids limit", 0, Limits{MemoryMiB: 1}, map[string]string{"pids/pids.max": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := v1Layout(t)
			m, err := newManager(Config{Root: "/ecs", FS: l.fs, CPUPeriod: c.period}, l.ops)
			require.NoError(t, err)

			parent, err := m.Create(taskID, c.limits)
			require.NoError(t, err)
			assert.Equal(t, "/ecs/"+taskID, parent)
			for file, want := range c.want {
				h, name, _ := strings.Cut(file, "/")
				assert.Equal(t, want, l.read(t, filepath.Join(h, "ecs", taskID, name)), file)
			}
			for _, h := range []string{"cpu", "cpuacct", "cpuset", "devices", "memory", "pids", "systemd", "unified"} {
				assert.True(t, l.exists(t, filepath.Join(h, "ecs", taskID)), "task cgroup in %s", h)
			}
			assert.Equal(t, "", l.read(t, "unified/cgroup.subtree_control"), "no controllers in hybrid mode's cgroup2")
			for _, dir := range []string{"cpuset/ecs", "cpuset/ecs/" + taskID} {
				assert.Equal(t, "0-3", l.read(t, dir+"/cpuset.cpus"), dir)
				assert.Equal(t, "0", l.read(t, dir+"/cpuset.mems"), dir)
			}
			p, err := m.Path(taskID)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(l.fs, "memory/ecs", taskID), p)
		})
	}
}

func TestCreateV2(t *testing.T) {
	cases := []struct {
		name   string
		limits Limits
		want   map[string]string
	}{
		{"cpu and memory", Limits{CPUUnits: 512, MemoryMiB: 64},
			map[string]string{"cpu.max": "50000 100000", "cpu.weight": "", "memory.max": "67108864"}},
		{"quota at least 1ms", Limits{CPUUnits: 1},
			map[string]string{"cpu.max": "1000 100000", "memory.max": ""}},
		{"weight of 2 shares", Limits{}, map[string]string{"cpu.weight": "1", "cpu.max": ""}},
		{"weight of 1024 shares", Limits{ContainerCPUUnits: 1024}, map[string]string{"cpu.weight": "39"}},
		{"weight of 262144 shares", Limits{ContainerCPUUnits: 262144}, map[string]string{"cpu.weight": "10000"}},
		{"weight of too many shares", Limits{ContainerCPUUnits: 1 << 30}, map[string]string{"cpu.weight": "10000"}},
		{"pids limit", Limits{PIDs: 100}, map[string]string{"pids.max": "100"}},
		{"no pids limit", Limits{MemoryMiB: 1}, map[string]string{"pids.max": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := v2Layout(t)
			m := l.manager(t)
			parent, err := m.Create(taskID, c.limits)
			require.NoError(t, err)
			assert.Equal(t, "/ecs/"+taskID, parent)
			for file, want := range c.want {
				assert.Equal(t, want, l.read(t, filepath.Join("ecs", taskID, file)), file)
			}
			// The fake keeps the last write; the kernel would show "cpu memory pids".
			assert.Equal(t, "+cpu +memory +pids", l.read(t, "cgroup.subtree_control"))
			assert.Equal(t, "+cpu +memory +pids", l.read(t, "ecs/cgroup.subtree_control"))
			assert.Equal(t, "", l.read(t, "ecs/"+taskID+"/cgroup.subtree_control"),
				"the task cgroup itself may still hold processes")
			p, err := m.Path(taskID)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(l.fs, "ecs", taskID), p)
		})
	}
}

func TestCreateV2NestedRootEnablesEveryAncestor(t *testing.T) {
	l := v2Layout(t)
	writeFiles(t, l.fs, map[string]string{"cgroup.subtree_control": "cpu memory"})
	m, err := newManager(Config{Root: "/berth/tasks", FS: l.fs}, l.ops)
	require.NoError(t, err)
	parent, err := m.Create(taskID, Limits{MemoryMiB: 8})
	require.NoError(t, err)
	assert.Equal(t, "/berth/tasks/"+taskID, parent)
	assert.Equal(t, "+pids", l.read(t, "cgroup.subtree_control"), "only the missing controller")
	assert.Equal(t, "+cpu +memory +pids", l.read(t, "berth/cgroup.subtree_control"))
	assert.Equal(t, "+cpu +memory +pids", l.read(t, "berth/tasks/cgroup.subtree_control"))
	assert.Equal(t, "8388608", l.read(t, "berth/tasks/"+taskID+"/memory.max"))
}

func TestCreateReusesAndResets(t *testing.T) {
	cases := []struct {
		name   string
		layout func(*testing.T) layout
		first  map[string]string // after Create with cpu and memory
		second map[string]string // after Create again with neither
	}{
		{"v1", v1Layout,
			map[string]string{"cpu/cpu.cfs_quota_us": "50000", "memory/memory.limit_in_bytes": "67108864", "pids/pids.max": "100"},
			map[string]string{"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.shares": "300", "memory/memory.limit_in_bytes": "-1", "pids/pids.max": "max"}},
		{"v2", v2Layout,
			map[string]string{"cpu.max": "50000 100000", "memory.max": "67108864", "pids.max": "100"},
			map[string]string{"cpu.max": "max", "cpu.weight": "12", "memory.max": "max", "pids.max": "max"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.layout(t)
			m := l.manager(t)
			check := func(want map[string]string) {
				t.Helper()
				for file, v := range want {
					dir, name := filepath.Split(file)
					assert.Equal(t, v, l.read(t, filepath.Join(dir, "ecs", taskID, name)), file)
				}
			}
			_, err := m.Create(taskID, Limits{CPUUnits: 512, MemoryMiB: 64, PIDs: 100})
			require.NoError(t, err)
			check(c.first)
			_, err = m.Create(taskID, Limits{ContainerCPUUnits: 300})
			require.NoError(t, err)
			check(c.second)
		})
	}
}

func TestCreateRollsBack(t *testing.T) {
	cases := []struct {
		name    string
		layout  func(*testing.T) layout
		missing string   // interface file removed from the hierarchy root, so the task cgroup lacks it
		dirs    []string // task cgroup parents that must not keep it
	}{
		{"v1 memory limit", v1Layout, "memory/memory.limit_in_bytes",
			[]string{"cpu", "cpuacct", "cpuset", "devices", "memory", "pids", "systemd", "unified"}},
		{"v1 cpu quota", v1Layout, "cpu/cpu.cfs_quota_us", []string{"cpu", "memory", "pids"}},
		{"v2 memory limit", v2Layout, "memory.max", []string{"."}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.layout(t)
			m := l.manager(t)
			require.NoError(t, os.Remove(filepath.Join(l.fs, c.missing)))

			_, err := m.Create(taskID, Limits{CPUUnits: 512, MemoryMiB: 64})
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Base(c.missing), "names the file")
			assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
			for _, h := range c.dirs {
				assert.False(t, l.exists(t, filepath.Join(h, "ecs", taskID)), "rolled back in %s", h)
				assert.True(t, l.exists(t, filepath.Join(h, "ecs")), "the shared root stays in %s", h)
			}
		})
	}
}

func TestCreateFailureKeepsExistingCgroup(t *testing.T) {
	l := v2Layout(t)
	m := l.manager(t)
	_, err := m.Create(taskID, Limits{})
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(l.fs, "ecs", taskID, "memory.max")))

	_, err = m.Create(taskID, Limits{MemoryMiB: 64})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `write "67108864" to `)
	assert.True(t, l.exists(t, "ecs/"+taskID), "a cgroup Create did not make is not its to remove")
}

func TestRemove(t *testing.T) {
	for _, mk := range []func(*testing.T) layout{v1Layout, v2Layout} {
		l := mk(t)
		m := l.manager(t)
		t.Run("v"+string(rune('0'+m.Version())), func(t *testing.T) {
			require.NoError(t, m.Remove(taskID), "never created")

			_, err := m.Create(taskID, Limits{CPUUnits: 256, MemoryMiB: 32})
			require.NoError(t, err)
			// A container cgroup Docker left behind, empty.
			cpuTask := filepath.Join(m.cpuDir, "ecs", taskID)
			require.NoError(t, l.ops.mkdir(filepath.Join(cpuTask, "container1")))
			// A process still in the task's memory cgroup.
			procs := filepath.Join(m.memoryDir, "ecs", taskID, "cgroup.procs")
			require.NoError(t, os.WriteFile(procs, []byte("4242\n"), 0o644))

			err = m.Remove(taskID)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrBusy), "%v", err)
			assert.True(t, errdefs.IsConflict(err))
			assert.True(t, errdefs.IsRetriable(err))
			if m.Version() == 1 {
				assert.False(t, l.exists(t, "cpu/ecs/"+taskID), "the other hierarchies are cleaned up")
				assert.True(t, l.exists(t, "memory/ecs/"+taskID))
			}

			require.NoError(t, os.WriteFile(procs, nil, 0o644)) // the process exited
			require.NoError(t, m.Remove(taskID))
			require.NoError(t, m.Remove(taskID), "already gone")
			for _, h := range m.hierarchies {
				_, err := os.Stat(filepath.Join(h, "ecs", taskID))
				assert.True(t, errors.Is(err, os.ErrNotExist), "%s: %v", h, err)
			}
		})
	}
}

func TestRemoveOtherFailureIsNotRetriable(t *testing.T) {
	l := v1Layout(t)
	m := l.manager(t)
	_, err := m.Create(taskID, Limits{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(l.fs, "memory/ecs", taskID, "cgroup.procs"), []byte("4242\n"), 0o644))
	l.ops.rmdirErr = map[string]error{filepath.Join(l.fs, "cpu/ecs", taskID): syscall.EACCES}

	err = m.Remove(taskID)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrBusy), "%v", err)
	assert.True(t, errors.Is(err, syscall.EACCES), "%v", err)
	assert.False(t, errdefs.IsRetriable(err), "a busy cgroup does not make a refused rmdir retriable")
}

func TestTaskIDs(t *testing.T) {
	for _, mk := range []func(*testing.T) layout{v1Layout, v2Layout} {
		l := mk(t)
		m := l.manager(t)
		t.Run("v"+string(rune('0'+m.Version())), func(t *testing.T) {
			ids, err := m.TaskIDs()
			require.NoError(t, err)
			assert.Empty(t, ids, "no root yet")

			for _, id := range []string{"bbbb", "aaaa"} {
				_, err := m.Create(id, Limits{})
				require.NoError(t, err)
			}
			if m.Version() == 1 {
				// A crash between hierarchies left a task cgroup in one only.
				require.NoError(t, l.ops.mkdir(filepath.Join(l.fs, "pids/ecs/cccc")))
			}
			ids, err = m.TaskIDs()
			require.NoError(t, err)
			want := []string{"aaaa", "bbbb"}
			if m.Version() == 1 {
				want = append(want, "cccc")
			}
			assert.Equal(t, want, ids)
		})
	}
}

func TestBadTaskIDRefused(t *testing.T) {
	l := v1Layout(t)
	m := l.manager(t)
	for _, id := range []string{"", ".", "..", "../x", "a/b", "a b", "task.1", strings.Repeat("a", 65)} {
		t.Run(id, func(t *testing.T) {
			_, err := m.Create(id, Limits{})
			assert.True(t, errdefs.IsInvalidArgument(err), "Create: %v", err)
			assert.True(t, errdefs.IsInvalidArgument(m.Remove(id)), "Remove")
			_, err = m.Path(id)
			assert.True(t, errdefs.IsInvalidArgument(err), "Path")
		})
	}
	assert.False(t, l.exists(t, "memory/ecs"), "nothing created")
	_, err := m.Create(strings.Repeat("a", 64), Limits{})
	assert.NoError(t, err, "64 characters is fine")
}

func TestBadLimitsRefused(t *testing.T) {
	l := v2Layout(t)
	m := l.manager(t)
	for name, lim := range map[string]Limits{
		"negative cpu":            {CPUUnits: -1},
		"negative memory":         {MemoryMiB: -1},
		"negative container cpu":  {ContainerCPUUnits: -1},
		"negative pids":           {PIDs: -1},
		"memory overflows int64":  {MemoryMiB: 1 << 43},
		"cpu quota overflows int": {CPUUnits: 1 << 62},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := m.Create(taskID, lim)
			assert.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			assert.False(t, l.exists(t, "ecs/"+taskID))
		})
	}
}

// TestEveryTaskPIDs: with Config.PIDs every task gets a cgroup and that pids limit, unless its own
// limits name another; without it only the task's own limits apply.
func TestEveryTaskPIDs(t *testing.T) {
	l := v1Layout(t)
	m, err := newManager(Config{Root: "/ecs", FS: l.fs, PIDs: 300}, l.ops)
	require.NoError(t, err)
	assert.True(t, m.EveryTask())
	_, err = m.Create(taskID, Limits{})
	require.NoError(t, err)
	assert.Equal(t, "300", l.read(t, filepath.Join("pids", "ecs", taskID, "pids.max")))
	_, err = m.Create(taskID, Limits{PIDs: 40})
	require.NoError(t, err)
	assert.Equal(t, "40", l.read(t, filepath.Join("pids", "ecs", taskID, "pids.max")))

	l = v1Layout(t)
	m, err = newManager(Config{Root: "/ecs", FS: l.fs}, l.ops)
	require.NoError(t, err)
	assert.False(t, m.EveryTask())
}

//go:build integration

package taskcgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// TestRealCgroupfs creates a task cgroup on this machine's /sys/fs/cgroup under a root of its own,
// reads the limits back from the kernel, and shows that Remove waits for the task's processes.
func TestRealCgroupfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to create cgroups")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := "/berth-test-" + hex.EncodeToString(b[:])
	const id = "0123456789abcdef0123456789abcdef"

	m, err := New(Config{Root: root})
	require.NoError(t, err)
	t.Logf("cgroup v%d, hierarchies %v", m.Version(), m.hierarchies)
	t.Cleanup(func() {
		// The task cgroup first (if the test stopped half-way), then the test's own root.
		if err := m.Remove(id); err != nil {
			t.Errorf("clean up: %v", err)
		}
		for _, h := range m.hierarchies {
			dir := filepath.Join(h, root)
			if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("clean up: %v", err)
			}
		}
	})

	parent, err := m.Create(id, Limits{CPUUnits: 512, MemoryMiB: 64})
	require.NoError(t, err)
	assert.Equal(t, root+"/"+id, parent)
	_, err = m.Create(id, Limits{CPUUnits: 512, MemoryMiB: 64, PIDs: 50})
	require.NoError(t, err, "Create again reuses the cgroup")

	read := func(dir, file string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, root, id, file))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	if m.Version() == 1 {
		assert.Equal(t, "67108864", read(m.memoryDir, "memory.limit_in_bytes"))
		assert.Equal(t, "100000", read(m.cpuDir, "cpu.cfs_period_us"))
		assert.Equal(t, "50000", read(m.cpuDir, "cpu.cfs_quota_us"))
	} else {
		assert.Equal(t, "67108864", read(m.memoryDir, "memory.max"))
		assert.Equal(t, "50000 100000", read(m.cpuDir, "cpu.max"))
	}
	assert.Equal(t, "50", read(m.pidsDir, "pids.max"))
	p, err := m.Path(id)
	require.NoError(t, err)
	_, err = os.Stat(p)
	require.NoError(t, err)
	ids, err := m.TaskIDs()
	require.NoError(t, err)
	assert.Equal(t, []string{id}, ids)

	// A process in the task cgroup, in every hierarchy, as a container's would be.
	sleep := exec.Command("sleep", "30")
	require.NoError(t, sleep.Start())
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = sleep.Process.Kill()
			_ = sleep.Wait()
		}
	})
	pid := strconv.Itoa(sleep.Process.Pid)
	for _, h := range m.hierarchies {
		require.NoError(t, writeFile(filepath.Join(h, root, id, "cgroup.procs"), pid))
	}
	procs, err := os.ReadFile("/proc/" + pid + "/cgroup")
	require.NoError(t, err)
	assert.Contains(t, string(procs), parent, "the kernel puts the process in the task cgroup")

	err = m.Remove(id)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrBusy), "%v", err)
	assert.True(t, errdefs.IsRetriable(err))
	t.Logf("busy: %v", err)

	require.NoError(t, sleep.Process.Kill())
	_ = sleep.Wait() // killed: the error says so
	exited = true

	// The kernel empties the cgroup shortly after the process is reaped.
	deadline := time.Now().Add(5 * time.Second)
	for err = m.Remove(id); errors.Is(err, ErrBusy) && time.Now().Before(deadline); err = m.Remove(id) {
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, err)
	for _, h := range m.hierarchies {
		_, err := os.Stat(filepath.Join(h, root, id))
		assert.True(t, errors.Is(err, os.ErrNotExist), "%s: %v", h, err)
	}
	require.NoError(t, m.Remove(id), "already gone")
}

package kernelstats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
)

func TestParseProcCgroup(t *testing.T) {
	v1, unified, err := parseProcCgroup("cg", []byte(v1CgroupFile))
	require.NoError(t, err)
	c := "/docker/" + testID
	assert.Equal(t, map[string]string{"pids": c, "cpuset": c, "blkio": c, "memory": c, "cpu": c, "cpuacct": c, "name=systemd": c}, v1)
	assert.Equal(t, c, unified)

	v1, unified, err = parseProcCgroup("cg", []byte("0::/system.slice/docker-x.scope:with:colons\n"))
	require.NoError(t, err)
	assert.Empty(t, v1)
	assert.Equal(t, "/system.slice/docker-x.scope:with:colons", unified)

	for _, bad := range []string{"4:memory\n", "memory:/docker\n", ":memory:/docker\n", "4:memory:docker\n", "0::\n"} {
		_, _, err := parseProcCgroup("/proc/9/cgroup", []byte("1:cpu:/\n"+bad))
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), "/proc/9/cgroup line 2: want \"ID:CONTROLLERS:/PATH\"")
	}
}

func TestContainerCgroup(t *testing.T) {
	for _, tc := range []struct {
		path, want, wantErr string
	}{
		{path: "/docker/" + testID, want: "/docker/" + testID},
		{path: "/ecs/task1/" + testID, want: "/ecs/task1/" + testID},
		{path: "/system.slice/docker-" + testID + ".scope", want: "/system.slice/docker-" + testID + ".scope"},
		// A container whose init moved itself into a child cgroup: the container's cgroup is read.
		{path: "/system.slice/docker-" + testID + ".scope/init.scope", want: "/system.slice/docker-" + testID + ".scope"},
		// docker-in-docker: the deepest element naming the container.
		{path: "/docker/" + testID + "/docker/" + testID, want: "/docker/" + testID + "/docker/" + testID},
		{path: "/docker/" + otherID, wantErr: "/docker/" + otherID + " does not name container " + testID},
		{path: "/docker/" + testID + "0", wantErr: "does not name container"},
		{path: "/system.slice/" + testID + ".scope", wantErr: "does not name container"},
		{path: "/", wantErr: "/ does not name container"},
		{path: "/../docker/" + testID, wantErr: "/../docker/" + testID + " is outside this process's cgroup namespace"},
	} {
		got, err := containerCgroup(tc.path, testID)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, tc.path)
			continue
		}
		require.NoError(t, err, tc.path)
		assert.Equal(t, tc.want, got, tc.path)
	}
}

func TestUnderMount(t *testing.T) {
	mounts := []mount{{root: "/docker/b3rth", point: "/a"}, {root: "/docker", point: "/b"}}
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"/docker/b3rth", "/a", true},
		{"/docker/b3rth/child", "/a/child", true},
		{"/docker/b3rthx", "/b/b3rthx", true},
		{"/docker/" + testID, "/b/" + testID, true},
		{"/dockerx/" + testID, "", false},
		{"/ecs/" + testID, "", false},
	} {
		got, ok := underMount(mounts, tc.path)
		assert.Equal(t, tc.ok, ok, tc.path)
		assert.Equal(t, tc.want, got, tc.path)
	}
	got, ok := underMount([]mount{{root: "/", point: "/sys/fs/cgroup/memory"}}, "/docker/x")
	assert.True(t, ok)
	assert.Equal(t, "/sys/fs/cgroup/memory/docker/x", got)
}

func TestOpenResolvesDirectories(t *testing.T) {
	h := newV1Host(t)
	r := h.reader()
	hd, err := r.Open(testPID, testID, OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { hd.Close() })
	cg := h.path("sys/fs/cgroup")
	assert.Equal(t, filepath.Join(cg, "cpu,cpuacct/docker", testID), hd.dirs[ctlCPU])
	assert.Equal(t, filepath.Join(cg, "cpu,cpuacct/docker", testID), hd.dirs[ctlCPUAcct])
	assert.Equal(t, filepath.Join(cg, "memory/docker", testID), hd.dirs[ctlMemory])
	assert.Equal(t, filepath.Join(cg, "blkio/docker", testID), hd.dirs[ctlBlkio])
	assert.Equal(t, filepath.Join(cg, "pids/docker", testID), hd.dirs[ctlPids])
	assert.Empty(t, hd.dirs[ctlUnified], "a hybrid host reads v1")
	assert.False(t, hd.cfq)
	// Without detail, four files stay open (and /proc/PID).
	var open []string
	for _, f := range hd.files {
		if f.fd >= 0 {
			open = append(open, filepath.Base(f.path))
		}
	}
	assert.ElementsMatch(t, []string{"cpuacct.usage", "memory.usage_in_bytes", "memory.stat", "blkio.throttle.io_service_bytes"}, open)
}

func TestOpenInsideAContainer(t *testing.T) {
	// Berth in a container that sees the host's hierarchies mounted with their root at /docker
	// (the container's parent): the container's cgroup /docker/ID is ID under the mount point.
	h := newFakeHost(t)
	h.mountInfo("30 25 0:26 /docker ROOT/cg/memory rw - cgroup cgroup rw,memory")
	h.process(testPID, "4:memory:/docker/"+testID+"\n", "")
	h.files("cg/memory/"+testID, v1Files["sys/fs/cgroup/memory/docker/"+testID])
	r := h.reader()
	hd, err := r.Open(testPID, testID, OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { hd.Close() })
	assert.Equal(t, h.path("cg/memory/"+testID), hd.dirs[ctlMemory])
	rd, err := r.Read(hd, true)
	require.NoError(t, err)
	assert.Equal(t, uint64(4415488), rd.Memory.Usage)
	assert.Equal(t, MemoryStats{}.Failcnt, rd.Memory.Failcnt)
	assert.Nil(t, rd.Blkio.IoServiceBytesRecursive, "no blkio controller: null, as Docker")
	assert.Equal(t, uint64(0), rd.CPU.CPUUsage.TotalUsage, "no cpuacct controller")
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pid     int
		id      string
		setup   func(h *fakeHost)
		wantErr string // with ROOT for the host's root
		gone    bool
	}{
		{name: "a cgroup of another container (a reused PID)", pid: testPID, id: testID,
			setup: func(h *fakeHost) {
				h.process(testPID, "4:memory:/docker/"+otherID+"\n3:cpu,cpuacct:/docker/"+otherID+"\n7:blkio:/docker/"+otherID+"\n12:pids:/docker/"+otherID+"\n", "")
			},
			wantErr: "stats of container " + testID + " (pid 4242): ROOT/proc/4242/cgroup: cpu cgroup: /docker/" + otherID + " does not name container " + testID},
		{name: "a process outside any container", pid: testPID, id: testID,
			setup:   func(h *fakeHost) { h.process(testPID, "12:pids:/\n7:blkio:/\n4:memory:/\n3:cpu,cpuacct:/\n", "") },
			wantErr: "(pid 4242): ROOT/proc/4242/cgroup: cpu cgroup: / does not name container"},
		{name: "no line for a mounted controller", pid: testPID, id: testID,
			setup:   func(h *fakeHost) { h.process(testPID, "4:memory:/docker/"+testID+"\n", "") },
			wantErr: "(pid 4242): ROOT/proc/4242/cgroup has no cpu cgroup"},
		{name: "a malformed cgroup file", pid: testPID, id: testID,
			setup:   func(h *fakeHost) { h.process(testPID, "garbage\n", "") },
			wantErr: "(pid 4242): ROOT/proc/4242/cgroup line 1: want"},
		{name: "a cgroup under none of the mounts", pid: testPID, id: testID,
			setup: func(h *fakeHost) {
				h.mountInfo("31 25 0:27 /ecs ROOT/sys/fs/cgroup/memory rw - cgroup cgroup rw,memory")
			},
			wantErr: "(pid 4242): ROOT/proc/4242/cgroup: memory cgroup /docker/" + testID + " is under none of its mounts (root /ecs at ROOT/sys/fs/cgroup/memory)"},
		{name: "a missing cgroup directory", pid: testPID, id: testID,
			setup:   func(h *fakeHost) { h.remove("sys/fs/cgroup/memory/docker/" + testID) },
			wantErr: "(pid 4242): memory cgroup: stat ROOT/sys/fs/cgroup/memory/docker/" + testID + ": no such file or directory"},
		{name: "no such process", pid: 77, id: testID,
			wantErr: "stats of container " + testID + " (pid 77): no process ROOT/proc/77: container gone", gone: true},
		{name: "the process exits while it is opened", pid: testPID, id: testID,
			setup:   func(h *fakeHost) { h.remove("proc/4242/cgroup") },
			wantErr: "(pid 4242): container gone: open ROOT/proc/4242/cgroup", gone: true},
		{name: "pid 0", pid: 0, id: testID, wantErr: "(pid 0): not a process ID"},
		{name: "a short ID", pid: testPID, id: testID[:12], wantErr: "stats of container " + testID[:12] + " (pid 4242): not a full Docker container ID"},
		{name: "an ID with a slash", pid: testPID, id: "../" + testID[3:], wantErr: "not a full Docker container ID"},
		{name: "an upper-case ID", pid: testPID, id: "A" + testID[1:], wantErr: "not a full Docker container ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newV1Host(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			_, err := h.reader().Open(tc.pid, tc.id, OpenOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), replaceRoot(tc.wantErr, h.root))
			assert.Equal(t, tc.gone, errors.Is(err, ErrGone), "%v", err)
		})
	}
}

func TestErrGoneIsNotRunning(t *testing.T) {
	assert.ErrorIs(t, ErrGone, dockerclient.ErrNotRunning)
	assert.True(t, errdefs.IsFailedPrecondition(ErrGone))
	assert.False(t, errdefs.IsRetriable(ErrGone))
}

func TestCloseIsIdempotentAndEndsReads(t *testing.T) {
	h := newV1Host(t)
	r := h.reader()
	hd, err := r.Open(testPID, testID, OpenOptions{Networks: true})
	require.NoError(t, err)
	_, err = r.Read(hd, true)
	require.NoError(t, err)
	require.NoError(t, hd.Close())
	require.NoError(t, hd.Close())
	_, err = r.Read(hd, false)
	assert.ErrorIs(t, err, os.ErrClosed)
	assert.ErrorContains(t, err, "stats of container "+testID+" (pid 4242)")
	_, err = r.Read(hd, true)
	assert.ErrorIs(t, err, os.ErrClosed)
}

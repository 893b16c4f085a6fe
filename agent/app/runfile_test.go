package app

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/logger"
)

func TestRunFilePath(t *testing.T) {
	for _, tt := range []struct {
		environ []string
		want    string
	}{
		{nil, "/run/berth/agent.json"},
		{[]string{"PATH=/bin"}, "/run/berth/agent.json"},
		{[]string{"BERTH_RUN_FILE="}, "/run/berth/agent.json"},
		{[]string{"BERTH_RUN_FILE=/tmp/a.json"}, "/tmp/a.json"},
		{[]string{"BERTH_RUN_FILE=/tmp/a.json", "BERTH_RUN_FILE=/tmp/b.json"}, "/tmp/b.json"},
		{[]string{"XBERTH_RUN_FILE=/tmp/a.json"}, "/run/berth/agent.json"},
	} {
		assert.Equal(t, tt.want, RunFilePath(tt.environ), "%q", tt.environ)
	}
}

// readRunInfo reads the run file at path as a reader would, failing the test when it does not parse.
func readRunInfo(t *testing.T, path string) RunInfo {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var info RunInfo
	require.NoError(t, json.Unmarshal(data, &info), "%s", data)
	return info
}

// The run file is written 0644 in a directory created 0755, whatever the umask (the agent runs with
// 027), and holds what was given under the documented names.
func TestWriteRunFile(t *testing.T) {
	old := syscall.Umask(0o027)
	t.Cleanup(func() { syscall.Umask(old) })
	path := filepath.Join(t.TempDir(), "run", "berth", "agent.json")
	info := RunInfo{PID: 4242, DataDir: "/var/lib/ecs/data", Mode: config.ModeLocal, Cluster: "default",
		IntrospectionAddr: "127.0.0.1:51678", LocalControlPlaneAddr: "127.0.0.1:51677", TaskEndpointAddr: "127.0.0.1:51679"}
	require.NoError(t, writeRunFile(path, info))

	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	dir, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), dir.Mode().Perm())

	var fields map[string]any
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &fields))
	assert.Equal(t, map[string]any{"pid": 4242.0, "dataDir": "/var/lib/ecs/data", "mode": "local", "cluster": "default",
		"introspectionAddr": "127.0.0.1:51678", "localControlPlaneAddr": "127.0.0.1:51677", "taskEndpointAddr": "127.0.0.1:51679"}, fields)

	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind: %v", entries)
}

// A directory that exists keeps its mode: the agent creates the directory, it does not take one over.
func TestWriteRunFileKeepsAnExistingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "berth")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, writeRunFile(filepath.Join(dir, "agent.json"), RunInfo{PID: 1}))
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

// A write that fails says where and leaves nothing behind.
func TestWriteRunFileFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.json")
	require.NoError(t, os.Mkdir(path, 0o755)) // a directory where the file goes: the rename fails
	err := writeRunFile(path, RunInfo{PID: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the directory in the way is left: %v", entries)
}

// A reader never sees a part of a run file: every read while another agent rewrites it parses, with
// one of the PIDs written.
func TestWriteRunFileIsAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	info := RunInfo{PID: 1, DataDir: "/var/lib/ecs/data", IntrospectionAddr: "127.0.0.1:51678"}
	require.NoError(t, writeRunFile(path, info))
	const writes = 300
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for pid := 2; pid <= writes; pid++ {
			info.PID = pid
			if err := writeRunFile(path, info); err != nil {
				t.Error(err)
				return
			}
		}
	})
	reads := 0
	for finished := false; !finished; reads++ {
		select {
		case <-done:
			finished = true
		default:
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err, "the run file is always there")
		var got RunInfo
		require.NoError(t, json.Unmarshal(data, &got), "read %d saw a part of a run file: %q", reads, data)
		require.True(t, got.PID >= 1 && got.PID <= writes, "pid %d", got.PID)
	}
	wg.Wait()
	assert.Equal(t, writes, readRunInfo(t, path).PID, "the last write wins")
}

// The run file is removed at exit only while it is still the exiting agent's.
func TestRemoveRunFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.json")

	require.NoError(t, writeRunFile(path, RunInfo{PID: 100}))
	require.NoError(t, removeRunFile(path, 100))
	assert.NoFileExists(t, path, "its own run file is removed")

	require.NoError(t, removeRunFile(path, 100), "a run file already gone is no error")

	require.NoError(t, writeRunFile(path, RunInfo{PID: 200}))
	require.NoError(t, removeRunFile(path, 100))
	assert.Equal(t, 200, readRunInfo(t, path).PID, "another agent's run file is left alone")

	require.NoError(t, os.WriteFile(path, []byte("not json"), 0o644))
	require.NoError(t, removeRunFile(path, 100))
	assert.FileExists(t, path, "a run file that is not this agent's, whatever it holds, is left alone")
}

func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// publishRunFile writes the listeners' real addresses, the absolute data directory and this
// process's PID, and the function it returns removes the file.
func TestPublishRunFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	t.Setenv(RunFileEnv, path)
	t.Chdir(t.TempDir())
	s := &servers{introspection: loopbackListener(t), taskEndpoint: loopbackListener(t), local: loopbackListener(t)}
	var console logger.Buffer
	log, err := logger.New(logger.Config{Level: "info"}, &console)
	require.NoError(t, err)
	cfg := &config.Config{DataDir: "data", Mode: config.ModeLocal, Cluster: "it", AWSRegion: "eu-west-1"}

	remove := publishRunFile(cfg, s, log)
	info := readRunInfo(t, path)
	wd, err := os.Getwd()
	require.NoError(t, err)
	assert.Equal(t, RunInfo{PID: os.Getpid(), DataDir: filepath.Join(wd, "data"), Mode: config.ModeLocal, Cluster: "it",
		IntrospectionAddr: s.introspection.Addr().String(), LocalControlPlaneAddr: s.local.Addr().String(),
		TaskEndpointAddr: s.taskEndpoint.Addr().String()}, info, "local mode publishes no region")
	assert.Contains(t, console.String(), "run file written")
	remove()
	assert.NoFileExists(t, path)

	// ecs mode: the region, and no embedded control plane.
	s.local = nil
	cfg.Mode = config.ModeECS
	remove = publishRunFile(cfg, s, log)
	info = readRunInfo(t, path)
	assert.Equal(t, "eu-west-1", info.Region)
	assert.Empty(t, info.LocalControlPlaneAddr)
	remove()
	assert.NoFileExists(t, path)
}

// A run file that cannot be written does not stop the agent: it is logged, with what the commands
// then need.
func TestPublishRunFileFails(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	t.Setenv(RunFileEnv, filepath.Join(blocker, "agent.json")) // its directory is a file
	var console logger.Buffer
	log, err := logger.New(logger.Config{Level: "info"}, &console)
	require.NoError(t, err)
	remove := publishRunFile(&config.Config{DataDir: "/d"}, &servers{introspection: loopbackListener(t), taskEndpoint: loopbackListener(t)}, log)
	remove()
	assert.Contains(t, console.String(), "the run file cannot be written")
	assert.Contains(t, console.String(), "ECS_DATADIR")
	assert.Contains(t, console.String(), blocker)
}

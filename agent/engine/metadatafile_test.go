package engine

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

const mdTaskArn = "arn:aws:ecs:us-west-2:012345678910:task/test-cluster/2b88376daba34950"

func metadataConfig(t *testing.T, arn *atomic.Value) Config {
	cfg := testConfig()
	cfg.ContainerMetadata = ContainerMetadataConfig{Enabled: true, Dir: filepath.Join(t.TempDir(), "metadata"),
		InstanceARN: func() string { return arn.Load().(string) }, AvailabilityZone: "us-west-2a", HostPrivateIPv4Address: "10.0.0.7"}
	return cfg
}

func readMetadata(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var md map[string]any
	require.NoError(t, json.Unmarshal(data, &md), "%s", data)
	return md
}

// TestContainerMetadataFile follows the file of a bridge container: PENDING with what the task
// definition says before Docker creates the container, its directory mounted read-only and its path
// in ECS_CONTAINER_METADATA_FILE, READY with Docker's facts once the container runs, the instance ARN
// filled in once it is known, and the task's directory removed at cleanup.
func TestContainerMetadataFile(t *testing.T) {
	var instanceARN atomic.Value
	instanceARN.Store("")
	cfg := metadataConfig(t, &instanceARN)
	cfg.CleanupWait = 0
	root := cfg.ContainerMetadata.Dir
	dir := filepath.Join(root, "test-cluster", "2b88376daba34950", "app")
	file := filepath.Join(dir, MetadataFileName)

	var atCreate []byte
	h := newHarness(t, cfg, func(h *harness) {
		h.docker.setHook(func(op, id string) error {
			if op == "create" && strings.Contains(id, "-app-") {
				atCreate, _ = os.ReadFile(file)
			}
			return nil
		})
	})
	tk := newTask(mdTaskArn, ctr("app", func(c *task.Container) {
		c.PortMappings = []task.PortMapping{{ContainerPort: 80, Protocol: "tcp"}}
		c.Environment = []task.KeyValue{{Name: MetadataFileEnv, Value: "/spoofed"}, {Name: "KEEP", Value: "1"}}
	}), ctr("side", nonEssential))
	h.add(tk)
	h.waitStatus(tk.Arn, task.TaskRunning)

	// PENDING before the create: only what the definition says.
	var pending map[string]any
	require.NoError(t, json.Unmarshal(atCreate, &pending), "the file exists before Docker creates the container: %q", atCreate)
	assert.Equal(t, map[string]any{"Cluster": "test-cluster", "TaskARN": mdTaskArn, "TaskDefinitionFamily": "fam",
		"TaskDefinitionRevision": "3", "ContainerName": "app", "MetadataFileStatus": "PENDING", "AvailabilityZone": "us-west-2a",
		"HostPrivateIPv4Address": "10.0.0.7"}, pending)

	// The create options: the container's directory, read-only, and the variable naming the file in it.
	var opts docker.CreateContainerOptions
	for _, o := range h.docker.createCalls() {
		if o.Config.Labels[LabelContainerName] == "app" {
			opts = o
		}
	}
	require.Len(t, opts.HostConfig.Mounts, 1)
	m := opts.HostConfig.Mounts[0]
	assert.Equal(t, "bind", m.Type)
	assert.Equal(t, dir, m.Source, "only the container's own directory is mounted")
	assert.True(t, m.ReadOnly)
	assert.Regexp(t, `^/opt/ecs/metadata/[0-9a-f]{32}$`, m.Target)
	env := envOf(opts.Config.Env)
	assert.Equal(t, m.Target+"/"+MetadataFileName, env[MetadataFileEnv], "the agent's value replaces the definition's")
	assert.Equal(t, "1", env["KEEP"])
	assert.Equal(t, 1, strings.Count(strings.Join(opts.Config.Env, "\n"), MetadataFileEnv+"="))

	// READY once it runs, with Docker's facts.
	var ready map[string]any
	require.True(t, pollUntil(func() bool {
		ready = readMetadata(t, file)
		return ready["MetadataFileStatus"] == MetadataReady
	}), "the file becomes READY: %v", ready)
	app := h.engine.Task(tk.Arn).Container("app")
	assert.Equal(t, map[string]any{"Cluster": "test-cluster", "TaskARN": mdTaskArn, "TaskDefinitionFamily": "fam",
		"TaskDefinitionRevision": "3", "ContainerID": app.DockerID, "ContainerName": "app", "DockerContainerName": "/" + app.DockerName,
		"ImageID": "sha256:img-app", "ImageName": "img-app",
		"PortMappings": []any{map[string]any{"ContainerPort": float64(80), "HostPort": float64(app.NetworkBindings[0].HostPort),
			"BindIp": "0.0.0.0", "Protocol": "tcp"}},
		"Networks":           []any{map[string]any{"NetworkMode": "bridge", "IPv4Addresses": []any{"172.17.0.2"}}},
		"MetadataFileStatus": "READY", "AvailabilityZone": "us-west-2a", "HostPrivateIPv4Address": "10.0.0.7"}, ready)

	// Readable by a container's non-root user, and nothing else in the directory.
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
	for p := dir; p != filepath.Dir(root); p = filepath.Dir(p) {
		info, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), info.Mode().Perm(), p)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, MetadataFileName, entries[0].Name())
	assert.FileExists(t, filepath.Join(filepath.Dir(dir), "side", MetadataFileName))

	// The instance ARN, once the host is registered, at the next re-inspection.
	before, err := os.Stat(file)
	require.NoError(t, err)
	instanceARN.Store("arn:aws:ecs:us-west-2:012345678910:container-instance/test-cluster/1f73d099")
	h.engine.reinspectAll()
	require.True(t, pollUntil(func() bool {
		return readMetadata(t, file)["ContainerInstanceARN"] == "arn:aws:ecs:us-west-2:012345678910:container-instance/test-cluster/1f73d099"
	}))
	after, err := os.Stat(file)
	require.NoError(t, err)
	assert.False(t, os.SameFile(before, after), "the file is replaced (renamed over), not written in place")
	assert.Equal(t, MetadataReady, readMetadata(t, file)["MetadataFileStatus"])

	// Removed with the task.
	require.NoError(t, h.engine.StopTask(t.Context(), tk.Arn, "done"))
	require.True(t, pollUntil(func() bool { return h.journal.removed(tk.Arn) }), "the task is cleaned up")
	assert.NoDirExists(t, filepath.Join(root, "test-cluster", "2b88376daba34950"))
	assert.DirExists(t, root)
}

// TestContainerMetadataOff: without ECS_ENABLE_CONTAINER_METADATA no file, mount or variable; the
// pause container of an awsvpc task never has one either.
func TestContainerMetadataOff(t *testing.T) {
	var instanceARN atomic.Value
	instanceARN.Store("")
	cfg := metadataConfig(t, &instanceARN)
	cfg.ContainerMetadata.Enabled = false
	h := newHarness(t, cfg)
	tk := newTask(mdTaskArn, ctr("app"))
	h.add(tk)
	h.waitStatus(tk.Arn, task.TaskRunning)
	opts := h.docker.createCalls()[0]
	assert.Empty(t, opts.HostConfig.Mounts)
	assert.NotContains(t, envOf(opts.Config.Env), MetadataFileEnv)
	assert.NoDirExists(t, cfg.ContainerMetadata.Dir)

	md := buildMetadata(&task.Task{Arn: mdTaskArn, NetworkMode: task.NetworkAWSVPC}, &task.Container{Name: "app", DockerID: "x",
		KnownStatus: task.ContainerRunning}, "c", ContainerMetadataConfig{}, "")
	assert.Equal(t, MetadataPending, md.MetadataFileStatus, "awsvpc: not READY before the task's address is known")
	md = buildMetadata(&task.Task{Arn: mdTaskArn, NetworkMode: task.NetworkAWSVPC, AWSVPC: &task.AWSVPC{IPv4: "172.31.250.5"}},
		&task.Container{Name: "app", DockerID: "x", KnownStatus: task.ContainerRunning}, "c", ContainerMetadataConfig{}, "")
	assert.Equal(t, MetadataReady, md.MetadataFileStatus)
	assert.Equal(t, []metadataNetwork{{NetworkMode: "awsvpc", IPv4Addresses: []string{"172.31.250.5"}}}, md.Networks)

	hook := metadataFeature{cfg: metadataConfig(t, &instanceARN).ContainerMetadata}.TaskHook(&task.Task{Arn: mdTaskArn}).(*metadataHook)
	dir, err := hook.sync(&task.Task{Arn: mdTaskArn}, &task.Container{Name: PauseContainerName, Pause: true}, "", true)
	require.NoError(t, err)
	assert.Empty(t, dir, "the pause container has no metadata file")
}

// TestMetadataTaskDir: the ECS agent's layout, and no ARN or container name reaches outside the root.
func TestMetadataTaskDir(t *testing.T) {
	for _, tt := range []struct {
		arn, container, want string
	}{
		{"arn:aws:ecs:us-east-1:1:task/cl/abc", "app", "/r/cl/abc/app"},
		{"arn:aws:ecs:us-east-1:1:task/abc", "app", "/r/abc/app"},
		{"arn:aws:ecs:us-east-1:1:task/cl/../../etc", "app", ""},
		{"arn:aws:ecs:us-east-1:1:task/cl/abc", "..", ""},
		{"arn:aws:ecs:us-east-1:1:task/cl/abc", "a/b", ""},
		{"arn:aws:ecs:us-east-1:1:task/cl//abc", "app", ""},
		{"arn:aws:ecs:us-east-1:1:task", "app", ""},
		{"not-an-arn", "app", ""},
	} {
		t.Run(tt.arn+"|"+tt.container, func(t *testing.T) {
			got, err := metadataDir("/r", tt.arn, tt.container)
			if tt.want == "" {
				assert.Error(t, err, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestWriteMetadataFileIsAtomic: a reader polling while the file is rewritten over and over only ever
// sees one whole version or the other, and no temporary file is left behind.
func TestWriteMetadataFileIsAtomic(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cl", "id", "app")
	a := bytes.Repeat([]byte("a"), 64<<10)
	b := bytes.Repeat([]byte("b"), 96<<10)
	require.NoError(t, writeMetadataFile(root, dir, a))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var torn atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(filepath.Join(dir, MetadataFileName))
			if err != nil || !bytes.Equal(got, a) && !bytes.Equal(got, b) {
				torn.Add(1)
			}
		}
	}()
	for i := range 200 {
		data := a
		if i%2 == 0 {
			data = b
		}
		require.NoError(t, writeMetadataFile(root, dir, data))
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, torn.Load(), "reads saw a missing or partly written file")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, MetadataFileName, entries[0].Name())
}

// TestMetadataAfterRestart: a hook that has not written a file yet (a restored task) rewrites only
// files that exist, never makes one for a container created without it, and keeps the instance ARN a
// file has while the host is not registered again yet.
func TestMetadataAfterRestart(t *testing.T) {
	var instanceARN atomic.Value
	instanceARN.Store("")
	cfg := metadataConfig(t, &instanceARN)
	root := cfg.ContainerMetadata.Dir
	tk := newTask(mdTaskArn, ctr("app"), ctr("old"))
	for _, c := range tk.Containers {
		c.DockerID, c.DockerName, c.KnownStatus = "id-"+c.Name, "ecs-fam-3-"+c.Name, task.ContainerRunning
		c.Networks = []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.9"}}}
	}
	dir, err := metadataDir(root, mdTaskArn, "app")
	require.NoError(t, err)
	old, err := json.Marshal(containerMetadata{ContainerInstanceARN: "arn:aws:ecs:r:1:container-instance/c/saved", MetadataFileStatus: MetadataPending})
	require.NoError(t, err)
	require.NoError(t, writeMetadataFile(root, dir, old))

	run := &Run{&worker{arn: mdTaskArn, t: tk, log: logger.Nop()}}
	hook := metadataFeature{cfg: cfg.ContainerMetadata, cluster: cfg.Cluster}.TaskHook(tk).(*metadataHook)
	hook.AfterCommit(run)
	md := readMetadata(t, filepath.Join(dir, MetadataFileName))
	assert.Equal(t, MetadataReady, md["MetadataFileStatus"])
	assert.Equal(t, "arn:aws:ecs:r:1:container-instance/c/saved", md["ContainerInstanceARN"], "kept until registration")
	assert.NoDirExists(t, filepath.Join(filepath.Dir(dir), "old"), "no file for a container created without one")

	instanceARN.Store("arn:aws:ecs:r:1:container-instance/c/new")
	hook.AfterCommit(run)
	assert.Equal(t, "arn:aws:ecs:r:1:container-instance/c/new", readMetadata(t, filepath.Join(dir, MetadataFileName))["ContainerInstanceARN"])
}

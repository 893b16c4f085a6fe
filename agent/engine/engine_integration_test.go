//go:build integration

package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// itHarness runs a real engine against the real Docker Engine. Every container it creates carries a
// cluster label unique to the test, by which cleanup finds them.
type itHarness struct {
	t       *testing.T
	eng     *Engine
	client  *dockerclient.Client
	cluster string
}

func newITHarness(t *testing.T, mutate ...func(*Config)) *itHarness {
	t.Helper()
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	require.NoError(t, err)
	_, err = client.Version(t.Context())
	require.NoError(t, err, "the Docker Engine must answer (make test starts it)")
	_, err = client.PullImage(t.Context(), itImage, nil)
	require.NoError(t, err, "the test image must be in the local registry (make images pushes it)")

	cluster := fmt.Sprintf("it-%s-%d", strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())), time.Now().UnixNano())
	cfg := Config{Cluster: cluster, StopTimeout: 5 * time.Second, StartTimeout: 30 * time.Second, CleanupWait: time.Hour,
		ReconcileInterval: time.Second, Resources: Resources{CPU: 64 * 1024, MemoryMiB: 64 * 1024}, Images: client}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	eng := New(cfg, client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	require.NoError(t, eng.Start(ctx))
	h := &itHarness{t: t, eng: eng, client: client, cluster: cluster}
	t.Cleanup(func() {
		cancel()
		eng.Wait()
		h.removeAll()
		client.Close()
	})
	return h
}

// removeAll removes every container of the test, and the volumes they made.
func (h *itHarness) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := h.client.ListContainersByLabel(ctx, map[string]string{LabelCluster: h.cluster})
	if err != nil {
		h.t.Logf("cleanup: %v", err)
		return
	}
	for _, c := range list {
		_ = h.client.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
	}
}

var itARNSeq struct {
	sync.Mutex
	n int
}

// newTask parses a task definition into a task with a fresh ARN, without adding it.
func (h *itHarness) newTask(t *testing.T, def string) *task.Task {
	t.Helper()
	d, err := taskdef.Parse([]byte(def))
	require.NoError(t, err)
	itARNSeq.Lock()
	itARNSeq.n++
	arn := fmt.Sprintf("arn:aws:ecs:local:000000000000:task/%s/t%d", h.cluster, itARNSeq.n)
	itARNSeq.Unlock()
	tk := d.NewTask(arn)
	tk.Revision = max(tk.Revision, 1)
	return tk
}

// run parses a task definition, adds it to the engine and returns its ARN.
func (h *itHarness) run(t *testing.T, def string) string {
	t.Helper()
	tk := h.newTask(t, def)
	require.NoError(t, h.eng.AddTask(context.Background(), tk))
	return tk.Arn
}

// waitTask polls the task until cond holds, failing with the task's state after the timeout.
func (h *itHarness) waitTask(t *testing.T, arn string, timeout time.Duration, what string, cond func(*task.Task) bool) *task.Task {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		tk := h.eng.Task(arn)
		if tk != nil && cond(tk) {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task did not %s within %s; state: %s", what, timeout, itDescribe(tk))
		}
		<-tick.C
	}
}

func itDescribe(tk *task.Task) string {
	if tk == nil {
		return "unknown task"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "task %s known=%s desired=%s reason=%q pending=%q", tk.Family, tk.KnownStatus, tk.DesiredStatus, tk.StoppedReason, tk.PendingReason)
	for _, c := range tk.Containers {
		fmt.Fprintf(&b, "; %s known=%s health=%s exit=%s reason=%q", c.Name, c.KnownStatus, c.Health, exitCode(c), c.Reason)
	}
	return b.String()
}

func itRunning(tk *task.Task) bool { return tk.KnownStatus == task.TaskRunning }
func itStopped(tk *task.Task) bool { return tk.KnownStatus == task.TaskStopped }

// container builds one container definition as JSON.
func itContainer(name string, essential bool, extra string, command ...string) string {
	quoted := make([]string, len(command))
	for i, c := range command {
		quoted[i] = fmt.Sprintf("%q", c)
	}
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`{"name": %q, "image": %q, "memory": 32, "essential": %t, "command": [%s]%s}`,
		name, itImage, essential, strings.Join(quoted, ", "), extra)
}

func itTaskDef(family string, containers ...string) string {
	return fmt.Sprintf(`{"family": %q, "containerDefinitions": [%s]}`, family, strings.Join(containers, ", "))
}

const itHealthCheck = `"healthCheck": {"command": ["CMD", "/testapp", "health", "-url", "http://127.0.0.1:8080/health"], "interval": 5, "timeout": 2, "retries": 1}`

func TestIntegrationDependsOn(t *testing.T) {
	h := newITHarness(t)
	dep := func(cond string) string {
		return fmt.Sprintf(`"dependsOn": [{"containerName": "a", "condition": %q}]`, cond)
	}
	tests := []struct {
		name string
		a    string
		b    string
		// check runs once the task settled (b itRunning, or the task itStopped).
		settled func(*task.Task) bool
		check   func(t *testing.T, tk *task.Task)
	}{
		{name: "START", a: itContainer("a", true, "", "sleep"), b: itContainer("b", true, dep("START"), "sleep"),
			settled: itRunning,
			check: func(t *testing.T, tk *task.Task) {
				assert.False(t, tk.Container("b").StartedAt.Before(tk.Container("a").StartedAt))
			}},
		{name: "COMPLETE", a: itContainer("a", false, "", "exit", "-code", "3", "-after", "500ms"), b: itContainer("b", true, dep("COMPLETE"), "sleep"),
			settled: func(tk *task.Task) bool { return tk.Container("b").KnownStatus == task.ContainerRunning },
			check: func(t *testing.T, tk *task.Task) {
				a := tk.Container("a")
				require.NotNil(t, a.ExitCode)
				assert.Equal(t, 3, *a.ExitCode)
				assert.False(t, tk.Container("b").StartedAt.Before(a.FinishedAt), "b starts after a completed")
			}},
		{name: "SUCCESS", a: itContainer("a", false, "", "exit", "-code", "0", "-after", "500ms"), b: itContainer("b", true, dep("SUCCESS"), "sleep"),
			settled: func(tk *task.Task) bool { return tk.Container("b").KnownStatus == task.ContainerRunning },
			check: func(t *testing.T, tk *task.Task) {
				assert.False(t, tk.Container("b").StartedAt.Before(tk.Container("a").FinishedAt))
			}},
		{name: "SUCCESS but the dependency failed", a: itContainer("a", false, "", "exit", "-code", "1", "-after", "300ms"), b: itContainer("b", true, dep("SUCCESS"), "sleep"),
			settled: itStopped,
			check: func(t *testing.T, tk *task.Task) {
				b := tk.Container("b")
				assert.Empty(t, b.DockerID, "b never started")
				assert.Contains(t, tk.StoppedReason, "SUCCESS")
				assert.Contains(t, b.Reason, "exit code 1")
			}},
		{name: "HEALTHY", a: itContainer("a", true, itHealthCheck, "http", "-addr", ":8080", "-healthy-after", "500ms"), b: itContainer("b", true, dep("HEALTHY"), "sleep"),
			settled: itRunning,
			check: func(t *testing.T, tk *task.Task) {
				assert.Equal(t, task.HealthHealthy, tk.Container("a").Health)
			}},
		{name: "HEALTHY never", a: itContainer("a", true, itHealthCheck, "http", "-addr", ":8080", "-healthy-after", "1h"),
			b:       itContainer("b", true, dep("HEALTHY")+`, "startTimeout": 3`, "sleep"),
			settled: itStopped,
			check: func(t *testing.T, tk *task.Task) {
				assert.Empty(t, tk.Container("b").DockerID, "b never started")
				assert.Contains(t, tk.StoppedReason, "condition HEALTHY")
				assert.Contains(t, tk.StoppedReason, "timed out")
				assert.Equal(t, task.ContainerStopped, tk.Container("a").KnownStatus)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arn := h.run(t, itTaskDef("deps", tt.a, tt.b))
			tk := h.waitTask(t, arn, 60*time.Second, "settle", tt.settled)
			tt.check(t, tk)
		})
	}
}

func TestIntegrationEssentialExit(t *testing.T) {
	h := newITHarness(t)
	arn := h.run(t, itTaskDef("ess", itContainer("long", true, "", "sleep"), itContainer("short", true, "", "exit", "-code", "2", "-after", "1s")))
	tk := h.waitTask(t, arn, 60*time.Second, "stop", itStopped)
	assert.Equal(t, task.StopReasonEssentialExited, tk.StoppedReason)
	short, long := tk.Container("short"), tk.Container("long")
	require.NotNil(t, short.ExitCode)
	assert.Equal(t, 2, *short.ExitCode)
	assert.Equal(t, task.StopReasonEssentialExited, long.Reason, "the others get the task's stop reason")
	require.NotNil(t, long.ExitCode)
	assert.Equal(t, task.TaskStopped, tk.DesiredStatus)
}

func TestIntegrationNonEssentialExit(t *testing.T) {
	h := newITHarness(t)
	arn := h.run(t, itTaskDef("noness", itContainer("main", true, "", "sleep"), itContainer("job", false, "", "exit", "-code", "0", "-after", "300ms")))
	tk := h.waitTask(t, arn, 60*time.Second, "see the job exit", func(tk *task.Task) bool {
		return tk.Container("job").KnownStatus == task.ContainerStopped
	})
	assert.Equal(t, task.TaskRunning, tk.KnownStatus)
	// Over two reconcile rounds (ReconcileInterval is 1 s here) the task must keep running.
	assert.Never(t, func() bool {
		x := h.eng.Task(arn)
		return x.DesiredStatus != task.TaskRunning || x.Container("main").KnownStatus != task.ContainerRunning
	}, 2*time.Second, 50*time.Millisecond)
}

func TestIntegrationStopTimeoutKills(t *testing.T) {
	h := newITHarness(t)
	arn := h.run(t, itTaskDef("stubborn", itContainer("stubborn", true, `"stopTimeout": 2`, "ignore-term")))
	h.waitTask(t, arn, 60*time.Second, "run", itRunning)
	start := time.Now()
	require.NoError(t, h.eng.StopTask(context.Background(), arn, "test stops it"))
	tk := h.waitTask(t, arn, 30*time.Second, "stop", itStopped)
	took := time.Since(start)
	c := tk.Container("stubborn")
	require.NotNil(t, c.ExitCode)
	assert.Equal(t, 137, *c.ExitCode, "SIGKILL after the stop timeout")
	assert.GreaterOrEqual(t, took, 2*time.Second)
	assert.Less(t, took, 10*time.Second)
	assert.Equal(t, "test stops it", tk.StoppedReason)
}

func TestIntegrationResourceQueue(t *testing.T) {
	h := newITHarness(t, func(c *Config) { c.Resources.MemoryMiB = 100 })
	big := func(name string) string {
		return fmt.Sprintf(`{"family": %q, "containerDefinitions": [{"name": "m", "image": %q, "memory": 64, "command": ["sleep"]}]}`, name, itImage)
	}
	first := h.run(t, big("first"))
	h.waitTask(t, first, 60*time.Second, "run", itRunning)
	second := h.run(t, big("second"))
	waiting := h.waitTask(t, second, 10*time.Second, "wait for memory", func(tk *task.Task) bool { return tk.PendingReason != "" })
	assert.Contains(t, waiting.PendingReason, "memory")
	assert.Equal(t, task.TaskNone, waiting.KnownStatus)

	require.NoError(t, h.eng.StopTask(context.Background(), first, "make room"))
	h.waitTask(t, first, 30*time.Second, "stop", itStopped)
	tk := h.waitTask(t, second, 60*time.Second, "run once memory frees", itRunning)
	assert.Empty(t, tk.PendingReason)
}

func TestIntegrationPortBindings(t *testing.T) {
	h := newITHarness(t)
	arn := h.run(t, itTaskDef("ports", itContainer("web", true, `"portMappings": [{"containerPort": 8080, "hostPort": 0}]`, "http", "-addr", ":8080")))
	tk := h.waitTask(t, arn, 60*time.Second, "run", itRunning)
	binds := tk.Container("web").NetworkBindings
	require.NotEmpty(t, binds)
	assert.Equal(t, uint16(8080), binds[0].ContainerPort)
	require.NotZero(t, binds[0].HostPort, "a dynamic host port was assigned and read back")
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", binds[0].HostPort))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond)
	assert.Contains(t, body, "testapp host=")
}

func TestIntegrationVolumes(t *testing.T) {
	h := newITHarness(t)
	hostDir := t.TempDir()
	def := fmt.Sprintf(`{"family": "vols",
		"volumes": [{"name": "scratch", "host": {}}, {"name": "hostdir", "host": {"sourcePath": %q}}],
		"containerDefinitions": [
			{"name": "writer", "image": %q, "memory": 32, "command": ["write", "-path", "/scratch/msg", "-content", "shared", "-stay"],
			 "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/scratch"}]},
			{"name": "reader", "image": %q, "memory": 32, "essential": false, "command": ["read", "-path", "/scratch/msg", "-wait", "20s"],
			 "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/scratch", "readOnly": true}]},
			{"name": "hostwriter", "image": %q, "memory": 32, "essential": false, "command": ["write", "-path", "/out/hello", "-content", "from-task"],
			 "mountPoints": [{"sourceVolume": "hostdir", "containerPath": "/out"}]}
		]}`, hostDir, itImage, itImage, itImage)
	arn := h.run(t, def)
	tk := h.waitTask(t, arn, 60*time.Second, "let the reader and host writer finish", func(tk *task.Task) bool {
		return tk.Container("reader").KnownStatus == task.ContainerStopped && tk.Container("hostwriter").KnownStatus == task.ContainerStopped
	})
	require.NotNil(t, tk.Container("reader").ExitCode)
	assert.Equal(t, 0, *tk.Container("reader").ExitCode, "the reader saw the writer's file through the task volume")
	data, err := os.ReadFile(filepath.Join(hostDir, "hello"))
	require.NoError(t, err, "the host volume is the host directory")
	assert.Equal(t, "from-task", string(data))
}

func TestIntegrationFiftyTasksAtOnce(t *testing.T) {
	h := newITHarness(t)
	arns := make([]string, 50)
	for i := range arns {
		arns[i] = h.run(t, itTaskDef(fmt.Sprintf("many%d", i), itContainer("c", true, "", "sleep")))
	}
	for _, arn := range arns {
		h.waitTask(t, arn, 3*time.Minute, "run", itRunning)
	}
}

// TestIntegrationImageDigest: a container's ImageDigest is the manifest digest the registry serves
// for the tag it was pulled by (the registry's Docker-Content-Digest), not the image ID.
func TestIntegrationImageDigest(t *testing.T) {
	h := newITHarness(t)
	arn := h.run(t, itTaskDef("digest", itContainer("web", true, "", "sleep")))
	tk := h.waitTask(t, arn, 60*time.Second, "run", itRunning)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, "http://127.0.0.1:5000/v2/berth/testapp/manifests/latest", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", strings.Join([]string{"application/vnd.oci.image.index.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json"}, ", "))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	want := resp.Header.Get("Docker-Content-Digest")
	require.NotEmpty(t, want, "the registry names the manifest's digest")
	c := tk.Container("web")
	assert.Equal(t, want, c.ImageDigest)
	assert.NotEqual(t, c.ImageID, c.ImageDigest, "the digest is the manifest's, not the image ID")
}

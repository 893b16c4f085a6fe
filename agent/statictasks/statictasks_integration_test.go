//go:build integration

package statictasks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

const image = "127.0.0.1:5000/berth/testapp:latest"

// TestIntegrationStaticTasks: with the real engine and Docker Engine, a file added to the directory
// runs, a changed file replaces its task, a removed file stops it, and a file others may write never
// reaches the engine until only root may write it.
func TestIntegrationStaticTasks(t *testing.T) {
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	require.NoError(t, err)
	defer client.Close()
	_, err = client.PullImage(t.Context(), image, nil)
	require.NoError(t, err, "the test image must be in the local registry (make images pushes it)")

	cluster := fmt.Sprintf("it-static-%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	eng := engine.New(engine.Config{Cluster: cluster, StopTimeout: 5 * time.Second, StartTimeout: 30 * time.Second,
		CleanupWait: time.Hour, Resources: engine.Resources{CPU: 8192, MemoryMiB: 8192}},
		client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	require.NoError(t, eng.Start(ctx))
	t.Cleanup(func() {
		cancel()
		eng.Wait()
		list, _ := client.ListContainersByLabel(context.Background(), map[string]string{engine.LabelCluster: cluster})
		for _, c := range list {
			_ = client.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: c.ID, Force: true})
		}
	})

	dir := t.TempDir()
	w := New(Config{Dir: dir, Cluster: cluster}, eng, logger.Nop())
	def := func(msg string) string {
		return fmt.Sprintf(`{"family": "static", "containerDefinitions": [{"name": "app", "image": %q, "memory": 32,
			"command": ["sleep"], "environment": [{"name": "MSG", "value": %q}]}]}`, image, msg)
	}
	byFamily := func() []*task.Task {
		var out []*task.Task
		for _, tk := range eng.Tasks() {
			if tk.Family == "static" {
				out = append(out, tk)
			}
		}
		return out
	}
	waitFor := func(what string, cond func([]*task.Task) bool) []*task.Task {
		t.Helper()
		var got []*task.Task
		require.Eventually(t, func() bool {
			got = byFamily()
			return cond(got)
		}, 60*time.Second, 50*time.Millisecond, what)
		return got
	}
	statusOf := func(tasks []*task.Task, arn string) task.TaskStatus {
		for _, tk := range tasks {
			if tk.Arn == arn {
				return tk.KnownStatus
			}
		}
		return -1
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.json"), []byte(def("one")), 0o600))
	w.Scan(context.Background())
	tasks := waitFor("the added file's task runs", func(ts []*task.Task) bool { return len(ts) == 1 && ts[0].KnownStatus == task.TaskRunning })
	first := tasks[0].Arn

	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.json"), []byte(def("two")), 0o600))
	w.Scan(context.Background())
	var second string
	tasks = waitFor("the changed file's task replaces the old one", func(ts []*task.Task) bool {
		for _, tk := range ts {
			if tk.Arn != first && tk.KnownStatus == task.TaskRunning {
				second = tk.Arn
			}
		}
		return second != "" && statusOf(ts, first) == task.TaskStopped
	})
	for _, tk := range tasks {
		if tk.Arn == first {
			assert.Equal(t, ReasonChanged, tk.StoppedReason)
		}
	}

	open := filepath.Join(dir, "open.json")
	require.NoError(t, os.WriteFile(open, []byte(strings.Replace(def("open"), `"static"`, `"open"`, 1)), 0o600))
	require.NoError(t, os.Chmod(open, 0o666))
	w.Scan(context.Background())
	hasOpen := func() bool {
		return slices.ContainsFunc(eng.Tasks(), func(tk *task.Task) bool { return tk.Family == "open" })
	}
	assert.False(t, hasOpen(), "a file writable by others is refused (AddTask returns once the task is saved)")
	require.NoError(t, os.Chmod(open, 0o644))
	w.Scan(context.Background())
	assert.True(t, hasOpen(), "once only root may write it, its task is added")

	require.NoError(t, os.Remove(filepath.Join(dir, "app.json")))
	w.Scan(context.Background())
	tasks = waitFor("the removed file's task stops", func(ts []*task.Task) bool { return statusOf(ts, second) == task.TaskStopped })
	for _, tk := range tasks {
		if tk.Arn == second {
			assert.Equal(t, ReasonRemoved, tk.StoppedReason)
			assert.True(t, strings.HasSuffix(tk.Containers[0].Reason, ReasonRemoved))
		}
	}
}

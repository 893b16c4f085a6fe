package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/statictasks"
	"github.com/berth-agent/berth/agent/task"
)

// addedTasks is a statictasks.Runner that keeps the tasks the watcher adds.
type addedTasks struct {
	added []*task.Task
}

func (r *addedTasks) AddTask(_ context.Context, t *task.Task) error {
	r.added = append(r.added, t)
	return nil
}

func (r *addedTasks) Admit(*task.Task) error                         { return nil }
func (r *addedTasks) StopTask(context.Context, string, string) error { return nil }
func (r *addedTasks) Task(string) *task.Task                         { return nil }

// TestStaticMirrorNamesFiles is the contract with agent/statictasks: the mirror finds the file of
// each task the watcher starts, by the ARN the watcher gives it (restarts included), shows only the
// static tasks, and names no file for a task whose file is gone.
func TestStaticMirrorNamesFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("static task files are read only from a directory root owns: run this test as root (CI does)")
	}
	dir := t.TempDir()
	names := []string{"web.json", "a b.json", "a-b.json", "db.v2.json"}
	for i, name := range names {
		def := `{"family": "f` + string(rune('a'+i)) + `", "containerDefinitions": [{"name": "app", "image": "busybox", "memory": 32}]}`
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(def), 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a task"), 0o600))
	runner := &addedTasks{}
	statictasks.New(statictasks.Config{Dir: dir, Cluster: "default"}, runner, logger.Nop()).Scan(t.Context())
	require.Len(t, runner.added, len(names))

	byFamily := map[string]*task.Task{}
	for _, tk := range runner.added {
		byFamily[tk.Family] = tk
	}
	restarted := byFamily["fa"].Clone()
	restarted.Arn += "-r2" // statictasks' third task of the file, after two restarts
	gone := byFamily["fb"].Clone()
	gone.Arn = "arn:aws:ecs:local:000000000000:task/default/static-removed-0badc0de-0123456789ab"
	plain := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/0123456789abcdef0123456789abcdef", Family: "plain"}
	engineTasks := []*task.Task{byFamily["fa"], plain, byFamily["fb"], byFamily["fc"], byFamily["fd"], restarted, gone}

	asked := 0
	mirror := staticMirror(func() []*task.Task { return engineTasks },
		func(context.Context) string {
			asked++
			return "arn:aws:ecs:local:000000000000:container-instance/default/ci"
		}, dir)
	got := mirror(t.Context())
	files := map[string]string{}
	for _, st := range got {
		files[st.Task.Arn] = st.File
		assert.Equal(t, "arn:aws:ecs:local:000000000000:container-instance/default/ci", st.ContainerInstanceArn)
	}
	assert.Equal(t, map[string]string{
		byFamily["fa"].Arn: "web.json",
		byFamily["fb"].Arn: "a b.json",
		byFamily["fc"].Arn: "a-b.json",
		byFamily["fd"].Arn: "db.v2.json",
		restarted.Arn:      "web.json",
		gone.Arn:           "",
	}, files)
	assert.Len(t, got, 6, "the task of no file is not static")
	assert.Equal(t, 1, asked, "the instance is asked once per call")

	engineTasks = []*task.Task{plain}
	assert.Empty(t, mirror(t.Context()))
	assert.Equal(t, 1, asked, "not asked when there is no static task")
}

// TestStaticMirrorWithoutDirectory: with ECS_STATIC_TASKS_DIR unset or unreadable, the static tasks
// the engine still holds (restored from before) are shown with no file.
func TestStaticMirrorWithoutDirectory(t *testing.T) {
	st := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/static-web-1a2b3c4d-0123456789ab", Static: true}
	for _, dir := range []string{"", filepath.Join(t.TempDir(), "missing")} {
		got := staticMirror(func() []*task.Task { return []*task.Task{st} }, func(context.Context) string { return "" }, dir)(t.Context())
		assert.Equal(t, []localcp.StaticTask{{Task: st}}, got, "dir %q", dir)
	}
}

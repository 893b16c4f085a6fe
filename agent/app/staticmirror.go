package app

import (
	"context"
	"os"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/statictasks"
	"github.com/berth-agent/berth/agent/task"
)

// newStaticMirror is the embedded control plane's source of static tasks (localcp.Config.StaticTasks):
// the engine's static tasks, live, with their files in ECS_STATIC_TASKS_DIR and the container
// instance the agent registered in its cluster.
func newStaticMirror(eng *engine.Engine, store state.Store, cfg *config.Config) func(ctx context.Context) []localcp.StaticTask {
	return staticMirror(eng.StaticTasks, func(ctx context.Context) string { return state.InstanceARN(ctx, store, cfg.Cluster) }, cfg.StaticTasksDir)
}

// staticMirror returns what tasks holds that is static, each with the name of the file of dir it
// comes from ("" when none does any more, or dir cannot be read) and the container instance that
// instance names. The directory is read, and instance asked, once per call with a static task.
func staticMirror(tasks func() []*task.Task, instance func(ctx context.Context) string, dir string) func(ctx context.Context) []localcp.StaticTask {
	return func(ctx context.Context) []localcp.StaticTask {
		var out []localcp.StaticTask
		var files map[string]string
		var arn string
		for _, t := range tasks() {
			if !t.Static {
				continue
			}
			if files == nil {
				files, arn = staticFiles(dir), instance(ctx)
			}
			out = append(out, localcp.StaticTask{Task: t, File: files[arnStem(t.Arn)], ContainerInstanceArn: arn})
		}
		return out
	}
}

// staticFiles maps the stem of the task IDs of each *.json file of dir (statictasks.IDStem) to the file's
// name; a directory that cannot be read holds none.
func staticFiles(dir string) map[string]string {
	files := map[string]string{}
	if dir == "" {
		return files
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return files
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			files[statictasks.IDStem(e.Name())] = e.Name()
		}
	}
	return files
}

// arnStem is the ID of a static task's ARN without its definition's digest and restart count: the
// statictasks.IDStem of its file.
func arnStem(arn string) string {
	id := arn[strings.LastIndexByte(arn, '/')+1:]
	if i := strings.LastIndex(id, "-r"); i >= 0 && isDigits(id[i+2:]) {
		id = id[:i]
	}
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		id = id[:i]
	}
	return id
}

// isDigits reports whether s is one or more decimal digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

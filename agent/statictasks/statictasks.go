// Package statictasks keeps every task definition file in a directory running on this host, like a
// kubelet static pod: a new file starts a task, a changed file replaces it (the old task stops, a new
// one starts) and a removed file stops it. Invalid files are logged with their validation errors,
// once per content, and skipped.
//
// A static task's ARN is derived from its file name and its definition's digest, so the same file
// maps to the same task across agent restarts, and any change to it is a new task.
package statictasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// Runner is the part of the engine static tasks drive.
type Runner interface {
	AddTask(t *task.Task) error
	StopTask(arn, reason string) bool
}

// Config says where the files are and how tasks are named.
type Config struct {
	Dir      string
	Cluster  string
	Region   string        // ARN region; "local" when empty
	Interval time.Duration // how often the directory is scanned (default 2 s)
}

// Reasons given to the engine when a static task stops.
const (
	ReasonRemoved = "static task file removed"
	ReasonChanged = "static task file changed"
)

// Watcher keeps the directory's tasks running. Its methods are not safe for concurrent use; Run is
// meant to be its only caller.
type Watcher struct {
	cfg     Config
	runner  Runner
	log     *logger.Logger
	running map[string]string // file name → ARN of its task
	invalid map[string]string // file name → content digest of the invalid version already reported
}

// New returns a watcher for cfg.Dir.
func New(cfg Config, runner Runner, log *logger.Logger) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	return &Watcher{cfg: cfg, runner: runner, log: log.With("static_tasks_dir", cfg.Dir),
		running: map[string]string{}, invalid: map[string]string{}}
}

// Run scans the directory at once and then every interval until ctx ends. A directory that does not
// exist (yet) holds no tasks.
func (w *Watcher) Run(ctx context.Context) {
	w.log.Info("watching static task definitions")
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		w.Scan()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan applies the directory's current contents once.
func (w *Watcher) Scan() {
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("cannot read the static tasks directory", "error", err)
		return
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		seen[e.Name()] = true
		w.apply(e.Name())
	}
	names := make([]string, 0, len(w.running))
	for name := range w.running {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !seen[name] {
			w.runner.StopTask(w.running[name], ReasonRemoved)
			w.log.Info("static task file removed; its task stops", "file", name, "task", w.running[name])
			delete(w.running, name)
		}
	}
	for name := range w.invalid {
		if !seen[name] {
			delete(w.invalid, name)
		}
	}
}

// apply starts the task of one file, or replaces it when the file changed.
func (w *Watcher) apply(name string) {
	path := filepath.Join(w.cfg.Dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		w.log.Warn("cannot read static task file", "file", name, "error", err)
		return
	}
	def, err := taskdef.Parse(data)
	if err != nil {
		w.reportInvalid(name, data, err)
		return
	}
	delete(w.invalid, name)
	digest, err := def.Digest()
	if err != nil {
		w.log.Warn("cannot digest static task definition", "file", name, "error", err)
		return
	}
	arn := w.arn(name, digest)
	old, ok := w.running[name]
	if ok && old == arn {
		return
	}
	for _, warning := range def.Warnings {
		w.log.Warn("static task definition: "+warning, "file", name)
	}
	t := def.NewTask(arn)
	t.CreatedAt = time.Now()
	if t.Revision == 0 {
		t.Revision = 1 // a file is its family's one and only revision
	}
	if ok {
		w.runner.StopTask(old, ReasonChanged)
		w.log.Info("static task file changed; replacing its task", "file", name, "old_task", old, "task", arn)
	}
	if err := w.runner.AddTask(t); err != nil {
		w.log.Warn("cannot start static task", "file", name, "task", arn, "error", err)
		delete(w.running, name)
		return
	}
	w.running[name] = arn
	w.log.Info("static task started", "file", name, "task", arn, "family", t.Family)
}

// reportInvalid logs a file's validation errors once per content.
func (w *Watcher) reportInvalid(name string, data []byte, err error) {
	sum := contentKey(data)
	if w.invalid[name] == sum {
		return
	}
	w.invalid[name] = sum
	w.log.Error("invalid static task definition; skipped", "file", name, "error", err)
}

func contentKey(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

var unsafeID = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// arn names the task of a file: arn:aws:ecs:<region>:000000000000:task/<cluster>/static-<file>-<digest>.
func (w *Watcher) arn(name, digest string) string {
	base := unsafeID.ReplaceAllString(strings.TrimSuffix(name, ".json"), "-")
	return fmt.Sprintf("arn:aws:ecs:%s:000000000000:task/%s/static-%s-%s", w.cfg.Region, w.cfg.Cluster, base, digest[:12])
}

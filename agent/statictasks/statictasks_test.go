package statictasks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

type call struct {
	op, arn, reason string
}

type fakeRunner struct {
	calls []call
	tasks map[string]*task.Task
	// policy refuses tasks as the engine's Admit does (ECS_DISABLE_PRIVILEGED,
	// ECS_TASK_SECURITY_POLICY); admits counts the tasks asked about.
	policy task.Policy
	admits int
}

func (f *fakeRunner) Admit(t *task.Task) error {
	f.admits++
	return t.Refuse(f.policy)
}

func (f *fakeRunner) AddTask(_ context.Context, t *task.Task) error {
	f.calls = append(f.calls, call{op: "add", arn: t.Arn})
	if f.tasks == nil {
		f.tasks = map[string]*task.Task{}
	}
	f.tasks[t.Arn] = t
	return nil
}

func (f *fakeRunner) Task(arn string) *task.Task { return f.tasks[arn] }

func (f *fakeRunner) StopTask(_ context.Context, arn, reason string) error {
	f.calls = append(f.calls, call{op: "stop", arn: arn, reason: reason})
	return nil
}

const webDef = `{"family": "web", "containerDefinitions": [{"name": "web", "image": "berth/testapp:latest", "memory": 32}]}`

func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}

	w.Scan(context.Background())
	assert.Empty(t, r.calls, "an empty directory starts nothing")

	write("web.json", webDef)
	write("notes.txt", "not a task definition")
	w.Scan(context.Background())
	require.Len(t, r.calls, 1)
	first := r.calls[0].arn
	assert.Equal(t, "add", r.calls[0].op)
	assert.Regexp(t, `^arn:aws:ecs:local:000000000000:task/default/static-web-[0-9a-f]{8}-[0-9a-f]{12}$`, first)
	assert.Equal(t, "web", r.tasks[first].Family)
	assert.Equal(t, task.TaskRunning, r.tasks[first].DesiredStatus)
	assert.Equal(t, 1, r.tasks[first].Revision, "a file without a revision is revision 1")
	assert.True(t, r.tasks[first].Static, "marked as the host's own")

	w.Scan(context.Background())
	assert.Len(t, r.calls, 1, "an unchanged file is left alone")

	write("web.json", strings.Replace(webDef, `"memory": 32`, `"memory": 64`, 1))
	w.Scan(context.Background())
	require.Len(t, r.calls, 3)
	assert.Equal(t, call{op: "stop", arn: first, reason: ReasonChanged}, r.calls[1])
	assert.Equal(t, "add", r.calls[2].op)
	second := r.calls[2].arn
	assert.NotEqual(t, first, second)

	require.NoError(t, os.Remove(filepath.Join(dir, "web.json")))
	w.Scan(context.Background())
	require.Len(t, r.calls, 4)
	assert.Equal(t, call{op: "stop", arn: second, reason: ReasonRemoved}, r.calls[3])

	w.Scan(context.Background())
	assert.Len(t, r.calls, 4, "a removed task is stopped once")
}

func TestWatcherInvalidFileReportedOnce(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	bad := `{"family": "bad", "containerDefinitions": [{"name": "a", "image": "x", "memory": 32, "dependsOn": [{"containerName": "db", "condition": "START"}]}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(bad), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "good.json"), []byte(webDef), 0o600))

	w.Scan(context.Background())
	w.Scan(context.Background())
	assert.Len(t, r.calls, 1, "the valid file still starts")
	assert.Equal(t, 1, strings.Count(logs.String(), "invalid static task definition"), logs.String())
	assert.Contains(t, logs.String(), `containerDefinitions[0].dependsOn[0].containerName`)
	assert.Contains(t, logs.String(), "file=bad.json")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(strings.Replace(bad, `"db"`, `"dbx"`, 1)), 0o600))
	w.Scan(context.Background())
	assert.Equal(t, 2, strings.Count(logs.String(), "invalid static task definition"), "a changed invalid file is reported again")
}

func TestWatcherMissingDirectory(t *testing.T) {
	r := &fakeRunner{}
	w := New(Config{Dir: filepath.Join(t.TempDir(), "absent")}, r, logger.Nop())
	w.Scan(context.Background())
	assert.Empty(t, r.calls)
}

func TestWatcherRestartsATaskThatStoppedByItself(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRunner{}
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	w := New(Config{Dir: dir, Cluster: "default", Clock: clock}, r, logger.Nop())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(webDef), 0o600))
	w.Scan(context.Background())
	require.Len(t, r.calls, 1)
	first := r.calls[0].arn
	assert.Equal(t, time.Unix(1000, 0), r.tasks[first].CreatedAt, "created at the watcher's clock")

	w.Scan(context.Background())
	assert.Len(t, r.calls, 1, "a running task is left alone")

	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		current := r.calls[len(r.calls)-1].arn
		r.tasks[current].KnownStatus = task.TaskStopped // its essential container exited
		w.Scan(context.Background())
		calls := len(r.calls)
		clock.Advance(delay - time.Millisecond)
		w.Scan(context.Background())
		assert.Len(t, r.calls, calls, "restart %d waits %s", i+1, delay)
		clock.Advance(time.Millisecond)
		w.Scan(context.Background())
		require.Len(t, r.calls, calls+1, "restart %d happens after %s", i+1, delay)
		assert.Equal(t, "add", r.calls[calls].op)
		assert.Equal(t, fmt.Sprintf("%s-r%d", first, i+1), r.calls[calls].arn)
		assert.Equal(t, clock.Now(), r.tasks[r.calls[calls].arn].CreatedAt)
	}
}

func TestWatcherAdoptsRestoredTasks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(webDef), 0o600))
	probe := &fakeRunner{}
	New(Config{Dir: dir, Cluster: "default"}, probe, logger.Nop()).Scan(context.Background())
	kept := probe.calls[0].arn

	r := &fakeRunner{tasks: map[string]*task.Task{kept: {Arn: kept, KnownStatus: task.TaskRunning, DesiredStatus: task.TaskRunning}}}
	w := New(Config{Dir: dir, Cluster: "default"}, r, logger.Nop())
	gone := "arn:aws:ecs:local:000000000000:task/default/static-old-0123456789ab"
	other := "arn:aws:ecs:local:000000000000:task/default/not-static"
	w.Adopt([]*task.Task{
		{Arn: kept, DesiredStatus: task.TaskRunning},
		{Arn: gone, DesiredStatus: task.TaskRunning},
		{Arn: other, DesiredStatus: task.TaskRunning},
	})
	w.Scan(context.Background())
	assert.Equal(t, []call{{op: "stop", arn: gone, reason: ReasonRemoved}}, r.calls,
		"the unchanged file keeps its restored task; the task of a file that went away stops; other tasks are not the watcher's")
	w.Scan(context.Background())
	assert.Len(t, r.calls, 1)
}

// notifyingRunner is a fakeRunner that tells of every task added and stopped; only Run calls it.
type notifyingRunner struct {
	fakeRunner
	added, stopped chan string
}

func (r *notifyingRunner) AddTask(ctx context.Context, t *task.Task) error {
	r.added <- t.Arn
	return r.fakeRunner.AddTask(ctx, t)
}

func (r *notifyingRunner) StopTask(ctx context.Context, arn, reason string) error {
	r.stopped <- arn
	return r.fakeRunner.StopTask(ctx, arn, reason)
}

// runWatcher runs w until the test ends, and fails the test if Run does not return once its context
// is cancelled.
func runWatcher(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return when its context ended")
		}
	})
}

// waitTimers waits until n timers and tickers wait on clock, failing the test after a deadline.
func waitTimers(t *testing.T, clock *clockwork.FakeClock, n int, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, n), what)
}

// next returns the next ARN on ch, failing the test after a deadline.
func next(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case arn := <-ch:
		return arn
	case <-time.After(5 * time.Second):
		t.Fatalf("no task was %s", what)
		return ""
	}
}

func TestWatcherRunScansEveryInterval(t *testing.T) {
	// The directory appears after Run started: no inotify watch sees it, the periodic scan does.
	dir := filepath.Join(t.TempDir(), "tasks.d")
	clock := clockwork.NewFakeClock()
	r := &notifyingRunner{added: make(chan string, 4), stopped: make(chan string, 4)}
	w := New(Config{Dir: dir, Cluster: "default", Interval: time.Minute, Clock: clock}, r, logger.Nop())
	gone := "arn:aws:ecs:local:000000000000:task/default/static-old-01234567-0123456789ab"
	w.Adopt([]*task.Task{{Arn: gone, DesiredStatus: task.TaskRunning}})
	runWatcher(t, w)

	assert.Equal(t, gone, next(t, r.stopped, "stopped"), "the first scan is done: it stopped the restored task")
	waitTimers(t, clock, 1, "Run waits on its ticker")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(webDef), 0o600))
	clock.Advance(time.Minute - time.Second)
	select {
	case arn := <-r.added:
		t.Fatalf("scanned before the interval passed: %s", arn)
	default:
	}
	clock.Advance(time.Second)
	assert.Contains(t, next(t, r.added, "added"), "web", "the next scan is an interval later")

	// That scan also started watching the directory: a new file is picked up without the ticker.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "api.json"), []byte(strings.Replace(webDef, `"web"`, `"api"`, 1)), 0o600))
	waitTimers(t, clock, 2, "inotify starts the debounce timer")
	clock.Advance(debounceDelay)
	assert.Contains(t, next(t, r.added, "added"), "api")
}

func TestWatcherRunPicksUpChangesAtOnce(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(webDef), 0o600))
	clock := clockwork.NewFakeClock()
	r := &notifyingRunner{added: make(chan string, 4), stopped: make(chan string, 4)}
	w := New(Config{Dir: dir, Cluster: "default", Interval: time.Hour, Clock: clock}, r, logger.Nop())
	runWatcher(t, w)
	web := next(t, r.added, "added")
	assert.Contains(t, web, "web", "the first scan is at once")

	steps := []struct {
		name   string
		change func()
		check  func()
	}{
		{"a new file starts", func() {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "api.json"), []byte(strings.Replace(webDef, `"web"`, `"api"`, 1)), 0o600))
		}, func() { assert.Contains(t, next(t, r.added, "added"), "api") }},
		{"a changed file is replaced", func() {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(strings.Replace(webDef, `"memory": 32`, `"memory": 64`, 1)), 0o600))
		}, func() {
			assert.Equal(t, web, next(t, r.stopped, "stopped"))
			web = next(t, r.added, "added")
			assert.Contains(t, web, "web")
		}},
		{"a removed file stops", func() {
			require.NoError(t, os.Remove(filepath.Join(dir, "web.json")))
		}, func() { assert.Equal(t, web, next(t, r.stopped, "stopped")) }},
	}
	for _, step := range steps {
		step.change()
		waitTimers(t, clock, 2, step.name+": inotify starts the debounce timer")
		clock.Advance(debounceDelay)
		step.check()
	}
}

func TestWatcherRefusesPrivilegedWhenDisabled(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	priv := strings.Replace(webDef, `"memory": 32`, `"memory": 32, "privileged": true`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(priv), 0o600))

	r := &fakeRunner{policy: task.Policy{NoPrivileged: true}}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	w.Scan(context.Background())
	w.Scan(context.Background())
	assert.Empty(t, r.calls, "the privileged task is not started")
	assert.Equal(t, 1, r.admits, "the refusal is remembered until the file changes")
	assert.Equal(t, 1, strings.Count(logs.String(), "containerDefinitions[0].privileged"), "logged once, naming the field:\n%s", logs.String())

	allowed := &fakeRunner{}
	New(Config{Dir: dir, Cluster: "default"}, allowed, log).Scan(context.Background())
	assert.Len(t, allowed.calls, 1, "without ECS_DISABLE_PRIVILEGED it starts")
}

// With ECS_TASK_SECURITY_POLICY=baseline a file whose task the policy refuses is invalid, logged
// once with the field named, and never started.
func TestWatcherRefusesWhatBaselineRefuses(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	sock := strings.Replace(webDef, `"memory": 32`, `"memory": 32, "mountPoints": [{"sourceVolume": "sock", "containerPath": "/sock"}]`, 1)
	sock = strings.Replace(sock, `"containerDefinitions"`, `"volumes": [{"name": "sock", "host": {"sourcePath": "/var/run/docker.sock"}}], "containerDefinitions"`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(sock), 0o600))

	r := &fakeRunner{policy: task.Policy{Baseline: true}}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	w.Scan(context.Background())
	w.Scan(context.Background())
	assert.Empty(t, r.calls, "the task is not started")
	assert.Equal(t, 1, strings.Count(logs.String(), "volumes[0].host.sourcePath: /var/run/docker.sock is refused by ECS_TASK_SECURITY_POLICY=baseline"),
		"logged once, naming the field:\n%s", logs.String())
}

func TestWatcherReadsOnlySmallRegularFiles(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	path := func(name string) string { return filepath.Join(dir, name) }
	require.NoError(t, syscall.Mkfifo(path("fifo.json"), 0o600))
	require.NoError(t, os.Mkdir(path("dir.json"), 0o700))
	require.NoError(t, os.WriteFile(path("big.json"), bytes.Repeat([]byte(" "), MaxFileSize+1), 0o600))
	require.NoError(t, os.WriteFile(path("web.txt"), []byte(webDef), 0o600))
	require.NoError(t, os.Symlink("web.txt", path("link.json")))
	require.NoError(t, os.Symlink("fifo.json", path("fifolink.json")))
	require.NoError(t, os.Symlink("absent", path("dangling.json")))

	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		w.Scan(context.Background())
		w.Scan(context.Background())
	}()
	select {
	case <-scanned:
	case <-time.After(5 * time.Second):
		t.Fatal("the scan blocked on a FIFO")
	}
	require.Len(t, r.calls, 1, "only the symlink to a regular file starts:\n%s", logs.String())
	assert.Contains(t, r.calls[0].arn, "static-link-")
	out := logs.String()
	assert.Equal(t, 5, strings.Count(out, "invalid static task definition"), "each refused file is logged once:\n%s", out)
	for _, want := range []string{
		"fifo.json is not a regular file (p",
		"dir.json is not a regular file (d",
		"fifolink.json is not a regular file (p",
		"dangling.json is a dangling symlink",
		fmt.Sprintf("big.json is %d bytes, over the limit of %d bytes", MaxFileSize+1, MaxFileSize),
	} {
		assert.Contains(t, out, want)
	}

	require.NoError(t, os.Truncate(path("big.json"), MaxFileSize+2))
	w.Scan(context.Background())
	assert.Equal(t, 6, strings.Count(logs.String(), "invalid static task definition"), "a changed file is reported again")
}

func TestReadRegularRefusesASwappedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.json")
	require.NoError(t, os.WriteFile(path, []byte(webDef), 0o600))
	fi, err := statRegular(path)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, _, err = readRegular(path, fi)
	assert.ErrorIs(t, err, errInvalidFile, "a FIFO put in the file's place is refused, not read")
}

func TestWatcherReadsOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, logger.Nop())
	path := filepath.Join(dir, "web.json")
	require.NoError(t, os.WriteFile(path, []byte(webDef), 0o600))
	w.Scan(context.Background())
	w.Scan(context.Background())
	w.Scan(context.Background())
	assert.Equal(t, 1, w.reads, "an unchanged file is read once")

	// Same size, same mtime, new content: the inode's ctime still tells.
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(webDef, `"memory": 32`, `"memory": 64`, 1)), 0o600))
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	w.Scan(context.Background())
	assert.Equal(t, 2, w.reads)
	require.Len(t, r.calls, 3, "the changed file replaces its task")
	assert.Equal(t, ReasonChanged, r.calls[1].reason)

	// Replaced by rename: a new inode.
	tmp := filepath.Join(dir, "web.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(webDef), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	w.Scan(context.Background())
	assert.Equal(t, 3, w.reads)
	require.Len(t, r.calls, 5)
}

func TestWatcherOneTaskPerFileName(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, logger.Nop())
	names := []string{"a b.json", "a-b.json", "a_b.json", "a.b.json"}
	for _, name := range names {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(webDef), 0o600))
	}
	w.Scan(context.Background())
	require.Len(t, r.calls, len(names))
	var arns set.Set[string]
	for _, c := range r.calls {
		assert.Regexp(t, `/static-a-b-[0-9a-f]{8}-[0-9a-f]{12}$`, c.arn)
		arns.Add(c.arn)
	}
	assert.Len(t, set.Sorted(arns), len(names), "names that sanitize alike still get their own task")

	require.NoError(t, os.Remove(filepath.Join(dir, "a b.json")))
	w.Scan(context.Background())
	require.Len(t, r.calls, len(names)+1, "removing one file stops only its task")
	assert.Equal(t, call{op: "stop", arn: r.calls[0].arn, reason: ReasonRemoved}, r.calls[len(names)])
}

func TestWatcherRefusesAnUnsafeDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a directory: run it as root (CI does)")
	}
	for _, tc := range []struct {
		name string
		uid  int
		mode os.FileMode
		err  string
	}{
		{name: "writable by others", uid: 0, mode: 0o757, err: "mode -rwxr-xrwx"},
		{name: "writable by group", uid: 0, mode: 0o775, err: "mode -rwxrwxr-x"},
		{name: "not owned by root", uid: 1000, mode: 0o755, err: "uid 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "web.json"), []byte(webDef), 0o600))
			require.NoError(t, os.Chown(dir, tc.uid, 0))
			require.NoError(t, os.Chmod(dir, tc.mode))
			var logs bytes.Buffer
			log, err := logger.New(logger.Config{}, &logs)
			require.NoError(t, err)
			r := &fakeRunner{}
			w := New(Config{Dir: dir, Cluster: "default"}, r, log)
			w.Scan(context.Background())
			w.Scan(context.Background())
			assert.Empty(t, r.calls, "no task from an unsafe directory starts")
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "static tasks directory is not safe"), "logged once:\n%s", out)
			assert.Contains(t, out, tc.err)
			assert.Contains(t, out, fmt.Sprintf("chown root:root %s && chmod go-w %s", dir, dir))

			require.NoError(t, os.Chown(dir, 0, 0))
			require.NoError(t, os.Chmod(dir, 0o755))
			w.Scan(context.Background())
			assert.Len(t, r.calls, 1, "once fixed, its tasks start")
		})
	}
}

// TestWatcherRefusesFilesRootDoesNotAloneControl: in a safe directory, a file (or an element of its
// symlink chain) that someone other than root could write, or point elsewhere, is refused and logged
// once by name; a chain only root controls starts.
func TestWatcherRefusesFilesRootDoesNotAloneControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns files: run it as root (CI does)")
	}
	const stranger = 1000
	// dir is the static tasks directory and other a sibling of it (both root's, mode 0700): relative
	// links reach other as ../<base of other>, without passing through the world-writable /tmp.
	type paths struct{ dir, other, up string }
	file := func(t *testing.T, path string, mode os.FileMode, uid int) {
		require.NoError(t, os.WriteFile(path, []byte(webDef), 0o600))
		require.NoError(t, os.Chmod(path, mode))
		require.NoError(t, os.Chown(path, uid, 0))
	}
	mkdir := func(t *testing.T, path string, mode os.FileMode, uid int) {
		require.NoError(t, os.Mkdir(path, 0o700))
		require.NoError(t, os.Chmod(path, mode))
		require.NoError(t, os.Chown(path, uid, 0))
	}
	link := func(t *testing.T, target, path string, uid int) {
		require.NoError(t, os.Symlink(target, path))
		require.NoError(t, os.Lchown(path, uid, 0))
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p paths)
		err   func(p paths) string // in the log, naming what is wrong
		fix   func(t *testing.T, p paths)
	}{
		{
			name:  "a file owned by another user",
			setup: func(t *testing.T, p paths) { file(t, filepath.Join(p.dir, "web.json"), 0o644, stranger) },
			err: func(p paths) string {
				return fmt.Sprintf("%s: it is owned by uid 1000 with mode -rw-r--r--", filepath.Join(p.dir, "web.json"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Chown(filepath.Join(p.dir, "web.json"), 0, 0)) },
		},
		{
			name:  "a file writable by others",
			setup: func(t *testing.T, p paths) { file(t, filepath.Join(p.dir, "web.json"), 0o666, 0) },
			err: func(p paths) string {
				return fmt.Sprintf("it is owned by uid 0 with mode -rw-rw-rw-; only root may write to a static task file and to what its symlinks pass through: chown root %[1]s && chmod go-w %[1]s",
					filepath.Join(p.dir, "web.json"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Chmod(filepath.Join(p.dir, "web.json"), 0o644)) },
		},
		{
			name:  "a file writable by group",
			setup: func(t *testing.T, p paths) { file(t, filepath.Join(p.dir, "web.json"), 0o620, 0) },
			err:   func(paths) string { return "it is owned by uid 0 with mode -rw--w----" },
			fix:   func(t *testing.T, p paths) { require.NoError(t, os.Chmod(filepath.Join(p.dir, "web.json"), 0o600)) },
		},
		{
			name: "a symlink owned by another user",
			setup: func(t *testing.T, p paths) {
				file(t, filepath.Join(p.dir, "web.txt"), 0o600, 0)
				link(t, "web.txt", filepath.Join(p.dir, "web.json"), stranger)
			},
			err: func(p paths) string {
				return fmt.Sprintf("it is owned by uid 1000 with mode Lrwxrwxrwx; only root may write to a static task file and to what its symlinks pass through: chown -h root %s\"",
					filepath.Join(p.dir, "web.json"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Lchown(filepath.Join(p.dir, "web.json"), 0, 0)) },
		},
		{
			name: "a symlink into a world-writable directory",
			setup: func(t *testing.T, p paths) {
				mkdir(t, filepath.Join(p.other, "open"), 0o777, 0)
				file(t, filepath.Join(p.other, "open", "web.json"), 0o600, 0)
				link(t, p.up+"/open/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 0 with mode drwxrwxrwx", filepath.Join(p.other, "open"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Chmod(filepath.Join(p.other, "open"), 0o755)) },
		},
		{
			name: "a symlink into a sticky world-writable directory, as /tmp",
			setup: func(t *testing.T, p paths) {
				mkdir(t, filepath.Join(p.other, "tmp"), 0o777|os.ModeSticky, 0)
				file(t, filepath.Join(p.other, "tmp", "web.json"), 0o600, 0)
				link(t, p.up+"/tmp/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 0 with mode dtrwxrwxrwx", filepath.Join(p.other, "tmp"))
			},
		},
		{
			name: "a symlink through a directory owned by another user",
			setup: func(t *testing.T, p paths) {
				mkdir(t, filepath.Join(p.other, "sub"), 0o755, stranger)
				file(t, filepath.Join(p.other, "sub", "web.json"), 0o600, 0)
				link(t, p.up+"/sub/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 1000", filepath.Join(p.other, "sub"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Chown(filepath.Join(p.other, "sub"), 0, 0)) },
		},
		{
			name: "a symlink to a file owned by another user",
			setup: func(t *testing.T, p paths) {
				file(t, filepath.Join(p.other, "web.json"), 0o644, stranger)
				link(t, p.up+"/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 1000 with mode -rw-r--r--", filepath.Join(p.other, "web.json"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Chown(filepath.Join(p.other, "web.json"), 0, 0)) },
		},
		{
			name: "a symlink to a file writable by group",
			setup: func(t *testing.T, p paths) {
				file(t, filepath.Join(p.other, "web.json"), 0o660, 0)
				link(t, p.up+"/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 0 with mode -rw-rw----", filepath.Join(p.other, "web.json"))
			},
		},
		{
			name: "a second link of the chain owned by another user",
			setup: func(t *testing.T, p paths) {
				file(t, filepath.Join(p.dir, "web.txt"), 0o600, 0)
				link(t, "../"+filepath.Base(p.dir)+"/web.txt", filepath.Join(p.other, "hop"), stranger)
				link(t, p.up+"/hop", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is owned by uid 1000 with mode Lrwxrwxrwx", filepath.Join(p.other, "hop"))
			},
			fix: func(t *testing.T, p paths) { require.NoError(t, os.Lchown(filepath.Join(p.other, "hop"), 0, 0)) },
		},
		{
			name: "a symlink loop",
			setup: func(t *testing.T, p paths) {
				link(t, "b.lnk", filepath.Join(p.dir, "a.lnk"), 0)
				link(t, "a.lnk", filepath.Join(p.dir, "b.lnk"), 0)
				link(t, "a.lnk", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s: more than 40 symlinks on its chain (a loop?)", filepath.Join(p.dir, "web.json"))
			},
		},
		{
			name:  "a symlink to itself",
			setup: func(t *testing.T, p paths) { link(t, "web.json", filepath.Join(p.dir, "web.json"), 0) },
			err:   func(paths) string { return "more than 40 symlinks on its chain (a loop?)" },
		},
		{
			name: "a symlink through a file",
			setup: func(t *testing.T, p paths) {
				file(t, filepath.Join(p.dir, "web.txt"), 0o600, 0)
				link(t, "web.txt/web.json", filepath.Join(p.dir, "web.json"), 0)
			},
			err: func(p paths) string {
				return fmt.Sprintf("%s, on its symlink chain, is not a directory", filepath.Join(p.dir, "web.txt"))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := paths{dir: t.TempDir(), other: t.TempDir()}
			p.up = "../" + filepath.Base(p.other)
			tc.setup(t, p)
			var logs bytes.Buffer
			log, err := logger.New(logger.Config{}, &logs)
			require.NoError(t, err)
			r := &fakeRunner{}
			w := New(Config{Dir: p.dir, Cluster: "default"}, r, log)
			w.Scan(context.Background())
			w.Scan(context.Background())
			assert.Empty(t, r.calls, "the file's task does not start")
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "invalid static task definition"), "refused once, not once per scan:\n%s", out)
			assert.NotContains(t, out, "WARN", "no other line per scan")
			assert.Contains(t, out, "file=web.json")
			assert.Contains(t, out, tc.err(p))
			if tc.fix != nil {
				tc.fix(t, p)
				w.Scan(context.Background())
				assert.Len(t, r.calls, 1, "once fixed, its task starts:\n%s", logs.String())
			}
		})
	}
}

// TestWatcherFollowsAChainRootAloneControls: links of a chain only root can change, through ".." and
// other directories, lead to the file they name, read like any other.
func TestWatcherFollowsAChainRootAloneControls(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(other, "defs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, "defs", "web"), []byte(webDef), 0o644))
	require.NoError(t, os.Symlink("defs/./web", filepath.Join(other, "current")))
	require.NoError(t, os.Symlink("../"+filepath.Base(other)+"//current", filepath.Join(dir, "hop")))
	require.NoError(t, os.Symlink("hop", filepath.Join(dir, "web.json")))
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	r := &fakeRunner{}
	New(Config{Dir: dir, Cluster: "default"}, r, log).Scan(context.Background())
	require.Len(t, r.calls, 1, logs.String())
	assert.Equal(t, "web", r.tasks[r.calls[0].arn].Family)
}

// TestWatcherLeavesARunningTaskOfAFileThatBecameUnsafe: a file whose mode no longer lets only root
// write it is refused, and its running task (root's own definition) is neither stopped nor replaced.
func TestWatcherLeavesARunningTaskOfAFileThatBecameUnsafe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.json")
	require.NoError(t, os.WriteFile(path, []byte(webDef), 0o644))
	var logs bytes.Buffer
	log, err := logger.New(logger.Config{}, &logs)
	require.NoError(t, err)
	r := &fakeRunner{}
	w := New(Config{Dir: dir, Cluster: "default"}, r, log)
	w.Scan(context.Background())
	require.Len(t, r.calls, 1)

	require.NoError(t, os.Chmod(path, 0o666))
	w.Scan(context.Background())
	w.Scan(context.Background())
	assert.Len(t, r.calls, 1, "its task is left alone")
	assert.Equal(t, 1, strings.Count(logs.String(), "invalid static task definition"), logs.String())

	require.NoError(t, os.Chmod(path, 0o644))
	w.Scan(context.Background())
	assert.Len(t, r.calls, 1, "once fixed, the unchanged file keeps its task")
}

// TestWatcherFollowsAtMost40Links: a chain of 40 links, as many as Linux follows, is read; one more
// is refused as a loop would be.
func TestWatcherFollowsAtMost40Links(t *testing.T) {
	for _, tc := range []struct {
		links  int
		starts bool
	}{{links: 40, starts: true}, {links: 41, starts: false}} {
		t.Run(fmt.Sprint(tc.links), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "l0"), []byte(webDef), 0o600))
			for i := 1; i < tc.links; i++ {
				require.NoError(t, os.Symlink(fmt.Sprintf("l%d", i-1), filepath.Join(dir, fmt.Sprintf("l%d", i))))
			}
			require.NoError(t, os.Symlink(fmt.Sprintf("l%d", tc.links-1), filepath.Join(dir, "web.json")))
			var logs bytes.Buffer
			log, err := logger.New(logger.Config{}, &logs)
			require.NoError(t, err)
			r := &fakeRunner{}
			New(Config{Dir: dir, Cluster: "default"}, r, log).Scan(context.Background())
			if tc.starts {
				assert.Len(t, r.calls, 1, logs.String())
			} else {
				assert.Empty(t, r.calls)
				assert.Contains(t, logs.String(), "more than 40 symlinks on its chain")
			}
		})
	}
}

// Files come and go: the watcher's bookkeeping of a file (its task, its restarts, its last read, its
// reported invalid version) goes with the file, however many files have been there.
func TestWatcherForgetsRemovedFiles(t *testing.T) {
	dir := t.TempDir()
	r := &fakeRunner{}
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	w := New(Config{Dir: dir, Cluster: "default", Clock: clock}, r, logger.Nop())
	const n = 50
	for i := range n {
		name := filepath.Join(dir, fmt.Sprintf("web-%d.json", i))
		require.NoError(t, os.WriteFile(name, []byte(webDef), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("bad-%d.json", i)), []byte("{"), 0o600))
		w.Scan(context.Background())
		arn := r.calls[len(r.calls)-1].arn
		r.tasks[arn].KnownStatus = task.TaskStopped // it stopped by itself: the next scans restart it
		w.Scan(context.Background())
		clock.Advance(time.Second)
		w.Scan(context.Background())
		require.Equal(t, arn+"-r1", r.calls[len(r.calls)-1].arn, "file %d's task was restarted", i)
		require.NoError(t, os.Remove(name))
		require.NoError(t, os.Remove(filepath.Join(dir, fmt.Sprintf("bad-%d.json", i))))
		w.Scan(context.Background())
		assert.Equal(t, call{op: "stop", arn: arn + "-r1", reason: ReasonRemoved}, r.calls[len(r.calls)-1])
	}
	assert.Zero(t, len(w.running))
	assert.Zero(t, len(w.restarts), "the restart bookkeeping of removed files is dropped")
	assert.Zero(t, len(w.parsed))
	assert.Zero(t, len(w.invalid))
}

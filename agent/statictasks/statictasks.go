// Package statictasks keeps every task definition file in a directory running on this host, like a
// kubelet static pod: a new file starts a task, a changed file replaces it (the old task stops, a new
// one starts) and a removed file stops it. Invalid files are logged with their validation errors,
// once per content, and skipped. Changes are seen at once through inotify, and by a periodic scan as
// a backstop.
//
// A static task's ARN is derived from its file name (sanitized, plus a short hash of the exact name,
// so two names never share a task) and its definition's digest, so the same file maps to the same task
// across agent restarts, and any change to it is a new task. A static task that stops by itself (its
// essential container exited, the Docker Engine restarted) is started again as a new task, after a
// delay that doubles with each consecutive restart (1 s up to 5 min) so that a crash-looping
// definition does not churn the host.
//
// Only what root alone can write is trusted: the directory must be owned by root and not writable by
// group or others (a symlink to it is followed), else nothing in it is started and tasks already
// running are left alone. So must each file: the file, and when it is a symlink every element of its
// chain (each link, each directory a link's target passes through, and the final target), must be
// owned by root and, links aside, not writable by group or others; any other file is invalid, logged
// once by name, and its task (if one runs from before) is left alone. Only regular files up to
// MaxFileSize are read; a symlink is followed only when it points to a regular file, and a FIFO,
// socket, device or directory named *.json, a dangling symlink or a chain of more than 40 links (a
// loop) is invalid and never opened. A file whose size, mtime, ctime and inode did not change since the last scan is
// not read again.
package statictasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// Runner is the part of the engine static tasks drive.
type Runner interface {
	// AddTask returns once the task is saved.
	AddTask(ctx context.Context, t *task.Task) error
	// Admit returns a *task.RefusedError naming the field when AddTask would refuse t, else nil.
	Admit(t *task.Task) error
	// StopTask returns once the stop is saved.
	StopTask(ctx context.Context, arn, reason string) error
	Task(arn string) *task.Task
}

var _ Runner = (*engine.Engine)(nil)

// Config says where the files are and how tasks are named.
type Config struct {
	Dir      string
	Cluster  string
	Region   string          // ARN region; "local" when empty
	Interval time.Duration   // how often the directory is scanned (default 2 s)
	Clock    clockwork.Clock // scans, restart back-off and tasks' CreatedAt; nil is the wall clock
}

// MaxFileSize is the largest static task file read; a larger one is invalid.
const MaxFileSize = 1 << 20

// Restart delays of a static task that keeps stopping by itself.
const (
	firstRestartDelay = time.Second
	maxRestartDelay   = 5 * time.Minute
)

// Reasons given to the engine when a static task stops.
const (
	ReasonRemoved = "static task file removed"
	ReasonChanged = "static task file changed"
)

// Watcher keeps the directory's tasks running. Its methods are not safe for concurrent use; Run is
// meant to be its only caller.
type Watcher struct {
	cfg      Config
	runner   Runner
	log      *logger.Logger
	running  map[string]string  // file name → ARN of its task
	restarts map[string]restart // file name → restart bookkeeping of its definition
	invalid  map[string]string  // file name → key of the invalid version already reported
	parsed   map[string]parsed  // file name → its last read version
	adopted  set.Set[string]    // ARNs of restored static tasks no file has claimed yet
	dirError string             // the directory's ownership problem already reported
	reads    int                // files read and parsed, for tests
}

// parsed is what one read of a file gave, kept until its identity changes.
type parsed struct {
	id     fileID
	def    *taskdef.Definition
	digest string
	err    error  // the file is invalid
	key    string // content digest, or the identity of a file that was not read
}

// fileID tells whether a file changed without reading it.
type fileID struct {
	dev, ino  uint64
	size      int64
	mtime     int64 // ns since the epoch
	ctime     int64
	ctimeNsec int64
}

// errInvalidFile is the class of files that are refused before they are parsed.
var errInvalidFile = errors.New("invalid static task file")

// restart tracks how often a file's task stopped by itself, to back off.
type restart struct {
	count int
	after time.Time // no new task before this time
}

// New returns a watcher for cfg.Dir.
func New(cfg Config, runner Runner, log *logger.Logger) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Watcher{cfg: cfg, runner: runner, log: log.With("static_tasks_dir", cfg.Dir),
		running: map[string]string{}, restarts: map[string]restart{}, invalid: map[string]string{},
		parsed: map[string]parsed{}}
}

// Adopt takes the static tasks restored after an agent restart: the first scan keeps each one whose
// file is unchanged and stops those whose file changed or went away while the agent was down. Call
// it before Run.
func (w *Watcher) Adopt(tasks []*task.Task) {
	prefix := w.arnPrefix()
	for _, t := range tasks {
		if strings.HasPrefix(t.Arn, prefix) && t.DesiredStatus != task.TaskStopped {
			w.adopted.Add(t.Arn)
		}
	}
}

// Run scans the directory at once, then whenever inotify tells of a change in it (a few ms later, so
// that a burst of events makes one scan) and every interval as a backstop, until ctx ends. A directory
// that does not exist (yet) holds no tasks; it is watched from the first scan that finds it. Run
// returns once ctx ends, with its inotify watch closed.
func (w *Watcher) Run(ctx context.Context) {
	w.log.Info("watching static task definitions")
	t := w.cfg.Clock.NewTicker(w.cfg.Interval)
	defer t.Stop()
	n := w.newNotifier()
	defer n.close()
	var debounce clockwork.Timer
	for {
		if debounce != nil {
			debounce.Stop()
			debounce = nil
		}
		n.watch() // before the scan, so that no change after it goes unnoticed
		w.Scan(ctx)
		for rescan := false; !rescan; {
			var fired <-chan time.Time
			if debounce != nil {
				fired = debounce.Chan()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
				rescan = true
			case <-fired:
				debounce = nil
				rescan = true
			case ev := <-n.events:
				if n.relevant(ev) && debounce == nil {
					debounce = w.cfg.Clock.NewTimer(debounceDelay)
				}
			case err := <-n.errors:
				w.log.Warn("inotify on the static tasks directory", "error", err)
			}
		}
	}
}

// debounceDelay is how long a change waits for the events that follow it before it is scanned.
const debounceDelay = 10 * time.Millisecond

// notifier is Run's inotify watch on the directory; with no inotify its channels are nil and only the
// periodic scan sees changes.
type notifier struct {
	dir      string
	log      *logger.Logger
	fs       *fsnotify.Watcher
	watching bool
	events   chan fsnotify.Event
	errors   chan error
}

func (w *Watcher) newNotifier() *notifier {
	n := &notifier{dir: filepath.Clean(w.cfg.Dir), log: w.log}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		w.log.Warn("cannot use inotify; the static tasks directory is only scanned every interval",
			"interval", w.cfg.Interval, "error", err)
		return n
	}
	n.fs, n.events, n.errors = fw, fw.Events, fw.Errors
	return n
}

// watch adds the directory's watch if it is not in place and the directory exists.
func (n *notifier) watch() {
	if n.fs == nil || n.watching {
		return
	}
	if _, err := os.Stat(n.dir); err != nil {
		return // not there yet, or the scan reports why
	}
	if err := n.fs.Add(n.dir); err != nil {
		n.log.Warn("cannot watch the static tasks directory; it is scanned every interval", "error", err)
		return
	}
	n.watching = true
}

// relevant reports whether ev may change what the directory holds. The directory itself going away
// drops its watch; the next scan adds it again once the directory is back.
func (n *notifier) relevant(ev fsnotify.Event) bool {
	if filepath.Clean(ev.Name) == n.dir {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			_ = n.fs.Remove(n.dir) // already gone with the directory, or a rename we no longer follow
			n.watching = false
		}
		return true
	}
	return strings.HasSuffix(ev.Name, ".json")
}

func (n *notifier) close() {
	if n.fs != nil {
		if err := n.fs.Close(); err != nil {
			n.log.Warn("cannot close the inotify watch of the static tasks directory", "error", err)
		}
	}
}

// Scan applies the directory's current contents once.
func (w *Watcher) Scan(ctx context.Context) {
	if err := checkDir(w.cfg.Dir); err != nil {
		if err.Error() != w.dirError {
			w.dirError = err.Error()
			w.log.Error("static tasks directory is not safe; no task from it is started", "error", err)
		}
		return
	}
	w.dirError = ""
	entries, err := os.ReadDir(w.cfg.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("cannot read the static tasks directory", "error", err)
		return
	}
	var seen set.Set[string]
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		seen.Add(e.Name())
		w.apply(ctx, e.Name())
	}
	names := make([]string, 0, len(w.running))
	for name := range w.running {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !seen.Has(name) {
			w.stop(ctx, w.running[name], ReasonRemoved)
			w.log.Info("static task file removed; its task stops", "file", name, "task", w.running[name])
			delete(w.running, name)
		}
	}
	for name := range w.invalid {
		if !seen.Has(name) {
			delete(w.invalid, name)
		}
	}
	for name := range w.restarts {
		if !seen.Has(name) {
			delete(w.restarts, name) // a file that comes back starts over, like a changed one
		}
	}
	for name := range w.parsed {
		if !seen.Has(name) {
			delete(w.parsed, name)
		}
	}
	for _, arn := range set.Sorted(w.adopted) {
		w.stop(ctx, arn, ReasonRemoved)
		w.log.Info("static task's file changed or went away while the agent was down; its task stops", "task", arn)
		w.adopted.Remove(arn)
	}
}

// apply starts the task of one file, or replaces it when the file changed.
func (w *Watcher) apply(ctx context.Context, name string) {
	p, ok := w.load(name)
	if !ok {
		return
	}
	if p.err != nil {
		w.reportInvalid(name, p.key, p.err)
		return
	}
	delete(w.invalid, name)
	def, digest := p.def, p.digest
	base := w.arn(name, digest)
	old, ok := w.running[name]
	if !ok {
		if arn, adopted := w.claim(base); adopted {
			w.running[name] = arn
			return
		}
	}
	if ok && strings.HasPrefix(old, base) {
		if !w.stoppedByItself(old) || !w.restartDue(name) {
			return
		}
		w.log.Warn("static task stopped by itself; starting it again", "file", name, "task", old,
			"restarts", w.restarts[name].count)
	} else if ok {
		delete(w.restarts, name) // a changed file starts over
	}
	arn := base
	if n := w.restarts[name].count; n > 0 {
		arn = fmt.Sprintf("%s-r%d", base, n)
	}
	t := def.NewTask(arn)
	t.CreatedAt = w.cfg.Clock.Now()
	t.Static = true
	if t.Revision == 0 {
		t.Revision = 1 // a file is its family's one and only revision
	}
	if ok && !strings.HasPrefix(old, base) {
		w.stop(ctx, old, ReasonChanged)
		w.log.Info("static task file changed; replacing its task", "file", name, "old_task", old, "task", arn)
	}
	if err := w.runner.AddTask(ctx, t); err != nil {
		w.log.Warn("cannot start static task", "file", name, "task", arn, "error", err)
		delete(w.running, name)
		return
	}
	w.running[name] = arn
	w.log.Info("static task started", "file", name, "task", arn, "family", t.Family)
}

// stop stops a task this watcher started; a task the engine no longer holds needs no stop.
func (w *Watcher) stop(ctx context.Context, arn, reason string) {
	if err := w.runner.StopTask(ctx, arn, reason); err != nil && !errors.Is(err, engine.ErrUnknownTask) && ctx.Err() == nil {
		w.log.Warn("cannot stop static task", "task", arn, "error", err)
	}
}

// claim takes the restored task of a file, if one survived the restart with this definition.
func (w *Watcher) claim(base string) (string, bool) {
	for _, arn := range set.Sorted(w.adopted) {
		if arn == base || strings.HasPrefix(arn, base+"-r") {
			w.adopted.Remove(arn)
			return arn, true
		}
	}
	return "", false
}

// stoppedByItself reports whether a task this watcher started has stopped without being asked to.
func (w *Watcher) stoppedByItself(arn string) bool {
	t := w.runner.Task(arn)
	return t == nil || t.KnownStatus == task.TaskStopped
}

// restartDue records one more restart of a file's task and reports whether its back-off delay has
// passed; until it has, it reports false and the next scan asks again.
func (w *Watcher) restartDue(name string) bool {
	r := w.restarts[name]
	now := w.cfg.Clock.Now()
	if r.after.IsZero() {
		delay := firstRestartDelay << min(r.count, 20)
		r.after = now.Add(min(delay, maxRestartDelay))
		w.restarts[name] = r
	}
	if now.Before(r.after) {
		return false
	}
	w.restarts[name] = restart{count: r.count + 1}
	return true
}

// load returns the parsed version of a file, reading it only when its identity changed since the
// last scan; it reports false when the file could not be looked at (gone since the listing, I/O error).
func (w *Watcher) load(name string) (parsed, bool) {
	path := filepath.Join(w.cfg.Dir, name)
	fi, err := statRegular(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return parsed{}, false
		}
		if errors.Is(err, errInvalidFile) {
			p := parsed{err: err, key: "stat:" + err.Error()}
			w.parsed[name] = p
			return p, true
		}
		w.log.Warn("cannot read static task file", "file", name, "error", err)
		return parsed{}, false
	}
	id := identity(fi)
	if p, ok := w.parsed[name]; ok && p.id == id {
		return p, true
	}
	data, id, err := readRegular(path, fi)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return parsed{}, false // removed since the stat; the next scan sees it gone
		}
		if errors.Is(err, errInvalidFile) {
			p := parsed{id: id, err: err, key: "read:" + err.Error()}
			w.parsed[name] = p
			return p, true
		}
		w.log.Warn("cannot read static task file", "file", name, "error", err)
		return parsed{}, false
	}
	w.reads++
	p := parsed{id: id, key: contentKey(data)}
	p.def, p.err = taskdef.Parse(data)
	if p.err == nil {
		p.err = w.admit(p.def)
	}
	if p.err == nil {
		if p.digest, err = p.def.Digest(); err != nil {
			w.log.Warn("cannot digest static task definition", "file", name, "error", err)
			return parsed{}, false
		}
	}
	w.parsed[name] = p
	return p, true
}

// maxLinks is how many symbolic links a file's chain may hold, as many as Linux follows before ELOOP.
const maxLinks = 40

// statRegular returns the file info of the regular file at path, after checking that only root can
// change what it reads: the file, and every element of its symlink chain (each link, each directory a
// link's target passes through, and the final target), must be owned by root, and every one but the
// links (whose mode means nothing) not writable by group or others. Any other kind of final target, a
// dangling link, a chain of more than maxLinks links (a loop) or an untrusted element is
// errInvalidFile naming the element; path gone is fs.ErrNotExist. It looks at each element once.
func statRegular(path string) (fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := trusted(path, path, fi); err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if fi, err = resolve(path); err != nil {
			return nil, err
		}
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file (%s)", errInvalidFile, path, fi.Mode().Type())
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the limit of %d bytes", errInvalidFile, path, fi.Size(), MaxFileSize)
	}
	return fi, nil
}

// resolve follows the symlink at path to its final target, as the kernel does, checking every element
// it looks at with trusted, and returns the target's file info. Each component of each link's target
// is looked at once.
func resolve(path string) (fs.FileInfo, error) {
	dir, err := filepath.EvalSymlinks(filepath.Dir(path)) // the static tasks directory, checked by checkDir
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	cur := dir // the resolved path so far
	fi, err := lstatTrusted(path, cur)
	if err != nil {
		return nil, err
	}
	pending := []string{filepath.Base(path)} // what is left to resolve, innermost link's target last
	links := 0
	for len(pending) > 0 {
		top := &pending[len(pending)-1]
		if *top == "" {
			pending = pending[:len(pending)-1]
			continue
		}
		comp, rest, slash := strings.Cut(*top, "/")
		if slash && rest == "" {
			rest = "." // a trailing slash asks for a directory
		}
		*top = rest
		if comp == "" || comp == "." && fi.IsDir() {
			continue
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%w: %s: %s, on its symlink chain, is not a directory", errInvalidFile, path, cur)
		}
		next := filepath.Join(cur, comp) // ".." is lexical: cur holds no symlink
		if fi, err = lstatTrusted(path, next); err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return nil, fmt.Errorf("%w: %s: more than %d symlinks on its chain (a loop?)", errInvalidFile, path, maxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		if fi, err = lstatTrusted(path, cur); err != nil {
			return nil, err
		}
		pending = append(pending, target)
	}
	return fi, nil
}

// lstatTrusted returns the file info of elem, an element of the symlink chain of path, when trusted
// passes it; elem gone is a dangling symlink.
func lstatTrusted(path, elem string) (fs.FileInfo, error) {
	fi, err := os.Lstat(elem)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is a dangling symlink (%s does not exist)", errInvalidFile, path, elem)
		}
		return nil, err
	}
	return fi, trusted(path, elem, fi)
}

// trusted returns errInvalidFile, naming path, elem (one of its elements) and the fix, when elem is
// not owned by root or, not being a symlink, is writable by group or others.
func trusted(path, elem string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: cannot tell the owner of %s", errInvalidFile, path, elem)
	}
	link := fi.Mode()&fs.ModeSymlink != 0
	if st.Uid == 0 && (link || fi.Mode().Perm()&0o022 == 0) {
		return nil
	}
	what := "it"
	if elem != path {
		what = elem + ", on its symlink chain,"
	}
	fix := fmt.Sprintf("chown -h root %s", elem)
	if !link {
		fix = fmt.Sprintf("chown root %s && chmod go-w %s", elem, elem)
	}
	return fmt.Errorf("%w: %s: %s is owned by uid %d with mode %s; only root may write to a static task file and to what its symlinks pass through: %s",
		errInvalidFile, path, what, st.Uid, fi.Mode(), fix)
}

// readRegular reads the regular file statRegular found at path, at most MaxFileSize bytes. It opens
// without blocking and checks the open file again, so a file swapped for a FIFO or device since the
// stat is refused, not waited on.
func readRegular(path string, want fs.FileInfo) ([]byte, fileID, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || !os.SameFile(fi, want) {
		return nil, fileID{}, fmt.Errorf("%w: %s was replaced while being opened", errInvalidFile, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fileID{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, identity(fi), fmt.Errorf("%w: %s is over the limit of %d bytes", errInvalidFile, path, MaxFileSize)
	}
	return data, identity(fi), nil
}

// identity is what changes when a file is written, replaced or renamed over.
func identity(fi fs.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
		id.ctime, id.ctimeNsec = st.Ctim.Sec, st.Ctim.Nsec
	}
	return id
}

// checkDir returns an error naming the fix when dir is not owned by root or is writable by group or
// others; a directory that does not exist is fine (it holds no tasks).
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("static tasks directory %s: cannot tell its owner", dir)
	}
	if st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("static tasks directory %s is owned by uid %d gid %d with mode %s; only root may write to it: chown root:root %s && chmod go-w %s",
			dir, st.Uid, st.Gid, fi.Mode().Perm(), dir, dir)
	}
	return nil
}

// reportInvalid logs a file's validation errors once per content (or identity, for a file that was
// not read).
func (w *Watcher) reportInvalid(name, key string, err error) {
	if w.invalid[name] == key {
		return
	}
	w.invalid[name] = key
	w.log.Error("invalid static task definition; skipped", "file", name, "error", err)
}

// admit asks the Runner whether it takes the definition's task, before anything is started or
// stopped for the file; its refusal names the definition's field.
func (w *Watcher) admit(def *taskdef.Definition) error {
	return w.runner.Admit(def.NewTask(""))
}

func contentKey(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

var unsafeID = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// IDStem is how the IDs of the tasks of the static task file name start:
// static-<file>-<name hash>, where <file> is the name without .json sanitized for an ARN and <name
// hash> the first 8 hex digits of the SHA-256 of the exact name, so that names that sanitize alike
// ("a b.json", "a-b.json") still differ.
func IDStem(name string) string {
	return "static-" + unsafeID.ReplaceAllString(strings.TrimSuffix(name, ".json"), "-") + "-" + contentKey([]byte(name))[:8]
}

// arn names the first task of a file:
// arn:aws:ecs:<region>:000000000000:task/<cluster>/<IDStem>-<digest>, the digest being its
// definition's. Restarts of it add -r<N>.
func (w *Watcher) arn(name, digest string) string {
	return strings.TrimSuffix(w.arnPrefix(), "static-") + IDStem(name) + "-" + digest[:12]
}

// arnPrefix is what every static task ARN of this cluster starts with.
func (w *Watcher) arnPrefix() string {
	return fmt.Sprintf("arn:aws:ecs:%s:000000000000:task/%s/static-", w.cfg.Region, w.cfg.Cluster)
}

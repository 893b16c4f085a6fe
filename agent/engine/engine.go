// Package engine runs tasks on the Docker Engine and keeps each in its desired state.
//
// Every task has one worker goroutine that owns the task's model. The engine hands a worker work
// through a mailbox that keeps only the latest desired status (a stop is never overwritten by a
// start) and a queue of Docker events for the task's containers; the worker wakes, drains both,
// and moves the task one step closer to what is desired:
//
//	              ┌──────────── mailbox: desired status (latest wins, STOPPED sticky)
//	engine ──────▶│ worker ───▶ acquire host resources (FIFO) ─▶ pull all images ─▶ create+start
//	 events ─────▶│  (one per   containers as dependsOn allows ─▶ watch (events, reconcile)
//	 reconcile ──▶└  task)      ─▶ stop in reverse dependency order ─▶ release ─▶ clean up after a wait
//
// Each transition is saved to the Store before listeners hear of it. Locks are per task; the engine's
// own lock guards only its maps and is never held across a save, a Docker call or a listener.
// Time comes from Config.Clock, so tests drive timeouts with a fake clock.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// Docker is the part of the Docker Engine client the engine calls.
type Docker interface {
	CreateContainer(ctx context.Context, opts docker.CreateContainerOptions) (*docker.Container, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	RemoveContainer(ctx context.Context, opts docker.RemoveContainerOptions) error
	InspectContainer(ctx context.Context, id string) (*docker.Container, error)
	ListContainersByLabel(ctx context.Context, labels map[string]string) ([]docker.APIContainers, error)
	RemoveVolume(ctx context.Context, name string) error
	Events(ctx context.Context, filters map[string][]string) (<-chan dockerclient.Event, error)
}

// Puller pulls images (with retries, sharing and the pull behaviour).
type Puller interface {
	Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error)
}

// Store persists tasks. SaveTask must be durable when it returns: the engine reports nothing it has
// not saved.
type Store interface {
	SaveTask(ctx context.Context, t *task.Task) error
	DeleteTask(ctx context.Context, arn string) error
}

// Listener hears what happens to tasks. Calls for one task come in order from its worker and must
// not block for long.
type Listener interface {
	// TaskChanged is called after every saved change of a task, with a copy it may keep.
	TaskChanged(t *task.Task)
	// TaskRemoved is called once a stopped task has been cleaned up and deleted from the store; the
	// engine will not mention it again.
	TaskRemoved(arn string)
}

// ChangeFunc adapts a function to a Listener that hears task changes and ignores removals.
type ChangeFunc func(t *task.Task)

// TaskChanged calls f.
func (f ChangeFunc) TaskChanged(t *task.Task) { f(t) }

// TaskRemoved does nothing.
func (ChangeFunc) TaskRemoved(string) {}

// Config is what the engine takes from the agent's configuration.
type Config struct {
	Cluster     string
	StopTimeout time.Duration // default stop timeout (ECS_CONTAINER_STOP_TIMEOUT)
	// StartTimeout is the default bound on a dependsOn wait, and the bound on retrying a container
	// start through a Docker Engine outage (ECS_CONTAINER_START_TIMEOUT).
	StartTimeout time.Duration
	// CreateTimeout bounds retrying a container create through a Docker Engine outage
	// (ECS_CONTAINER_CREATE_TIMEOUT); zero: 4 m.
	CreateTimeout time.Duration
	CleanupWait   time.Duration // stopped task kept this long (ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION)
	// AWSLogsExecutionRole lets an awslogs driver that asks for it (Container.LogsAuthExecutionRole)
	// use the task's execution-role credentials (ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE).
	AWSLogsExecutionRole bool
	// CleanupJitter keeps each stopped task up to this much longer, an amount fixed by its ARN, so
	// it is the same after an agent restart (ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION_JITTER).
	CleanupJitter     time.Duration
	ReconcileInterval time.Duration // how often every task re-inspects its containers (default 1 m)
	Resources         Resources
	// AWSVPC enables awsvpc tasks.
	AWSVPC AWSVPCConfig
	// Probe, if set, is called at each Probe* point.
	Probe Probe
	// Clock is the engine's time source; nil means the real clock.
	Clock clockwork.Clock
	// Policy is what the host refuses of a task (ECS_DISABLE_PRIVILEGED, ECS_TASK_SECURITY_POLICY):
	// AddTask refuses a new task it refuses (see Admit), and such a task restored from the store
	// stops before anything of it is created, with a reason naming the field.
	Policy task.Policy
	// TaskEndpoint tells containers where their credentials and metadata are.
	TaskEndpoint TaskEndpointConfig
	// ContainerMetadata is the container metadata file (ECS_ENABLE_CONTAINER_METADATA).
	ContainerMetadata ContainerMetadataConfig
	// ExecutionRoleAuth, when set, gives the pulls of containers that ask for their task's execution
	// role (task.ECRAuth.UseExecutionRole) its credentials; nil: every pull uses the agent's own.
	ExecutionRoleAuth ExecutionRoleAuth
	// Secrets fetches what containers get with their task's execution role: secrets, environment
	// files, log driver secret options and private registry credentials. nil: a container that asks
	// for any of them cannot be created.
	Secrets SecretSource
	// TaskCgroups, when set, gives each task with a task-level cpu or memory its own cgroup, the
	// parent of its containers' (ECS_ENABLE_TASK_CPU_MEM_LIMIT).
	TaskCgroups TaskCgroups
	// DynamicHostPorts is the range containerPortRange mappings get their host ports from in bridge
	// mode (ECS_DYNAMIC_HOST_PORT_RANGE); zero: 49153-65535.
	DynamicHostPorts [2]int
	// PauseImage is the image of the pause container that holds the PID and IPC namespaces of a task
	// outside awsvpc mode with pidMode or ipcMode task (awsvpc tasks use AWSVPC.PauseImage); empty:
	// such tasks are refused, saying why.
	PauseImage string
	// Features are run at points of every task's life after the engine's own (awsvpc, secrets, task
	// cgroup, task endpoint, metadata file), in this order; see hooks.go.
	Features []Feature
	// Images reads pulled images' repo digests for Container.ImageDigest; nil: only digests pinned
	// in image references are known.
	Images ImageInspector
}

// Probe is called at a named step of a task's life with the task, which it must not keep or change.
type Probe func(point string, t *task.Task)

// Probe points: named steps of a task's life at which Config.Probe is called. The crash-recovery tests
// kill the agent at each of them.
const (
	ProbeSaved        = "saved"         // a change of the task is saved; listeners are not told yet
	ProbeBeforeCreate = "before-create" // a container's name is saved; Docker has not been asked to create it
	ProbeAfterCreate  = "after-create"  // Docker created the container; its ID is not saved yet
	ProbeBeforeStart  = "before-start"  // Docker created the container; it has not been asked to start it
	ProbeAfterStart   = "after-start"   // Docker started the container; RUNNING is not saved yet
	ProbeBeforeStop   = "before-stop"   // the stop is saved; Docker has not been asked to stop the containers
	ProbeAfterStop    = "after-stop"    // Docker stopped the containers; STOPPED is not saved yet
)

// defaultCreateTimeout is Config.CreateTimeout when unset: the ECS agent's create timeout.
const defaultCreateTimeout = 4 * time.Minute

// ErrStopped is returned by AddTask before Start and after the engine's context has ended. An
// errdefs.ErrFailedPrecondition.
var ErrStopped = errdefs.New(errdefs.ErrFailedPrecondition, "engine stopped")

// ErrUnknownTask is returned by StopTask for a task the engine does not hold. An errdefs.ErrNotFound.
var ErrUnknownTask = errdefs.New(errdefs.ErrNotFound, "unknown task")

// Engine runs tasks. Create it with New, start it with Start, and add tasks with AddTask.
type Engine struct {
	cfg       Config
	docker    Docker
	puller    Puller
	auth      dockerclient.AuthSource
	store     Store
	log       *logger.Logger
	resources *resourceQueue
	ports     *hostPortPicker
	features  []Feature // the built-ins, then Config.Features

	clock clockwork.Clock

	retryDelay time.Duration // wait before retrying a failed stop; the first wait before retrying a create or start through an outage

	saveFailures atomic.Int64          // workers whose last save failed and is being retried
	lastSaveErr  atomic.Pointer[error] // the latest of those failures

	spawn chan *worker  // accepted workers for the goroutine that runs them (Start's)
	done  chan struct{} // closed once the engine's context has ended

	mu        sync.Mutex
	started   bool
	workers   map[string]*worker               // task ARN → worker, including ones whose first save is in flight
	byID      map[string]*worker               // Docker container ID → worker
	unknown   map[string]task.UnknownContainer // Docker container ID → a running container of no known task
	tokens    map[string]*worker               // metadata token → worker
	listeners []Listener
	wg        sync.WaitGroup
}

// New returns an engine; nothing runs until Start.
func New(cfg Config, d Docker, p Puller, auth dockerclient.AuthSource, store Store, log *logger.Logger) *Engine {
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = defaultCreateTimeout
	}
	if cfg.DynamicHostPorts == [2]int{} {
		cfg.DynamicHostPorts = [2]int{49153, 65535}
	}
	e := &Engine{cfg: cfg, ports: newHostPortPicker(cfg.DynamicHostPorts[0], cfg.DynamicHostPorts[1]), docker: d, puller: p, auth: auth, store: store, log: log, clock: cfg.Clock, retryDelay: time.Second,
		resources: newResourceQueue(cfg.Resources), workers: map[string]*worker{}, byID: map[string]*worker{},
		unknown: map[string]task.UnknownContainer{}, tokens: map[string]*worker{},
		spawn: make(chan *worker), done: make(chan struct{})}
	e.features = append(e.builtinFeatures(), cfg.Features...)
	return e
}

// SharesNamespaces reports whether tasks with pidMode or ipcMode task can run: the engine has a
// pause image for them.
func (e *Engine) SharesNamespaces() bool { return e.cfg.PauseImage != "" }

// pauseImage returns the pause image for t: awsvpc's for an awsvpc task, else the one for tasks
// that share PID or IPC namespaces.
func (e *Engine) pauseImage(t *task.Task) string {
	if t.NetworkMode == task.NetworkAWSVPC {
		return e.cfg.AWSVPC.PauseImage
	}
	return e.cfg.PauseImage
}

func (e *Engine) probe(point string, t *task.Task) {
	if e.cfg.Probe != nil {
		e.cfg.Probe(point, t)
	}
}

// Subscribe registers l for every task change from now on. Call it before Start.
func (e *Engine) Subscribe(l Listener) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.listeners = append(e.listeners, l)
}

// Start subscribes to Docker events and starts the reconcile loop. The engine runs until ctx ends;
// Wait returns once every goroutine it started, workers included, has finished.
func (e *Engine) Start(ctx context.Context) error {
	// Only Berth's containers: the events of other containers on the host are not decoded at all.
	events, err := e.docker.Events(ctx, map[string][]string{"type": {"container"}, "label": {LabelManaged + "=true"}})
	if err != nil {
		return fmt.Errorf("subscribe to Docker events: %w", err)
	}
	e.mu.Lock()
	e.started = true
	e.mu.Unlock()
	e.wg.Add(3)
	go func() {
		defer e.wg.Done()
		e.dispatch(ctx, events)
	}()
	go func() {
		defer e.wg.Done()
		e.reconcileLoop(ctx)
	}()
	go func() {
		defer e.wg.Done()
		e.runWorkers(ctx)
	}()
	return nil
}

// runWorkers runs every accepted worker under ctx until ctx ends.
func (e *Engine) runWorkers(ctx context.Context) {
	defer close(e.done)
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-e.spawn:
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				w.run(ctx)
			}()
		}
	}
}

// Wait blocks until the engine's goroutines have finished after its context ended.
func (e *Engine) Wait() { e.wg.Wait() }

// AddTask hands a copy of a task to the engine and returns once the task is saved, so the caller may
// acknowledge it. A task whose ARN the engine holds already only updates that task's desired status,
// so delivering a task twice starts it once; when that update is a stop, AddTask returns once the
// stop is saved. It fails with ErrStopped before Start and after the engine's context has ended,
// with Admit's error for a new task the engine refuses (it is then neither saved nor held), and
// with the store's error when the save fails (the task is then not held). ctx bounds the wait.
func (e *Engine) AddTask(ctx context.Context, t *task.Task) error {
	return e.add(ctx, t, true)
}

// Admit reports whether the engine takes t as a new task: a *task.RefusedError (wrapping
// task.ErrRefused) naming the first field of t that Config.Policy refuses, else nil. It is the one
// gate of every path a task comes by (the control plane, the embedded one through it, static
// files): AddTask refuses a new task with this error, and a restored task stops with it.
func (e *Engine) Admit(t *task.Task) error {
	return t.Refuse(e.cfg.Policy)
}

// add is AddTask; save is false for tasks Restore loaded from the store, which are saved already.
func (e *Engine) add(ctx context.Context, t *task.Task, save bool) error {
	refused := e.Admit(t) // before the pause container is added, so indexes are the caller's
	t = t.Clone()         // the worker owns its task; the caller keeps its own
	withPause(t, e.pauseImage(t))
	assignEndpointIDs(t, e.cfg.TaskEndpoint.Credentials)
	e.mu.Lock()
	if !e.started || e.stopping() {
		e.mu.Unlock()
		return ErrStopped
	}
	if w, ok := e.workers[t.Arn]; ok {
		e.mu.Unlock()
		return e.update(ctx, w, t.DesiredStatus)
	}
	if save && refused != nil { // a restored task is stopped by its worker instead
		e.mu.Unlock()
		return fmt.Errorf("task %s: %w", t.Arn, refused)
	}
	w := newWorker(e, t)
	e.workers[t.Arn] = w // held but not listed until saved, so a second delivery waits for this one
	e.mu.Unlock()

	if save {
		w.acceptErr = e.store.SaveTask(ctx, t) // accepted means saved: an ACS ack may follow
		if w.acceptErr == nil {
			if data, err := json.Marshal(t); err == nil {
				w.saved = sha256.Sum256(data) // the worker's first commit need not save it again
			}
		}
	}
	e.mu.Lock()
	if w.acceptErr != nil {
		delete(e.workers, t.Arn)
	} else {
		w.listed = true
		for _, c := range t.Containers {
			if c.DockerID != "" {
				e.byID[c.DockerID] = w
			}
			if c.MetadataToken != "" {
				e.tokens[c.MetadataToken] = w
			}
		}
	}
	e.mu.Unlock()
	close(w.accepted)
	if w.acceptErr != nil {
		return fmt.Errorf("save task %s: %w", t.Arn, w.acceptErr)
	}
	w.prepareHooks()
	select {
	case e.spawn <- w:
		return nil
	case <-e.done:
		return ErrStopped
	}
}

// update applies a later delivery of a task the engine holds: a stop is saved before it returns.
func (e *Engine) update(ctx context.Context, w *worker, desired task.TaskStatus) error {
	select {
	case <-w.accepted:
	case <-ctx.Done():
		return ctx.Err()
	}
	if w.acceptErr != nil {
		return fmt.Errorf("task %s was not saved: %w", w.arn, w.acceptErr)
	}
	if desired != task.TaskStopped {
		return nil
	}
	return w.stop(ctx, "")
}

// StopAll stops every task with reason and waits until each has stopped, bounded by the longest
// stop timeout of its containers (twice, plus 30 s for Docker) unless ctx ends first. It returns how
// many tasks had not stopped by then.
func (e *Engine) StopAll(ctx context.Context, reason string) int {
	e.mu.Lock()
	workers := e.listedLocked()
	e.mu.Unlock()
	limit := 2*e.cfg.StopTimeout + 30*time.Second
	for _, w := range workers {
		w.setDesired(task.TaskStopped, reason)
		for _, c := range w.snapshot().Containers {
			limit = max(limit, 2*c.StopTimeout+30*time.Second)
		}
	}
	e.log.Info("stopping every task", "tasks", len(workers), "limit", limit)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := e.clock.After(limit)
	left := 0
	for _, w := range workers {
		select {
		case <-w.stopped:
		case <-deadline:
			cancel()
			left++
		case <-ctx.Done():
			left++
		}
	}
	return left
}

// goTracked runs fn in a goroutine Wait waits for, unless the engine's context has ended; it
// reports whether fn runs.
func (e *Engine) goTracked(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping() { // runWorkers has returned or is returning: Wait may be about to see zero
		return false
	}
	e.wg.Add(1) // runWorkers still counts, so the counter is not zero
	go func() {
		defer e.wg.Done()
		fn()
	}()
	return true
}

// stopping reports whether the engine's context has ended.
func (e *Engine) stopping() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// StopTask sets a task's desired status to STOPPED with the given reason and returns once that is
// saved (the containers stop afterwards). It fails with ErrUnknownTask for a task the engine does not
// hold, and with ctx's error if ctx ends first.
func (e *Engine) StopTask(ctx context.Context, arn, reason string) error {
	e.mu.Lock()
	w, ok := e.workers[arn]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("stop task %s: %w", arn, ErrUnknownTask)
	}
	select {
	case <-w.accepted:
	case <-ctx.Done():
		return ctx.Err()
	}
	if w.acceptErr != nil {
		return fmt.Errorf("stop task %s: %w", arn, ErrUnknownTask)
	}
	return w.stop(ctx, reason)
}

// SaveError returns the latest failure to save a task while some task's save is still failing (its
// worker waits and retries), and nil once every save succeeds again.
func (e *Engine) SaveError() error {
	if e.saveFailures.Load() == 0 {
		return nil
	}
	if err := e.lastSaveErr.Load(); err != nil {
		return *err
	}
	return errors.New("saving task state fails")
}

// Tasks returns a copy of every task the engine holds.
func (e *Engine) Tasks() []*task.Task {
	e.mu.Lock()
	workers := e.listedLocked()
	e.mu.Unlock()
	out := make([]*task.Task, 0, len(workers))
	for _, w := range workers {
		out = append(out, w.snapshot())
	}
	return out
}

// StaticTasks returns a copy of every static task the engine holds, copying no other: the embedded
// control plane asks for them at each DescribeTasks or ListTasks that may name one.
func (e *Engine) StaticTasks() []*task.Task {
	var out []*task.Task
	for _, t := range e.snaps() {
		if t.Static {
			out = append(out, t.Clone())
		}
	}
	return out
}

// VisitRunning calls visit with the snapshot of each running task, which visit must neither change
// nor keep: the copy-free way for periodic readers (telemetry samples once a second) to look at
// every task. Snapshots are replaced, never changed, so reading one needs no lock once taken.
func (e *Engine) VisitRunning(visit func(t *task.Task)) {
	for _, t := range e.snaps() {
		if t.KnownStatus == task.TaskRunning {
			visit(t)
		}
	}
}

// snaps yields each listed worker with its current snapshot, which must be neither changed nor
// kept by the caller.
func (e *Engine) snaps() iter.Seq2[*worker, *task.Task] {
	return func(yield func(*worker, *task.Task) bool) {
		e.mu.Lock()
		workers := e.listedLocked()
		e.mu.Unlock()
		for _, w := range workers {
			w.mu.Lock()
			t := w.snap
			w.mu.Unlock()
			if !yield(w, t) {
				return
			}
		}
	}
}

// listedLocked returns every worker whose task is saved; the caller holds e.mu.
func (e *Engine) listedLocked() []*worker {
	workers := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		if w.listed {
			workers = append(workers, w)
		}
	}
	return workers
}

// Task returns a copy of one task, or nil.
func (e *Engine) Task(arn string) *task.Task {
	e.mu.Lock()
	w, ok := e.workers[arn]
	listed := ok && w.listed
	e.mu.Unlock()
	if !listed {
		return nil
	}
	return w.snapshot()
}

// CleanupStopped removes the containers of every stopped task now instead of after the cleanup
// wait, oldest-stopped first, and waits until they are gone or ctx ends. It returns how many tasks it
// cleaned up. The disk-pressure cleaner calls it: a crash-looping task must not fill the disk.
func (e *Engine) CleanupStopped(ctx context.Context) (int, error) {
	e.mu.Lock()
	var stopped []*worker
	for _, w := range e.listedLocked() {
		if w.snapshot().KnownStatus == task.TaskStopped {
			stopped = append(stopped, w)
		}
	}
	e.mu.Unlock()
	slices.SortFunc(stopped, func(a, b *worker) int { return a.snapshot().StoppedAt.Compare(b.snapshot().StoppedAt) })
	for _, w := range stopped {
		w.cleanupNow()
	}
	for i, w := range stopped {
		select {
		case <-w.gone:
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(stopped), nil
}

// trackContainer routes the Docker events of id to w.
func (e *Engine) trackContainer(id string, w *worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byID[id] = w
}

// forget drops a task whose cleanup is done and tells the listeners.
func (e *Engine) forget(w *worker) {
	defer close(w.gone)
	e.mu.Lock()
	delete(e.workers, w.arn)
	for id, x := range e.byID {
		if x == w {
			delete(e.byID, id)
		}
	}
	for token, x := range e.tokens {
		if x == w {
			delete(e.tokens, token)
		}
	}
	ls := slices.Clone(e.listeners)
	e.mu.Unlock()
	if x := e.cfg.ExecutionRoleAuth; x != nil {
		x.TaskRemoved(w.arn)
	}
	for _, l := range ls {
		l.TaskRemoved(w.arn)
	}
}

// notify tells every listener about a saved change.
func (e *Engine) notify(t *task.Task) {
	e.mu.Lock()
	ls := slices.Clone(e.listeners)
	e.mu.Unlock()
	for _, l := range ls {
		l.TaskChanged(t.Clone())
	}
}

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
// own lock guards only its maps.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
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

// Listener hears of every saved change of a task, with a copy it may keep.
type Listener func(t *task.Task)

// Config is what the engine takes from the agent's configuration.
type Config struct {
	Cluster           string
	StopTimeout       time.Duration // default stop timeout (ECS_CONTAINER_STOP_TIMEOUT)
	StartTimeout      time.Duration // default bound on a dependsOn wait (ECS_CONTAINER_START_TIMEOUT)
	CleanupWait       time.Duration // stopped task kept this long (ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION)
	ReconcileInterval time.Duration // how often every task re-inspects its containers (default 1 m)
	Resources         Resources
	// AWSVPC enables awsvpc tasks.
	AWSVPC AWSVPCConfig
	// Hook, if set, is called at each Hook* point with the task (which it must not keep or change).
	Hook func(point string, t *task.Task)
}

// Hook points: named steps of a task's life at which Config.Hook is called. The crash-recovery tests
// kill the agent at each of them.
const (
	HookSaved        = "saved"         // a change of the task is saved; listeners are not told yet
	HookBeforeCreate = "before-create" // a container's name is saved; Docker has not been asked to create it
	HookAfterCreate  = "after-create"  // Docker created the container; its ID is not saved yet
	HookBeforeStart  = "before-start"  // the created container is saved; Docker has not been asked to start it
	HookAfterStart   = "after-start"   // Docker started the container; RUNNING is not saved yet
	HookBeforeStop   = "before-stop"   // the stop is saved; Docker has not been asked to stop the containers
	HookAfterStop    = "after-stop"    // Docker stopped the containers; STOPPED is not saved yet
)

// ErrStopped is returned by AddTask after the engine's context has ended.
var ErrStopped = errors.New("engine stopped")

// Engine runs tasks. Create it with New, start it with Start, and add tasks with AddTask.
type Engine struct {
	cfg       Config
	docker    Docker
	puller    Puller
	auth      dockerclient.AuthSource
	store     Store
	log       *logger.Logger
	resources *resourceQueue

	retryDelay time.Duration // wait before retrying a failed stop

	mu        sync.Mutex
	ctx       context.Context
	workers   map[string]*worker // task ARN → worker
	byID      map[string]*worker // Docker container ID → worker
	listeners []Listener
	wg        sync.WaitGroup
}

// New returns an engine; nothing runs until Start.
func New(cfg Config, d Docker, p Puller, auth dockerclient.AuthSource, store Store, log *logger.Logger) *Engine {
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Minute
	}
	return &Engine{cfg: cfg, docker: d, puller: p, auth: auth, store: store, log: log, retryDelay: time.Second,
		resources: newResourceQueue(cfg.Resources), workers: map[string]*worker{}, byID: map[string]*worker{}}
}

func (e *Engine) hook(point string, t *task.Task) {
	if e.cfg.Hook != nil {
		e.cfg.Hook(point, t)
	}
}

// Subscribe registers l for every task change from now on. Call it before Start.
func (e *Engine) Subscribe(l Listener) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.listeners = append(e.listeners, l)
}

// Start subscribes to Docker events and starts the reconcile loop. The engine runs until ctx ends;
// Wait returns once every goroutine it started has finished.
func (e *Engine) Start(ctx context.Context) error {
	events, err := e.docker.Events(ctx, map[string][]string{"type": {"container"}})
	if err != nil {
		return fmt.Errorf("subscribe to Docker events: %w", err)
	}
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		e.dispatch(ctx, events)
	}()
	go func() {
		defer e.wg.Done()
		e.reconcileLoop(ctx)
	}()
	return nil
}

// Wait blocks until the engine's goroutines have finished after its context ended.
func (e *Engine) Wait() { e.wg.Wait() }

// AddTask hands a copy of a task to the engine. A task whose ARN the engine knows already only updates
// that task's desired status, so delivering a task twice starts it once.
func (e *Engine) AddTask(t *task.Task) error {
	t = t.Clone() // the worker owns its task; the caller keeps its own
	withPause(t, e.cfg.AWSVPC.PauseImage)
	e.mu.Lock()
	if e.ctx == nil || e.ctx.Err() != nil {
		e.mu.Unlock()
		return ErrStopped
	}
	if w, ok := e.workers[t.Arn]; ok {
		e.mu.Unlock()
		w.setDesired(t.DesiredStatus, "")
		return nil
	}
	if err := e.store.SaveTask(e.ctx, t); err != nil { // accepted means saved: an ACS ack may follow
		e.mu.Unlock()
		return fmt.Errorf("save task %s: %w", t.Arn, err)
	}
	w := newWorker(e, t)
	e.workers[t.Arn] = w
	for _, c := range t.Containers {
		if c.DockerID != "" {
			e.byID[c.DockerID] = w
		}
	}
	ctx := e.ctx
	e.wg.Add(1)
	e.mu.Unlock()
	e.notify(t)
	go func() {
		defer e.wg.Done()
		w.run(ctx)
	}()
	return nil
}

// MarkSent records what the control plane has been told of a task — its and its containers'
// SentStatus, which never move backwards — through the task's worker, so the worker never saves over
// it, and returns once it is saved or ctx ends. A task the engine no longer holds is ignored.
func (e *Engine) MarkSent(ctx context.Context, t *task.Task) error {
	e.mu.Lock()
	w, ok := e.workers[t.Arn]
	e.mu.Unlock()
	if !ok {
		return nil
	}
	req := sentRequest{t: t.Clone(), saved: make(chan struct{})}
	w.mu.Lock()
	w.sent = append(w.sent, req)
	w.mu.Unlock()
	w.poke()
	select {
	case <-req.saved:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopTask sets a task's desired status to STOPPED with the given reason. It reports whether the
// engine knows the task.
func (e *Engine) StopTask(arn, reason string) bool {
	e.mu.Lock()
	w, ok := e.workers[arn]
	e.mu.Unlock()
	if ok {
		w.setDesired(task.TaskStopped, reason)
	}
	return ok
}

// Tasks returns a copy of every task the engine holds.
func (e *Engine) Tasks() []*task.Task {
	e.mu.Lock()
	workers := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		workers = append(workers, w)
	}
	e.mu.Unlock()
	out := make([]*task.Task, 0, len(workers))
	for _, w := range workers {
		out = append(out, w.snapshot())
	}
	return out
}

// Task returns a copy of one task, or nil.
func (e *Engine) Task(arn string) *task.Task {
	e.mu.Lock()
	w, ok := e.workers[arn]
	e.mu.Unlock()
	if !ok {
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
	for _, w := range e.workers {
		if w.snapshot().KnownStatus == task.TaskStopped {
			stopped = append(stopped, w)
		}
	}
	e.mu.Unlock()
	slices.SortFunc(stopped, func(a, b *worker) int { return a.snapshot().StoppedAt.Compare(b.snapshot().StoppedAt) })
	for _, w := range stopped {
		w.cleanupNow()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		e.mu.Lock()
		for _, w := range stopped {
			if e.workers[w.arn] == w {
				left++
			}
		}
		e.mu.Unlock()
		if left == 0 {
			return len(stopped), nil
		}
		select {
		case <-ctx.Done():
			return len(stopped) - left, ctx.Err()
		case <-tick.C:
		}
	}
}

// trackContainer routes the Docker events of id to w.
func (e *Engine) trackContainer(id string, w *worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byID[id] = w
}

// forget drops a task whose cleanup is done.
func (e *Engine) forget(w *worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.workers, w.arn)
	for id, x := range e.byID {
		if x == w {
			delete(e.byID, id)
		}
	}
}

// notify tells every listener about a saved change.
func (e *Engine) notify(t *task.Task) {
	e.mu.Lock()
	ls := append([]Listener(nil), e.listeners...)
	e.mu.Unlock()
	for _, l := range ls {
		l(t.Clone())
	}
}

// dispatch routes container events to their task's worker until ctx ends or the stream closes. After a
// re-subscription every worker re-inspects, since events may have been missed.
func (e *Engine) dispatch(ctx context.Context, events <-chan dockerclient.Event) {
	for {
		var ev dockerclient.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-events:
		}
		if !ok {
			return
		}
		if ev.Type == dockerclient.EventTypeBerth && ev.Action == dockerclient.ActionResubscribed {
			e.log.Info("Docker event stream re-subscribed; re-inspecting every task's containers")
			e.reinspectAll()
			continue
		}
		e.mu.Lock()
		w, ok := e.byID[ev.ID]
		e.mu.Unlock()
		if ok {
			w.event(ev)
		}
	}
}

func (e *Engine) reinspectAll() {
	e.mu.Lock()
	workers := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		workers = append(workers, w)
	}
	e.mu.Unlock()
	for _, w := range workers {
		w.requestInspect()
	}
}

// reconcileLoop makes every worker re-inspect its containers periodically, to catch what events missed.
func (e *Engine) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.reinspectAll()
		}
	}
}

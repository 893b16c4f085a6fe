package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// worker drives one task. Its run goroutine owns t; other goroutines talk to it through the
// mailbox fields under mu and the wake channel.
type worker struct {
	e   *Engine
	arn string
	log *logger.Logger
	t   *task.Task // owned by run

	cleanupRetries int // cleanups put off because the Docker Engine was unreachable; the cleanup's own

	// Set by the engine under its lock: listed once the task's first save succeeded; accepted is
	// closed once that save has finished, with acceptErr its outcome.
	listed    bool
	accepted  chan struct{}
	acceptErr error

	mu             sync.Mutex
	desired        task.TaskStatus
	reason         string
	events         []dockerclient.Event
	posts          []func(*Run) // hooks' work for the worker goroutine (Run.Go's post)
	inspect        bool
	snap           *task.Task
	cancelStart    context.CancelFunc
	wake           chan struct{}
	cleanEarly     bool            // clean the stopped task up without waiting (disk pressure)
	cleanScheduled bool            // the worker's goroutine has ended; the cleanup timer holds the task
	cleanTimer     clockwork.Timer // the stopped task's cleanup, once its worker has finished
	stopSaved      chan struct{}   // closed once a save holds desired STOPPED
	stopped        chan struct{}   // closed once a save holds known STOPPED
	gone           chan struct{}   // closed once the task is cleaned up and forgotten
	cleanOnce      sync.Once
	stopOnce       sync.Once
	stoppedOnce    sync.Once

	waitingSince map[string]time.Time // container name → when its dependsOn wait began (run only)
	saved        [sha256.Size]byte    // digest of the task's JSON as last saved; zero before (run only, and add before run)
	hooks        taskHooks            // the features' hooks for the task (see hooks.go)
	runCtx       context.Context      // run's start context: ends when a stop is wanted or the agent stops (run only; nil before)
	refused      error                // a Preparer's refusal: the task stops with it before anything is made
}

func newWorker(e *Engine, t *task.Task) *worker {
	w := &worker{e: e, arn: t.Arn, t: t, log: e.log.With("task", t.Arn), desired: t.DesiredStatus,
		snap: t.Clone(), wake: make(chan struct{}, 1), stopSaved: make(chan struct{}), stopped: make(chan struct{}), gone: make(chan struct{}),
		accepted: make(chan struct{}), waitingSince: map[string]time.Time{}}
	w.hooks = hooksFor(e.features, t)
	for _, c := range t.Containers {
		if c.DockerID != "" && c.KnownStatus != task.ContainerStopped {
			w.inspect = true // a restored task: its containers may have changed while nobody watched
		}
	}
	return w
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// setDesired records the newest desired status. STOPPED is final: a later RUNNING is ignored. A stop
// cancels whatever start work is in flight.
func (w *worker) setDesired(s task.TaskStatus, reason string) {
	w.mu.Lock()
	if w.desired == task.TaskStopped || s != task.TaskStopped {
		w.mu.Unlock()
		return
	}
	w.desired, w.reason = s, reason
	if w.cancelStart != nil {
		w.cancelStart()
	}
	w.mu.Unlock()
	w.poke()
}

// stop sets the desired status to STOPPED and waits until a save holds it, or ctx ends.
func (w *worker) stop(ctx context.Context, reason string) error {
	w.setDesired(task.TaskStopped, reason)
	select {
	case <-w.stopSaved:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the stop of task %s was not saved: %w", w.arn, ctx.Err())
	}
}

func (w *worker) stopWanted() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.desired == task.TaskStopped, w.reason
}

func (w *worker) event(ev dockerclient.Event) {
	w.mu.Lock()
	if w.cleanScheduled {
		w.mu.Unlock()
		return // nothing reads the mailbox of a stopped task waiting for its cleanup
	}
	w.events = append(w.events, ev)
	w.mu.Unlock()
	w.poke()
}

// post queues fn for the worker goroutine, which runs it at its next drain and commits; false once
// the worker no longer reads its mailbox.
func (w *worker) post(fn func(*Run)) bool {
	w.mu.Lock()
	if w.cleanScheduled {
		w.mu.Unlock()
		return false
	}
	w.posts = append(w.posts, fn)
	w.mu.Unlock()
	w.poke()
	return true
}

func (w *worker) requestInspect() {
	w.mu.Lock()
	w.inspect = !w.cleanScheduled
	w.mu.Unlock()
	w.poke()
}

func (w *worker) snapshot() *task.Task {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap.Clone()
}

// commit derives the task's known status, saves the task, publishes a snapshot and notifies the
// listeners — in that order, so nothing is reported before it is saved. A stopped essential container
// stops the task here, wherever it was noticed, so STOPPED is never reported while RUNNING is desired.
func (w *worker) commit(ctx context.Context) {
	t := w.t
	w.checkEssential()
	if stop, reason := w.stopWanted(); stop {
		// The last container may stop before stopAll runs; STOPPED is never reported without its reason.
		t.DesiredStatus = task.TaskStopped
		if t.StoppedReason == "" {
			t.StoppedReason = reason
		}
	}
	known := t.DeriveKnownStatus()
	if known != t.KnownStatus {
		w.log.Info("task status changed", "from", t.KnownStatus.String(), "to", known.String())
		switch known {
		case task.TaskRunning:
			t.StartedAt = w.e.clock.Now()
		case task.TaskStopped:
			t.StoppedAt = w.e.clock.Now()
		}
		t.KnownStatus = known
	}
	data, err := json.Marshal(t)
	if err != nil {
		w.log.Error("encoding task state failed; the change is not reported", "error", err)
		return
	}
	sum := sha256.Sum256(data)
	if sum == w.saved {
		w.afterCommit()
		return // nothing changed since the last save: nothing to save or tell
	}
	if !w.save(ctx, t) {
		return
	}
	w.saved = sum
	w.e.probe(ProbeSaved, t)
	w.mu.Lock()
	w.snap = t.Clone()
	w.mu.Unlock()
	if t.DesiredStatus == task.TaskStopped {
		w.stopOnce.Do(func() { close(w.stopSaved) })
	}
	if t.KnownStatus == task.TaskStopped {
		w.stoppedOnce.Do(func() { close(w.stopped) })
	}
	w.e.notify(t)
	w.afterCommit()
}

// afterCommit runs the task's CommitHooks.
func (w *worker) afterCommit() {
	for _, h := range w.hooks.commit {
		h.AfterCommit(&Run{w})
	}
}

// prepareHooks runs the task's Preparers, before its worker runs; the first refusal is kept for
// prepare to stop the task with.
func (w *worker) prepareHooks() {
	for _, h := range w.hooks.prepare {
		if err := h.Prepare(&Run{w}); err != nil {
			w.refused = err
			return
		}
	}
}

// save saves t, retrying with backoff while the store fails (a full disk): the worker goes no further,
// so nothing is done to Docker that the state file does not record. The engine reports the failure
// (SaveError) until the save succeeds. It returns false only when ctx ends first.
func (w *worker) save(ctx context.Context, t *task.Task) bool {
	backoff := retry.NewExponentialBackoff(saveRetryMin, saveRetryMax, 0.2, 2)
	failing := false
	for {
		err := w.e.store.SaveTask(context.WithoutCancel(ctx), t)
		if err == nil {
			if failing {
				w.e.saveFailures.Add(-1)
				w.log.Info("saving task state works again")
			}
			return true
		}
		if !failing {
			failing = true
			w.e.saveFailures.Add(1)
			w.log.Error("saving task state failed; the task waits until it can be saved", "error", err)
		}
		w.e.lastSaveErr.Store(&err)
		select {
		case <-ctx.Done():
			w.e.saveFailures.Add(-1)
			return false
		case <-w.e.clock.After(backoff.Duration()):
		}
	}
}

// Bounds of the wait between attempts to save a task while the store fails.
const (
	saveRetryMin = 100 * time.Millisecond
	saveRetryMax = 10 * time.Second
)

// run drives the task to its desired status and, once it has stopped, cleans it up after the wait. It
// returns early, leaving containers as they are, when ctx ends (the agent is shutting down).
func (w *worker) run(ctx context.Context) {
	startCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancelStart = cancel
	if w.desired == task.TaskStopped {
		cancel()
	}
	w.mu.Unlock()
	w.runCtx = startCtx

	if w.saved != ([sha256.Size]byte{}) { // AddTask saved it: that is the task's first saved change
		w.e.probe(ProbeSaved, w.t)
	}
	w.e.notify(w.t)
	w.t.DesiredStatus = task.TaskRunning
	if stop, _ := w.stopWanted(); stop {
		w.t.DesiredStatus = task.TaskStopped
	}
	w.commit(ctx)

	if w.prepare(startCtx) {
		w.supervise(ctx, startCtx)
	}
	if ctx.Err() != nil {
		return
	}
	w.stopAll(ctx)
	w.e.resources.Release(w.arn)
	if ctx.Err() != nil {
		return
	}
	w.scheduleCleanup(ctx)
}

// stopTask records why the task stops and sets its desired status.
func (w *worker) stopTask(reason string) {
	w.setDesired(task.TaskStopped, reason)
	w.log.Info("task stopping", "reason", reason)
}

package ecsclient

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// Store persists tasks; the Reporter only saves. state.Store satisfies it.
type Store interface {
	// SaveTask durably replaces the task with t's ARN.
	SaveTask(ctx context.Context, t *task.Task) error
}

// TaskStateSubmitter sends one task state change; *Client satisfies it.
type TaskStateSubmitter interface {
	SubmitTaskStateChange(ctx context.Context, ch TaskStateChange) error
}

var _ TaskStateSubmitter = (*Client)(nil)

// ReporterConfig configures a Reporter. Zero values take the documented defaults.
type ReporterConfig struct {
	// NewBackoff returns a fresh backoff for one delivery; nil means 250ms → 2min, ×1.5, 20 % jitter.
	NewBackoff func() retry.Backoff
	// Retrier runs the delivery and persistence retry loops; its Clock drives backoff waits.
	Retrier retry.Retrier
	// OnSent, if set, is called with a copy of each task as persisted after a delivery, so the owner
	// of the live task can carry its SentStatus forward (and not save it backwards). It is called from
	// the task's worker goroutine and must not block for long.
	OnSent func(saved *task.Task)
}

// Reporter delivers task and container state changes to ECS, in order per task, exactly once as
// far as its store allows.
//
// Rules:
//   - Only what ECS knows is reported: a container's RUNNING and STOPPED (the pause container of an
//     awsvpc task never), a task's RUNNING and STOPPED. A submission whose task has not reached
//     RUNNING carries status PENDING.
//   - One SubmitTaskStateChange carries the task status and every container that changed since the
//     last delivery. A container change without a task change is sent the same way, re-stating the
//     task's current status (as the ECS agent does); SubmitContainerStateChange is never needed.
//   - Snapshots are delivered in order per task by one worker per task. A newer snapshot supersedes
//     an undelivered older one, also between retries, but never skips a status: the newest snapshot
//     is diffed against what was sent, so a task whose RUNNING was never sent and is now STOPPED is
//     sent once as STOPPED with its containers' final states (ECS accepts PENDING → STOPPED).
//   - Delivery is retried with backoff until ECS accepts it or Run's ctx ends. Then SentStatus is set
//     on the task and its containers and the task is saved; only after the save does the change
//     count as delivered. What a snapshot's SentStatus says was sent is never sent again, so callers
//     re-Report every loaded task at start.
//   - A change ECS rejects as an invalid parameter is marked sent (resending cannot succeed and
//     would block the task's later changes); other permanent errors drop the snapshot unsent, so the
//     next snapshot of the task tries again.
type Reporter struct {
	client     TaskStateSubmitter
	store      Store
	log        *logger.Logger
	newBackoff func() retry.Backoff
	retrier    retry.Retrier
	onSent     func(*task.Task)
	delivered  atomic.Int64

	mu      sync.Mutex
	tasks   map[string]*taskQueue
	ctx     context.Context // Run's; nil until Run
	stopped bool
	wg      sync.WaitGroup
}

// taskQueue is one task's mailbox and what has been sent for it; guarded by Reporter.mu.
type taskQueue struct {
	pending *task.Task // newest undelivered snapshot
	running bool       // a worker goroutine owns the queue
	forget  bool       // drop the queue when the worker exits
	sent    sentView
}

// sentView is what ECS has been told about a task.
type sentView struct {
	task       task.TaskStatus
	containers map[string]task.ContainerStatus
}

// NewReporter returns a Reporter sending through client and saving to store. Call Run to start it.
func NewReporter(client TaskStateSubmitter, store Store, cfg ReporterConfig, log *logger.Logger) *Reporter {
	r := &Reporter{
		client:     client,
		store:      store,
		log:        log,
		newBackoff: cfg.NewBackoff,
		retrier:    cfg.Retrier,
		onSent:     cfg.OnSent,
		tasks:      make(map[string]*taskQueue),
	}
	if r.newBackoff == nil {
		r.newBackoff = func() retry.Backoff {
			return retry.NewExponentialBackoff(250*time.Millisecond, 2*time.Minute, 0.2, 1.5)
		}
	}
	return r
}

// Delivered returns how many state changes ECS accepted and the store persisted.
func (r *Reporter) Delivered() int64 { return r.delivered.Load() }

// Report queues a snapshot of t for delivery and returns at once. t is copied; the caller may keep
// changing it. A snapshot with nothing new to send is dropped. Safe for concurrent use; snapshots
// of one task must be reported in the order they were taken.
func (r *Reporter) Report(t *task.Task) {
	if t == nil || t.Arn == "" {
		return
	}
	snap := t.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.tasks[snap.Arn]
	if q == nil {
		q = &taskQueue{sent: sentView{containers: make(map[string]task.ContainerStatus)}}
		r.tasks[snap.Arn] = q
	}
	q.forget = false
	q.sent.merge(snap)
	if _, _, ok := changeFor(snap, q.sent); !ok {
		return
	}
	q.pending = snap
	r.startLocked(snap.Arn, q)
}

// Forget drops what the Reporter remembers of a task (call it when the task is deleted). A later
// Report of the task starts from the snapshot's SentStatus.
func (r *Reporter) Forget(taskArn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.tasks[taskArn]; q != nil {
		if q.running {
			q.forget = true
		} else {
			delete(r.tasks, taskArn)
		}
	}
}

// Run delivers queued and future snapshots until ctx is done, then waits for its workers to
// exit. Snapshots undelivered by then are left to the next process (their tasks are re-Reported
// at start). Run must be called once.
func (r *Reporter) Run(ctx context.Context) {
	r.mu.Lock()
	if r.ctx != nil {
		r.mu.Unlock()
		return
	}
	r.ctx = ctx
	for arn, q := range r.tasks {
		if q.pending != nil {
			r.startLocked(arn, q)
		}
	}
	r.mu.Unlock()

	<-ctx.Done()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
}

// startLocked starts the task's worker unless it runs or the Reporter is not running.
func (r *Reporter) startLocked(arn string, q *taskQueue) {
	if r.ctx == nil || r.stopped || q.running {
		return
	}
	q.running = true
	r.wg.Add(1)
	go r.work(r.ctx, arn, q)
}

// work delivers the task's snapshots until its mailbox is empty or ctx is done.
func (r *Reporter) work(ctx context.Context, arn string, q *taskQueue) {
	defer r.wg.Done()
	log := r.log.With("task", arn)
	for {
		r.mu.Lock()
		snap := q.pending
		if snap == nil || ctx.Err() != nil {
			q.running = false
			if q.forget && r.tasks[arn] == q {
				delete(r.tasks, arn)
			}
			r.mu.Unlock()
			return
		}
		q.pending = nil
		r.mu.Unlock()
		r.deliver(ctx, log, q, snap)
	}
}

// deliver sends what snap has that was not sent, retrying (and switching to newer snapshots)
// until ECS accepts, then persists the sent status.
func (r *Reporter) deliver(ctx context.Context, log *logger.Logger, q *taskQueue, snap *task.Task) {
	var (
		ch    TaskStateChange
		after sentView
		send  bool
	)
	err := r.retrier.Retry(ctx, r.newBackoff(), func() error {
		r.mu.Lock()
		if q.pending != nil { // a newer snapshot supersedes the undelivered one
			snap, q.pending = q.pending, nil
		}
		ch, after, send = changeFor(snap, q.sent)
		r.mu.Unlock()
		if !send {
			return nil
		}
		return r.client.SubmitTaskStateChange(ctx, ch)
	})
	switch {
	case !send && err == nil:
		return
	case errors.Is(err, ErrInvalidParameter):
		log.Error("task state change rejected as invalid; marking it sent", "status", ch.Status, "error", err)
	case err != nil && ctx.Err() != nil:
		log.Debug("task state change not delivered before shutdown", "status", ch.Status)
		return
	case err != nil:
		log.Error("task state change not delivered", "status", ch.Status, "error", err)
		return
	}

	r.mu.Lock()
	q.sent.mergeView(after)
	saved := snap
	if q.pending != nil { // save the newest state we hold, so saving never rolls the task back
		saved = q.pending
	}
	saved = saved.Clone()
	q.sent.apply(saved)
	r.mu.Unlock()

	if err := r.retrier.Retry(ctx, r.newBackoff(), func() error { return r.store.SaveTask(ctx, saved) }); err != nil {
		log.Error("task state change delivered but its sent status was not saved", "status", ch.Status, "error", err)
		return
	}
	r.delivered.Add(1)
	log.Info("task state change delivered", "status", ch.Status, "containers", containerSummary(ch.Containers))
	if r.onSent != nil {
		r.onSent(saved.Clone())
	}
}

func containerSummary(cs []ContainerStateChange) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, c.Name+"="+string(c.Status))
	}
	return strings.Join(parts, ",")
}

// reportableTask maps a task status onto the one ECS is told: RUNNING, STOPPED or nothing (NONE).
func reportableTask(s task.TaskStatus) task.TaskStatus {
	switch s {
	case task.TaskRunning, task.TaskStopped:
		return s
	}
	return task.TaskNone
}

// reportableContainer maps a container status onto the one ECS is told: RUNNING, STOPPED or NONE.
func reportableContainer(c *task.Container) task.ContainerStatus {
	if c.Pause {
		return task.ContainerNone
	}
	switch c.KnownStatus {
	case task.ContainerRunning, task.ContainerStopped:
		return c.KnownStatus
	}
	return task.ContainerNone
}

// changeFor returns the change that brings ECS from sent to t, the sent view after it is
// delivered, and whether there is anything to send.
func changeFor(t *task.Task, sent sentView) (TaskStateChange, sentView, bool) {
	after := sent.clone()
	ch := TaskStateChange{TaskArn: t.Arn, Status: StatusPending}
	rt := reportableTask(t.KnownStatus)
	taskChanged := rt > sent.task
	switch rt {
	case task.TaskRunning:
		ch.Status = StatusRunning
	case task.TaskStopped:
		ch.Status = StatusStopped
		ch.Reason = t.StoppedReason
		ch.ExecutionStoppedAt = t.StoppedAt
	}
	if taskChanged {
		after.task = rt
	}
	for _, c := range t.Containers {
		rc := reportableContainer(c)
		if rc <= sent.containers[c.Name] {
			continue
		}
		after.containers[c.Name] = rc
		cs := ContainerStateChange{
			Name:        c.Name,
			Status:      StatusRunning,
			RuntimeID:   c.DockerID,
			ImageDigest: imageDigest(c.Image),
			Reason:      c.Reason,
		}
		if len(c.NetworkBindings) > 0 {
			cs.NetworkBindings = append([]task.NetworkBinding(nil), c.NetworkBindings...)
		}
		if rc == task.ContainerStopped {
			cs.Status = StatusStopped
			if c.ExitCode != nil {
				code := *c.ExitCode
				cs.ExitCode = &code
			}
		}
		ch.Containers = append(ch.Containers, cs)
	}
	return ch, after, taskChanged || len(ch.Containers) > 0
}

// imageDigest returns the manifest digest pinned in an image reference ("repo@sha256:…"), or "".
// The model keeps only the image ID (the config digest), which is not what ECS expects.
func imageDigest(ref string) string {
	if _, d, ok := strings.Cut(ref, "@"); ok && strings.Contains(d, ":") {
		return d
	}
	return ""
}

func (v sentView) clone() sentView {
	c := sentView{task: v.task, containers: make(map[string]task.ContainerStatus, len(v.containers))}
	for k, s := range v.containers {
		c.containers[k] = s
	}
	return c
}

// merge raises the view to what t's SentStatus fields say was sent.
func (v *sentView) merge(t *task.Task) {
	v.task = max(v.task, t.SentStatus)
	for _, c := range t.Containers {
		v.containers[c.Name] = max(v.containers[c.Name], c.SentStatus)
	}
}

// mergeView raises the view to o.
func (v *sentView) mergeView(o sentView) {
	v.task = max(v.task, o.task)
	for k, s := range o.containers {
		v.containers[k] = max(v.containers[k], s)
	}
}

// apply raises t's SentStatus fields to the view.
func (v sentView) apply(t *task.Task) {
	t.SentStatus = max(t.SentStatus, v.task)
	for _, c := range t.Containers {
		c.SentStatus = max(c.SentStatus, v.containers[c.Name])
	}
}

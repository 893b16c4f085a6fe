package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

// SentStore persists what the control plane was told; state.Store satisfies it. The Reporter is the
// only writer of these records.
type SentStore interface {
	// SaveSent durably replaces the record of r's task.
	SaveSent(ctx context.Context, r state.SentRecord) error
	// DeleteSent durably removes a task's record; an unknown ARN is a no-op.
	DeleteSent(ctx context.Context, taskArn string) error
}

// TaskStateSubmitter sends one task state change; *ecsclient.Client satisfies it.
type TaskStateSubmitter interface {
	SubmitTaskStateChange(ctx context.Context, ch ecsclient.TaskStateChange) error
}

var _ TaskStateSubmitter = (*ecsclient.Client)(nil)

// ReporterConfig configures a Reporter. Zero values take the documented defaults.
type ReporterConfig struct {
	// NewBackoff returns a fresh backoff for one delivery; nil means 250ms → 2min, ×1.5, 20 % jitter.
	NewBackoff func() retry.Backoff
	// Retrier runs the delivery and persistence retry loops; its Clock drives backoff waits.
	Retrier retry.Retrier
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
//   - A managed agent's (ECS Exec's) RUNNING and STOPPED ride in the same SubmitTaskStateChange, in
//     managedAgents, whenever its status or its start (lastStartedAt) changed since last sent; an
//     agent-only change re-states the task's status. PENDING is not reported.
//   - Snapshots are delivered in order per task by one worker per task. A newer snapshot supersedes
//     an undelivered older one, also between retries, but never skips a status: the newest snapshot
//     is diffed against what was sent, so a task whose RUNNING was never sent and is now STOPPED is
//     sent once as STOPPED with its containers' final states (ECS accepts PENDING → STOPPED).
//   - Delivery is retried with backoff until ECS accepts it or Run's ctx ends. Then the task's sent
//     record (state.SentRecord, the Reporter's own) is saved; only after the save does the change
//     count as delivered. What a sent record says was sent is never sent again: Load the records at
//     start, then re-Report every loaded task.
//   - A task rejected before the engine ever held it is reported STOPPED once from a sent record
//     saved before ReportRejected returns, so a crash after the caller acknowledged it loses nothing.
//   - The Reporter remembers a task until the engine removes it (TaskRemoved) and everything queued
//     for it is delivered; then it deletes the task's sent record and forgets it. Its memory is
//     bounded by the live tasks.
//   - A change ECS refuses as an invalid parameter (or that ECS would refuse:
//     ecsclient.ErrTooManyBindings), like any other permanent error, is dropped unsent, as the ECS
//     agent drops an event ECS refused with InvalidParameterException: resending it cannot succeed,
//     and nothing is recorded as sent that ECS did not accept, so the task's next snapshot (its
//     STOPPED, at the latest) tries again from what ECS really knows.
type Reporter struct {
	client     TaskStateSubmitter
	store      SentStore
	log        *logger.Logger
	newBackoff func() retry.Backoff
	retrier    retry.Retrier
	delivered  atomic.Int64

	mu      sync.Mutex
	tasks   map[string]*taskQueue
	ctx     context.Context // Run's; nil until Run
	stopped bool
	wg      sync.WaitGroup
}

// taskQueue is one task's mailbox and what has been sent for it; guarded by Reporter.mu.
type taskQueue struct {
	pending  *task.Task // newest undelivered snapshot
	running  bool       // a worker goroutine owns the queue
	removed  bool       // the engine removed the task: delete its record and forget it once drained
	rejected bool       // a report with no engine task behind it: forget it once delivered
	sent     sentView
}

// sentView is what ECS has been told about a task.
type sentView struct {
	task       task.TaskStatus
	containers map[string]task.ContainerStatus
	// agents is what was last sent of each container's managed agent, by container name. It is kept
	// in memory only: after an agent restart a managed agent's state is sent once more, which ECS
	// accepts (the ECS agent resends RUNNING → RUNNING too).
	agents map[string]sentAgent
}

// sentAgent is what was sent of a managed agent: its status and the start it was sent for.
type sentAgent struct {
	status    task.ManagedAgentStatus
	startedAt time.Time
}

// NewReporter returns a Reporter sending through client and saving to store. Call Run to start it.
func NewReporter(client TaskStateSubmitter, store SentStore, cfg ReporterConfig, log *logger.Logger) *Reporter {
	r := &Reporter{
		client:     client,
		store:      store,
		log:        log,
		newBackoff: cfg.NewBackoff,
		retrier:    cfg.Retrier,
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

// Load seeds the Reporter with the sent records saved by an earlier process, before Run and before
// any Report. live reports whether the engine holds a task: a record of a task it no longer holds
// (the process stopped between the task's removal and its record's) is deleted, and a saved report of
// a rejected task is queued again.
func (r *Reporter) Load(records []state.SentRecord, live func(arn string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range records {
		q := r.queueLocked(rec.TaskArn)
		q.sent.task = max(q.sent.task, rec.Task)
		for name, s := range rec.Containers {
			q.sent.containers[name] = max(q.sent.containers[name], s)
		}
		switch {
		case rec.Report != nil:
			q.rejected, q.pending = true, rec.Report.Clone()
		case !live(rec.TaskArn):
			q.removed = true
		}
	}
}

// queueLocked returns the task's queue, creating it; the caller holds r.mu.
func (r *Reporter) queueLocked(arn string) *taskQueue {
	q := r.tasks[arn]
	if q == nil {
		q = &taskQueue{sent: sentView{containers: make(map[string]task.ContainerStatus)}}
		r.tasks[arn] = q
	}
	return q
}

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
	q := r.queueLocked(snap.Arn)
	if _, _, ok := changeFor(snap, q.sent); !ok {
		return
	}
	q.pending = snap
	r.startLocked(snap.Arn, q)
}

// ReportRejected reports a task the engine never held (rejected when it arrived) as STOPPED with
// reason. It returns the report once it is saved, so the caller may acknowledge the task; the report
// is delivered later, after a restart if need be.
func (r *Reporter) ReportRejected(ctx context.Context, arn, reason string, at time.Time) (*task.Task, error) {
	report := &task.Task{Arn: arn, DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped,
		StoppedReason: reason, StoppedAt: at}
	if err := r.store.SaveSent(ctx, state.SentRecord{TaskArn: arn, Report: report}); err != nil {
		return nil, fmt.Errorf("save the STOPPED report of rejected task %s: %w", arn, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queueLocked(arn)
	q.rejected, q.pending = true, report.Clone()
	r.startLocked(arn, q)
	return report, nil
}

// TaskRemoved tells the Reporter the engine has cleaned the task up: once what is queued for it is
// delivered, its sent record is deleted and it is forgotten.
func (r *Reporter) TaskRemoved(arn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.tasks[arn]; q != nil {
		q.removed = true
		r.startLocked(arn, q)
	}
}

// Tracked returns how many tasks the Reporter remembers.
func (r *Reporter) Tracked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tasks)
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
		if q.pending != nil || q.removed {
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

// work delivers the task's snapshots until its mailbox is empty or ctx is done; then, if the task is
// gone (removed by the engine, or a rejected task's report delivered), it deletes its sent record and
// forgets it.
func (r *Reporter) work(ctx context.Context, arn string, q *taskQueue) {
	defer r.wg.Done()
	log := r.log.With("task", arn)
	for {
		r.mu.Lock()
		snap := q.pending
		if snap == nil || ctx.Err() != nil {
			gone := q.removed || q.rejected && q.sent.task == task.TaskStopped
			if !gone || ctx.Err() != nil {
				q.running = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			r.forget(ctx, log, arn, q)
			return
		}
		q.pending = nil
		r.mu.Unlock()
		r.deliver(ctx, log, q, snap)
	}
}

// forget deletes a finished task's sent record and drops its queue, unless a new snapshot arrived
// meanwhile.
func (r *Reporter) forget(ctx context.Context, log *logger.Logger, arn string, q *taskQueue) {
	err := r.retrier.Retry(ctx, r.newBackoff(), func() error { return r.store.DeleteSent(ctx, arn) })
	r.mu.Lock()
	defer r.mu.Unlock()
	q.running = false
	if err != nil {
		if ctx.Err() == nil {
			log.Error("deleting the sent record of a finished task failed", "error", err)
		}
		return
	}
	if q.pending != nil {
		r.startLocked(arn, q)
		return
	}
	if r.tasks[arn] == q {
		delete(r.tasks, arn)
	}
}

// deliver sends what snap has that was not sent, retrying (and switching to newer snapshots)
// until ECS accepts, then persists the sent status.
func (r *Reporter) deliver(ctx context.Context, log *logger.Logger, q *taskQueue, snap *task.Task) {
	var (
		ch    ecsclient.TaskStateChange
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
	case errors.Is(err, ecsclient.ErrInvalidParameter):
		log.Error("task state change refused as invalid; dropped unsent, the task's next change tries again", "status", ch.Status, "error", err)
		return
	case err != nil && ctx.Err() != nil:
		log.Debug("task state change not delivered before shutdown", "status", ch.Status)
		return
	case err != nil:
		log.Error("task state change not delivered", "status", ch.Status, "error", err)
		return
	}

	r.mu.Lock()
	q.sent.mergeView(after)
	rec := q.sent.record(snap.Arn)
	rejected := q.rejected
	r.mu.Unlock()

	// A rejected task's record is deleted once its report is delivered (see work), not saved again.
	if !rejected {
		if err := r.retrier.Retry(ctx, r.newBackoff(), func() error { return r.store.SaveSent(ctx, rec) }); err != nil {
			log.Error("task state change delivered but its sent record was not saved", "status", string(ch.Status), "error", err)
			return
		}
	}
	r.delivered.Add(1)
	log.Info("task state change delivered", "status", string(ch.Status), "containers", containerSummary(ch.Containers))
}

func containerSummary(cs []ecsclient.ContainerStateChange) string {
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
func changeFor(t *task.Task, sent sentView) (ecsclient.TaskStateChange, sentView, bool) {
	after := sent.clone()
	ch := ecsclient.TaskStateChange{TaskArn: t.Arn, Status: ecsclient.StatusPending,
		PullStartedAt: t.PullStartedAt, PullStoppedAt: t.PullStoppedAt, ExecutionStoppedAt: executionStoppedAt(t)}
	rt := reportableTask(t.KnownStatus)
	taskChanged := rt > sent.task
	switch rt {
	case task.TaskRunning:
		ch.Status = ecsclient.StatusRunning
	case task.TaskStopped:
		ch.Status = ecsclient.StatusStopped
		ch.Reason = t.StoppedReason
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
		cs := ecsclient.ContainerStateChange{
			Name:        c.Name,
			Status:      ecsclient.StatusRunning,
			RuntimeID:   c.DockerID,
			ImageDigest: cmp.Or(c.ImageDigest, imageDigest(c.Image)),
			Reason:      c.Reason,
		}
		cs.NetworkBindings, cs.PortRange = networkBindings(c)
		if rc == task.ContainerStopped {
			cs.Status = ecsclient.StatusStopped
			if c.ExitCode != nil {
				code := *c.ExitCode
				cs.ExitCode = &code
			}
		}
		ch.Containers = append(ch.Containers, cs)
	}
	for _, c := range t.Containers {
		for _, ma := range c.ManagedAgents {
			if ma.Status != task.ManagedAgentRunning && ma.Status != task.ManagedAgentStopped {
				continue // PENDING is not reported, as the ECS agent does not report it
			}
			now := sentAgent{status: ma.Status, startedAt: ma.LastStartedAt}
			if sent.agents[c.Name] == now {
				continue
			}
			after.agents[c.Name] = now
			ch.ManagedAgents = append(ch.ManagedAgents, ecsclient.ManagedAgentStateChange{
				ContainerName: c.Name, Name: ma.Name, Status: ecsclient.BackendStatus(ma.Status), Reason: ma.Reason})
		}
	}
	return ch, after, taskChanged || len(ch.Containers) > 0 || len(ch.ManagedAgents) > 0
}

// executionStoppedAt is when the task's first essential container stopped, as the ECS agent reports
// it (agent/api/task/task.go, RecordExecutionStoppedAt); zero while every essential container
// runs. A task with no container (one rejected before the engine held it) stopped at StoppedAt.
func executionStoppedAt(t *task.Task) time.Time {
	var first time.Time
	for _, c := range t.Containers {
		if c.Pause || !c.Essential || c.KnownStatus != task.ContainerStopped || c.FinishedAt.IsZero() {
			continue
		}
		if first.IsZero() || c.FinishedAt.Before(first) {
			first = c.FinishedAt
		}
	}
	if first.IsZero() && len(t.Containers) == 0 && t.KnownStatus == task.TaskStopped {
		return t.StoppedAt
	}
	return first
}

// networkBindings returns the network bindings ECS is told of, consolidated as the ECS agent does
// (agent/api/statechange.go, getNetworkBindings): the bindings of a containerPortRange mapping
// become one binding per host address and protocol, with the containerPortRange and the
// hostPortRange Docker bound it to (contiguous: the engine asks for host ports first..first+n);
// every other binding is sent as it is. portRange reports whether the container maps a range.
func networkBindings(c *task.Container) (out []ecsclient.NetworkBinding, portRange bool) {
	type span struct {
		lo, hi   int
		protocol string
		text     string
	}
	var spans []span
	for _, pm := range c.PortMappings {
		if pm.ContainerPortRange == "" {
			continue
		}
		portRange = true
		lo, hi, ok := parsePortRange(pm.ContainerPortRange)
		if !ok {
			continue // taskdef validated it; nothing of it can be bound
		}
		spans = append(spans, span{lo: lo, hi: hi, protocol: bindingProtocol(pm.Protocol), text: pm.ContainerPortRange})
	}
	inRange := func(b task.NetworkBinding) bool {
		for _, sp := range spans {
			if bindingProtocol(b.Protocol) == sp.protocol && int(b.ContainerPort) >= sp.lo && int(b.ContainerPort) <= sp.hi {
				return true
			}
		}
		return false
	}
	for _, b := range c.NetworkBindings {
		if !inRange(b) {
			out = append(out, ecsclient.NetworkBinding{BindIP: b.BindIP, Protocol: bindingProtocol(b.Protocol),
				ContainerPort: b.ContainerPort, HostPort: b.HostPort})
		}
	}
	for _, sp := range spans {
		for _, b := range c.NetworkBindings {
			if int(b.ContainerPort) != sp.lo || bindingProtocol(b.Protocol) != sp.protocol {
				continue
			}
			out = append(out, ecsclient.NetworkBinding{BindIP: b.BindIP, Protocol: sp.protocol, ContainerPortRange: sp.text,
				HostPortRange: fmt.Sprintf("%d-%d", b.HostPort, int(b.HostPort)+sp.hi-sp.lo)})
		}
	}
	return out, portRange
}

// bindingProtocol names a port mapping's or a binding's protocol as ECS does: tcp unless udp.
func bindingProtocol(p string) string {
	if strings.EqualFold(p, "udp") {
		return "udp"
	}
	return "tcp"
}

// parsePortRange parses a containerPortRange, "8000-8010".
func parsePortRange(s string) (lo, hi int, ok bool) {
	a, b, found := strings.Cut(s, "-")
	lo, errA := strconv.Atoi(a)
	hi, errB := strconv.Atoi(b)
	if !found || errA != nil || errB != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// imageDigest returns the manifest digest pinned in an image reference ("repo@sha256:…"), or "":
// what ECS is told of a container saved before the engine resolved Container.ImageDigest.
func imageDigest(ref string) string {
	if _, d, ok := strings.Cut(ref, "@"); ok && strings.Contains(d, ":") {
		return d
	}
	return ""
}

func (v sentView) clone() sentView {
	c := sentView{task: v.task, containers: make(map[string]task.ContainerStatus, len(v.containers)),
		agents: make(map[string]sentAgent, len(v.agents))}
	for k, s := range v.containers {
		c.containers[k] = s
	}
	for k, a := range v.agents {
		c.agents[k] = a
	}
	return c
}

// mergeView raises the view to o.
func (v *sentView) mergeView(o sentView) {
	v.task = max(v.task, o.task)
	for k, s := range o.containers {
		v.containers[k] = max(v.containers[k], s)
	}
	if v.agents == nil {
		v.agents = map[string]sentAgent{}
	}
	for k, a := range o.agents {
		v.agents[k] = a
	}
}

// record returns the view as the task's sent record.
func (v sentView) record(arn string) state.SentRecord {
	rec := state.SentRecord{TaskArn: arn, Task: v.task}
	for name, s := range v.containers {
		if s == task.ContainerNone {
			continue
		}
		if rec.Containers == nil {
			rec.Containers = make(map[string]task.ContainerStatus, len(v.containers))
		}
		rec.Containers[name] = s
	}
	return rec
}

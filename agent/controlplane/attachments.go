package controlplane

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// AttachmentSubmitter sends ENI attachment states; *ecsclient.Client satisfies it.
type AttachmentSubmitter interface {
	SubmitAttachmentStateChanges(ctx context.Context, changes []ecsclient.AttachmentStateChange) error
}

var _ AttachmentSubmitter = (*ecsclient.Client)(nil)

// AttachmentReporter reports a task's ENI ATTACHED once its networking is set up and DETACHED once
// it is torn down, in that order, each once per process, retried while the control plane is down.
// It remembers a task until the engine removes it, and a queued change until it is delivered.
type AttachmentReporter struct {
	client  AttachmentSubmitter
	retrier retry.Retrier
	log     *logger.Logger

	mu      sync.Mutex
	queued  map[string]ecsclient.AttachmentStatus // task ARN → the newest status queued for its ENI
	pending []ecsclient.AttachmentStateChange
	wake    chan struct{}
}

// NewAttachmentReporter returns a reporter sending through client, retrying on clock (nil: the real
// one). Call Run to start it.
func NewAttachmentReporter(client AttachmentSubmitter, clock clockwork.Clock, log *logger.Logger) *AttachmentReporter {
	return &AttachmentReporter{client: client, retrier: retry.Retrier{Clock: clock}, log: log, queued: map[string]ecsclient.AttachmentStatus{}, wake: make(chan struct{}, 1)}
}

// Report queues what a task change means for its ENI attachment; it never blocks.
func (r *AttachmentReporter) Report(t *task.Task) {
	if t.ENI == nil || t.ENI.AttachmentArn == "" || t.AWSVPC == nil {
		return
	}
	status := ecsclient.AttachmentAttached
	if t.AWSVPC.TornDown {
		status = ecsclient.AttachmentDetached
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.queued[t.Arn]; ok && (prev == status || prev == ecsclient.AttachmentDetached) {
		return
	}
	r.queued[t.Arn] = status
	r.pending = append(r.pending, ecsclient.AttachmentStateChange{AttachmentArn: t.ENI.AttachmentArn, Status: status})
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// TaskRemoved forgets a task the engine has cleaned up; changes already queued are still delivered.
func (r *AttachmentReporter) TaskRemoved(arn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.queued, arn)
}

// Tracked returns how many tasks and undelivered changes the reporter holds.
func (r *AttachmentReporter) Tracked() (tasks, pending int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queued), len(r.pending)
}

// Run delivers queued changes in order until ctx ends.
func (r *AttachmentReporter) Run(ctx context.Context) {
	for {
		r.mu.Lock()
		var next *ecsclient.AttachmentStateChange
		if len(r.pending) > 0 {
			next = &r.pending[0]
		}
		r.mu.Unlock()
		if next == nil {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		change := *next
		err := r.retrier.Retry(ctx, retry.NewExponentialBackoff(250*time.Millisecond, time.Minute, 0.2, 1.5), func() error {
			return r.client.SubmitAttachmentStateChanges(ctx, []ecsclient.AttachmentStateChange{change})
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.log.Warn("the control plane refused an attachment state; dropped", "attachment", change.AttachmentArn, "status", string(change.Status), "error", err)
		} else {
			r.log.Info("attachment state reported", "attachment", change.AttachmentArn, "status", string(change.Status))
		}
		r.mu.Lock()
		r.pending = r.pending[1:]
		if len(r.pending) == 0 {
			r.pending = nil // let the backing array go
		}
		r.mu.Unlock()
	}
}

package app

import (
	"context"
	"sync"
	"time"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// attachmentSubmitter sends ENI attachment states; *ecsclient.Client satisfies it.
type attachmentSubmitter interface {
	SubmitAttachmentStateChanges(ctx context.Context, changes []ecsclient.AttachmentStateChange) error
}

// attachmentReporter reports a task's ENI ATTACHED once its networking is set up and DETACHED once
// it is torn down, in that order, each once per process, retried while the control plane is down.
type attachmentReporter struct {
	client attachmentSubmitter
	log    *logger.Logger

	mu      sync.Mutex
	queued  map[ecsclient.AttachmentStateChange]bool
	pending []ecsclient.AttachmentStateChange
	wake    chan struct{}
}

func newAttachmentReporter(client attachmentSubmitter, log *logger.Logger) *attachmentReporter {
	return &attachmentReporter{client: client, log: log, queued: map[ecsclient.AttachmentStateChange]bool{}, wake: make(chan struct{}, 1)}
}

// Report queues what a task change means for its ENI attachment; it never blocks.
func (r *attachmentReporter) Report(t *task.Task) {
	if t.ENI == nil || t.ENI.AttachmentArn == "" || t.AWSVPC == nil {
		return
	}
	status := ecsclient.AttachmentAttached
	if t.AWSVPC.TornDown {
		status = ecsclient.AttachmentDetached
	}
	change := ecsclient.AttachmentStateChange{AttachmentArn: t.ENI.AttachmentArn, Status: status}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued[change] {
		return
	}
	if status == ecsclient.AttachmentDetached {
		r.queued[ecsclient.AttachmentStateChange{AttachmentArn: change.AttachmentArn, Status: ecsclient.AttachmentAttached}] = true
	}
	r.queued[change] = true
	r.pending = append(r.pending, change)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run delivers queued changes in order until ctx ends.
func (r *attachmentReporter) Run(ctx context.Context) {
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
		err := retry.Retrier{}.Retry(ctx, retry.NewExponentialBackoff(250*time.Millisecond, time.Minute, 0.2, 1.5), func() error {
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
		r.mu.Unlock()
	}
}

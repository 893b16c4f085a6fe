package controlplane

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

type fakeAttachments struct {
	mu       sync.Mutex
	failures int
	sent     []ecsclient.AttachmentStateChange
}

func (f *fakeAttachments) SubmitAttachmentStateChanges(_ context.Context, c []ecsclient.AttachmentStateChange) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return errors.New("control plane down")
	}
	f.sent = append(f.sent, c...)
	return nil
}

func (f *fakeAttachments) got() []ecsclient.AttachmentStateChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ecsclient.AttachmentStateChange(nil), f.sent...)
}

func TestAttachmentReporter(t *testing.T) {
	fake := &fakeAttachments{failures: 2}
	r := NewAttachmentReporter(fake, nil, logger.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	const att = "arn:aws:ecs:us-west-2:012345678901:attachment/abc"
	eni := &task.ENI{AttachmentArn: att, MAC: "0a:00:00:00:00:01"}
	r.Report(&task.Task{Arn: "t", ENI: eni})                                       // not set up yet: nothing
	r.Report(&task.Task{Arn: "t", ENI: eni, AWSVPC: &task.AWSVPC{}})               // attached
	r.Report(&task.Task{Arn: "t", ENI: eni, AWSVPC: &task.AWSVPC{}})               // again: once
	r.Report(&task.Task{Arn: "t", ENI: eni, AWSVPC: &task.AWSVPC{TornDown: true}}) // detached
	r.Report(&task.Task{Arn: "u", AWSVPC: &task.AWSVPC{}})                         // no ENI: nothing

	require.Eventually(t, func() bool { return len(fake.got()) == 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []ecsclient.AttachmentStateChange{
		{AttachmentArn: att, Status: ecsclient.AttachmentAttached},
		{AttachmentArn: att, Status: ecsclient.AttachmentDetached},
	}, fake.got(), "in order, once each, after the control plane came back")
	cancel()
	<-done
}

func TestControlPlaneSkipsStaticTasks(t *testing.T) {
	cp := New(Config{}, &fakeControl{fakeECS: newFakeECS()}, nil, nil, logger.Nop())
	eni := &task.ENI{AttachmentArn: "arn:att", MAC: "0a:00:00:00:00:02"}
	cp.TaskChanged(&task.Task{Arn: "static", Static: true, KnownStatus: task.TaskRunning, ENI: eni, AWSVPC: &task.AWSVPC{}})
	_, attachments, pending, _ := cp.Tracked()
	assert.Zero(t, attachments+pending, "a static task's attachment is not reported to the control plane")
	assert.Zero(t, cp.reporter.Tracked(), "nor its state")
}

package controlplane

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/state"
)

// fakeECS is an in-memory control plane for the reporters: it records every submission, and can be
// down, fail a number of calls, or refuse changes as invalid.
type fakeECS struct {
	mu          sync.Mutex
	attempts    []ecsclient.TaskStateChange
	accepted    []ecsclient.TaskStateChange
	attachments []ecsclient.AttachmentStateChange
	down        bool
	failures    int
	invalid     bool
	failed      chan ecsclient.TaskStateChange // each refused submission, when someone listens
}

var _ TaskStateSubmitter = (*fakeECS)(nil)

func newFakeECS() *fakeECS { return &fakeECS{failed: make(chan ecsclient.TaskStateChange, 1000)} }

func (f *fakeECS) SubmitTaskStateChange(ctx context.Context, ch ecsclient.TaskStateChange) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, ch)
	switch {
	case f.invalid:
		select {
		case f.failed <- ch:
		default:
		}
		return invalidParameter{}
	case f.down || f.failures > 0:
		if f.failures > 0 {
			f.failures--
		}
		select {
		case f.failed <- ch:
		default:
		}
		return errors.New("control plane unavailable")
	}
	f.accepted = append(f.accepted, ch)
	return nil
}

// invalidParameter is ECS refusing a change as invalid: not retriable.
type invalidParameter struct{}

func (invalidParameter) Error() string { return "ecs SubmitTaskStateChange: InvalidParameterException" }
func (invalidParameter) Unwrap() error { return ecsclient.ErrInvalidParameter }
func (invalidParameter) Retry() bool   { return false }

func (f *fakeECS) SubmitAttachmentStateChanges(ctx context.Context, changes []ecsclient.AttachmentStateChange) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("control plane unavailable")
	}
	f.attachments = append(f.attachments, changes...)
	return nil
}

func (f *fakeECS) setInvalid(invalid bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invalid = invalid
}

func (f *fakeECS) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeECS) attemptCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.attempts)
}

func (f *fakeECS) acceptedChanges() []ecsclient.TaskStateChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.accepted)
}

// fakeSentStore is an in-memory SentStore that hands every write to the test.
type fakeSentStore struct {
	mu      sync.Mutex
	records map[string]state.SentRecord
	saved   chan state.SentRecord
	deleted chan string
	onSave  func(r state.SentRecord) // spy, called before the save is recorded
}

func newFakeSentStore() *fakeSentStore {
	return &fakeSentStore{records: map[string]state.SentRecord{}, saved: make(chan state.SentRecord, 10000),
		deleted: make(chan string, 10000)}
}

func (s *fakeSentStore) SaveSent(ctx context.Context, r state.SentRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.onSave != nil {
		s.onSave(r)
	}
	s.mu.Lock()
	s.records[r.TaskArn] = r
	s.mu.Unlock()
	s.saved <- r
	return nil
}

func (s *fakeSentStore) DeleteSent(ctx context.Context, arn string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.records, arn)
	s.mu.Unlock()
	s.deleted <- arn
	return nil
}

func (s *fakeSentStore) all() []state.SentRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []state.SentRecord
	for _, k := range slices.Sorted(maps.Keys(s.records)) {
		out = append(out, s.records[k])
	}
	return out
}

// waitSaved returns the next n saves, failing the test after a deadline.
func (s *fakeSentStore) waitSaved(t *testing.T, n int) []state.SentRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var out []state.SentRecord
	for len(out) < n {
		select {
		case r := <-s.saved:
			out = append(out, r)
		case <-deadline:
			t.Fatalf("waited for %d saves, got %d", n, len(out))
		}
	}
	return out
}

func zeroBackoff() retry.Backoff { return retry.NewExponentialBackoff(0, 0, 0, 1) }

// runReporter runs r until the test ends or the returned stop is called; stop waits for Run.
func runReporter(t *testing.T, r *Reporter) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/berth-agent/berth/agent/task"
)

var _ Store = (*Memory)(nil)

// Memory keeps state in memory only: what ECS_CHECKPOINT=false asks for. It is safe for concurrent use.
// It keeps records encoded as the bbolt store does, so what it returns never aliases what it was given
// and round-trips exactly as a reopened bbolt file would.
type Memory struct {
	mu     sync.Mutex
	closed bool
	tasks  map[string][]byte
	images map[string][]byte
	sent   map[string][]byte
	reg    *Registration
	seq    int64
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{tasks: map[string][]byte{}, images: map[string][]byte{}, sent: map[string][]byte{}}
}

// lock checks ctx, takes the lock and fails once the store is closed. On success the caller unlocks.
func (m *Memory) lock(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("%s: %w", what, ErrClosed)
	}
	return nil
}

// SaveTask stores a copy of t, replacing any earlier version with the same ARN.
func (m *Memory) SaveTask(ctx context.Context, t *task.Task) error {
	b, err := encodeTask(t)
	if err != nil {
		return err
	}
	if err := m.lock(ctx, fmt.Sprintf("save task %q", t.Arn)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.tasks[t.Arn] = b
	return nil
}

// DeleteTask removes a task; deleting an unknown ARN is a no-op.
func (m *Memory) DeleteTask(ctx context.Context, arn string) error {
	if err := m.lock(ctx, fmt.Sprintf("delete task %q", arn)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.tasks, arn)
	return nil
}

// Tasks returns copies of every stored task, ordered by ARN.
func (m *Memory) Tasks(ctx context.Context) ([]*task.Task, error) {
	return memList(ctx, m, "list tasks", func(m *Memory) map[string][]byte { return m.tasks }, decodeTask)
}

// memList decodes every record of one of m's maps in key order, as the bbolt store's list does.
func memList[T any](ctx context.Context, m *Memory, what string, records func(*Memory) map[string][]byte, decode func(key string, data []byte) (T, error)) ([]T, error) {
	if err := m.lock(ctx, what); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	recs := records(m)
	keys := slices.Sorted(maps.Keys(recs))
	out := make([]T, 0, len(keys))
	var errs []error
	for _, k := range keys {
		r, err := decode(k, recs[k])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// SaveRegistration replaces the agent's registration.
func (m *Memory) SaveRegistration(ctx context.Context, r Registration) error {
	if err := m.lock(ctx, "save registration"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.reg = &r
	return nil
}

// Registration returns the saved registration, or false when none has been saved.
func (m *Memory) Registration(ctx context.Context) (Registration, bool, error) {
	if err := m.lock(ctx, "load registration"); err != nil {
		return Registration{}, false, err
	}
	defer m.mu.Unlock()
	if m.reg == nil {
		return Registration{}, false, nil
	}
	return *m.reg, true, nil
}

// SaveSeqNum records the last ACS sequence number handled.
func (m *Memory) SaveSeqNum(ctx context.Context, seq int64) error {
	if err := m.lock(ctx, "save ACS sequence number"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.seq = seq
	return nil
}

// SeqNum returns the saved ACS sequence number, 0 when none was saved.
func (m *Memory) SeqNum(ctx context.Context) (int64, error) {
	if err := m.lock(ctx, "load ACS sequence number"); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	return m.seq, nil
}

// SaveImage stores img, replacing any earlier record with the same Ref.
func (m *Memory) SaveImage(ctx context.Context, img ImageRecord) error {
	b, err := encodeImage(img)
	if err != nil {
		return err
	}
	if err := m.lock(ctx, fmt.Sprintf("save image %q", img.Ref)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.images[img.Ref] = b
	return nil
}

// DeleteImage removes an image record; deleting an unknown ref is a no-op.
func (m *Memory) DeleteImage(ctx context.Context, ref string) error {
	if err := m.lock(ctx, fmt.Sprintf("delete image %q", ref)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.images, ref)
	return nil
}

// Images returns every image record, ordered by Ref.
func (m *Memory) Images(ctx context.Context) ([]ImageRecord, error) {
	return memList(ctx, m, "list images", func(m *Memory) map[string][]byte { return m.images }, decodeImage)
}

// SaveSent stores r, replacing any earlier record of the same task.
func (m *Memory) SaveSent(ctx context.Context, r SentRecord) error {
	b, err := encodeSent(r)
	if err != nil {
		return err
	}
	if err := m.lock(ctx, fmt.Sprintf("save sent record %q", r.TaskArn)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.sent[r.TaskArn] = b
	return nil
}

// DeleteSent removes a task's sent record; deleting an unknown ARN is a no-op.
func (m *Memory) DeleteSent(ctx context.Context, taskArn string) error {
	if err := m.lock(ctx, fmt.Sprintf("delete sent record %q", taskArn)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.sent, taskArn)
	return nil
}

// SentRecords returns every sent record, ordered by task ARN.
func (m *Memory) SentRecords(ctx context.Context) ([]SentRecord, error) {
	return memList(ctx, m, "list sent records", func(m *Memory) map[string][]byte { return m.sent }, decodeSent)
}

// SaveLastGood does nothing: memory holds nothing to restore after a restart.
func (m *Memory) SaveLastGood() error { return nil }

// Close marks the store closed; later calls fail with ErrClosed. Calling it again is a no-op.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Package state persists what the agent must not lose: its registration, every task with its
// containers' desired, known and sent status, image records and the ACS sequence number.
package state

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/berth-agent/berth/agent/task"
)

// Memory keeps state in memory only: what ECS_CHECKPOINT=false asks for. It is safe for concurrent use.
type Memory struct {
	mu    sync.Mutex
	tasks map[string]*task.Task
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{tasks: map[string]*task.Task{}}
}

// SaveTask stores a copy of t, replacing any earlier version with the same ARN.
func (m *Memory) SaveTask(_ context.Context, t *task.Task) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tasks[t.Arn] = t.Clone()
	return nil
}

// DeleteTask removes a task; deleting an unknown ARN is a no-op.
func (m *Memory) DeleteTask(_ context.Context, arn string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tasks, arn)
	return nil
}

// Tasks returns copies of every stored task, ordered by ARN.
func (m *Memory) Tasks(_ context.Context) ([]*task.Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*task.Task, 0, len(m.tasks))
	for _, t := range m.tasks {
		out = append(out, t.Clone())
	}
	slices.SortFunc(out, func(a, b *task.Task) int { return strings.Compare(a.Arn, b.Arn) })
	return out, nil
}

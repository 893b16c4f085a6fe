package ecsstandin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// StateLog remembers when the control plane first accepted each status of each task.
type StateLog struct {
	mu      sync.Mutex
	at      map[string]map[string]time.Time // task ID → status → first accepted
	changed chan struct{}                   // closed and replaced on every record
}

func newStateLog() *StateLog {
	return &StateLog{at: map[string]map[string]time.Time{}, changed: make(chan struct{})}
}

// recordChange notes an accepted SubmitTaskStateChange body.
func (l *StateLog) recordChange(body []byte, at time.Time) {
	var change struct {
		Task   string `json:"task"`
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &change) == nil {
		l.record(TaskID(change.Task), change.Status, at)
	}
}

func (l *StateLog) record(id, status string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at[id] == nil {
		l.at[id] = map[string]time.Time{}
	}
	if _, ok := l.at[id][status]; !ok {
		l.at[id][status] = at
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// Wait returns the latest acceptance time of status over ids (task IDs) once every one of them has
// been accepted, or ctx's cause.
func (l *StateLog) Wait(ctx context.Context, ids []string, status string) (time.Time, error) {
	for {
		l.mu.Lock()
		var last time.Time
		missing := 0
		for _, id := range ids {
			at, ok := l.at[id][status]
			if !ok {
				missing++
			} else if at.After(last) {
				last = at
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if missing == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d tasks not accepted as %s: %w", missing, len(ids), status, context.Cause(ctx))
		case <-changed:
		}
	}
}

package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
)

// classes are errdefs' classes, to check that an error is of exactly one.
var classes = []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrUnauthorized, errdefs.ErrConflict,
	errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable, errdefs.ErrResourceExhausted}

// TestErrorClasses checks that each sentinel, and the errors the store returns with it, are of the one
// errdefs class its doc names, and are not retriable.
func TestErrorClasses(t *testing.T) {
	tests := []struct {
		name     string
		sentinel error
		class    error
		produce  func(t *testing.T) error // makes the store return an error wrapping the sentinel
	}{
		{name: "locked", sentinel: ErrLocked, class: errdefs.ErrConflict, produce: func(t *testing.T) error {
			path := filepath.Join(t.TempDir(), "berth.db")
			openTestBolt(t, path)
			_, err := OpenBolt(path, time.Millisecond)
			return err
		}},
		{name: "corrupt", sentinel: ErrCorrupt, class: errdefs.ErrFailedPrecondition, produce: func(t *testing.T) error {
			path := filepath.Join(t.TempDir(), "berth.db")
			require.NoError(t, os.WriteFile(path, []byte("not a bbolt database"), 0o600))
			_, err := OpenBolt(path, time.Second)
			return err
		}},
		{name: "closed", sentinel: ErrClosed, class: errdefs.ErrFailedPrecondition, produce: func(t *testing.T) error {
			s := NewMemory()
			require.NoError(t, s.Close())
			return s.SaveTask(context.Background(), &task.Task{Arn: "arn:a"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.produce(t)
			require.ErrorIs(t, err, tt.sentinel)
			for _, e := range []error{tt.sentinel, err, fmt.Errorf("wrapped: %w", err)} {
				for _, class := range classes {
					assert.Equal(t, class == tt.class, errors.Is(e, class), "errors.Is(%v, %v)", e, class)
				}
				assert.False(t, errdefs.IsRetriable(e), "%v", e)
			}
		})
	}
}

package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
)

// TestErrorClasses checks that ErrStopped and ErrUnknownTask, as AddTask and StopTask return them, are
// of exactly the errdefs class their docs name, and are not retriable.
func TestErrorClasses(t *testing.T) {
	e := New(testConfig(), newFakeDocker(), newFakePuller(), nil, newFakeStore(&journal{}), logger.Nop())
	classes := []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrUnauthorized, errdefs.ErrConflict,
		errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable, errdefs.ErrResourceExhausted}
	tests := []struct {
		name     string
		err      error
		sentinel error
		class    error
	}{
		{name: "AddTask before Start", err: e.AddTask(context.Background(), newTask("arn:early", ctr("app"))),
			sentinel: ErrStopped, class: errdefs.ErrFailedPrecondition},
		{name: "StopTask of an unknown task", err: e.StopTask(context.Background(), "arn:unknown", "x"),
			sentinel: ErrUnknownTask, class: errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.err, tt.sentinel)
			for _, class := range classes {
				assert.Equal(t, class == tt.class, errors.Is(tt.err, class), "errors.Is(%v, %v)", tt.err, class)
			}
			assert.False(t, errdefs.IsRetriable(tt.err))
		})
	}
}

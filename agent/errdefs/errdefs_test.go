package errdefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// retriable is an error that decides for itself.
type retriable struct{ retry bool }

func (r retriable) Error() string { return fmt.Sprintf("retry=%v", r.retry) }
func (r retriable) Retry() bool   { return r.retry }

// isOnly matches a class through an Is method only, as some typed errors do.
type isOnly struct{ class error }

func (e isOnly) Error() string        { return "is only" }
func (e isOnly) Is(target error) bool { return target == e.class }

func TestClassesAndHelpers(t *testing.T) {
	helpers := map[error]func(error) bool{
		ErrNotFound:           IsNotFound,
		ErrInvalidArgument:    IsInvalidArgument,
		ErrUnauthorized:       IsUnauthorized,
		ErrConflict:           IsConflict,
		ErrFailedPrecondition: IsFailedPrecondition,
		ErrUnavailable:        IsUnavailable,
		ErrResourceExhausted:  IsResourceExhausted,
	}
	for class := range helpers {
		t.Run(class.Error(), func(t *testing.T) {
			sub := New(class, "a finer kind")
			err := fmt.Errorf("do %q: %w", "thing", sub)
			for other, is := range helpers {
				want := other == class
				if got := is(err); got != want {
					t.Errorf("%s helper on a wrapped %s sentinel = %v, want %v", other, class, got, want)
				}
				if got := is(class); got != want {
					t.Errorf("%s helper on the %s class = %v, want %v", other, class, got, want)
				}
			}
			if !errors.Is(err, sub) {
				t.Errorf("wrapped sentinel does not match itself")
			}
			if errors.Is(fmt.Errorf("x: %w", class), sub) {
				t.Errorf("the class matches a sentinel of it; only the other way round should hold")
			}
			if sub.Error() != "a finer kind" {
				t.Errorf("sentinel text = %q", sub.Error())
			}
		})
	}
	if IsNotFound(nil) || IsNotFound(errors.New("not found")) {
		t.Error("IsNotFound matched nil or a look-alike text")
	}
}

func TestIsRetriable(t *testing.T) {
	plain := errors.New("connection reset by peer")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"says nothing", plain, true},
		{"context canceled says nothing", context.Canceled, true},
		{"not found", fmt.Errorf("x: %w", ErrNotFound), false},
		{"invalid argument sentinel", fmt.Errorf("x: %w", New(ErrInvalidArgument, "bad ref")), false},
		{"unauthorized", ErrUnauthorized, false},
		{"conflict", ErrConflict, false},
		{"failed precondition", ErrFailedPrecondition, false},
		{"unavailable", fmt.Errorf("x: %w", ErrUnavailable), true},
		{"resource exhausted", New(ErrResourceExhausted, "throttled"), true},
		{"class matched by an Is method", isOnly{ErrInvalidArgument}, false},
		{"Permanent beats a retriable class", Permanent(fmt.Errorf("x: %w", ErrUnavailable)), false},
		{"Transient beats a permanent class", Transient(fmt.Errorf("x: %w", ErrUnauthorized)), true},
		{"Permanent wrapped", fmt.Errorf("outer: %w", Permanent(plain)), false},
		{"own Retriable beats its class", fmt.Errorf("x: %w: %w", retriable{true}, ErrNotFound), true},
		{"own Retriable false", fmt.Errorf("x: %w", retriable{false}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsRetriable(tt.err); got != tt.want {
				t.Errorf("IsRetriable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestPermanentAndTransientKeepTheError(t *testing.T) {
	base := fmt.Errorf("pull: %w", ErrNotFound)
	for _, mark := range []func(error) error{Permanent, Transient} {
		err := mark(base)
		if err.Error() != base.Error() {
			t.Errorf("text = %q, want %q", err.Error(), base.Error())
		}
		if !errors.Is(err, base) || !IsNotFound(err) {
			t.Errorf("%v does not match what it wraps", err)
		}
		if mark(nil) != nil {
			t.Error("nil was not kept nil")
		}
	}
}

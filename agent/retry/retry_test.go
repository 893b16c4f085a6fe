package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// fakeClock is clockwork's fake clock that also records every wait asked of it.
type fakeClock struct {
	*clockwork.FakeClock
	mu    sync.Mutex
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{FakeClock: clockwork.NewFakeClock()} }

// NewTimer records d and starts a fake timer.
func (c *fakeClock) NewTimer(d time.Duration) clockwork.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return c.FakeClock.NewTimer(d)
}

// Delays returns the waits asked for so far.
func (c *fakeClock) Delays() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// run runs loop in a goroutine and, each time loop waits on the clock, advances the clock by
// exactly that wait; it returns loop's error.
func (c *fakeClock) run(t *testing.T, loop func() error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- loop()
	}()
	for c.BlockUntilContext(ctx, 1) == nil {
		d := c.Delays()
		c.Advance(d[len(d)-1])
	}
	return <-done
}

// waiting blocks until loop is waiting on the clock, failing the test after a second.
func (c *fakeClock) waiting(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	require.NoError(t, c.BlockUntilContext(ctx, 1), "the retry loop never started waiting")
}

// retryAfterError asks for a minimum delay.
type retryAfterError struct{ d time.Duration }

func (e retryAfterError) Error() string             { return fmt.Sprintf("slow down for %v", e.d) }
func (e retryAfterError) RetryAfter() time.Duration { return e.d }

// permanentError implements errdefs.Retriable directly.
type permanentError struct{ retry bool }

func (e permanentError) Error() string { return "permanent" }
func (e permanentError) Retry() bool   { return e.retry }

func constantBackoff(d time.Duration) *ExponentialBackoff {
	return NewExponentialBackoff(d, d, 0, 1)
}

func TestRetry(t *testing.T) {
	errA := errors.New("a")
	errB := errors.New("b")
	errC := errors.New("c")
	nonRetriable := errdefs.Permanent(errA)
	notFound := fmt.Errorf("image: %w", errdefs.ErrNotFound)

	tests := []struct {
		name string
		// limit 0 uses Retry, otherwise RetryN(limit).
		limit   int
		results []error // returned by successive attempts; nil once exhausted
		wantN   int
		wantErr error // compared by identity; nil means success
	}{
		{"success first try", 0, nil, 1, nil},
		{"success first try limited", 3, nil, 1, nil},
		{"success after three failures", 0, []error{errA, errB, errC}, 4, nil},
		{"success after two failures limited", 5, []error{errA, errB}, 3, nil},
		{"success on the last allowed attempt", 3, []error{errA, errB}, 3, nil},
		{"retriable true is retried", 0, []error{errdefs.Transient(errA)}, 2, nil},
		{"non-retriable stops after one attempt", 0, []error{nonRetriable, errB}, 1, nonRetriable},
		{"non-retriable stops after one attempt limited", 5, []error{nonRetriable, errB}, 1, nonRetriable},
		{"custom Retriable false stops", 0, []error{permanentError{retry: false}, nil}, 1, permanentError{retry: false}},
		{"custom Retriable true is retried", 0, []error{permanentError{retry: true}}, 2, nil},
		{"non-retriable after retriable failures", 0, []error{errA, errB, nonRetriable}, 3, nonRetriable},
		{"attempts exhausted returns last error", 3, []error{errA, errB, errC, nil}, 3, errC},
		{"single attempt allowed", 1, []error{errA, nil}, 1, errA},
		{"retriable true exhausted", 2, []error{errdefs.Transient(errA), errB, nil}, 2, errB},
		{"a permanent class stops", 0, []error{errA, notFound, nil}, 2, notFound},
		{"a retriable class is retried", 0, []error{fmt.Errorf("x: %w", errdefs.ErrUnavailable), errA}, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			var hooked []int
			r := Retrier{Clock: clock, OnRetry: func(attempt int, err error, delay time.Duration) {
				hooked = append(hooked, attempt)
				assert.Error(t, err)
				assert.Equal(t, time.Millisecond, delay)
			}}
			n := 0
			fn := func() error {
				n++
				if n <= len(tt.results) {
					return tt.results[n-1]
				}
				return nil
			}
			err := clock.run(t, func() error {
				if tt.limit == 0 {
					return r.Retry(context.Background(), constantBackoff(time.Millisecond), fn)
				}
				return r.RetryN(context.Background(), constantBackoff(time.Millisecond), tt.limit, fn)
			})
			assert.Equal(t, tt.wantN, n, "attempts")
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.Equal(t, tt.wantErr, err)
			}
			retries := len(clock.Delays())
			assert.Len(t, hooked, retries)
			for i, a := range hooked {
				assert.Equal(t, i+1, a)
			}
			if tt.wantErr == nil {
				assert.Equal(t, tt.wantN-1, retries, "waits")
			}
		})
	}
}

func TestNonRetriableWrappedTwice(t *testing.T) {
	base := errors.New("bad request")
	wrapped := fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", errdefs.Permanent(base)))
	tests := []struct {
		name string
		run  func(r Retrier, fn func() error) error
	}{
		{"Retry", func(r Retrier, fn func() error) error {
			return r.Retry(context.Background(), constantBackoff(time.Millisecond), fn)
		}},
		{"RetryN", func(r Retrier, fn func() error) error {
			return r.RetryN(context.Background(), constantBackoff(time.Millisecond), 10, fn)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			n := 0
			err := clock.run(t, func() error { return tt.run(Retrier{Clock: clock}, func() error { n++; return wrapped }) })
			assert.Equal(t, 1, n)
			assert.Same(t, wrapped, err)
			assert.ErrorIs(t, err, base)
			assert.Empty(t, clock.Delays())
		})
	}
}

func TestRetryNNonPositiveLimit(t *testing.T) {
	for _, n := range []int{0, -1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			calls := 0
			err := Retrier{}.RetryN(context.Background(), nil, n, func() error { calls++; return nil })
			require.Error(t, err)
			assert.Zero(t, calls)
		})
	}
}

func TestRetryContextDoneBeforeStart(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	tests := []struct {
		name  string
		ctx   context.Context
		limit int
		want  error
	}{
		{"cancelled Retry", cancelled, 0, context.Canceled},
		{"cancelled RetryN", cancelled, 3, context.Canceled},
		{"deadline passed Retry", expired, 0, context.DeadlineExceeded},
		{"deadline passed RetryN", expired, 3, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			r := Retrier{Clock: clock}
			calls := 0
			fn := func() error { calls++; return nil }
			err := clock.run(t, func() error {
				if tt.limit == 0 {
					return r.Retry(tt.ctx, constantBackoff(time.Millisecond), fn)
				}
				return r.RetryN(tt.ctx, constantBackoff(time.Millisecond), tt.limit, fn)
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Zero(t, calls)
			assert.Empty(t, clock.Delays())
		})
	}
}

func TestRetryContextDoneDuringWait(t *testing.T) {
	attemptErr := errors.New("connection refused")
	tests := []struct {
		name string
		// deadline gives the context a short real deadline; otherwise it is cancelled once the loop
		// is waiting. (clockwork v0.5.0's fake-clock contexts block in Err until done, so a deadline
		// on the fake clock cannot be used with a loop that checks ctx.Err first.)
		deadline bool
		limit    int
		want     error
	}{
		{"cancel Retry", false, 0, context.Canceled},
		{"cancel RetryN", false, 5, context.Canceled},
		{"deadline exceeded Retry", true, 0, context.DeadlineExceeded},
		{"deadline exceeded RetryN", true, 5, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			ctx, cancel := context.WithCancel(t.Context())
			if tt.deadline {
				ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
			}
			defer cancel()
			r := Retrier{Clock: clock}
			calls := 0
			fn := func() error { calls++; return attemptErr }

			done := make(chan error, 1)
			go func() {
				if tt.limit == 0 {
					done <- r.Retry(ctx, constantBackoff(time.Hour), fn)
				} else {
					done <- r.RetryN(ctx, constantBackoff(time.Hour), tt.limit, fn)
				}
			}()
			if !tt.deadline {
				clock.waiting(t)
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("retry loop did not return promptly after the context ended")
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorIs(t, err, attemptErr)
			assert.Equal(t, 1, calls)
			assert.Equal(t, []time.Duration{time.Hour}, clock.Delays(), "the context ended the hour-long wait")
		})
	}
}

func TestRetryContextCancelledByAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attemptErr := errors.New("boom")
	calls := 0
	clock := newFakeClock()
	err := clock.run(t, func() error {
		return Retrier{Clock: clock}.Retry(ctx, constantBackoff(time.Millisecond), func() error {
			calls++
			cancel()
			return attemptErr
		})
	})
	assert.Equal(t, 1, calls)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, attemptErr)
}

func TestRetryNeverNilWhenContextDoneFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := newFakeClock()
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- Retrier{Clock: clock}.Retry(ctx, constantBackoff(time.Second), func() error {
			calls++
			if calls == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		})
	}()
	clock.waiting(t)
	cancel()
	err := <-done
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls)
}

func TestRetryAfterHonoured(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		backoff time.Duration
		err     error
		want    time.Duration
	}{
		{"retry-after above backoff", 1 * ms, retryAfterError{50 * ms}, 50 * ms},
		{"retry-after below backoff", 30 * ms, retryAfterError{5 * ms}, 30 * ms},
		{"retry-after wrapped", 1 * ms, fmt.Errorf("http: %w", fmt.Errorf("429: %w", retryAfterError{2 * time.Second})), 2 * time.Second},
		{"retry-after negative ignored", 3 * ms, retryAfterError{-time.Second}, 3 * ms},
		{"retry-after inside retriable error", 1 * ms, errdefs.Transient(retryAfterError{40 * ms}), 40 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			var hooked []time.Duration
			r := Retrier{Clock: clock, OnRetry: func(_ int, _ error, d time.Duration) { hooked = append(hooked, d) }}
			calls := 0
			err := clock.run(t, func() error {
				return r.RetryN(context.Background(), constantBackoff(tt.backoff), 2, func() error {
					calls++
					if calls == 1 {
						return tt.err
					}
					return nil
				})
			})
			require.NoError(t, err)
			require.Equal(t, []time.Duration{tt.want}, clock.Delays())
			assert.Equal(t, []time.Duration{tt.want}, hooked)
		})
	}
}

func TestRetryReportsBackoffDelays(t *testing.T) {
	clock := newFakeClock()
	type call struct {
		attempt int
		err     error
		delay   time.Duration
	}
	var got []call
	r := Retrier{Clock: clock, OnRetry: func(attempt int, err error, delay time.Duration) {
		got = append(got, call{attempt, err, delay})
	}}
	fail := errors.New("fail")
	b := NewExponentialBackoff(10*time.Millisecond, 35*time.Millisecond, 0, 2)
	start := clock.Now()
	err := clock.run(t, func() error { return r.RetryN(context.Background(), b, 4, func() error { return fail }) })
	require.Same(t, fail, err)
	want := []call{
		{1, fail, 10 * time.Millisecond},
		{2, fail, 20 * time.Millisecond},
		{3, fail, 35 * time.Millisecond},
	}
	assert.Equal(t, want, got)
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 35 * time.Millisecond}, clock.Delays())
	assert.Equal(t, 65*time.Millisecond, clock.Since(start), "the loop waited on the clock it was given")
}

func TestRetryNilBackoffDoesNotWait(t *testing.T) {
	clock := newFakeClock()
	calls := 0
	err := clock.run(t, func() error {
		return Retrier{Clock: clock}.Retry(context.Background(), nil, func() error {
			calls++
			if calls < 3 {
				return errors.New("again")
			}
			return nil
		})
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls)
	assert.Empty(t, clock.Delays())
}

func TestZeroRetrierUsesRealClock(t *testing.T) {
	fail := errors.New("fail")
	tests := []struct {
		name string
		run  func(fn func() error) error
	}{
		{"Retry", func(fn func() error) error {
			return Retrier{}.Retry(context.Background(), constantBackoff(time.Microsecond), fn)
		}},
		{"RetryN", func(fn func() error) error {
			return Retrier{}.RetryN(context.Background(), constantBackoff(time.Microsecond), 5, fn)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			err := tt.run(func() error {
				calls++
				if calls < 3 {
					return fail
				}
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, 3, calls)
			assert.Less(t, time.Since(start), 500*time.Millisecond)
		})
	}
}

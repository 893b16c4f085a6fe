package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
)

// RetryAfterer is implemented by errors that demand a minimum wait before the
// next attempt, such as an HTTP 429 response carrying a Retry-After header.
type RetryAfterer interface {
	// RetryAfter returns the minimum delay before the next attempt; values <= 0 impose none.
	RetryAfter() time.Duration
}

// Retrier runs retry loops; its zero value is ready to use with the real clock.
// A Retrier is safe for concurrent use as long as its fields are not modified.
type Retrier struct {
	// Clock is used for backoff waits; nil means the real clock. Tests pass a
	// clockwork.FakeClock and advance it past each wait.
	Clock clockwork.Clock
	// OnRetry, if non-nil, is called after each failed attempt that will be
	// retried, with the 1-based attempt number, its error and the delay about
	// to be waited.
	OnRetry func(attempt int, err error, delay time.Duration)
}

// Retry calls fn until it returns nil, returns an error that is not retriable
// according to errdefs.IsRetriable (that error is returned as is), or ctx is
// done; an error that says nothing about retrying is retried. Between attempts
// it waits max(backoff.Duration(), RetryAfter()) where RetryAfter comes from
// a RetryAfterer in the error's chain; a nil backoff means no delay. ctx is
// checked before every attempt and interrupts waits immediately; the error
// then wraps ctx.Err() and the last attempt's error, if any, so both match
// errors.Is. It never returns nil unless fn succeeded.
func (r Retrier) Retry(ctx context.Context, backoff Backoff, fn func() error) error {
	return r.run(ctx, backoff, 0, fn)
}

// RetryN behaves like Retry but makes at most n attempts and then returns the
// last attempt's error unchanged; n < 1 makes no attempt and returns an error.
func (r Retrier) RetryN(ctx context.Context, backoff Backoff, n int, fn func() error) error {
	if n < 1 {
		return fmt.Errorf("retry: attempt limit %d is not positive", n)
	}
	return r.run(ctx, backoff, n, fn)
}

// run is the retry loop; limit 0 means unlimited attempts.
func (r Retrier) run(ctx context.Context, backoff Backoff, limit int, fn func() error) error {
	var lastErr error
	for attempt := 1; ; attempt++ {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return abortError(attempt-1, ctxErr, lastErr)
		}

		err := fn()
		if err == nil || !errdefs.IsRetriable(err) {
			return err
		}
		lastErr = err
		if limit > 0 && attempt >= limit {
			return err
		}

		delay := nextDelay(backoff, err)
		if r.OnRetry != nil {
			r.OnRetry(attempt, err, delay)
		}
		if ctxErr := Sleep(ctx, r.Clock, delay); ctxErr != nil {
			return abortError(attempt, ctxErr, lastErr)
		}
	}
}

// nextDelay returns max(backoff delay, the error's RetryAfter), never negative.
func nextDelay(backoff Backoff, err error) time.Duration {
	var delay time.Duration
	if backoff != nil {
		delay = backoff.Duration()
	}
	var ra RetryAfterer
	if errors.As(err, &ra) {
		delay = max(delay, ra.RetryAfter())
	}
	return max(delay, 0)
}

// Sleep waits d on clock (nil: the real clock) and returns nil, or returns
// ctx.Err() as soon as ctx is done; d <= 0 does not wait. Its timer is stopped
// when it returns, so a fake clock counts no waiter that nobody waits on.
func Sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}

// abortError builds the error returned when ctx ends the loop, wrapping
// ctxErr and, if present, the last attempt's error.
func abortError(attempts int, ctxErr, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("retry aborted after %d attempts: %w", attempts, ctxErr)
	}
	return fmt.Errorf("retry aborted after %d attempts: %w: last error: %w", attempts, ctxErr, lastErr)
}

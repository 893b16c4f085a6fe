// Package retry runs operations repeatedly with backoff until they succeed,
// fail permanently, or their context is done. Whether a failure is permanent
// is errdefs.IsRetriable's answer: the one place that question is decided.
package retry

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff yields the successive delays to wait between attempts.
type Backoff interface {
	// Duration returns the next delay and advances the backoff state.
	Duration() time.Duration
	// Reset returns the backoff to its initial state.
	Reset()
}

// ExponentialBackoff is a Backoff whose delay starts at a minimum, is
// multiplied by a constant factor after every call and is capped at a
// maximum, with symmetric (+/-) random jitter applied to each returned value.
//
// With c the un-jittered current delay (minDelay <= c <= maxDelay) and j the
// jitter fraction, each Duration result d lies in [c*(1-j), c*(1+j)],
// clamped below at 0. Hence every result satisfies
// 0 <= d <= maxDelay*(1+j) (saturating at math.MaxInt64 nanoseconds).
//
// It is safe for concurrent use.
type ExponentialBackoff struct {
	mu       sync.Mutex
	min      time.Duration
	max      time.Duration
	jitter   float64
	multiple float64
	current  time.Duration
	rnd      *rand.Rand
}

var _ Backoff = (*ExponentialBackoff)(nil)

// NewExponentialBackoff returns a backoff whose first delay is minDelay, each
// following delay being the previous one times multiple, capped at maxDelay,
// and each returned value jittered by +/- jitterFraction of the current delay.
//
// Out-of-range arguments are normalised: a negative minDelay is treated as 0
// (which yields zero delays), a maxDelay below minDelay as minDelay, a
// jitterFraction that is negative or NaN as 0, and a multiple below 1 or NaN
// as 1. The random source is seeded independently for each instance; use
// WithRand to inject one.
func NewExponentialBackoff(minDelay, maxDelay time.Duration, jitterFraction, multiple float64) *ExponentialBackoff {
	if minDelay < 0 {
		minDelay = 0
	}
	if maxDelay < minDelay {
		maxDelay = minDelay
	}
	if !(jitterFraction > 0) {
		jitterFraction = 0
	}
	if !(multiple >= 1) {
		multiple = 1
	}
	return &ExponentialBackoff{
		min:      minDelay,
		max:      maxDelay,
		jitter:   jitterFraction,
		multiple: multiple,
		current:  minDelay,
		rnd:      newRand(),
	}
}

// WithRand makes b draw its jitter from r (nil installs a freshly seeded
// source) and returns b. Once handed over, r must only be used through b.
func (b *ExponentialBackoff) WithRand(r *rand.Rand) *ExponentialBackoff {
	if r == nil {
		r = newRand()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rnd = r
	return b
}

// MaxDuration returns the documented upper bound on any Duration result,
// maxDelay*(1+jitterFraction), saturating at math.MaxInt64 nanoseconds.
func (b *ExponentialBackoff) MaxDuration() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.upper()
}

// Duration returns the current delay with jitter applied and advances the
// current delay by the multiple, capped at the maximum.
func (b *ExponentialBackoff) Duration() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()

	c := b.current
	d := c
	if b.jitter > 0 {
		// Uniform factor in [1-j, 1+j).
		factor := 1 + b.jitter*(2*b.rnd.Float64()-1)
		d = toDuration(float64(c) * factor)
		if upper := b.upper(); d > upper {
			d = upper
		}
	}

	next := toDuration(float64(c) * b.multiple)
	if next < c { // float rounding on huge values must not shrink the delay
		next = c
	}
	if next > b.max {
		next = b.max
	}
	b.current = next
	return d
}

// Reset makes the next Duration call start again from the minimum delay.
func (b *ExponentialBackoff) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.current = b.min
}

// upper returns max*(1+jitter); callers must hold b.mu.
func (b *ExponentialBackoff) upper() time.Duration {
	return toDuration(float64(b.max) * (1 + b.jitter))
}

// toDuration converts nanoseconds to a Duration, clamping to [0, MaxInt64].
func toDuration(ns float64) time.Duration {
	switch {
	case math.IsNaN(ns) || ns <= 0:
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	default:
		return time.Duration(ns)
	}
}

// newRand returns a random source seeded independently of other instances.
func newRand() *rand.Rand {
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

package taskendpoint

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
)

// RateLimit is how many requests one caller may make: Steady a second on average, Burst at once.
type RateLimit struct {
	Steady int
	Burst  int
}

// DefaultRateLimit returns the ECS agent's default ECS_TASK_METADATA_RPS_LIMIT, 40,60.
func DefaultRateLimit() RateLimit { return RateLimit{Steady: 40, Burst: 60} }

// ErrInvalidRateLimit is wrapped by the errors of ParseRateLimit and New for a bad rate limit. An
// errdefs.ErrInvalidArgument.
var ErrInvalidRateLimit = errdefs.New(errdefs.ErrInvalidArgument, "invalid task metadata rate limit")

// ParseRateLimit parses ECS_TASK_METADATA_RPS_LIMIT: "steady,burst", two positive integers (spaces
// around them are allowed). It fails with ErrInvalidRateLimit.
func ParseRateLimit(s string) (RateLimit, error) {
	steady, burst, ok := strings.Cut(s, ",")
	if !ok {
		return RateLimit{}, fmt.Errorf("%w: %q is not steady,burst", ErrInvalidRateLimit, s)
	}
	var rl RateLimit
	var err error
	if rl.Steady, err = strconv.Atoi(strings.TrimSpace(steady)); err != nil {
		return RateLimit{}, fmt.Errorf("%w: %q: steady rate is not an integer", ErrInvalidRateLimit, s)
	}
	if rl.Burst, err = strconv.Atoi(strings.TrimSpace(burst)); err != nil {
		return RateLimit{}, fmt.Errorf("%w: %q: burst is not an integer", ErrInvalidRateLimit, s)
	}
	if err := rl.validate(); err != nil {
		return RateLimit{}, err
	}
	return rl, nil
}

func (rl RateLimit) validate() error {
	if rl.Steady <= 0 || rl.Burst <= 0 {
		return fmt.Errorf("%w: %d,%d: both must be positive", ErrInvalidRateLimit, rl.Steady, rl.Burst)
	}
	return nil
}

// maxLimiters bounds how many callers have a limiter at once.
const maxLimiters = 4096

// sweepInterval is how often limiters that are full again (idle callers) are dropped.
const sweepInterval = time.Minute

// bucket is one caller's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter keeps a token bucket per caller key. It holds at most max buckets: a bucket that has
// refilled completely is the same as a new one, so idle callers' buckets are dropped every
// sweepInterval, and when the map is full; if most are still in use then, arbitrary ones are dropped
// too (their callers start again with a full burst). It is safe for concurrent use.
type limiter struct {
	rate  float64
	burst float64
	max   int
	clock clockwork.Clock

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

func newLimiter(rl RateLimit, clock clockwork.Clock, max int) *limiter {
	return &limiter{rate: float64(rl.Steady), burst: float64(rl.Burst), max: max, clock: clock,
		buckets: map[string]*bucket{}, lastSweep: clock.Now()}
}

// allow takes one token from key's bucket and reports whether there was one.
func (l *limiter) allow(key string) bool {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepInterval {
		l.sweepLocked(now)
	}
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.max {
			l.shrinkLocked(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	} else if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweepLocked drops the buckets that have refilled completely.
func (l *limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	l.lastSweep = now
}

// shrinkLocked makes room in a full map: idle buckets go, then arbitrary ones down to half, so that
// the next shrink is at least max/4 new callers away.
func (l *limiter) shrinkLocked(now time.Time) {
	l.sweepLocked(now)
	if len(l.buckets) <= l.max*3/4 {
		return
	}
	for k := range l.buckets {
		if len(l.buckets) <= l.max/2 {
			break
		}
		delete(l.buckets, k)
	}
}

// size returns how many buckets the limiter holds.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

package taskendpoint

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/logger"
)

// refusal is a reason a request is refused that the operator is told about.
type refusal int

const (
	refusedThrottled refusal = iota // over its rate limit: 429
	refusedStranger                 // a task's credentials asked from an address that is not the task's
	refusedAmbiguous                // v2 from an address more than one task has
	refusalKinds
)

// refusalNames name the reasons in the log.
var refusalNames = [refusalKinds]string{"throttled", "credentials_not_the_tasks_address", "address_of_several_tasks"}

// refusalInterval is the least time between two lines about refused requests.
const refusalInterval = time.Minute

// refusalLog writes refused requests to the log at WARN, at most one line per refusalInterval: the
// first refusal after a quiet interval, with its details and, as suppressed_REASON, how many of each
// reason were left out since the previous line. Any local process (or a web page, through a
// browser) can make requests as fast as it likes, so a line per refused request would let it flood
// the log. What is left out after the last line is counted in the next one. It is safe for
// concurrent use.
type refusalLog struct {
	log   *logger.Logger
	clock clockwork.Clock

	mu   sync.Mutex
	last time.Time         // when the last line was written; zero: never
	left [refusalKinds]int // refusals left out since then, by reason
}

// note records one refused request; kv are its details (never a secret).
func (l *refusalLog) note(why refusal, kv ...any) {
	now := l.clock.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < refusalInterval {
		l.left[why]++
		l.mu.Unlock()
		return
	}
	left := l.left
	l.left = [refusalKinds]int{}
	l.last = now
	l.mu.Unlock()
	fields := append([]any{"reason", refusalNames[why]}, kv...)
	for r, n := range left {
		if n > 0 {
			fields = append(fields, "suppressed_"+refusalNames[r], n)
		}
	}
	l.log.Warn("task endpoint request refused; further refusals are counted, one line a minute", fields...)
}

package logger

import (
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Summary writes a kind of event anyone may cause at will (a refused request: any local process,
// or a web page through a browser, can send them as fast as it likes) to the log at WARN, at most
// one line per interval: the first event after a quiet interval, with its details and, as
// suppressed_REASON, how many events of each reason were left out since the previous line. What is
// left out after the last line is counted in the next one. It is safe for concurrent use.
type Summary struct {
	log      *Logger
	clock    clockwork.Clock
	msg      string
	interval time.Duration

	mu   sync.Mutex
	last time.Time      // when the last line was written; zero: never
	left map[string]int // events left out since then, by reason
}

// NewSummary returns a Summary writing msg to log at most once per interval; a nil clock is the
// wall clock.
func NewSummary(log *Logger, clock clockwork.Clock, msg string, interval time.Duration) *Summary {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Summary{log: log, clock: clock, msg: msg, interval: interval, left: map[string]int{}}
}

// Note records one event of reason; kv are its details (never a secret).
func (s *Summary) Note(reason string, kv ...any) {
	now := s.clock.Now()
	s.mu.Lock()
	if !s.last.IsZero() && now.Sub(s.last) < s.interval {
		s.left[reason]++
		s.mu.Unlock()
		return
	}
	left := s.left
	s.left = map[string]int{}
	s.last = now
	s.mu.Unlock()
	fields := append([]any{"reason", reason}, kv...)
	for _, r := range sortedKeys(left) {
		fields = append(fields, "suppressed_"+r, left[r])
	}
	s.log.Warn(s.msg, fields...)
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

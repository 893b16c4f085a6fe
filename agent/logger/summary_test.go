package logger

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummaryOneLineAnInterval: a burst of events is one line, the next line counts what was left
// out by reason, and a quiet interval lets the next event through at once.
func TestSummaryOneLineAnInterval(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(Config{Level: "info"}, &buf)
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	s := NewSummary(log, clock, "refused", time.Minute)
	for i := range 1000 {
		s.Note("throttled", "n", i)
	}
	s.Note("stranger", "n", 1000)
	s.Note("stranger", "n", 1001)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "%s", buf.String())
	assert.Contains(t, lines[0], `msg=refused`)
	assert.Contains(t, lines[0], `reason=throttled n=0`)

	clock.Advance(time.Minute)
	s.Note("throttled", "n", 2000)
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "%s", buf.String())
	assert.Contains(t, lines[1], `reason=throttled n=2000 suppressed_stranger=2 suppressed_throttled=999`)
}

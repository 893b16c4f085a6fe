package tcs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestReconnectBackoffIsTheECSAgents: 1 s, 2 s, 4 s … capped at 1 min, each within 20 %.
func TestReconnectBackoffIsTheECSAgents(t *testing.T) {
	b := newReconnectBackoff()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		got := b.Duration()
		assert.InDelta(t, float64(want), float64(got), 0.2*float64(want)+1, "delay %d", i)
	}
}

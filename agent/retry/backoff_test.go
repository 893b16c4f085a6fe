package retry

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func seeded(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func TestExponentialBackoffSequenceWithoutJitter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		min, max time.Duration
		multiple float64
		want     []time.Duration
	}{
		{"doubling capped", 10 * ms, 100 * ms, 2, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}},
		{"tripling capped", 1 * ms, 50 * ms, 3, []time.Duration{1 * ms, 3 * ms, 9 * ms, 27 * ms, 50 * ms, 50 * ms}},
		{"fractional multiple", 100 * ms, time.Second, 1.5, []time.Duration{100 * ms, 150 * ms, 225 * ms, 337500 * time.Microsecond}},
		{"constant when multiple is 1", 5 * ms, time.Second, 1, []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"multiple below 1 treated as 1", 5 * ms, time.Second, 0.5, []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"max below min treated as min", 5 * ms, 1 * ms, 2, []time.Duration{5 * ms, 5 * ms}},
		{"negative min treated as zero", -5 * ms, time.Second, 2, []time.Duration{0, 0, 0}},
		{"min equals max", 7 * ms, 7 * ms, 4, []time.Duration{7 * ms, 7 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewExponentialBackoff(tt.min, tt.max, 0, tt.multiple)
			got := make([]time.Duration, len(tt.want))
			for i := range got {
				got[i] = b.Duration()
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestExponentialBackoffJitterBounds(t *testing.T) {
	const samples = 10000
	tests := []struct {
		name     string
		min, max time.Duration
		jitter   float64
		multiple float64
	}{
		{"small jitter", 10 * time.Millisecond, time.Second, 0.1, 2},
		{"half jitter", time.Millisecond, 200 * time.Millisecond, 0.5, 1.7},
		{"full jitter", time.Millisecond, 50 * time.Millisecond, 1, 2},
		{"jitter above one clamps at zero", time.Millisecond, 50 * time.Millisecond, 2.5, 3},
		{"saturating max", time.Hour, math.MaxInt64, 0.5, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewExponentialBackoff(tt.min, tt.max, tt.jitter, tt.multiple).WithRand(seeded(42))
			ref := NewExponentialBackoff(tt.min, tt.max, 0, tt.multiple) // un-jittered current delay
			upper := b.MaxDuration()
			assert.Equal(t, toDuration(float64(tt.max)*(1+tt.jitter)), upper)

			distinct := map[time.Duration]struct{}{}
			var sawBelow, sawAbove bool
			for i := 0; i < samples; i++ {
				if i%50 == 0 { // exercise the whole range of current delays
					b.Reset()
					ref.Reset()
				}
				d, c := b.Duration(), ref.Duration()
				// Plain comparisons keep this hot loop fast under -race.
				if d < 0 || d > upper {
					require.Failf(t, "out of documented bound", "sample %d: %v not in [0, %v]", i, d, upper)
				}
				lo := max(0, float64(c)*(1-tt.jitter))
				hi := float64(c) * (1 + tt.jitter)
				if float64(d) < lo-1 || float64(d) > hi+1 {
					require.Failf(t, "out of jitter range", "sample %d: %v not in [%v, %v] for current %v", i, d, lo, hi, c)
				}
				sawBelow = sawBelow || d < c
				sawAbove = sawAbove || d > c
				distinct[d] = struct{}{}
			}
			assert.True(t, sawBelow, "jitter never went below the current delay")
			assert.True(t, sawAbove, "jitter never went above the current delay")
			assert.Greater(t, len(distinct), 100)
		})
	}
}

func TestExponentialBackoffSameSeedSameSequence(t *testing.T) {
	a := NewExponentialBackoff(time.Millisecond, time.Second, 0.5, 2).WithRand(seeded(7))
	b := NewExponentialBackoff(time.Millisecond, time.Second, 0.5, 2).WithRand(seeded(7))
	for i := 0; i < 20; i++ {
		require.Equal(t, a.Duration(), b.Duration(), "sample %d", i)
	}
}

func TestExponentialBackoffDefaultSourcesAreIndependent(t *testing.T) {
	a := NewExponentialBackoff(time.Second, time.Second, 0.5, 1)
	b := NewExponentialBackoff(time.Second, time.Second, 0.5, 1)
	same := true
	for i := 0; i < 10; i++ {
		if a.Duration() != b.Duration() {
			same = false
		}
	}
	assert.False(t, same, "two default backoffs produced identical jitter")
}

func TestExponentialBackoffReset(t *testing.T) {
	tests := []struct {
		name   string
		jitter float64
	}{
		{"without jitter", 0},
		{"with jitter", 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewExponentialBackoff(10*time.Millisecond, time.Second, tt.jitter, 2).WithRand(seeded(1))
			for i := 0; i < 5; i++ {
				b.Duration()
			}
			b.Reset()
			d := b.Duration()
			assert.GreaterOrEqual(t, d, time.Duration(float64(10*time.Millisecond)*(1-tt.jitter)))
			assert.LessOrEqual(t, d, time.Duration(float64(10*time.Millisecond)*(1+tt.jitter)))
			if tt.jitter == 0 {
				assert.Equal(t, 10*time.Millisecond, d)
				assert.Equal(t, 20*time.Millisecond, b.Duration())
			}
		})
	}
}

func TestExponentialBackoffWithNilRand(t *testing.T) {
	b := NewExponentialBackoff(time.Millisecond, time.Second, 0.5, 2).WithRand(nil)
	d := b.Duration()
	assert.GreaterOrEqual(t, d, 500*time.Microsecond)
	assert.LessOrEqual(t, d, 1500*time.Microsecond)
}

func TestExponentialBackoffConcurrentUse(t *testing.T) {
	b := NewExponentialBackoff(time.Millisecond, 100*time.Millisecond, 0.3, 2)
	upper := b.MaxDuration()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if d := b.Duration(); d < 0 || d > upper {
					t.Errorf("duration %v out of [0, %v]", d, upper)
					return
				}
				if i%97 == 0 {
					b.Reset()
				}
			}
		}()
	}
	wg.Wait()
}

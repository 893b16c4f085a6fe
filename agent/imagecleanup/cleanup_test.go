package imagecleanup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
)

// rec is a record pulled pulledAgo ago and last used usedAgo ago (0 = never used).
func rec(ref, id string, pulledAgo, usedAgo time.Duration) state.ImageRecord {
	r := state.ImageRecord{Ref: ref, ImageID: id, PulledAt: ago(pulledAgo)}
	if usedAgo > 0 {
		r.LastUsedAt = ago(usedAgo)
	}
	return r
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	assert.Equal(t, 30*time.Minute, c.Interval)
	assert.Equal(t, time.Hour, c.MinimumAge)
	assert.Equal(t, 5, c.PerCycle)
	assert.Equal(t, 0.85, c.HighWater)
	assert.Equal(t, 0.75, c.LowWater)
	assert.Equal(t, 10*time.Second, c.PressureInterval)
	assert.NotNil(t, c.Clock)

	c = Config{MinimumAge: -1, HighWater: 0.5, LowWater: 0.9}.withDefaults()
	assert.Zero(t, c.MinimumAge, "negative means no minimum age")
	assert.Equal(t, 0.5, c.LowWater, "LowWater is clamped to HighWater")
}

func TestCycle(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name        string
		records     []state.ImageRecord
		cfg         Config
		setup       func(*host)
		wantRemoved []string // in order
		wantRecords []string // records left, sorted
		wantErr     error
	}{
		{
			name: "oldest first by the later of pulled and last used",
			records: []state.ImageRecord{
				rec("a", "sha256:a", 10*h, 2*h), // touched 2 h ago
				rec("b", "sha256:b", 5*h, 0),    // touched 5 h ago
				rec("c", "sha256:c", 9*h, 3*h),  // touched 3 h ago
			},
			wantRemoved: []string{"b", "c", "a"},
		},
		{
			name: "MinimumAge keeps images pulled or used recently",
			records: []state.ImageRecord{
				rec("old", "", 3*h, 0),
				rec("fresh-pull", "", 30*time.Minute, 0),
				rec("used-recently", "", 30*h, 10*time.Minute),
				rec("just-old-enough", "", 2*h, h),
			},
			wantRemoved: []string{"old", "just-old-enough"},
			wantRecords: []string{"fresh-pull", "used-recently"},
		},
		{
			name:        "custom MinimumAge",
			records:     []state.ImageRecord{rec("a", "", 3*h, 0), rec("b", "", 5*h, 0)},
			cfg:         Config{MinimumAge: 4 * h},
			wantRemoved: []string{"b"},
			wantRecords: []string{"a"},
		},
		{
			name:        "negative MinimumAge removes even fresh images",
			records:     []state.ImageRecord{rec("a", "", time.Second, 0)},
			cfg:         Config{MinimumAge: -1},
			wantRemoved: []string{"a"},
		},
		{
			name: "PerCycle limit takes the oldest",
			records: []state.ImageRecord{
				rec("i1", "", 11*h, 0), rec("i2", "", 12*h, 0), rec("i3", "", 13*h, 0), rec("i4", "", 14*h, 0),
				rec("i5", "", 15*h, 0), rec("i6", "", 16*h, 0), rec("i7", "", 17*h, 0),
			},
			cfg:         Config{PerCycle: 3},
			wantRemoved: []string{"i7", "i6", "i5"},
			wantRecords: []string{"i1", "i2", "i3", "i4"},
		},
		{
			name: "default PerCycle is 5",
			records: []state.ImageRecord{
				rec("i1", "", 11*h, 0), rec("i2", "", 12*h, 0), rec("i3", "", 13*h, 0), rec("i4", "", 14*h, 0),
				rec("i5", "", 15*h, 0), rec("i6", "", 16*h, 0),
			},
			wantRemoved: []string{"i6", "i5", "i4", "i3", "i2"},
			wantRecords: []string{"i1"},
		},
		{
			name:        "in use by ref is never removed",
			records:     []state.ImageRecord{rec("used", "sha256:u", 100*h, 0), rec("free", "sha256:f", 2*h, 0)},
			cfg:         Config{MinimumAge: -1, PerCycle: 10},
			setup:       func(h *host) { h.useRef("used") },
			wantRemoved: []string{"free"},
			wantRecords: []string{"used"},
		},
		{
			name: "in use by image ID is never removed, with or without the sha256 prefix",
			records: []state.ImageRecord{
				rec("by-id", "sha256:1111", 100*h, 0),
				rec("by-bare-id", "sha256:2222", 100*h, 0),
				rec("bare-record", "3333", 100*h, 0),
				rec("other-tag-same-id", "sha256:1111", 100*h, 0),
				rec("free", "sha256:ffff", 2*h, 0),
			},
			cfg: Config{MinimumAge: -1, PerCycle: 10},
			setup: func(h *host) {
				h.useID("sha256:1111")
				h.useID("2222")
				h.useID("sha256:3333")
			},
			wantRemoved: []string{"free"},
			wantRecords: []string{"bare-record", "by-bare-id", "by-id", "other-tag-same-id"},
		},
		{
			name:        "Docker conflict is skipped, record kept, and does not use up PerCycle",
			records:     []state.ImageRecord{rec("busy", "", 10*h, 0), rec("b", "", 9*h, 0), rec("c", "", 8*h, 0)},
			cfg:         Config{PerCycle: 2},
			setup:       func(h *host) { h.conflicts.Add("busy") },
			wantRemoved: []string{"b", "c"},
			wantRecords: []string{"busy"},
		},
		{
			name:        "other Docker failures are returned, kept and count against PerCycle",
			records:     []state.ImageRecord{rec("bad", "", 10*h, 0), rec("b", "", 9*h, 0), rec("c", "", 8*h, 0)},
			cfg:         Config{PerCycle: 2},
			setup:       func(h *host) { h.removeErrs["bad"] = errEngine },
			wantRemoved: []string{"b"},
			wantRecords: []string{"bad", "c"},
			wantErr:     errEngine,
		},
		{
			name:        "record delete failure is returned; the image is still reported removed",
			records:     []state.ImageRecord{rec("a", "", 10*h, 0)},
			setup:       func(h *host) { h.deleteErr = errEngine },
			wantRemoved: []string{"a"},
			wantRecords: []string{"a"},
			wantErr:     errEngine,
		},
		{
			name:        "listing failure",
			records:     []state.ImageRecord{rec("a", "", 10*h, 0)},
			setup:       func(h *host) { h.listErr = errEngine },
			wantRecords: []string{"a"},
			wantErr:     errEngine,
		},
		{
			name:        "a record without a ref is ignored",
			records:     []state.ImageRecord{rec("", "sha256:x", 10*h, 0)},
			wantRecords: []string{""},
		},
		{
			name: "nothing to do",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, tt.records...)
			if tt.setup != nil {
				tt.setup(h)
			}
			removed, err := h.cleaner(tt.cfg, nil).Cycle(t.Context())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantRemoved, removed)
			_, engine, records := h.snapshot()
			assert.Equal(t, tt.wantRecords, records)
			for _, r := range tt.wantRemoved {
				assert.NotContains(t, engine, r)
			}
			for _, r := range tt.wantRecords {
				if r != "" && !slices.Contains(tt.wantRemoved, r) {
					assert.Contains(t, engine, r, "kept records keep their image")
				}
			}
		})
	}
}

func TestCycleRechecksInUseBeforeEachRemoval(t *testing.T) {
	h := newHost(t, rec("first", "sha256:1", 10*time.Hour, 0), rec("second", "sha256:2", 9*time.Hour, 0))
	// A task starts using "second" (by ID) while "first" is being removed.
	h.onRemove = func(h *host, ref string) {
		if ref == "first" {
			h.ids.Add("sha256:2")
		}
	}
	removed, err := h.cleaner(Config{}, nil).Cycle(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"first"}, removed)
	_, engine, records := h.snapshot()
	assert.Equal(t, []string{"second"}, engine)
	assert.Equal(t, []string{"second"}, records)
}

// TestInUseNeverRemoved throws random records and in-use sets at normal cycles and at pressure cleanup;
// the fake fails the test if Docker is ever asked to remove an image a task uses.
func TestInUseNeverRemoved(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var records []state.ImageRecord
		for i := range 1 + rng.IntN(20) {
			records = append(records, rec(fmt.Sprintf("img%d", i), fmt.Sprintf("sha256:%d", rng.IntN(8)),
				time.Duration(rng.IntN(5000))*time.Minute, time.Duration(rng.IntN(3000))*time.Minute))
		}
		h := newHost(t, records...)
		var usedRefs, usedIDs set.Set[string]
		for _, r := range records {
			switch rng.IntN(4) {
			case 0:
				usedRefs.Add(r.Ref)
			case 1:
				usedIDs.Add(r.ImageID)
			}
		}
		for _, r := range usedRefs.Values() {
			h.useRef(r)
		}
		for _, id := range usedIDs.Values() {
			h.useID(id)
		}
		h.usage = func(*host) float64 { return 0.99 } // never relieved: pressure removes all it may
		c := h.cleaner(Config{PerCycle: 1 + rng.IntN(5), MinimumAge: time.Duration(rng.IntN(3)-1) * time.Hour}, nil)
		if round%2 == 0 {
			_, err := c.Cycle(t.Context())
			require.NoError(t, err)
		} else {
			c.checkPressure(t.Context(), &pressureState{})
		}
		_, engine, _ := h.snapshot()
		for _, r := range records {
			if usedRefs.Has(r.Ref) || usedIDs.Has(r.ImageID) {
				assert.Contains(t, engine, r.Ref, "round %d", round)
			} else if round%2 == 1 {
				assert.NotContains(t, engine, r.Ref, "round %d: pressure removes every unused image", round)
			}
		}
	}
}

func TestCycleLogs(t *testing.T) {
	h := newHost(t,
		rec("nginx:1", "sha256:n", 3*time.Hour, 0),
		rec("busy:1", "sha256:b", 4*time.Hour, 0),
		rec("bad:1", "sha256:x", 5*time.Hour, 0))
	h.conflicts.Add("busy:1")
	h.removeErrs["bad:1"] = errEngine
	log, buf := debugLog(t)
	_, err := h.cleaner(Config{}, log).Cycle(t.Context())
	require.ErrorIs(t, err, errEngine)

	assert.Len(t, logLines(buf, "level=info", "removed unused image", "image=nginx:1", "image_id=sha256:n", "age=3h0m0s"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=debug", "image=busy:1", "kept"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=warn", "image=bad:1", "engine exploded"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=info", "image cleanup cycle finished", "removed=1", "candidates=3",
		"kept_used_by_container=1", "failed=1"), 1, buf.String())
}

func TestRunPeriodicCycles(t *testing.T) {
	tests := []struct {
		name     string
		disabled bool
	}{
		{name: "enabled runs cycles"},
		{name: "Disabled skips periodic cycles", disabled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, rec("a", "", 2*time.Hour, 0), rec("b", "", 3*time.Hour, 0))
			clock := clockwork.NewFakeClockAt(now)
			c := h.cleaner(Config{Interval: time.Minute, PressureInterval: time.Minute,
				Disabled: tt.disabled, PerCycle: 1, Clock: clock}, nil)
			done := runInBackground(t, c)
			samples := func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.samples }
			// The first sample is taken once both tickers exist.
			require.Eventually(t, func() bool { return samples() == 1 }, 5*time.Second, time.Millisecond, "one sample at start")
			// Each minute brings a disk usage sample and, unless Disabled, a cycle removing one image.
			for i := 1; i <= 3; i++ {
				clock.Advance(time.Minute)
				require.Eventually(t, func() bool { return samples() == 1+i }, 5*time.Second, time.Millisecond,
					"sample after minute %d", i)
				if !tt.disabled {
					require.Eventually(t, func() bool { return h.count("rm ") == min(i, 2) }, 5*time.Second, time.Millisecond,
						"cycle after minute %d", i)
				}
			}
			done()
			if tt.disabled {
				assert.Zero(t, h.count("rm "))
			} else {
				assert.Equal(t, 2, h.count("rm "), "three cycles of one image each, and two images")
			}
		})
	}
}

// runInBackground runs c.Run and returns a function that cancels it and waits for it to return.
func runInBackground(t *testing.T, c *Cleaner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		c.Run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestPressure(t *testing.T) {
	h := time.Hour
	// usage: 0.50 + 0.04 per image left in the engine + 0.03 per stopped container left.
	perState := func(x *host) float64 { return float64(50+4*x.engine.Len()+3*x.containers) / 100 }
	tests := []struct {
		name        string
		records     []state.ImageRecord
		containers  int
		cfg         Config
		setup       func(*host)
		wantEvents  []string
		wantRecords []string
	}{
		{
			name: "below high water does nothing",
			records: []state.ImageRecord{
				rec("a", "", 10*h, 0), rec("b", "", 9*h, 0), rec("c", "", 8*h, 0),
			}, // 0.62
			containers:  2, // 0.68
			wantRecords: []string{"a", "b", "c"},
		},
		{
			name: "containers first, then images oldest first, until low water, ignoring MinimumAge",
			records: []state.ImageRecord{
				rec("r1", "", time.Minute, 0), rec("r2", "", 2*time.Minute, 0), rec("r3", "", 3*time.Minute, 0),
				rec("r4", "", 4*time.Minute, 0), rec("r5", "", 5*time.Minute, 0), rec("r6", "", 6*time.Minute, 0),
			}, // 0.74
			containers: 5, // 0.89 > 0.85
			cfg:        Config{PerCycle: 2},
			// After the first container: 0.86; two images: 0.78; second container: 0.75 ≤ 0.75.
			wantEvents:  []string{"reclaim", "rm r6", "delete r6", "rm r5", "delete r5", "reclaim"},
			wantRecords: []string{"r1", "r2", "r3", "r4"},
		},
		{
			name:       "containers alone may suffice",
			records:    []state.ImageRecord{rec("a", "", 10*h, 0)}, // 0.54
			containers: 11,                                         // 0.87
			// 0.84, 0.81, 0.78, 0.75
			wantEvents: []string{
				"reclaim", "rm a", "delete a", "reclaim", "reclaim",
			},
		},
		{
			name: "in-use and refused images are kept; stops when nothing is left",
			records: []state.ImageRecord{
				rec("used", "sha256:u", 10*h, 0), rec("busy", "", 9*h, 0), rec("free", "", 8*h, 0),
				rec("u2", "sha256:u", 7*h, 0), rec("x1", "", 6*h, 0), rec("x2", "", 5*h, 0), rec("x3", "", 4*h, 0),
			},
			cfg: Config{HighWater: 0.6, LowWater: 0.55, PerCycle: 1},
			setup: func(x *host) {
				x.useRef("used")
				x.useID("sha256:u")
				x.conflicts.Add("busy")
			},
			wantEvents: []string{
				"reclaim", "conflict busy", "rm free", "delete free",
				"reclaim", "rm x1", "delete x1",
				"reclaim", "rm x2", "delete x2",
				"reclaim", "rm x3", "delete x3",
				"reclaim",
			},
			wantRecords: []string{"busy", "u2", "used"},
		},
		{
			name:        "Disabled: containers only, never images",
			records:     []state.ImageRecord{rec("a", "", 10*h, 0), rec("b", "", 9*h, 0)}, // 0.58
			containers:  10,                                                               // 0.88
			cfg:         Config{Disabled: true, LowWater: 0.5},
			wantEvents:  slices.Repeat([]string{"reclaim"}, 11),
			wantRecords: []string{"a", "b"},
		},
		{
			name:        "a failing reclaimer does not stop image removal",
			records:     []state.ImageRecord{rec("a", "", 10*h, 0), rec("b", "", 9*h, 0), rec("c", "", 8*h, 0)}, // 0.62
			cfg:         Config{HighWater: 0.6, LowWater: 0.55},
			setup:       func(x *host) { x.reclaimErr = errEngine },
			wantEvents:  []string{"reclaim", "rm a", "delete a", "rm b", "delete b", "rm c", "delete c"},
			wantRecords: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newHost(t, tt.records...)
			x.containers = tt.containers
			x.usage = perState
			if tt.setup != nil {
				tt.setup(x)
			}
			c := x.cleaner(tt.cfg, nil)
			c.checkPressure(t.Context(), &pressureState{})
			events, _, records := x.snapshot()
			assert.Equal(t, tt.wantEvents, events)
			assert.Equal(t, tt.wantRecords, records)
		})
	}
}

func TestPressureNothingToRemoveStops(t *testing.T) {
	x := newHost(t, rec("used", "", 10*time.Hour, 0))
	x.useRef("used")
	x.usage = func(*host) float64 { return 0.97 }
	log, buf := debugLog(t)
	// One sample at start; the next is an hour away, so exactly one cleanup runs.
	c := x.cleaner(Config{PressureInterval: time.Hour}, log)
	stop := runInBackground(t, c)
	require.Eventually(t, func() bool {
		return len(logLines(buf, "disk pressure cleanup found nothing to remove")) == 1
	}, 5*time.Second, time.Millisecond)
	stop()
	events, _, records := x.snapshot()
	assert.Equal(t, []string{"reclaim"}, events, "one round, then stop")
	assert.Equal(t, []string{"used"}, records)
	assert.Equal(t, 1, x.samples)
	assert.Len(t, logLines(buf, "level=warn", "disk usage above high water mark", "usage_percent=97", "high_water_percent=85"), 1, buf.String())
}

func TestPressureRepeatedSamplesLogQuietly(t *testing.T) {
	x := newHost(t)
	usage := 0.9
	x.usage = func(*host) float64 { return usage }
	log, buf := debugLog(t)
	c := x.cleaner(Config{}, log)
	var st pressureState
	ctx := t.Context()
	c.checkPressure(ctx, &st)
	c.checkPressure(ctx, &st)
	assert.Len(t, logLines(buf, "level=warn", "disk usage above high water mark"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=debug", "disk usage above high water mark"), 1, buf.String())
	assert.Equal(t, 2, x.count("reclaim"), "every sample above high water tries again")

	x.mu.Lock()
	usage = 0.5
	x.mu.Unlock()
	c.checkPressure(ctx, &st)
	assert.Len(t, logLines(buf, "level=info", "back below high water"), 1, buf.String())
	x.mu.Lock()
	usage = 0.9
	x.mu.Unlock()
	c.checkPressure(ctx, &st)
	assert.Len(t, logLines(buf, "level=warn", "disk usage above high water mark"), 2, "a new episode warns again")
}

func TestPressureLogsWhatItFreed(t *testing.T) {
	x := newHost(t, rec("a:1", "sha256:a", 10*time.Hour, 0))
	x.containers = 1
	x.usage = func(x *host) float64 { return 0.8 + 0.05*float64(x.engine.Len()) + 0.05*float64(x.containers) }
	log, buf := debugLog(t)
	x.cleaner(Config{}, log).checkPressure(t.Context(), &pressureState{})
	assert.Len(t, logLines(buf, "level=info", "disk pressure cleanup finished", "containers_removed=1", "images_removed=1",
		"usage_before_percent=90", "usage_after_percent=80", "images=a:1"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=warn", "still above low water"), 1, buf.String())
}

func TestPressureUsageErrors(t *testing.T) {
	x := newHost(t, rec("a", "", 10*time.Hour, 0))
	log, buf := debugLog(t)
	c := New(Config{Clock: clockwork.NewFakeClockAt(now)}, x, x.inUse, x, x.reclaim, func() (float64, error) { return 0, errEngine }, log)
	var st pressureState
	c.checkPressure(t.Context(), &st)
	c.checkPressure(t.Context(), &st)
	assert.Len(t, logLines(buf, "level=warn", "sample disk usage", "engine exploded"), 1, buf.String())
	assert.Len(t, logLines(buf, "level=debug", "sample disk usage"), 1, buf.String())
	events, _, _ := x.snapshot()
	assert.Empty(t, events)
}

func TestRunWithoutUsageOrReclaimer(t *testing.T) {
	x := newHost(t, rec("a", "", 10*time.Hour, 0))
	clock := clockwork.NewFakeClockAt(now)
	c := New(Config{Interval: time.Minute, Clock: clock}, x, x.inUse, x, nil, nil, logger.Nop())
	stop := runInBackground(t, c)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "Run waits on its cycle ticker")
	assert.Zero(t, x.count("rm a"), "no cycle before the first interval")
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return x.count("rm a") == 1 }, 5*time.Second, time.Millisecond)
	stop()
}

func TestCycleStopsWhenContextDone(t *testing.T) {
	x := newHost(t, rec("a", "", 10*time.Hour, 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	removed, err := x.cleaner(Config{}, nil).Cycle(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, removed)
}

func TestNewRequiresItsInputs(t *testing.T) {
	x := newHost(t)
	assert.Panics(t, func() { New(Config{}, nil, x.inUse, x, nil, nil, nil) })
	assert.Panics(t, func() { New(Config{}, x, nil, x, nil, nil, nil) })
	assert.Panics(t, func() { New(Config{}, x, x.inUse, nil, nil, nil, nil) })
}

func TestStatfsUsage(t *testing.T) {
	u, err := StatfsUsage(t.TempDir())()
	require.NoError(t, err)
	assert.Greater(t, u, 0.0)
	assert.Less(t, u, 1.0)

	_, err = StatfsUsage("/does/not/exist")()
	require.ErrorContains(t, err, "/does/not/exist")
}

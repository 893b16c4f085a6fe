package tcswire_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/tcswire"
)

func TestFloatStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []float64
		want    *tcswire.CWStatsSet
	}{
		{"none", nil, nil},
		{"only NaN", []float64{math.NaN()}, nil},
		{"one", []float64{42}, &tcswire.CWStatsSet{Min: 42, Max: 42, SampleCount: 1, Sum: 42}},
		{"several", []float64{3, 1, 2}, &tcswire.CWStatsSet{Min: 1, Max: 3, SampleCount: 3, Sum: 6}},
		{"NaN skipped", []float64{5, math.NaN(), 7}, &tcswire.CWStatsSet{Min: 5, Max: 7, SampleCount: 2, Sum: 12}},
		{"zero and negative", []float64{0, -1}, &tcswire.CWStatsSet{Min: -1, Max: 0, SampleCount: 2, Sum: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tcswire.FloatStats(tc.samples...))
		})
	}
}

func TestULongStats(t *testing.T) {
	const maxI = math.MaxInt64
	for _, tc := range []struct {
		name    string
		samples []uint64
		want    *tcswire.ULongStatsSet
	}{
		{"none", nil, nil},
		{"small", []uint64{10, 30, 20}, &tcswire.ULongStatsSet{Min: 10, Max: 30, SampleCount: 3, Sum: 60}},
		{"at MaxInt64", []uint64{maxI}, &tcswire.ULongStatsSet{Min: maxI, Max: maxI, SampleCount: 1, Sum: maxI}},
		{"above MaxInt64", []uint64{maxI + 5}, &tcswire.ULongStatsSet{
			Min: maxI, OverflowMin: 5, Max: maxI, OverflowMax: 5, SampleCount: 1, Sum: maxI, OverflowSum: 5}},
		{"sum overflows int64", []uint64{maxI, 10}, &tcswire.ULongStatsSet{
			Min: 10, Max: maxI, SampleCount: 2, Sum: maxI, OverflowSum: 10}},
		{"sum saturates", []uint64{math.MaxUint64, math.MaxUint64}, &tcswire.ULongStatsSet{
			Min: maxI, OverflowMin: maxI, Max: maxI, OverflowMax: maxI, SampleCount: 2, Sum: maxI, OverflowSum: maxI}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tcswire.ULongStats(tc.samples...))
		})
	}
}

func TestCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cpu, wall time.Duration
		units     int64
		want      float64
	}{
		{"one busy core, one vCPU", time.Second, time.Second, 1024, 100},
		{"one busy core, half a vCPU", time.Second, time.Second, 512, 200},
		{"half a core, two vCPUs", time.Second / 2, time.Second, 2048, 25},
		{"no reservation means one vCPU", 2 * time.Second, 4 * time.Second, 0, 50},
		{"idle", 0, time.Second, 256, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, tcswire.CPUPercent(tc.cpu, tc.wall, tc.units), 1e-9)
		})
	}
	assert.True(t, math.IsNaN(tcswire.CPUPercent(time.Second, 0, 1024)))
}

func TestWindow(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	w := tcswire.NewWindow(512)
	_, ok := w.Take("app")
	assert.False(t, ok, "no sample yet")

	net := func(rx, tx uint64) *tcswire.NetworkCounters {
		return &tcswire.NetworkCounters{RxBytes: rx, TxBytes: tx, RxPackets: rx / 100}
	}
	w.Add(tcswire.Sample{Read: t0, CPUTime: 0, MemoryBytes: 64 << 20, Network: net(1000, 500), StorageReadBytes: 10})
	w.Add(tcswire.Sample{Read: t0.Add(time.Second), CPUTime: time.Second / 2, MemoryBytes: 128 << 20, Network: net(3000, 500), StorageReadBytes: 30})
	w.Add(tcswire.Sample{Read: t0.Add(time.Second), CPUTime: time.Second, MemoryBytes: 1 << 30}) // not later: ignored
	w.Add(tcswire.Sample{Read: t0.Add(3 * time.Second), CPUTime: time.Second / 2, MemoryBytes: 96 << 20, Network: net(7000, 1500), StorageReadBytes: 30})

	m, ok := w.Take("app")
	require.True(t, ok)
	assert.Equal(t, "app", m.ContainerName)
	// 0.5 s of CPU in 1 s on 512 units (half a vCPU) is 100 %; then nothing for 2 s.
	assert.Equal(t, &tcswire.CWStatsSet{Min: 0, Max: 100, SampleCount: 2, Sum: 100}, m.CPUStatsSet)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 64, Max: 128, SampleCount: 3, Sum: 288}, m.MemoryStatsSet)
	require.NotNil(t, m.NetworkStatsSet)
	assert.Equal(t, &tcswire.ULongStatsSet{Min: 1000, Max: 7000, SampleCount: 3, Sum: 11000}, m.NetworkStatsSet.RxBytes)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 2000, Max: 2000, SampleCount: 2, Sum: 4000}, m.NetworkStatsSet.RxBytesPerSecond)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 0, Max: 500, SampleCount: 2, Sum: 500}, m.NetworkStatsSet.TxBytesPerSecond)
	assert.Equal(t, &tcswire.ULongStatsSet{Min: 10, Max: 30, SampleCount: 3, Sum: 70}, m.StorageStatsSet.ReadSizeBytes)

	// The next interval starts empty but rates continue from the last sample.
	_, ok = w.Take("app")
	assert.False(t, ok)
	w.Add(tcswire.Sample{Read: t0.Add(4 * time.Second), CPUTime: time.Second, MemoryBytes: 64 << 20})
	m, ok = w.Take("app")
	require.True(t, ok)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 100, Max: 100, SampleCount: 1, Sum: 100}, m.CPUStatsSet)
	assert.Nil(t, m.NetworkStatsSet, "no network in this interval")
}

package tcswire

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// BytesPerMiB converts memory bytes to the MiB memoryStatsSet is in.
const BytesPerMiB = 1 << 20

// CPUUnitsPerVCPU is how many ECS CPU units make one vCPU.
const CPUUnitsPerVCPU = 1024

// FloatStats returns the stats set of samples, skipping NaN; nil when no sample is left.
func FloatStats(samples ...float64) *CWStatsSet {
	var a floatAcc
	for _, v := range samples {
		a.add(v)
	}
	return a.set()
}

// ULongStats returns the stats set of counter samples, each value above math.MaxInt64 split into
// base and overflow (value = base + overflow; a sum beyond what the two can hold saturates); nil when
// there is no sample.
func ULongStats(samples ...uint64) *ULongStatsSet {
	var a ulongAcc
	for _, v := range samples {
		a.add(v)
	}
	return a.set()
}

// CPUPercent is the CPU utilisation between two readings of a container's cumulative CPU time, in
// percent of cpuUnits (1024 units are one vCPU, so a container busy on one core with 512 units is at
// 200 %). cpuUnits <= 0 means one vCPU. A wall interval <= 0 gives NaN (no sample).
func CPUPercent(cpuDelta, wallDelta time.Duration, cpuUnits int64) float64 {
	if wallDelta <= 0 {
		return math.NaN()
	}
	if cpuUnits <= 0 {
		cpuUnits = CPUUnitsPerVCPU
	}
	vcpus := float64(cpuUnits) / CPUUnitsPerVCPU
	return 100 * cpuDelta.Seconds() / wallDelta.Seconds() / vcpus
}

// splitOverflow fits v into the model's signed base and overflow fields.
func splitOverflow(v uint64) (base, overflow int64) {
	if v <= math.MaxInt64 {
		return int64(v), 0
	}
	return math.MaxInt64, int64(min(v-math.MaxInt64, math.MaxInt64))
}

// floatAcc accumulates double samples in constant memory.
type floatAcc struct {
	min, max, sum float64
	n             int64
}

func (a *floatAcc) add(v float64) {
	if math.IsNaN(v) {
		return
	}
	if a.n == 0 || v < a.min {
		a.min = v
	}
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.sum += v
	a.n++
}

func (a *floatAcc) set() *CWStatsSet {
	if a.n == 0 {
		return nil
	}
	return &CWStatsSet{Min: a.min, Max: a.max, SampleCount: a.n, Sum: a.sum}
}

// ulongAcc accumulates counter samples in constant memory; its sum saturates at math.MaxUint64.
type ulongAcc struct {
	min, max, sum uint64
	n             int64
}

func (a *ulongAcc) add(v uint64) {
	if a.n == 0 || v < a.min {
		a.min = v
	}
	if a.n == 0 || v > a.max {
		a.max = v
	}
	sum, carry := bits.Add64(a.sum, v, 0)
	if carry != 0 {
		sum = math.MaxUint64
	}
	a.sum = sum
	a.n++
}

func (a *ulongAcc) set() *ULongStatsSet {
	if a.n == 0 {
		return nil
	}
	s := &ULongStatsSet{SampleCount: a.n}
	s.Min, s.OverflowMin = splitOverflow(a.min)
	s.Max, s.OverflowMax = splitOverflow(a.max)
	s.Sum, s.OverflowSum = splitOverflow(a.sum)
	return s
}

// Sample is one reading of a container's stats stream (Docker sends one about every second).
type Sample struct {
	Read              time.Time
	CPUTime           time.Duration // cumulative CPU time of the container
	MemoryBytes       uint64
	Network           *NetworkCounters // nil: the container has no network of its own
	StorageReadBytes  uint64           // cumulative
	StorageWriteBytes uint64           // cumulative
}

// NetworkCounters are a container's cumulative network counters, summed over its interfaces.
type NetworkCounters struct {
	RxBytes, RxPackets, RxDropped, RxErrors uint64
	TxBytes, TxPackets, TxDropped, TxErrors uint64
}

// Window turns one container's samples into the stats sets of a publish interval, in constant
// memory. CPU percent and bytes per second come from consecutive samples, so the first sample only
// counts for memory, network and storage. It is safe for concurrent use.
type Window struct {
	mu       sync.Mutex
	cpuUnits int64
	prev     *Sample // kept across Take, so the next interval's first rate has a predecessor
	cpu, mem floatAcc
	rxps     floatAcc
	txps     floatAcc
	net      [8]ulongAcc // in NetworkCounters order
	hasNet   bool
	rd, wr   ulongAcc
}

// NewWindow returns a Window whose CPU percent is relative to cpuUnits (the container's or task's
// CPU reservation; <= 0 means one vCPU).
func NewWindow(cpuUnits int64) *Window { return &Window{cpuUnits: cpuUnits} }

// Add counts a sample; one not later than the previous is ignored.
func (w *Window) Add(s Sample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.prev != nil && !s.Read.After(w.prev.Read) {
		return
	}
	w.mem.add(float64(s.MemoryBytes) / BytesPerMiB)
	w.rd.add(s.StorageReadBytes)
	w.wr.add(s.StorageWriteBytes)
	if n := s.Network; n != nil {
		w.hasNet = true
		for i, v := range []uint64{n.RxBytes, n.RxPackets, n.RxDropped, n.RxErrors, n.TxBytes, n.TxPackets, n.TxDropped, n.TxErrors} {
			w.net[i].add(v)
		}
	}
	if p := w.prev; p != nil {
		wall := s.Read.Sub(p.Read)
		if s.CPUTime >= p.CPUTime {
			w.cpu.add(CPUPercent(s.CPUTime-p.CPUTime, wall, w.cpuUnits))
		}
		if s.Network != nil && p.Network != nil {
			if s.Network.RxBytes >= p.Network.RxBytes {
				w.rxps.add(float64(s.Network.RxBytes-p.Network.RxBytes) / wall.Seconds())
			}
			if s.Network.TxBytes >= p.Network.TxBytes {
				w.txps.add(float64(s.Network.TxBytes-p.Network.TxBytes) / wall.Seconds())
			}
		}
	}
	w.prev = &s
}

// Take returns the container's metric for the samples added since the last Take and starts a new
// interval; ok is false when no sample was added.
func (w *Window) Take(containerName string) (m ContainerMetric, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mem.n == 0 {
		return ContainerMetric{}, false
	}
	m = ContainerMetric{
		ContainerName:   containerName,
		CPUStatsSet:     w.cpu.set(),
		MemoryStatsSet:  w.mem.set(),
		StorageStatsSet: &StorageStatsSet{ReadSizeBytes: w.rd.set(), WriteSizeBytes: w.wr.set()},
	}
	if w.hasNet {
		m.NetworkStatsSet = &NetworkStatsSet{
			RxBytes: w.net[0].set(), RxPackets: w.net[1].set(), RxDropped: w.net[2].set(), RxErrors: w.net[3].set(),
			TxBytes: w.net[4].set(), TxPackets: w.net[5].set(), TxDropped: w.net[6].set(), TxErrors: w.net[7].set(),
			RxBytesPerSecond: w.rxps.set(), TxBytesPerSecond: w.txps.set(),
		}
	}
	w.cpu, w.mem, w.rxps, w.txps = floatAcc{}, floatAcc{}, floatAcc{}, floatAcc{}
	w.net, w.hasNet, w.rd, w.wr = [8]ulongAcc{}, false, ulongAcc{}, ulongAcc{}
	return m, true
}

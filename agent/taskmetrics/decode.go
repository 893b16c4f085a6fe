package taskmetrics

import (
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/tcswire"
)

// Convert turns one Docker stats sample into the sample a tcswire.Window counts and the figures shown
// locally. Memory is usage less the page cache (which cgroup v1 reports), as the ECS agent counts
// it; network sums every interface (nil without networks). The CPU percent is Docker's own
// (cpu_stats against precpu_stats), 0 on a stream's first sample, which has no predecessor.
func Convert(d dockerclient.StatsSample) (tcswire.Sample, Figures) {
	mem := d.MemoryUsage
	if d.MemoryCache < mem {
		mem -= d.MemoryCache
	}
	s := tcswire.Sample{Read: d.Read, CPUTime: d.CPUTotal, MemoryBytes: mem,
		StorageReadBytes: d.StorageRead, StorageWriteBytes: d.StorageWrite}
	if d.Networks != nil {
		n := &tcswire.NetworkCounters{}
		for _, i := range d.Networks {
			n.RxBytes += i.RxBytes
			n.RxPackets += i.RxPackets
			n.RxErrors += i.RxErrors
			n.RxDropped += i.RxDropped
			n.TxBytes += i.TxBytes
			n.TxPackets += i.TxPackets
			n.TxErrors += i.TxErrors
			n.TxDropped += i.TxDropped
		}
		s.Network = n
	}
	f := Figures{MemoryBytes: mem}
	cur, prev := d.CPUTotal, d.PreCPUTotal
	if wall := d.Read.Sub(d.PreRead); !d.PreRead.IsZero() && wall > 0 && cur >= prev && prev > 0 {
		f.CPUPercent = tcswire.CPUPercent(cur-prev, wall, tcswire.CPUUnitsPerVCPU)
	}
	return s, f
}

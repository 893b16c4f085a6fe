package telemetry

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/tcs"
)

// dockerStats is the part of Docker's stats object the source reads; the rest is skipped.
type dockerStats struct {
	Read     time.Time `json:"read"`
	PreRead  time.Time `json:"preread"`
	CPUStats struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"` // ns
		} `json:"cpu_usage"`
	} `json:"cpu_stats"`
	PreCPUStats struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
	} `json:"precpu_stats"`
	MemoryStats struct {
		Usage uint64 `json:"usage"`
		Stats struct {
			Cache uint64 `json:"cache"` // cgroup v1 only
		} `json:"stats"`
	} `json:"memory_stats"`
	Networks map[string]struct {
		RxBytes   uint64 `json:"rx_bytes"`
		RxPackets uint64 `json:"rx_packets"`
		RxErrors  uint64 `json:"rx_errors"`
		RxDropped uint64 `json:"rx_dropped"`
		TxBytes   uint64 `json:"tx_bytes"`
		TxPackets uint64 `json:"tx_packets"`
		TxErrors  uint64 `json:"tx_errors"`
		TxDropped uint64 `json:"tx_dropped"`
	} `json:"networks"`
	BlkioStats struct {
		IOServiceBytesRecursive []struct {
			Op    string `json:"op"`
			Value uint64 `json:"value"`
		} `json:"io_service_bytes_recursive"`
	} `json:"blkio_stats"`
}

// Decode reads one Docker stats object into the sample a tcs.Window counts and the figures shown
// locally. Memory is usage less the page cache ("cache", which cgroup v1 reports), as the ECS agent
// counts it; storage sums the Read and Write entries of io_service_bytes_recursive; network sums
// every interface (nil without networks). The CPU percent is Docker's own (cpu_stats against
// precpu_stats), 0 on a stream's first sample, which has no predecessor.
func Decode(raw json.RawMessage) (tcs.Sample, Figures, error) {
	var d dockerStats
	if err := json.Unmarshal(raw, &d); err != nil {
		return tcs.Sample{}, Figures{}, fmt.Errorf("decode docker stats: %w", err)
	}
	mem := d.MemoryStats.Usage
	if cache := d.MemoryStats.Stats.Cache; cache < mem {
		mem -= cache
	}
	s := tcs.Sample{Read: d.Read, CPUTime: time.Duration(d.CPUStats.CPUUsage.TotalUsage), MemoryBytes: mem}
	if d.Networks != nil {
		n := &tcs.NetworkCounters{}
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
	for _, e := range d.BlkioStats.IOServiceBytesRecursive {
		switch {
		case strings.EqualFold(e.Op, "read"):
			s.StorageReadBytes += e.Value
		case strings.EqualFold(e.Op, "write"):
			s.StorageWriteBytes += e.Value
		}
	}
	f := Figures{MemoryBytes: mem}
	cur, prev := d.CPUStats.CPUUsage.TotalUsage, d.PreCPUStats.CPUUsage.TotalUsage
	if wall := d.Read.Sub(d.PreRead); !d.PreRead.IsZero() && wall > 0 && cur >= prev && prev > 0 {
		f.CPUPercent = tcs.CPUPercent(time.Duration(cur-prev), wall, tcs.CPUUnitsPerVCPU)
	}
	return s, f, nil
}

package dockerclient

import (
	"time"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrNotRunning: the container is not running (it stopped, or never started), so it has no stats.
// An errdefs.ErrFailedPrecondition; not retried.
var ErrNotRunning = errdefs.New(errdefs.ErrFailedPrecondition, "container not running")

// StatsSample is the counters Berth reads of one stats sample of a container, as the Docker
// Engine's stats object names them (agent/kernelstats reads them from the kernel).
type StatsSample struct {
	// Read is when the sample was read ("read"); PreRead the previous sample's ("preread"), zero
	// on the first.
	Read, PreRead time.Time
	// CPUTotal and PreCPUTotal are the container's CPU time (cpu_stats and precpu_stats
	// cpu_usage.total_usage).
	CPUTotal, PreCPUTotal time.Duration
	// MemoryUsage is memory_stats.usage, MemoryCache its page cache (memory_stats.stats.cache, which
	// only cgroup v1 reports).
	MemoryUsage, MemoryCache uint64
	// StorageRead and StorageWrite sum the Read and Write entries of
	// blkio_stats.io_service_bytes_recursive.
	StorageRead, StorageWrite uint64
	// Networks holds each interface's totals ("networks"); nil when the container has no network
	// of its own (network mode host or none).
	Networks map[string]NetworkStats
}

// NetworkStats are an interface's counts since the container's network was set up.
type NetworkStats struct {
	RxBytes   uint64 `json:"rx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	RxErrors  uint64 `json:"rx_errors"`
	RxDropped uint64 `json:"rx_dropped"`
	TxBytes   uint64 `json:"tx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxErrors  uint64 `json:"tx_errors"`
	TxDropped uint64 `json:"tx_dropped"`
}

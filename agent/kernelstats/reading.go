package kernelstats

import (
	"time"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// Reading is one sample of a container's counters. Each member marshals (encoding/json) to the
// Docker Engine's member of the same name for the host's cgroup version, with Docker's omissions
// and nulls; a Reading read without detail fills only the counters telemetry needs (see
// Reader.Read).
type Reading struct {
	// Read is when the counters were read.
	Read time.Time `json:"-"`
	// Detail is true when the Reading was read with detail: every member below is filled.
	Detail bool `json:"-"`
	// CPU is cpu_stats.
	CPU CPUStats `json:"cpu_stats"`
	// Memory is memory_stats.
	Memory MemoryStats `json:"memory_stats"`
	// Blkio is blkio_stats.
	Blkio BlkioStats `json:"blkio_stats"`
	// Pids is pids_stats.
	Pids PidsStats `json:"pids_stats"`
	// Networks is networks: each interface of the container's network namespace but "lo" and
	// those left out; nil when the Handle reads no networks.
	Networks map[string]dockerclient.NetworkStats `json:"networks,omitempty"`
}

// CPUStats is Docker's cpu_stats (and precpu_stats).
type CPUStats struct {
	// CPUUsage is the cgroup's CPU time.
	CPUUsage CPUUsage `json:"cpu_usage"`
	// SystemUsage is the host's CPU time in nanoseconds, from /proc/stat (read with detail).
	SystemUsage uint64 `json:"system_cpu_usage,omitempty"`
	// OnlineCPUs is the number of CPUs /proc/stat lists (read with detail).
	OnlineCPUs uint32 `json:"online_cpus,omitempty"`
	// ThrottlingData is the CFS bandwidth control's counts (read with detail).
	ThrottlingData ThrottlingData `json:"throttling_data"`
}

// CPUUsage is Docker's cpu_usage, in nanoseconds.
type CPUUsage struct {
	// TotalUsage is the cgroup's CPU time.
	TotalUsage uint64 `json:"total_usage"`
	// PercpuUsage is the CPU time per possible CPU (cgroup v1 only; read with detail).
	PercpuUsage []uint64 `json:"percpu_usage,omitempty"`
	// UsageInKernelmode is the time in kernel mode (read with detail).
	UsageInKernelmode uint64 `json:"usage_in_kernelmode"`
	// UsageInUsermode is the time in user mode (read with detail).
	UsageInUsermode uint64 `json:"usage_in_usermode"`
}

// ThrottlingData is Docker's throttling_data.
type ThrottlingData struct {
	// Periods is the number of enforcement periods that have elapsed.
	Periods uint64 `json:"periods"`
	// ThrottledPeriods is the number of those in which the cgroup was throttled.
	ThrottledPeriods uint64 `json:"throttled_periods"`
	// ThrottledTime is the total time throttled, in nanoseconds.
	ThrottledTime uint64 `json:"throttled_time"`
}

// MemoryStats is Docker's memory_stats, in bytes.
type MemoryStats struct {
	// Usage is the memory charged to the cgroup, page cache included (memory.usage_in_bytes,
	// memory.current).
	Usage uint64 `json:"usage,omitempty"`
	// MaxUsage is the highest Usage recorded (cgroup v1 only; read with detail).
	MaxUsage uint64 `json:"max_usage,omitempty"`
	// Stats are the memory.stat counters Docker passes on, each key always present (read with
	// detail).
	Stats map[string]uint64 `json:"stats,omitempty"`
	// Failcnt is how often the limit was hit (v1 memory.failcnt, v2 memory.events oom; read with
	// detail).
	Failcnt uint64 `json:"failcnt,omitempty"`
	// Limit is the cgroup's limit, or the host's memory when it has none (read with detail).
	Limit uint64 `json:"limit,omitempty"`
	// Cache is memory.stat's "cache" on cgroup v1, the page cache the ECS agent subtracts from
	// Usage; 0 on cgroup v2. It is Stats["cache"], read without detail too.
	Cache uint64 `json:"-"`
}

// BlkioStats is Docker's blkio_stats. On cgroup v1 every list is [] when empty; on cgroup v2 only
// IoServiceBytesRecursive is filled (null without entries) and the others are null.
type BlkioStats struct {
	// IoServiceBytesRecursive is the bytes transferred per device and operation.
	IoServiceBytesRecursive []BlkioStatEntry `json:"io_service_bytes_recursive"`
	// IoServicedRecursive is the I/O operations per device and operation (v1; read with detail).
	IoServicedRecursive []BlkioStatEntry `json:"io_serviced_recursive"`
	// IoQueuedRecursive is the CFQ scheduler's queued operations (v1; read with detail).
	IoQueuedRecursive []BlkioStatEntry `json:"io_queue_recursive"`
	// IoServiceTimeRecursive is the CFQ scheduler's service time (v1; read with detail).
	IoServiceTimeRecursive []BlkioStatEntry `json:"io_service_time_recursive"`
	// IoWaitTimeRecursive is the CFQ scheduler's wait time (v1; read with detail).
	IoWaitTimeRecursive []BlkioStatEntry `json:"io_wait_time_recursive"`
	// IoMergedRecursive is the CFQ scheduler's merged operations (v1; read with detail).
	IoMergedRecursive []BlkioStatEntry `json:"io_merged_recursive"`
	// IoTimeRecursive is the CFQ scheduler's device time (v1; read with detail).
	IoTimeRecursive []BlkioStatEntry `json:"io_time_recursive"`
	// SectorsRecursive is the CFQ scheduler's sectors transferred (v1; read with detail).
	SectorsRecursive []BlkioStatEntry `json:"sectors_recursive"`
}

// BlkioStatEntry is one device's counter for one operation.
type BlkioStatEntry struct {
	// Major and Minor are the device's numbers.
	Major uint64 `json:"major"`
	Minor uint64 `json:"minor"`
	// Op is the operation: "Read", "Write", "Sync", "Async", "Discard" on v1, "read" or "write" on
	// v2.
	Op string `json:"op"`
	// Value is the count.
	Value uint64 `json:"value"`
}

// PidsStats is Docker's pids_stats (read with detail).
type PidsStats struct {
	// Current is the number of tasks in the cgroup.
	Current uint64 `json:"current,omitempty"`
	// Limit is pids.max: 0 (left out) for no limit on cgroup v1, 2^64-1 on cgroup v2.
	Limit uint64 `json:"limit,omitempty"`
}

// v1MemoryKeys are the memory.stat keys Docker passes on with cgroup v1, sorted; read-only.
var v1MemoryKeys = [...]string{
	"active_anon", "active_file", "cache", "dirty", "hierarchical_memory_limit",
	"hierarchical_memsw_limit", "inactive_anon", "inactive_file", "mapped_file", "pgfault",
	"pgmajfault", "pgpgin", "pgpgout", "rss", "rss_huge", "total_active_anon", "total_active_file",
	"total_cache", "total_dirty", "total_inactive_anon", "total_inactive_file", "total_mapped_file",
	"total_pgfault", "total_pgmajfault", "total_pgpgin", "total_pgpgout", "total_rss",
	"total_rss_huge", "total_unevictable", "total_writeback", "unevictable", "writeback",
}

// v2MemoryKeys are the memory.stat keys Docker passes on with cgroup v2, sorted; read-only.
var v2MemoryKeys = [...]string{
	"active_anon", "active_file", "anon", "anon_thp", "file", "file_dirty", "file_mapped",
	"file_writeback", "inactive_anon", "inactive_file", "kernel_stack", "pgactivate",
	"pgdeactivate", "pgfault", "pglazyfree", "pglazyfreed", "pgmajfault", "pgrefill", "pgscan",
	"pgsteal", "shmem", "slab", "slab_reclaimable", "slab_unreclaimable", "sock",
	"thp_collapse_alloc", "thp_fault_alloc", "unevictable", "workingset_activate",
	"workingset_nodereclaim", "workingset_refault",
}

// keyIndex returns the index of key in the sorted keys, or -1.
func keyIndex(keys []string, key []byte) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch k := keys[m]; {
		case k == string(key):
			return m
		case k < string(key):
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

package kernelstats

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// dockerTime marshals a time as the Engine does (RFC 3339 with nanoseconds, in UTC); unlike
// time.Time's MarshalJSON it cannot fail.
type dockerTime time.Time

// MarshalJSON returns the time as a JSON string.
func (t dockerTime) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(time.RFC3339Nano)+2)
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// dockerStats is the Engine's stats object (moby api/types/container.StatsResponse), members in
// its order.
type dockerStats struct {
	Name         string                               `json:"name,omitempty"`
	ID           string                               `json:"id,omitempty"`
	Read         dockerTime                           `json:"read"`
	PreRead      dockerTime                           `json:"preread"`
	PidsStats    PidsStats                            `json:"pids_stats"`
	BlkioStats   BlkioStats                           `json:"blkio_stats"`
	NumProcs     uint32                               `json:"num_procs"`
	StorageStats struct{}                             `json:"storage_stats"`
	CPUStats     CPUStats                             `json:"cpu_stats"`
	PreCPUStats  CPUStats                             `json:"precpu_stats"`
	MemoryStats  MemoryStats                          `json:"memory_stats"`
	Networks     map[string]dockerclient.NetworkStats `json:"networks,omitempty"`
}

// DockerJSON returns Docker's complete stats object of container id named name (without its
// leading "/"): name ("/"+name), id, read, preread, pids_stats, blkio_stats, num_procs (0),
// storage_stats ({}), cpu_stats, precpu_stats, memory_stats, networks — the members and order of
// Docker Engine 28 — from cur and the sample before it, pre. pre nil is a stream's first sample,
// whose precpu_stats and preread are Docker's zero values. cur and pre are Docker's complete
// counters when they were read with detail.
func DockerJSON(id, name string, cur Reading, pre *Reading) []byte {
	s := dockerStats{Name: "/" + name, ID: id, Read: dockerTime(cur.Read), PidsStats: cur.Pids,
		BlkioStats: cur.Blkio, CPUStats: cur.CPU, MemoryStats: cur.Memory, Networks: cur.Networks}
	if pre != nil {
		s.PreRead, s.PreCPUStats = dockerTime(pre.Read), pre.CPU
	}
	// The members are numbers, strings, slices and maps with string keys, and dockerTime's
	// MarshalJSON never fails, so Marshal cannot fail.
	b, _ := json.Marshal(s)
	return b
}

// Sample returns cur (and the sample before it, pre; nil for none) in the decoded form the rest of
// Berth uses, with every counter filled. The sample shares cur's Networks map.
func Sample(cur Reading, pre *Reading) dockerclient.StatsSample {
	s := dockerclient.StatsSample{Read: cur.Read, CPUTotal: time.Duration(cur.CPU.CPUUsage.TotalUsage),
		MemoryUsage: cur.Memory.Usage, MemoryCache: cur.Memory.Cache, Networks: cur.Networks}
	if pre != nil {
		s.PreRead, s.PreCPUTotal = pre.Read, time.Duration(pre.CPU.CPUUsage.TotalUsage)
	}
	for _, e := range cur.Blkio.IoServiceBytesRecursive {
		switch {
		case strings.EqualFold(e.Op, "read"):
			s.StorageRead += e.Value
		case strings.EqualFold(e.Op, "write"):
			s.StorageWrite += e.Value
		}
	}
	return s
}

package dockerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrNotRunning: the container is not running (it stopped, or never started), so the Engine has no
// stats for it. An errdefs.ErrFailedPrecondition; not retried.
var ErrNotRunning = errdefs.New(errdefs.ErrFailedPrecondition, "container not running")

// StatsSample is one stats object of a container, as the Engine sent it, with the counters Berth
// reads decoded beside it, once, where the stream is read.
type StatsSample struct {
	// JSON is the object exactly as the Engine sent it (read, preread, pids_stats, blkio_stats,
	// num_procs, storage_stats, cpu_stats, precpu_stats, memory_stats, name, id, networks). It is
	// the caller's: nothing else refers to it.
	JSON json.RawMessage
	// Read is when the Engine read the sample ("read"); PreRead the previous sample's ("preread"),
	// zero on a stream's first.
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

// ContainerStats opens the Engine's stats stream of container id (GET /containers/{id}/stats?stream=1)
// and calls fn with each sample, in order, on the calling goroutine; the Engine sends one about every
// second, the first with an empty precpu_stats. It never returns nil. It returns:
//   - a *NotFoundError (ErrNotFound) when the container does not exist;
//   - an error matching ErrNotRunning once the container is not running (the Engine then sends empty
//     samples, which fn does not see);
//   - ctx's error once ctx is done, and fn's error when fn returns one;
//   - a *TimeoutError when the Engine sends nothing for Timeouts.Stats;
//   - otherwise a retriable error: one matching ErrConnection when the Engine could not be reached or
//     the stream failed or ended (the Engine ends it when the container is removed, or when it
//     stops), or the Engine's answer (a *docker.Error) when it refused the request.
func (c *Client) ContainerStats(ctx context.Context, id string, fn func(StatsSample) error) error {
	limit := c.timeouts.Stats
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One watchdog bounds the wait for the headers and then every silence between two samples.
	watchdog := time.AfterFunc(limit, func() { cancel(&TimeoutError{Op: "container stats stream", Limit: limit}) })
	defer watchdog.Stop()
	resp, err := c.rawGet(sctx, "/containers/"+url.PathEscape(id)+"/stats?stream=1")
	if err != nil {
		return statsError(sctx, id, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		s, err := decodeSample(dec)
		if err != nil {
			if sctx.Err() != nil {
				return fmt.Errorf("stats of container %q: %w", id, context.Cause(sctx))
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("stats of container %q: the engine ended the stream: %w", id, ErrConnection)
			}
			return fmt.Errorf("stats of container %q: %w: %w", id, ErrConnection, err)
		}
		watchdog.Reset(limit)
		if s.Read.IsZero() {
			return fmt.Errorf("stats of container %q: %w", id, ErrNotRunning)
		}
		if err := fn(s); err != nil {
			return err
		}
	}
}

// decodeSample reads the next stats object from dec.
func decodeSample(dec *json.Decoder) (StatsSample, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return StatsSample{}, err
	}
	return ParseStats(raw)
}

// ParseStats decodes the counters of one Docker stats object; the sample keeps raw as its JSON.
func ParseStats(raw json.RawMessage) (StatsSample, error) {
	type cpu struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"` // ns
		} `json:"cpu_usage"`
	}
	var f struct {
		Read        time.Time `json:"read"`
		PreRead     time.Time `json:"preread"`
		CPUStats    cpu       `json:"cpu_stats"`
		PreCPUStats cpu       `json:"precpu_stats"`
		MemoryStats struct {
			Usage uint64 `json:"usage"`
			Stats struct {
				Cache uint64 `json:"cache"`
			} `json:"stats"`
		} `json:"memory_stats"`
		Networks   map[string]NetworkStats `json:"networks"`
		BlkioStats struct {
			IOServiceBytesRecursive []struct {
				Op    string `json:"op"`
				Value uint64 `json:"value"`
			} `json:"io_service_bytes_recursive"`
		} `json:"blkio_stats"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return StatsSample{}, fmt.Errorf("decode stats: %w", err)
	}
	s := StatsSample{JSON: raw, Read: f.Read, PreRead: f.PreRead,
		CPUTotal: time.Duration(f.CPUStats.CPUUsage.TotalUsage), PreCPUTotal: time.Duration(f.PreCPUStats.CPUUsage.TotalUsage),
		MemoryUsage: f.MemoryStats.Usage, MemoryCache: f.MemoryStats.Stats.Cache, Networks: f.Networks}
	for _, e := range f.BlkioStats.IOServiceBytesRecursive {
		switch {
		case strings.EqualFold(e.Op, "read"):
			s.StorageRead += e.Value
		case strings.EqualFold(e.Op, "write"):
			s.StorageWrite += e.Value
		}
	}
	return s, nil
}

// statsError classifies a failure to get a container's stats from the Engine.
func statsError(ctx context.Context, id string, err error) error {
	var de *docker.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("stats of container %q: %w", id, context.Cause(ctx))
	case errors.As(err, &de) && de.Status == http.StatusNotFound:
		return &NotFoundError{Kind: "container", Name: id, Err: err}
	case errors.As(err, &de):
		return fmt.Errorf("stats of container %q: %w", id, err)
	}
	return fmt.Errorf("stats of container %q: %w: %w", id, ErrConnection, err)
}

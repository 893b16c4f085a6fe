package dockerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrNotRunning: the container is not running (it stopped, or never started), so the Engine has no
// stats for it. An errdefs.ErrFailedPrecondition; not retried.
var ErrNotRunning = errdefs.New(errdefs.ErrFailedPrecondition, "container not running")

// StatsSample is one stats object of a container, as the Engine sent it, with the few fields Berth
// reads decoded beside it.
type StatsSample struct {
	// JSON is the object exactly as the Engine sent it (read, preread, pids_stats, blkio_stats,
	// num_procs, storage_stats, cpu_stats, precpu_stats, memory_stats, name, id, networks). It is
	// the caller's: nothing else refers to it.
	JSON json.RawMessage
	// Read is when the Engine read the sample ("read").
	Read time.Time
	// Networks holds each interface's totals ("networks"); nil when the container has no network
	// of its own (network mode host or none).
	Networks map[string]NetworkStats
}

// NetworkStats are an interface's byte counts since the container's network was set up.
type NetworkStats struct {
	RxBytes uint64 `json:"rx_bytes"`
	TxBytes uint64 `json:"tx_bytes"`
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
	var s StatsSample
	if err := dec.Decode(&s.JSON); err != nil {
		return StatsSample{}, err
	}
	var fields struct {
		Read     time.Time               `json:"read"`
		Networks map[string]NetworkStats `json:"networks"`
	}
	if err := json.Unmarshal(s.JSON, &fields); err != nil {
		return StatsSample{}, fmt.Errorf("decode stats: %w", err)
	}
	s.Read, s.Networks = fields.Read, fields.Networks
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

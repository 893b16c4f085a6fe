package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/scripts/internal/agentproc"
)

// dockerdPID finds the Docker Engine's process on this host: the one dockerd, or, when several run,
// the one /var/run/docker.pid names.
func dockerdPID() (int, error) {
	pids, err := agentproc.Processes(func(comm string) bool { return comm == "dockerd" })
	if err != nil {
		return 0, err
	}
	if len(pids) == 1 {
		return pids[0], nil
	}
	if data, err := os.ReadFile("/var/run/docker.pid"); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && slices.Contains(pids, pid) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("cannot tell the Docker Engine's process: dockerd processes %v, and /var/run/docker.pid names none of them", pids)
}

// runningContainers returns the IDs of this run's running containers.
func (r *benchRun) runningContainers(ctx context.Context) ([]string, error) {
	list, err := r.dc.ListContainers(docker.ListContainersOptions{Context: ctx,
		Filters: map[string][]string{"label": {labelBenchRun + "=" + r.runID}, "status": {"running"}}})
	if err != nil {
		return nil, fmt.Errorf("list bench containers: %w", err)
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// otherContainers counts the running containers on the Engine that are not this run's.
func (r *benchRun) otherContainers(ctx context.Context) (int, error) {
	list, err := r.dc.ListContainers(docker.ListContainersOptions{Context: ctx})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	n := 0
	for _, c := range list {
		if c.Labels[labelBenchRun] != r.runID {
			n++
		}
	}
	return n, nil
}

// openStatsStreams opens one Docker stats stream (GET /containers/ID/stats?stream=1) per container,
// reading and discarding every sample until ctx ends, and returns once each stream has delivered its
// first sample (within 30 s). wait, never nil, waits until every stream is closed (end ctx first)
// and returns the first error a stream met before ctx ended.
func openStatsStreams(ctx context.Context, dc *docker.Client, ids []string) (wait func() error, err error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	ready := make(chan struct{}, len(ids))
	for _, id := range ids {
		samples := make(chan *docker.Stats)
		wg.Add(2)
		go func() {
			defer wg.Done()
			first := true
			for range samples {
				if first {
					ready <- struct{}{}
					first = false
				}
			}
		}()
		go func() {
			defer wg.Done()
			err := dc.Stats(docker.StatsOptions{ID: id, Stats: samples, Stream: true, Context: ctx})
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("stats stream of %.12s: %w", id, err)
			}
		}()
	}
	wait = func() error {
		wg.Wait()
		close(errs)
		return <-errs // nil once closed and empty
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for n := 0; n < len(ids); n++ {
		select {
		case <-ready:
		case err := <-errs:
			return wait, err
		case <-ctx.Done():
			return wait, context.Cause(ctx)
		case <-timeout.C:
			return wait, fmt.Errorf("%d of %d Docker stats streams delivered no sample within 30 s", len(ids)-n, len(ids))
		}
	}
	return wait, nil
}

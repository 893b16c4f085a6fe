package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"golang.org/x/sync/errgroup"
)

// teardownWave is how many tasks the bench stops, and how many containers it removes, at once. The
// Docker Engine 20.10 of Debian 12 can deadlock in libnetwork when many bridge endpoints are torn
// down together (getSvcRecords against processEndpointDelete: moby/moby#46661, fixed by
// moby/libnetwork#2679 after 20.10.24), and a deadlocked Engine answers nobody on the host until it
// is restarted. Launches stay all at once: that is what the rows time.
const teardownWave = 10

// benchRun is what the sections that drive the berth binary share: the containers of one run carry
// labelBenchRun=runID, on the agent's side and the bare side, and only those are removed.
type benchRun struct {
	dc       *docker.Client
	runID    string
	cluster  string    // the agent's cluster; bare containers are labelled with cluster+"-bare"
	family   string    // the task definition family, in the bare containers' names and labels
	timeline io.Writer // what the bench did when, beside the agent's log
}

// newRunID returns a random label value for one run.
func newRunID() string {
	var id [3]byte
	_, _ = rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

// note writes one line to the timeline, in the agent log's time format.
func (r *benchRun) note(format string, args ...any) {
	fmt.Fprintf(r.timeline, "time=%s %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), fmt.Sprintf(format, args...))
}

// bareRound creates, starts and inspects n containers at once through the Engine API, as the agent
// would make them (name shape, labels, memory, CPU shares, stop timeout, bridge network), and returns
// the time until all of them run; then removes them.
func (r *benchRun) bareRound(ctx context.Context, n int) (time.Duration, error) {
	names, arns := make([]string, n), make([]string, n)
	for i := range names {
		var b [22]byte
		_, _ = rand.Read(b[:])
		names[i] = fmt.Sprintf("ecs-%s-1-c-%s", r.family, hex.EncodeToString(b[:6]))
		arns[i] = fmt.Sprintf("arn:aws:ecs:us-east-1:000000000000:task/%s-bare/%s", r.cluster, hex.EncodeToString(b[6:]))
	}
	created, started := make([]time.Time, n), make([]time.Time, n)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for i := range n {
		g.Go(func() error {
			c, err := r.dc.CreateContainer(docker.CreateContainerOptions{Context: gctx, Name: names[i],
				Config: &docker.Config{Image: testImage, Cmd: []string{"sleep"}, StopTimeout: 5, Labels: map[string]string{
					labelBenchRun: r.runID, labelManaged: "true", labelTaskARN: arns[i], labelContainer: "c",
					labelFamily: r.family, labelRevision: "1", labelCluster: r.cluster + "-bare"}},
				HostConfig: &docker.HostConfig{Memory: 16 << 20, CPUShares: 2, NetworkMode: "bridge"}})
			if err != nil {
				return fmt.Errorf("bare create: %w", err)
			}
			created[i] = time.Now()
			if err := r.dc.StartContainerWithContext(c.ID, nil, gctx); err != nil {
				return fmt.Errorf("bare start: %w", err)
			}
			started[i] = time.Now()
			for {
				ci, err := r.dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: c.ID, Context: gctx})
				if err != nil {
					return fmt.Errorf("bare inspect: %w", err)
				}
				if ci.State.Running {
					return nil
				}
				if ci.State.Status == "exited" || ci.State.Status == "dead" {
					return fmt.Errorf("bare container %s %s", names[i], ci.State.Status)
				}
				select {
				case <-gctx.Done():
					return gctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	err := g.Wait()
	took := time.Since(start)
	if err == nil {
		since := func(t time.Time) int64 { return t.Sub(start).Milliseconds() }
		r.note("bare N=%d start=%s all_running=%s took=%s created_ms=%d/%d started_ms=%d/%d (first/last)", n, stamp(start),
			stamp(start.Add(took)), took.Round(time.Millisecond), since(slices.MinFunc(created, time.Time.Compare)),
			since(slices.MaxFunc(created, time.Time.Compare)), since(slices.MinFunc(started, time.Time.Compare)),
			since(slices.MaxFunc(started, time.Time.Compare)))
	}
	if rerr := r.removeContainers(ctx); err == nil {
		err = rerr
	}
	return took, err
}

// removeContainers removes every container of this run, teardownWave at a time, and waits until
// Docker lists none.
func (r *benchRun) removeContainers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	filter := map[string][]string{"label": {labelBenchRun + "=" + r.runID}}
	for {
		list, err := r.dc.ListContainers(docker.ListContainersOptions{All: true, Filters: filter, Context: ctx})
		if err != nil {
			return fmt.Errorf("list bench containers: %w", err)
		}
		if len(list) == 0 {
			return nil
		}
		var g errgroup.Group
		g.SetLimit(teardownWave)
		for _, c := range list {
			g.Go(func() error {
				_ = r.dc.RemoveContainer(docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true, Context: ctx})
				return nil
			})
		}
		_ = g.Wait()
		if ctx.Err() != nil {
			return fmt.Errorf("%d bench containers not removed: %w", len(list), ctx.Err())
		}
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// RestoreReport says what Restore found.
type RestoreReport struct {
	Tasks           int           // tasks handed back to the engine
	Running         int           // containers still running, adopted as they are
	ExitedWhileDown int           // containers that stopped while the agent was down
	Gone            int           // containers that no longer exist
	Orphans         int           // stopped Berth-labelled containers of no known task, removed
	UnknownRunning  int           // running Berth-labelled containers of no known task, left alone
	Took            time.Duration // from the call until every task was handed back
}

// restoreConcurrency bounds the Docker inspections Restore runs at once.
const restoreConcurrency = 32

// Restore hands the engine the tasks loaded from the state store after a restart, before any new
// task arrives. It inspects every container those tasks had (by ID, or by the name saved before a
// create whose ID was never saved), adopts the ones still running without restarting or recreating
// them, records the exit of those that stopped while the agent was down (the workers then apply the
// essential-container rule), and hands each task to a worker that finishes whatever was in flight.
// Finally, when trusted is true, it removes the stopped containers labelled as Berth's for this
// cluster that belong to no known task and stopped longer ago than the cleanup wait. A running one is
// never removed: the record that would own it may be missing, not the task. The caller passes
// trusted=false when the state may be incomplete (a new or empty store, or records that did not
// decode), and then nothing is removed. The running ones are kept as the engine's unknown containers
// (see UnknownContainers). Call it after Start, so that no Docker event during recovery is missed.
func (e *Engine) Restore(ctx context.Context, tasks []*task.Task, trusted bool) (RestoreReport, error) {
	start := e.clock.Now()
	rep := RestoreReport{Tasks: len(tasks)}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, restoreConcurrency)
	)
	for _, t := range tasks {
		for _, c := range t.Containers {
			if c.DockerID == "" && c.DockerName == "" {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				outcome := e.reinspect(ctx, c)
				mu.Lock()
				defer mu.Unlock()
				switch outcome {
				case outcomeRunning:
					rep.Running++
				case outcomeExited:
					rep.ExitedWhileDown++
				case outcomeGone:
					rep.Gone++
				}
			}()
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	// Orphans go before any worker runs: a worker may create a container at once, which the scan
	// must not mistake for one of no task.
	removed, unknown, orphanErr := e.removeOrphans(ctx, tasks, trusted)
	rep.Orphans, rep.UnknownRunning = removed, len(unknown)
	e.setUnknown(unknown)
	for _, t := range tasks {
		if err := e.add(ctx, t, false); err != nil {
			return rep, fmt.Errorf("restore task %s: %w", t.Arn, err)
		}
	}
	rep.Took = e.clock.Since(start)
	e.log.Info("recovery finished", "tasks", rep.Tasks, "running", rep.Running, "exited_while_down", rep.ExitedWhileDown,
		"gone", rep.Gone, "orphans_removed", rep.Orphans, "unknown_running", rep.UnknownRunning, "took", rep.Took.Round(time.Millisecond))
	return rep, orphanErr
}

type restoreOutcome int

const (
	outcomeUnchanged restoreOutcome = iota
	outcomeRunning
	outcomeExited
	outcomeGone
)

// reinspect brings one saved container up to date with Docker.
func (e *Engine) reinspect(ctx context.Context, c *task.Container) restoreOutcome {
	ref := c.DockerID
	if ref == "" {
		ref = c.DockerName
	}
	wasStopped := c.KnownStatus == task.ContainerStopped
	ci, err := e.docker.InspectContainer(ctx, ref)
	switch {
	case errors.Is(err, dockerclient.ErrNotFound):
		if c.DockerID == "" {
			c.DockerName = "" // the create never happened: create afresh, under a new name
			return outcomeUnchanged
		}
		if !wasStopped {
			c.KnownStatus = task.ContainerStopped
			c.Reason = "container was removed while the agent was down"
			c.FinishedAt = e.clock.Now()
		}
		return outcomeGone
	case err != nil:
		e.log.Warn("cannot inspect a container during recovery; its worker will retry", "container", c.Name, "error", err)
		return outcomeUnchanged
	}
	c.DockerID = ci.ID
	if c.KnownStatus < task.ContainerCreated {
		c.KnownStatus = task.ContainerCreated
	}
	applyInspect(c, ci, e.clock.Now())
	switch {
	case ci.State.Running:
		return outcomeRunning
	case c.KnownStatus == task.ContainerStopped && !wasStopped:
		return outcomeExited
	}
	return outcomeUnchanged
}

// removeOrphans looks at the containers labelled as Berth's for this cluster that belong to no known
// task, or that a known task does not hold (a duplicate). Running ones are left alone and logged;
// stopped ones are removed once they have been stopped for the cleanup wait, and only when trusted.
// It returns how many it removed and the running ones it left.
func (e *Engine) removeOrphans(ctx context.Context, tasks []*task.Task, trusted bool) (removed int, running []task.UnknownContainer, err error) {
	list, err := e.docker.ListContainersByLabel(ctx, map[string]string{LabelManaged: "true", LabelCluster: e.cfg.Cluster})
	if err != nil {
		return 0, nil, fmt.Errorf("list Berth's containers: %w", err)
	}
	var held set.Set[string]
	for _, t := range tasks {
		for _, c := range t.Containers {
			held.Add(c.DockerID)
			held.Add("/" + c.DockerName)
		}
	}
	for _, ctr := range list {
		owned := held.Has(ctr.ID)
		for _, name := range ctr.Names {
			owned = owned || held.Has(name)
		}
		if owned {
			continue
		}
		log := e.log.With("docker_id", shortDockerID(ctr.ID), "task", ctr.Labels[LabelTaskARN], "container", ctr.Labels[LabelContainerName])
		ci, err := e.docker.InspectContainer(ctx, ctr.ID)
		switch {
		case errors.Is(err, dockerclient.ErrNotFound):
			continue
		case err != nil:
			log.Warn("cannot inspect a container of no known task; left alone", "error", err)
			continue
		case isUp(ci.State):
			running = append(running, unknownContainer(ctr, ci))
			log.Warn("a running container of no known task is left alone; stop and remove it by hand if it is not wanted")
			continue
		case !trusted:
			log.Info("a stopped container of no known task is kept: the saved state may be incomplete")
			continue
		case e.clock.Since(ci.State.FinishedAt) < e.cfg.CleanupWait:
			continue // removed by a later agent start, once it has been stopped for the cleanup wait
		}
		err = e.docker.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: ctr.ID, RemoveVolumes: true})
		if err != nil && !errors.Is(err, dockerclient.ErrNotFound) {
			log.Warn("cannot remove a stopped container of no known task", "error", err)
			continue
		}
		removed++
		log.Info("removed a stopped container of no known task")
	}
	return removed, running, nil
}

// isUp reports whether Docker counts a container as up: running, paused or restarting.
func isUp(s docker.State) bool { return s.Running || s.Paused || s.Restarting }

// unknownContainer describes a running container of no known task from its listing and inspection.
func unknownContainer(ctr docker.APIContainers, ci *docker.Container) task.UnknownContainer {
	u := task.UnknownContainer{DockerID: ci.ID, DockerName: strings.TrimPrefix(ci.Name, "/"), TaskArn: ctr.Labels[LabelTaskARN],
		Name: ctr.Labels[LabelContainerName], Image: ctr.Image, Since: ci.State.StartedAt}
	if u.DockerName == "" && len(ctr.Names) > 0 {
		u.DockerName = strings.TrimPrefix(ctr.Names[0], "/")
	}
	if u.Image == "" && ci.Config != nil {
		u.Image = ci.Config.Image
	}
	return u
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// reasonOOM is ECS's reason for a container the kernel killed for memory.
const reasonOOM = "OutOfMemoryError: Container killed due to memory usage"

// drain runs the hooks' posted work, applies queued Docker events and, if asked, re-inspects every
// container. A container found
// exited is restarted in place when its restart policy says so (see restart.go).
func (w *worker) drain(ctx context.Context) {
	w.mu.Lock()
	events, inspect, posts := w.events, w.inspect, w.posts
	w.events, w.inspect, w.posts = nil, false, nil
	w.mu.Unlock()
	changed := len(posts) > 0
	for _, fn := range posts {
		fn(&Run{w})
	}
	for _, ev := range events {
		c := w.byDockerID(ev.ID)
		if c == nil {
			continue
		}
		switch {
		case strings.HasPrefix(ev.Action, "health_status"):
			if h := healthOf(strings.TrimSpace(strings.TrimPrefix(ev.Action, "health_status:"))); h != c.Health {
				setHealth(c, h, w.healthLog(ctx, c), w.e.clock.Now())
				w.log.Info("container health changed", "container", c.Name, "health", string(h))
				changed = true
			}
		case ev.Action == "start" && c.KnownStatus >= task.ContainerRunning && c.KnownStatus != task.ContainerStopped:
			// Berth started it and has inspected it since; only a start by someone else is news.
		case ev.Action == "die" || ev.Action == "oom" || ev.Action == "start" || ev.Action == "destroy":
			w.refreshOrRestart(ctx, c)
			changed = true
		}
	}
	if inspect {
		for _, c := range w.t.Containers {
			if c.DockerID != "" && c.KnownStatus != task.ContainerStopped {
				w.refreshOrRestart(ctx, c)
			}
		}
		changed = true
	}
	if changed {
		w.commit(ctx)
	}
}

func (w *worker) byDockerID(id string) *task.Container {
	for _, c := range w.t.Containers {
		if c.DockerID == id {
			return c
		}
	}
	return nil
}

// checkEssential stops the task when an essential container has stopped while the task should run.
func (w *worker) checkEssential() {
	if stop, _ := w.stopWanted(); stop {
		return
	}
	for _, c := range w.t.Containers {
		if c.Essential && c.KnownStatus == task.ContainerStopped {
			w.log.Info("essential container stopped", "container", c.Name, "exit_code", exitCode(c))
			w.stopTask(task.StopReasonEssentialExited)
			return
		}
	}
}

func exitCode(c *task.Container) string {
	if c.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*c.ExitCode)
}

// maxHealthOutput bounds the health check output kept, as the ECS agent keeps it.
const maxHealthOutput = 1024

// healthLog returns the runs of the container's health check Docker keeps; nil when it cannot be
// inspected now (the status change is recorded without the run's output).
func (w *worker) healthLog(ctx context.Context, c *task.Container) []docker.HealthCheck {
	ci, err := w.e.docker.InspectContainer(ctx, c.DockerID)
	if err != nil {
		return nil
	}
	return ci.State.Health.Log
}

// setHealth records a change of the container's health at now, with the output and, for
// UNHEALTHY, the exit code of the latest run in log; a status that is not a change is ignored.
func setHealth(c *task.Container, h task.HealthStatus, log []docker.HealthCheck, now time.Time) {
	if h == c.Health {
		return
	}
	c.Health, c.HealthSince, c.HealthOutput = h, now, ""
	if len(log) == 0 {
		return
	}
	last := log[len(log)-1]
	c.HealthOutput = last.Output[:min(len(last.Output), maxHealthOutput)]
	if h == task.HealthUnhealthy {
		c.HealthExitCode = last.ExitCode
	}
}

func healthOf(s string) task.HealthStatus {
	switch s {
	case "healthy":
		return task.HealthHealthy
	case "unhealthy":
		return task.HealthUnhealthy
	default:
		return task.HealthUnknown
	}
}

// refresh reads a container's state from Docker into the model.
func (w *worker) refresh(ctx context.Context, c *task.Container) {
	ci, err := w.e.docker.InspectContainer(ctx, c.DockerID)
	if err != nil {
		if errors.Is(err, dockerclient.ErrNotFound) {
			w.markStopped(c, "container was removed outside Berth")
		} else if ctx.Err() == nil {
			w.log.Warn("inspect failed", "container", c.Name, "error", err)
		}
		return
	}
	applyInspect(c, ci, w.e.clock.Now())
}

// applyInspect copies what Docker reports about a container into the model; now is when a health
// change is recorded.
func applyInspect(c *task.Container, ci *docker.Container, now time.Time) {
	if ci.Image != "" {
		c.ImageID = ci.Image
	}
	if !ci.Created.IsZero() {
		c.CreatedAt = ci.Created.UTC()
	}
	st := ci.State
	if st.Health.Status != "" && c.HealthCheck != nil {
		setHealth(c, healthOf(st.Health.Status), st.Health.Log, now)
	}
	c.Mounts = mounts(ci)
	switch {
	case st.Running || st.Paused || st.Restarting:
		// A pause container stays RUNNING until its network is set up (RESOURCES_PROVISIONED).
		c.KnownStatus = max(c.KnownStatus, task.ContainerRunning)
		if !st.StartedAt.IsZero() {
			c.StartedAt = st.StartedAt
		}
		c.NetworkBindings = bindings(ci)
		c.Networks = networks(ci)
	case !st.FinishedAt.IsZero() && !st.StartedAt.IsZero() && st.StartedAt.Year() > 1:
		code := st.ExitCode
		c.ExitCode = &code
		c.StartedAt = st.StartedAt
		c.FinishedAt = st.FinishedAt
		c.KnownStatus = task.ContainerStopped
		switch {
		case st.OOMKilled:
			c.Reason = reasonOOM
		case st.Error != "" && c.Reason == "":
			c.Reason = st.Error
		}
	}
}

// dispatch routes container events to their task's worker until ctx ends or the stream closes, and
// drops a container of no known task once it stops or is removed. After a re-subscription every
// worker re-inspects, and the containers of no known task are inspected again, since events may have
// been missed.
func (e *Engine) dispatch(ctx context.Context, events <-chan dockerclient.Event) {
	for {
		var ev dockerclient.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-events:
		}
		if !ok {
			return
		}
		if ev.Type == dockerclient.EventTypeBerth && ev.Action == dockerclient.ActionResubscribed {
			e.log.Info("Docker event stream re-subscribed; re-inspecting every task's containers")
			e.reinspectAll()
			e.goTracked(func() { e.recheckUnknown(ctx) }) // Docker calls: not on the event path
			continue
		}
		e.mu.Lock()
		w, ok := e.byID[ev.ID]
		e.mu.Unlock()
		if ok {
			w.event(ev)
		} else if why, gone := unknownGone(ev); gone {
			e.dropUnknown(ev.ID, why)
		}
	}
}

func (e *Engine) reinspectAll() {
	e.mu.Lock()
	workers := e.listedLocked()
	e.mu.Unlock()
	for _, w := range workers {
		w.requestInspect()
	}
}

// reconcileLoop makes every worker re-inspect its containers periodically, and inspects the containers
// of no known task, to catch what events missed.
func (e *Engine) reconcileLoop(ctx context.Context) {
	t := e.clock.NewTicker(e.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			e.reinspectAll()
			e.recheckUnknown(ctx)
		}
	}
}

// mounts reads the container's mounts as Docker reports them.
func mounts(ci *docker.Container) []task.Mount {
	var out []task.Mount
	for _, m := range ci.Mounts {
		out = append(out, task.Mount{Name: m.Name, Source: m.Source, Destination: m.Destination})
	}
	return out
}

package engine

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// cleanupNow makes a stopped task skip the rest of its cleanup wait.
func (w *worker) cleanupNow() {
	w.mu.Lock()
	w.cleanEarly = true
	timer := w.cleanTimer
	w.mu.Unlock()
	if timer != nil {
		w.log.Info("cleaning up a stopped task early to free disk space")
		timer.Reset(0) // the timer's function runs the cleanup once, whenever it fires
	}
}

// scheduleCleanup arranges the cleanup of the stopped task after the cleanup wait, counted from when
// it stopped (which may have been before an agent restart), and lets the worker's goroutine end: a
// stopped task waits as a timer, not as a goroutine. Late Docker events about it are not applied.
func (w *worker) scheduleCleanup(ctx context.Context) {
	wait := w.t.StoppedAt.Add(w.e.cleanupWait(w.t.Arn)).Sub(w.e.clock.Now())
	w.mu.Lock()
	w.snap = w.t // nothing changes the task any more: the snapshot need not be a second copy
	w.cleanScheduled = true
	w.events = nil
	early := w.cleanEarly
	if !early {
		w.cleanTimer = w.e.clock.AfterFunc(wait, func() { w.startCleanup(ctx) })
	}
	w.mu.Unlock()
	if early {
		w.log.Info("cleaning up a stopped task early to free disk space")
		w.startCleanup(ctx)
	}
}

// startCleanup runs the cleanup once, in a goroutine of the engine, unless the engine is stopping
// (the next agent cleans the task up after restoring it).
func (w *worker) startCleanup(ctx context.Context) {
	w.cleanOnce.Do(func() { w.e.goTracked(func() { w.cleanup(ctx) }) })
}

// stopAll stops the task's containers in reverse dependency order (dependents first, the pause
// container last), each with SIGTERM (or the image's STOPSIGNAL) then SIGKILL after its stop timeout.
func (w *worker) stopAll(ctx context.Context) {
	_, reason := w.stopWanted()
	if w.t.StoppedReason == "" {
		w.t.StoppedReason = reason
	}
	w.t.DesiredStatus = task.TaskStopped
	w.t.PendingReason = ""
	for _, c := range w.t.Containers {
		c.DesiredStatus = task.ContainerStopped
	}
	w.commit(ctx)
	w.e.probe(ProbeBeforeStop, w.t)
	for {
		w.drain(ctx)
		unanswered := false // a look-up by name the Engine did not answer: asked again after a wait
		for _, c := range w.t.Containers {
			if c.KnownStatus == task.ContainerStopped || c.DockerID != "" {
				continue
			}
			if c.DockerName == "" {
				w.markStopped(c, w.t.StoppedReason) // never created: nothing to stop
				continue
			}
			// A saved name without an ID: the agent may have crashed right after Docker created it, or
			// a create's answer was lost. Only Docker's word that it has no such container marks it
			// stopped: an orphan is never left behind.
			found, err := w.adopt(ctx, c)
			switch {
			case err != nil:
				unanswered = true
				if ctx.Err() == nil {
					w.log.Warn("cannot look a container up by its name; will retry", "container", c.Name, "error", err)
				}
			case !found:
				w.markStopped(c, w.t.StoppedReason)
			}
		}
		var running, ready []*task.Container
		for _, c := range w.t.Containers {
			if c.KnownStatus == task.ContainerStopped || c.DockerID == "" {
				continue
			}
			running = append(running, c)
			if len(w.t.StopBlockers(c)) == 0 {
				ready = append(ready, c)
			}
		}
		if ctx.Err() != nil || len(running) == 0 && !unanswered {
			break
		}
		if len(running) == 0 {
			select {
			case <-ctx.Done():
			case <-w.e.clock.After(w.e.retryDelay):
			}
			continue
		}
		if len(ready) == 0 {
			// Only a dependsOn cycle blocks every running container; stop them all rather than spin.
			ready = running
		}
		for _, h := range w.hooks.stop {
			h.BeforeStop(ctx, &Run{w}, ready)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(ready))
		for i, c := range ready {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = w.e.docker.StopContainer(ctx, c.DockerID, effectiveStopTimeout(c, w.e.cfg))
			}()
		}
		wg.Wait()
		w.e.probe(ProbeAfterStop, w.t)
		failed := false
		for i, c := range ready {
			if errs[i] != nil && !errors.Is(errs[i], dockerclient.ErrNotFound) {
				if ctx.Err() == nil {
					w.log.Warn("stop failed; will retry", "container", c.Name, "error", errs[i])
				}
				failed = true
				continue
			}
			w.refresh(ctx, c)
			if c.KnownStatus != task.ContainerStopped {
				w.markStopped(c, "")
			}
			if c.Reason == "" {
				c.Reason = w.t.StoppedReason
			}
			w.log.Info("container stopped", "container", c.Name, "exit_code", exitCode(c))
		}
		w.commit(ctx)
		if failed {
			select {
			case <-ctx.Done():
			case <-w.e.clock.After(w.e.retryDelay):
			}
		}
	}
	if ctx.Err() == nil {
		for _, h := range w.hooks.stop {
			h.Stopped(ctx, &Run{w})
		}
	}
	w.commit(ctx)
}

// cleanup removes the task's containers and task-scoped volumes and forgets the task.
func (w *worker) cleanup(ctx context.Context) {
	unreachable := false
	for _, c := range w.t.Containers {
		if c.DockerID == "" {
			continue
		}
		err := w.e.docker.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: c.DockerID, RemoveVolumes: true, Force: true})
		if err != nil && !errors.Is(err, dockerclient.ErrNotFound) {
			unreachable = unreachable || errors.Is(err, dockerclient.ErrConnection)
			w.log.Warn("removing container failed", "container", c.Name, "error", err)
		}
	}
	if unreachable && ctx.Err() == nil {
		// The Docker Engine is away (restarting): forgetting the task now would leave its containers
		// until the next agent start. The whole cleanup runs again; removed containers are no error.
		w.cleanupRetries++
		delay := min(w.e.retryDelay<<min(w.cleanupRetries, 6), time.Minute)
		w.log.Warn("the Docker Engine is unreachable; the task's cleanup is retried", "retry_in", delay)
		w.e.clock.AfterFunc(delay, func() { w.e.goTracked(func() { w.cleanup(ctx) }) })
		return
	}
	for _, v := range w.t.Volumes {
		if v.Host != nil && v.Host.SourcePath != "" || v.Docker != nil && v.Docker.Scope == "shared" {
			continue
		}
		if err := w.e.docker.RemoveVolume(ctx, volumeName(w.t, v)); err != nil && !errors.Is(err, dockerclient.ErrNotFound) {
			w.log.Warn("removing task volume failed", "volume", v.Name, "error", err)
		}
	}
	for _, h := range w.hooks.cleanup { // before the task is forgotten: a crash here leaves it to clean up again
		h.Cleanup(ctx, &Run{w})
	}
	if err := w.e.store.DeleteTask(ctx, w.arn); err != nil {
		w.log.Warn("deleting task state failed", "error", err)
	}
	w.e.forget(w)
	w.log.Info("task cleaned up")
}

// shortDockerID returns a Docker container ID as Docker shows it: its first 12 characters. (A
// credentials ID is shortened by taskcreds.ShortID, the one rule for what of it may be logged.)
func shortDockerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// cleanupWait is how long the stopped task arn is kept: CleanupWait plus its share of CleanupJitter,
// in [0, CleanupJitter), from a hash of the ARN.
func (e *Engine) cleanupWait(arn string) time.Duration {
	if e.cfg.CleanupJitter <= 0 {
		return e.cfg.CleanupWait
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(arn))
	return e.cfg.CleanupWait + time.Duration(h.Sum64()%uint64(e.cfg.CleanupJitter))
}

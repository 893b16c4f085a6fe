package execagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// target is the container a watcher looks after, as it was when the watcher started.
type target struct {
	container string // the container's name in the task
	dockerID  string
	id        string // the managed agent's ID: its directory in the container
	execID    string // the exec of an agent started before (an agent restart), or ""
	restarts  int
}

// watch starts the agent in its container (unless the exec it was given still runs), then looks at
// its process every CheckInterval and starts it again when it has ended. Attempts in a row are
// bounded by MaxAttempts, with a backoff between them; an attempt counts as good once a check finds
// the process running. It returns when ctx ends, stop is closed, or the agent is STOPPED. What it
// finds it posts to the task.
func (f *Feature) watch(ctx context.Context, stop <-chan struct{}, post func(func(*task.Task)) bool, tg target, log *logger.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := f.cfg.NewBackoff()
	failures, execID, restart := 0, tg.execID, false
	if execID != "" {
		st, err := f.docker.ExecStatus(ctx, execID)
		if err == nil && st.Running {
			log.Info("ECS Exec's managed agent still runs", "exec_id", execID)
		} else {
			execID, restart = "", true
		}
	}
	for {
		if execID == "" {
			id, err := f.start(ctx, tg)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				log.Warn("starting ECS Exec's managed agent failed", "attempt", failures, "error", err)
				if failures >= f.cfg.MaxAttempts {
					post(update(tg.container, func(ma *task.ManagedAgent) { ma.Status, ma.Reason = task.ManagedAgentStopped, err.Error() }))
					return
				}
				if !f.sleep(ctx, backoff.Duration()) {
					return
				}
				continue
			}
			execID = id
			now, reason := f.cfg.Clock.Now(), "ExecuteCommandAgent started"
			if restart {
				tg.restarts++
				reason = "ExecuteCommandAgent restarted"
			}
			restarts := tg.restarts
			log.Info("ECS Exec's managed agent started", "exec_id", id, "restarts", restarts)
			post(update(tg.container, func(ma *task.ManagedAgent) {
				ma.Status, ma.Reason, ma.LastStartedAt, ma.ExecID, ma.Restarts = task.ManagedAgentRunning, reason, now, id, restarts
			}))
		}
		if !f.sleep(ctx, f.cfg.CheckInterval) {
			return
		}
		st, err := f.docker.ExecStatus(ctx, execID)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && st.Running:
			failures = 0
			backoff.Reset()
			continue
		case err != nil && !errors.Is(err, dockerclient.ErrNotFound):
			log.Debug("cannot look at ECS Exec's managed agent; asking again later", "error", err)
			continue
		}
		failures++
		ended := "its process ended"
		if err == nil {
			ended = fmt.Sprintf("its process exited with exit code %d", st.ExitCode)
		}
		if failures >= f.cfg.MaxAttempts {
			log.Warn("ECS Exec's managed agent ended again; not restarted", "attempts", failures, "why", ended)
			post(update(tg.container, func(ma *task.ManagedAgent) {
				ma.Status = task.ManagedAgentStopped
				ma.Reason = fmt.Sprintf("ExecuteCommandAgent cannot be restarted: %s, %d times in a row", ended, failures)
			}))
			return
		}
		log.Warn("ECS Exec's managed agent ended; restarting it", "why", ended)
		post(update(tg.container, func(ma *task.ManagedAgent) {
			ma.Status, ma.Reason = task.ManagedAgentPending, "ExecuteCommandAgent restarting: "+ended
		}))
		execID, restart = "", true
		if !f.sleep(ctx, backoff.Duration()) {
			return
		}
	}
}

// start runs the agent in the container with a detached exec as root and checks that its process
// runs, as the ECS agent does (doStartAgent).
func (f *Feature) start(ctx context.Context, tg target) (string, error) {
	id, err := f.docker.ExecDetached(ctx, tg.dockerID, execUser, agentCommand(tg.id))
	if err != nil {
		return "", fmt.Errorf("unable to start ExecuteCommandAgent [create]: %w", err)
	}
	st, err := f.docker.ExecStatus(ctx, id)
	if err != nil {
		return "", fmt.Errorf("unable to start ExecuteCommandAgent [inspect]: %w", err)
	}
	if !st.Running {
		return "", fmt.Errorf("ExecuteCommandAgent process exited with exit code: %d", st.ExitCode)
	}
	return id, nil
}

// sleep waits d; false when ctx ended first.
func (f *Feature) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-f.cfg.Clock.After(d):
		return true
	}
}

// update returns a change of the container's managed agent, ignored once the agent is STOPPED (that
// is final) or its container has stopped.
func update(container string, fn func(ma *task.ManagedAgent)) func(*task.Task) {
	return func(t *task.Task) {
		c := t.Container(container)
		if c == nil || c.KnownStatus == task.ContainerStopped {
			return
		}
		if ma := c.ManagedAgent(task.ExecuteCommandAgent); ma != nil && ma.Status != task.ManagedAgentStopped {
			fn(ma)
		}
	}
}

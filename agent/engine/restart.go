package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/berth-agent/berth/agent/task"
)

// A container's restartPolicy, as the ECS agent applies it: when a container whose policy is enabled
// exits while its task should run, the agent starts the same Docker container again, unless its exit
// code is ignored or it ran for less than the policy's AttemptPeriod since it last started (its first
// start, then each restart). The restart is counted and saved before Docker is asked to start it, and
// the container stays RUNNING throughout: neither it nor its task is reported STOPPED. A restart that
// Docker refuses lets the exit stand, as if there were no policy.
//
//	RUNNING --exit--> restart due? --yes--> RestartCount+1, saved --> docker start --ok--> RUNNING
//	                       |no                                              |error
//	                       v                                                v
//	                    STOPPED <-------------------------------------------+

// restartDue says whether c, just found exited at now, is to be restarted in place, and if not, why.
// taskStopping is whether the task's desired status is STOPPED.
func restartDue(c *task.Container, taskStopping bool, now time.Time) (bool, string) {
	rp := c.RestartPolicy
	switch {
	case rp == nil || !rp.Enabled:
		return false, "no restart policy"
	case taskStopping || c.DesiredStatus == task.ContainerStopped:
		return false, "the task is stopping"
	case c.ExitCode == nil:
		return false, "no exit code"
	case slices.Contains(rp.IgnoredExitCodes, *c.ExitCode):
		return false, fmt.Sprintf("exit code %d is ignored", *c.ExitCode)
	}
	since := c.StartedAt
	if !c.RestartedAt.IsZero() {
		since = c.RestartedAt
	}
	if ran := now.Sub(since); ran < rp.AttemptPeriod {
		return false, fmt.Sprintf("it ran for %s, less than the restart attempt period of %s", ran.Round(time.Second), rp.AttemptPeriod)
	}
	return true, ""
}

// refreshOrRestart reads c's state from Docker and, when that finds that it has just exited and its
// restart policy says so, restarts it in place, so that the exit is never recorded as a stop.
func (w *worker) refreshOrRestart(ctx context.Context, c *task.Container) {
	before := *c
	w.refresh(ctx, c)
	if before.KnownStatus == task.ContainerStopped || c.KnownStatus != task.ContainerStopped {
		return
	}
	w.restart(ctx, c, before)
}

// restart restarts the exited container c in place if its restart policy says so; before is c as it
// was while it ran. Otherwise, or when Docker refuses the start, c stays as it is: stopped.
func (w *worker) restart(ctx context.Context, c *task.Container, before task.Container) {
	stopping, _ := w.stopWanted()
	due, why := restartDue(c, stopping || w.essentialStopped(c), w.e.clock.Now())
	if !due {
		if c.RestartPolicy != nil && c.RestartPolicy.Enabled {
			w.log.Info("container exited and is not restarted", "container", c.Name, "exit_code", exitCode(c), "reason", why)
		}
		return
	}
	exited := *c
	// The model keeps the run it had (RUNNING, no exit code, no reason) and counts the restart; that is
	// saved before the start, so an agent that dies in between does not count it twice.
	*c = before
	c.RestartCount++
	c.RestartedAt = w.e.clock.Now().UTC()
	w.commit(ctx)
	if stop, _ := w.stopWanted(); stop || ctx.Err() != nil {
		return // the stop reads the exit back from Docker
	}
	if err := w.startDocker(ctx, c, exited.StartedAt); err != nil {
		if ctx.Err() != nil {
			return
		}
		count, at := c.RestartCount, c.RestartedAt
		*c = exited
		c.RestartCount, c.RestartedAt = count, at
		w.log.Warn("restarting the container failed; its exit stands", "container", c.Name, "exit_code", exitCode(&exited), "error", err)
		return
	}
	w.log.Info("container restarted", "container", c.Name, "docker_id", shortDockerID(c.DockerID), "exit_code", exitCode(&exited), "restart_count", c.RestartCount)
	w.refresh(ctx, c)
}

// essentialStopped reports whether an essential container of the task other than c has stopped: the
// task is about to stop, so c is not restarted.
func (w *worker) essentialStopped(c *task.Container) bool {
	for _, o := range w.t.Containers {
		if o != c && o.Essential && o.KnownStatus == task.ContainerStopped {
			return true
		}
	}
	return false
}

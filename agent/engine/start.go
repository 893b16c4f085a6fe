package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// prepare acquires host resources and pulls every image. It returns false when the task must not
// start: a stop arrived, resources can never fit, or a pull failed.
func (w *worker) prepare(ctx context.Context) bool {
	if stop, _ := w.stopWanted(); stop {
		return false
	}
	if w.refused != nil {
		w.stopTask(w.refused.Error())
		return false
	}
	if (w.t.PidMode == "task" || w.t.IpcMode == "task") && w.pause() == nil {
		w.stopTask("pidMode and ipcMode task need the pause image (berth/pause:latest, loaded from ECS_PAUSE_IMAGE_TARBALL), which this agent does not have")
		return false
	}
	if err := w.e.Admit(w.t); err != nil { // a restored task: AddTask refuses new ones
		w.stopTask(err.Error())
		return false
	}
	n, err := needOf(w.t)
	if err != nil {
		w.stopTask(fmt.Sprintf("ResourceError: %v", err))
		return false
	}
	if w.t.NetworkMode == task.NetworkAWSVPC && w.e.cfg.AWSVPC.BridgeIPv4 != nil {
		n.exclusive = staticBridgeAddress
	}
	err = w.e.resources.Acquire(ctx, w.arn, n, func(reason string) {
		w.t.PendingReason = reason
		w.log.Info("task waits", "reason", reason)
		w.commit(ctx)
	})
	if err != nil {
		if ctx.Err() == nil {
			w.stopTask(fmt.Sprintf("ResourceError: %v", err))
		}
		return false
	}
	if w.t.PendingReason != "" {
		w.t.PendingReason = ""
		w.commit(ctx)
	}
	return w.pullAll(ctx)
}

// pullAll pulls the images of every container not yet pulled, in parallel. A failed pull stops the
// container with the classified error and the task with a reason naming the image.
func (w *worker) pullAll(ctx context.Context) bool {
	type result struct {
		c      *task.Container
		err    error
		res    dockerclient.PullResult
		digest string
	}
	var pending []*task.Container
	for _, c := range w.t.Containers {
		if c.KnownStatus == task.ContainerNone && !c.Pause {
			pending = append(pending, c)
		}
	}
	if len(pending) > 0 && w.t.PullStartedAt.IsZero() {
		w.t.PullStartedAt = w.e.clock.Now().UTC()
	}
	results := make(chan result, len(pending))
	for _, c := range pending {
		auth := w.e.pullAuth(w.t, c)
		go func(c *task.Container, image string) {
			res, err := w.e.puller.Pull(ctx, image, auth)
			var digest string
			if err == nil {
				var derr error
				if digest, derr = w.e.imageDigest(ctx, image); derr != nil && ctx.Err() == nil {
					w.log.Warn("the image's digest is unknown; state changes will not carry it", "container", c.Name, "image", image, "error", derr)
				}
			}
			results <- result{c: c, err: err, res: res, digest: digest}
		}(c, c.Image)
	}
	ok := true
	for range pending {
		r := <-results
		if r.err != nil {
			ok = false
			if ctx.Err() != nil {
				continue
			}
			reason := fmt.Sprintf("CannotPullContainerError: %v", r.err)
			w.markStopped(r.c, reason)
			w.stopTask(fmt.Sprintf("container %s: %s", r.c.Name, reason))
			continue
		}
		r.c.KnownStatus = task.ContainerPulled
		r.c.ImageDigest = r.digest
		w.log.Info("image ready", "container", r.c.Name, "image", r.c.Image, "digest", r.digest, "cached", r.res.Cached, "attempts", len(r.res.Attempts))
	}
	if len(pending) > 0 {
		w.t.PullStoppedAt = w.e.clock.Now().UTC()
	}
	if !ok {
		w.commit(ctx)
	}
	// A successful pull is saved with the next change (a container's name, before its create): an
	// agent that dies before that pulls again, from the cache.
	return ok
}

// supervise starts containers as their dependencies allow and watches them until the task should
// stop or ctx ends.
func (w *worker) supervise(ctx, startCtx context.Context) {
	for {
		w.drain(ctx)
		if stop, _ := w.stopWanted(); stop || ctx.Err() != nil {
			return
		}
		next := w.startReady(startCtx)
		if stop, _ := w.stopWanted(); stop {
			return
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = w.e.clock.After(next.Sub(w.e.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer:
		}
	}
}

// startReady creates and starts every container whose dependencies allow it, fails those whose
// dependencies never will or whose wait ran out, and returns the earliest wait deadline (zero if none).
func (w *worker) startReady(ctx context.Context) time.Time {
	var next time.Time
	for progressed := true; progressed; {
		progressed = false
		for _, c := range w.t.Containers {
			if c.KnownStatus >= c.SteadyState() || c.KnownStatus == task.ContainerStopped {
				continue
			}
			if p := w.pause(); p != nil && p != c && w.t.NetworkMode == task.NetworkAWSVPC && p.KnownStatus != p.SteadyState() {
				// The container joins the pause container's network namespace, so the pause goes first.
				if p.KnownStatus == task.ContainerStopped {
					w.failContainer(ctx, c, fmt.Sprintf("pause container %s stopped", p.Name))
					progressed = true
				}
				continue
			}
			block := w.t.CanStart(c)
			switch {
			case block.Fail != nil:
				w.failContainer(ctx, c, block.Fail.Error())
				progressed = true
			case block.Wait != "":
				since, ok := w.waitingSince[c.Name]
				if !ok {
					since = w.e.clock.Now()
					w.waitingSince[c.Name] = since
					w.log.Info("container waits", "container", c.Name, "reason", block.Wait)
				}
				deadline := since.Add(effectiveStartTimeout(c, w.e.cfg))
				if !w.e.clock.Now().Before(deadline) {
					w.failContainer(ctx, c, fmt.Sprintf("dependency wait timed out after %s: %s", effectiveStartTimeout(c, w.e.cfg), block.Wait))
					progressed = true
					continue
				}
				if next.IsZero() || deadline.Before(next) {
					next = deadline
				}
			default:
				if err := w.startContainer(ctx, c); err != nil {
					if ctx.Err() != nil {
						return time.Time{}
					}
					w.failContainer(ctx, c, err.Error())
				}
				progressed = true
			}
			if stop, _ := w.stopWanted(); stop {
				return time.Time{}
			}
		}
	}
	return next
}

// failContainer stops a container that cannot start; an essential one takes the task down with it.
func (w *worker) failContainer(ctx context.Context, c *task.Container, reason string) {
	w.markStopped(c, reason)
	w.log.Warn("container cannot start", "container", c.Name, "reason", reason)
	if c.Essential {
		w.stopTask(fmt.Sprintf("container %s: %s", c.Name, reason))
	}
	w.commit(ctx)
}

// markStopped records a container as stopped without a Docker call (it never ran, or already exited).
func (w *worker) markStopped(c *task.Container, reason string) {
	c.KnownStatus = task.ContainerStopped
	c.DesiredStatus = task.ContainerStopped
	if c.Reason == "" {
		c.Reason = reason
	}
	if c.FinishedAt.IsZero() {
		c.FinishedAt = w.e.clock.Now()
	}
}

// startContainer creates (unless it exists) and starts c, then reads back what Docker made.
func (w *worker) startContainer(ctx context.Context, c *task.Container) error {
	if c.DockerID == "" {
		if err := w.create(ctx, c); err != nil {
			return err
		}
	}
	w.e.probe(ProbeBeforeStart, w.t)
	if err := w.e.docker.StartContainer(ctx, c.DockerID); err != nil {
		return fmt.Errorf("CannotStartContainerError: %w", err)
	}
	// Docker started it; a failed or stale inspect below must not make startReady start it again.
	c.KnownStatus = max(c.KnownStatus, task.ContainerRunning)
	for _, h := range w.hooks.start {
		if err := h.AfterStart(ctx, &Run{w}, c); err != nil {
			return err
		}
	}
	if c.Pause && w.t.NetworkMode != task.NetworkAWSVPC { // it holds only the task's PID and IPC namespaces
		c.KnownStatus = task.ContainerResourcesProvisioned
	}
	w.e.probe(ProbeAfterStart, w.t)
	w.log.Info("container started", "container", c.Name, "docker_id", shortDockerID(c.DockerID))
	delete(w.waitingSince, c.Name)
	w.refresh(ctx, c)
	w.commit(ctx)
	return nil
}

// create makes the container in Docker. Its name is saved before the create call, so an agent that
// crashes between create and saving the ID finds the container by name after a restart and adopts it
// instead of creating a second one.
func (w *worker) create(ctx context.Context, c *task.Container) error {
	if c.DockerName != "" && w.adopt(ctx, c) {
		return nil
	}
	if c.DockerName == "" {
		c.DockerName = containerName(w.t, c)
		w.commit(ctx)
		w.e.probe(ProbeBeforeCreate, w.t)
	}
	opts, err := w.createOptions(ctx, c)
	if err != nil {
		return fmt.Errorf("CannotCreateContainerError: %w", err)
	}
	created, err := w.e.docker.CreateContainer(ctx, opts)
	if errors.Is(err, dockerclient.ErrNameInUse) && w.adopt(ctx, c) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("CannotCreateContainerError: %w", err)
	}
	w.e.probe(ProbeAfterCreate, w.t)
	c.DockerID = created.ID
	c.KnownStatus = task.ContainerCreated
	c.CreatedAt = w.e.clock.Now().UTC()
	w.e.trackContainer(c.DockerID, w)
	// The ID is saved with the start that follows at once; an agent that dies in between finds the
	// container by its saved name.
	return nil
}

// createOptions returns c's create request: the definition's, with host ports picked for its port
// ranges, then changed by the task's CreateHooks in order.
func (w *worker) createOptions(ctx context.Context, c *task.Container) (docker.CreateContainerOptions, error) {
	var in createInputs
	if w.t.NetworkMode == task.NetworkBridge {
		ports, err := w.e.ports.forRanges(c)
		if err != nil {
			return docker.CreateContainerOptions{}, err
		}
		in.HostPorts = ports
	}
	opts, err := createOptions(w.t, c, w.e.cfg.Cluster, w.pauseID(), w.e.cfg, in)
	if err != nil {
		return opts, err
	}
	for _, h := range w.hooks.create {
		if err := h.BeforeCreate(ctx, &Run{w}, c, &opts); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// adopt looks the container up by its saved name and, if Docker has it, takes it as this container.
func (w *worker) adopt(ctx context.Context, c *task.Container) bool {
	ci, err := w.e.docker.InspectContainer(ctx, c.DockerName)
	if err != nil {
		return false
	}
	c.DockerID = ci.ID
	c.KnownStatus = max(c.KnownStatus, task.ContainerCreated)
	applyInspect(c, ci, w.e.clock.Now())
	w.e.trackContainer(c.DockerID, w)
	w.log.Info("adopted a container created before a restart", "container", c.Name, "docker_id", shortDockerID(c.DockerID))
	w.commit(ctx)
	return true
}

func (w *worker) pauseID() string {
	if p := w.pause(); p != nil {
		return p.DockerID
	}
	return ""
}

func (w *worker) pause() *task.Container {
	for _, c := range w.t.Containers {
		if c.Pause {
			return c
		}
	}
	return nil
}

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// prepare acquires host resources, pulls every image and waits while a Holder holds the task. It
// returns false when the task must not start: a stop arrived, resources can never fit, or a pull
// failed.
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
	return w.pullAll(ctx) && w.hold(ctx)
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
			if c.KnownStatus >= c.SteadyState() || c.KnownStatus == task.ContainerStopped || c.DesiredStatus == task.ContainerStopped {
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
					var silent *noAnswerError
					if errors.As(err, &silent) {
						w.giveUp(ctx, c, err.Error())
					} else {
						w.failContainer(ctx, c, err.Error())
					}
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

// giveUp is failContainer for a create or start given up on because the Docker Engine did not answer
// (a *noAnswerError), which Docker may have carried out unseen: the container is not taken as stopped
// before Docker has said, so it is neither orphaned nor left running while the task's resources count
// as free. An essential one stops the task, whose stop looks the container up by its ID or saved name
// and stops it; a non-essential one is settled here.
func (w *worker) giveUp(ctx context.Context, c *task.Container, reason string) {
	c.DesiredStatus = task.ContainerStopped
	if c.Reason == "" {
		c.Reason = reason
	}
	w.log.Warn("container cannot start", "container", c.Name, "reason", reason)
	if c.Essential {
		w.stopTask(fmt.Sprintf("container %s: %s", c.Name, reason))
		w.commit(ctx)
		return
	}
	w.commit(ctx)
	if w.settle(ctx, c) {
		w.markStopped(c, reason)
		w.commit(ctx)
	}
}

// settle asks Docker, until it answers or ctx ends, what became of a container given up on: one it
// has is adopted (so that the cleanup removes it), stopped if it is up, and its end read back. It
// reports whether Docker answered; the caller then marks c stopped.
func (w *worker) settle(ctx context.Context, c *task.Container) bool {
	backoff := w.e.dockerBackoff()
	for {
		err := w.settleOnce(ctx, c)
		if err == nil {
			return true
		}
		if ctx.Err() == nil {
			w.log.Warn("cannot tell what Docker made of a container given up on; will ask again", "container", c.Name, "error", err)
		}
		if retry.Sleep(ctx, w.e.clock, backoff.Duration()) != nil {
			return false
		}
	}
}

func (w *worker) settleOnce(ctx context.Context, c *task.Container) error {
	ci, err := w.e.docker.InspectContainer(ctx, cmp.Or(c.DockerID, c.DockerName))
	if errors.Is(err, dockerclient.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.DockerID == "" {
		c.DockerID = ci.ID
		w.e.trackContainer(c.DockerID, w)
	}
	if isUp(ci.State) {
		if err := w.e.docker.StopContainer(ctx, c.DockerID, effectiveStopTimeout(c, w.e.cfg)); err != nil && !errors.Is(err, dockerclient.ErrNotFound) {
			return err
		}
		if ci, err = w.e.docker.InspectContainer(ctx, c.DockerID); err != nil {
			return err
		}
	}
	applyInspect(c, ci, w.e.clock.Now())
	return nil
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
	if err := w.startDocker(ctx, c, time.Time{}); err != nil {
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
// instead of creating a second one. A create whose answer is lost (dockerclient.ErrConnection: the
// Docker Engine restarting) is retried with backoff for up to Config.CreateTimeout; before each retry
// and before giving up the container is looked up by its name and adopted if Docker made it, and a
// retry that finds the name taken adopts the container that holds it. Docker makes at most one.
func (w *worker) create(ctx context.Context, c *task.Container) error {
	if c.DockerName != "" {
		if found, _ := w.adopt(ctx, c); found {
			return nil
		}
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
	giveUp := w.e.clock.Now().Add(w.e.cfg.CreateTimeout)
	backoff := w.e.dockerBackoff()
	for {
		created, err := w.e.docker.CreateContainer(ctx, opts)
		if err == nil {
			w.e.probe(ProbeAfterCreate, w.t)
			c.DockerID = created.ID
			c.KnownStatus = task.ContainerCreated
			c.CreatedAt = w.e.clock.Now().UTC()
			w.e.trackContainer(c.DockerID, w)
			// The ID is saved with the start that follows at once; an agent that dies in between finds
			// the container by its saved name.
			return nil
		}
		if errors.Is(err, dockerclient.ErrNameInUse) {
			// An earlier attempt made it (or an agent before a restart did): the name is this container's.
			found, lerr := w.adopt(ctx, c)
			if found {
				return nil
			}
			if lerr == nil {
				return fmt.Errorf("CannotCreateContainerError: %w", err)
			}
			err = lerr
		}
		if !outcomeUnknown(ctx, err) {
			return fmt.Errorf("CannotCreateContainerError: %w", err)
		}
		// The Engine may have made it before the answer was lost.
		if found, _ := w.adopt(ctx, c); found {
			return nil
		}
		if !w.e.clock.Now().Before(giveUp) {
			return fmt.Errorf("CannotCreateContainerError: %w", &noAnswerError{op: "create", timeout: w.e.cfg.CreateTimeout, err: err})
		}
		if werr := w.dockerRetryWait(ctx, backoff, "create", c, err); werr != nil {
			return werr
		}
	}
}

// startDocker asks Docker to start c, whose last run (zero: none) began at since. A start whose
// answer is lost is retried with backoff for up to Config.StartTimeout; before each retry and before
// giving up c is read back, and a container that runs, or has run since, is taken as started: Docker
// never starts it a second time.
func (w *worker) startDocker(ctx context.Context, c *task.Container, since time.Time) error {
	giveUp := w.e.clock.Now().Add(w.e.cfg.StartTimeout)
	backoff := w.e.dockerBackoff()
	for {
		err := w.e.docker.StartContainer(ctx, c.DockerID)
		if err == nil || !outcomeUnknown(ctx, err) {
			return err
		}
		if ci, ierr := w.e.docker.InspectContainer(ctx, c.DockerID); ierr == nil && startedSince(ci.State, since) {
			w.log.Info("the Docker Engine started the container though its answer was lost", "container", c.Name, "docker_id", shortDockerID(c.DockerID))
			return nil
		}
		if !w.e.clock.Now().Before(giveUp) {
			return &noAnswerError{op: "start", timeout: w.e.cfg.StartTimeout, err: err}
		}
		if werr := w.dockerRetryWait(ctx, backoff, "start", c, err); werr != nil {
			return werr
		}
	}
}

// noAnswerError is a create or start given up on because the Docker Engine did not answer within its
// timeout: Docker may have carried it out unseen.
type noAnswerError struct {
	op      string // "create" or "start"
	timeout time.Duration
	err     error // the last attempt's
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("the Docker Engine did not answer within the %s timeout (%s): %v", e.op, e.timeout, e.err)
}

func (e *noAnswerError) Unwrap() error { return e.err }

// outcomeUnknown reports whether a failed create or start leaves open whether Docker did it: the way
// to the Engine failed (dockerclient.ErrConnection) or the call ran out of its own time limit, while
// the task still wants it (ctx is live).
func outcomeUnknown(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, dockerclient.ErrConnection) || errors.Is(err, context.DeadlineExceeded))
}

// startedSince reports whether a container in state st runs, or has started after since.
func startedSince(st docker.State, since time.Time) bool {
	return isUp(st) || st.StartedAt.Year() > 1 && st.StartedAt.After(since)
}

// dockerRetryWait logs a create or start about to be retried through an Engine outage and waits the
// backoff's next delay; it returns ctx's error if ctx ends first.
func (w *worker) dockerRetryWait(ctx context.Context, backoff retry.Backoff, op string, c *task.Container, err error) error {
	d := backoff.Duration()
	w.log.Warn("the Docker Engine did not answer; retrying", "op", op, "container", c.Name, "retry_in", d, "error", err)
	if serr := retry.Sleep(ctx, w.e.clock, d); serr != nil {
		return fmt.Errorf("%s container %s: %w", op, c.Name, serr)
	}
	return nil
}

// dockerBackoff is the wait between attempts of a create or start through a Docker Engine outage.
func (e *Engine) dockerBackoff() retry.Backoff {
	return retry.NewExponentialBackoff(e.retryDelay, dockerRetryMax, 0.2, 2)
}

// dockerRetryMax bounds the wait between attempts of a create or start through an Engine outage.
const dockerRetryMax = 10 * time.Second

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
// It reports whether Docker has it, and the look-up's error when Docker did not say (not found is
// no error).
func (w *worker) adopt(ctx context.Context, c *task.Container) (bool, error) {
	ci, err := w.e.docker.InspectContainer(ctx, c.DockerName)
	if errors.Is(err, dockerclient.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.DockerID = ci.ID
	c.KnownStatus = max(c.KnownStatus, task.ContainerCreated)
	applyInspect(c, ci, w.e.clock.Now())
	w.e.trackContainer(c.DockerID, w)
	w.log.Info("adopted a container found by its saved name (made before a restart, or by a create whose answer was lost)", "container", c.Name, "docker_id", shortDockerID(c.DockerID))
	w.commit(ctx)
	return true, nil
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

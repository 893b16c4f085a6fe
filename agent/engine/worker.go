package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/task"
)

// reasonOOM is ECS's reason for a container the kernel killed for memory.
const reasonOOM = "OutOfMemoryError: Container killed due to memory usage"

// worker drives one task. Its run goroutine owns t; other goroutines talk to it through the
// mailbox fields under mu and the wake channel.
type worker struct {
	e   *Engine
	arn string
	log *logger.Logger
	t   *task.Task // owned by run

	cleanupRetries int // cleanups put off because the Docker Engine was unreachable; the cleanup's own

	// Set by the engine under its lock: listed once the task's first save succeeded; accepted is
	// closed once that save has finished, with acceptErr its outcome.
	listed    bool
	accepted  chan struct{}
	acceptErr error

	mu             sync.Mutex
	desired        task.TaskStatus
	reason         string
	events         []dockerclient.Event
	inspect        bool
	snap           *task.Task
	cancelStart    context.CancelFunc
	wake           chan struct{}
	cleanEarly     bool            // clean the stopped task up without waiting (disk pressure)
	cleanScheduled bool            // the worker's goroutine has ended; the cleanup timer holds the task
	cleanTimer     clockwork.Timer // the stopped task's cleanup, once its worker has finished
	stopSaved      chan struct{}   // closed once a save holds desired STOPPED
	stopped        chan struct{}   // closed once a save holds known STOPPED
	gone           chan struct{}   // closed once the task is cleaned up and forgotten
	cleanOnce      sync.Once
	stopOnce       sync.Once
	stoppedOnce    sync.Once

	waitingSince map[string]time.Time     // container name → when its dependsOn wait began (run only)
	metadata     map[string]*metadataFile // container name → its metadata file as last written (run only)
	saved        [sha256.Size]byte        // digest of the task's JSON as last saved; zero before (run only, and add before run)
	cgroupParent string                   // the task cgroup, once made by this worker (run only)
}

func newWorker(e *Engine, t *task.Task) *worker {
	w := &worker{e: e, arn: t.Arn, t: t, log: e.log.With("task", t.Arn), desired: t.DesiredStatus,
		snap: t.Clone(), wake: make(chan struct{}, 1), stopSaved: make(chan struct{}), stopped: make(chan struct{}), gone: make(chan struct{}),
		accepted: make(chan struct{}), waitingSince: map[string]time.Time{}, metadata: map[string]*metadataFile{}}
	for _, c := range t.Containers {
		if c.DockerID != "" && c.KnownStatus != task.ContainerStopped {
			w.inspect = true // a restored task: its containers may have changed while nobody watched
		}
	}
	return w
}

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

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// setDesired records the newest desired status. STOPPED is final: a later RUNNING is ignored. A stop
// cancels whatever start work is in flight.
func (w *worker) setDesired(s task.TaskStatus, reason string) {
	w.mu.Lock()
	if w.desired == task.TaskStopped || s != task.TaskStopped {
		w.mu.Unlock()
		return
	}
	w.desired, w.reason = s, reason
	if w.cancelStart != nil {
		w.cancelStart()
	}
	w.mu.Unlock()
	w.poke()
}

// stop sets the desired status to STOPPED and waits until a save holds it, or ctx ends.
func (w *worker) stop(ctx context.Context, reason string) error {
	w.setDesired(task.TaskStopped, reason)
	select {
	case <-w.stopSaved:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the stop of task %s was not saved: %w", w.arn, ctx.Err())
	}
}

func (w *worker) stopWanted() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.desired == task.TaskStopped, w.reason
}

func (w *worker) event(ev dockerclient.Event) {
	w.mu.Lock()
	if w.cleanScheduled {
		w.mu.Unlock()
		return // nothing reads the mailbox of a stopped task waiting for its cleanup
	}
	w.events = append(w.events, ev)
	w.mu.Unlock()
	w.poke()
}

func (w *worker) requestInspect() {
	w.mu.Lock()
	w.inspect = !w.cleanScheduled
	w.mu.Unlock()
	w.poke()
}

func (w *worker) snapshot() *task.Task {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap.Clone()
}

// commit derives the task's known status, saves the task, publishes a snapshot and notifies the
// listeners — in that order, so nothing is reported before it is saved. A stopped essential container
// stops the task here, wherever it was noticed, so STOPPED is never reported while RUNNING is desired.
func (w *worker) commit(ctx context.Context) {
	t := w.t
	w.checkEssential()
	if stop, reason := w.stopWanted(); stop {
		// The last container may stop before stopAll runs; STOPPED is never reported without its reason.
		t.DesiredStatus = task.TaskStopped
		if t.StoppedReason == "" {
			t.StoppedReason = reason
		}
	}
	known := t.DeriveKnownStatus()
	if known != t.KnownStatus {
		w.log.Info("task status changed", "from", t.KnownStatus.String(), "to", known.String())
		switch known {
		case task.TaskRunning:
			t.StartedAt = w.e.clock.Now()
		case task.TaskStopped:
			t.StoppedAt = w.e.clock.Now()
		}
		t.KnownStatus = known
	}
	data, err := json.Marshal(t)
	if err != nil {
		w.log.Error("encoding task state failed; the change is not reported", "error", err)
		return
	}
	sum := sha256.Sum256(data)
	if sum == w.saved {
		w.syncAllMetadata() // the instance ARN may have become known since
		return              // nothing changed since the last save: nothing to save or tell
	}
	if !w.save(ctx, t) {
		return
	}
	w.saved = sum
	w.e.probe(ProbeSaved, t)
	w.mu.Lock()
	w.snap = t.Clone()
	w.mu.Unlock()
	if t.DesiredStatus == task.TaskStopped {
		w.stopOnce.Do(func() { close(w.stopSaved) })
	}
	if t.KnownStatus == task.TaskStopped {
		w.stoppedOnce.Do(func() { close(w.stopped) })
	}
	w.e.notify(t)
	w.syncAllMetadata()
}

// save saves t, retrying with backoff while the store fails (a full disk): the worker goes no further,
// so nothing is done to Docker that the state file does not record. The engine reports the failure
// (SaveError) until the save succeeds. It returns false only when ctx ends first.
func (w *worker) save(ctx context.Context, t *task.Task) bool {
	backoff := retry.NewExponentialBackoff(saveRetryMin, saveRetryMax, 0.2, 2)
	failing := false
	for {
		err := w.e.store.SaveTask(context.WithoutCancel(ctx), t)
		if err == nil {
			if failing {
				w.e.saveFailures.Add(-1)
				w.log.Info("saving task state works again")
			}
			return true
		}
		if !failing {
			failing = true
			w.e.saveFailures.Add(1)
			w.log.Error("saving task state failed; the task waits until it can be saved", "error", err)
		}
		w.e.lastSaveErr.Store(&err)
		select {
		case <-ctx.Done():
			w.e.saveFailures.Add(-1)
			return false
		case <-w.e.clock.After(backoff.Duration()):
		}
	}
}

// Bounds of the wait between attempts to save a task while the store fails.
const (
	saveRetryMin = 100 * time.Millisecond
	saveRetryMax = 10 * time.Second
)

// run drives the task to its desired status and, once it has stopped, cleans it up after the wait. It
// returns early, leaving containers as they are, when ctx ends (the agent is shutting down).
func (w *worker) run(ctx context.Context) {
	startCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancelStart = cancel
	if w.desired == task.TaskStopped {
		cancel()
	}
	w.mu.Unlock()

	if w.saved != ([sha256.Size]byte{}) { // AddTask saved it: that is the task's first saved change
		w.e.probe(ProbeSaved, w.t)
	}
	w.e.notify(w.t)
	w.t.DesiredStatus = task.TaskRunning
	if stop, _ := w.stopWanted(); stop {
		w.t.DesiredStatus = task.TaskStopped
	}
	w.commit(ctx)

	if w.prepare(startCtx) {
		w.supervise(ctx, startCtx)
	}
	if ctx.Err() != nil {
		return
	}
	w.stopAll(ctx)
	w.e.resources.Release(w.arn)
	if ctx.Err() != nil {
		return
	}
	w.scheduleCleanup(ctx)
}

// stopTask records why the task stops and sets its desired status.
func (w *worker) stopTask(reason string) {
	w.setDesired(task.TaskStopped, reason)
	w.log.Info("task stopping", "reason", reason)
}

// prepare acquires host resources and pulls every image. It returns false when the task must not
// start: a stop arrived, resources can never fit, or a pull failed.
func (w *worker) prepare(ctx context.Context) bool {
	if stop, _ := w.stopWanted(); stop {
		return false
	}
	if w.t.NetworkMode == task.NetworkAWSVPC && w.e.cfg.AWSVPC.Network == nil {
		w.stopTask("awsvpc network mode needs task networking: set ECS_ENABLE_TASK_ENI=true")
		return false
	}
	if (w.t.PidMode == "task" || w.t.IpcMode == "task") && w.pause() == nil {
		w.stopTask("pidMode and ipcMode task need the pause image (berth/pause:latest, loaded from ECS_PAUSE_IMAGE_TARBALL), which this agent does not have")
		return false
	}
	if err := w.t.RefusePrivileged(); err != nil && w.e.cfg.DisablePrivileged {
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
		c   *task.Container
		err error
		res dockerclient.PullResult
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
		go func(c *task.Container) {
			res, err := w.e.puller.Pull(ctx, c.Image, auth)
			results <- result{c: c, err: err, res: res}
		}(c)
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
		w.log.Info("image ready", "container", r.c.Name, "image", r.c.Image, "cached", r.res.Cached, "attempts", len(r.res.Attempts))
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
	switch {
	case c.Pause && w.t.NetworkMode == task.NetworkAWSVPC:
		if err := w.setupNetwork(ctx, c); err != nil {
			return err
		}
	case c.Pause: // it holds only the task's PID and IPC namespaces
		c.KnownStatus = task.ContainerResourcesProvisioned
	}
	w.e.probe(ProbeAfterStart, w.t)
	w.log.Info("container started", "container", c.Name, "docker_id", shortID(c.DockerID))
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
	// The file exists (PENDING) before the container does, since Docker mounts its directory.
	mdDir, err := w.syncMetadata(c, true)
	if err != nil {
		w.log.Warn("the container gets no metadata file", "container", c.Name, "error", err)
	}
	in, err := w.gatherInputs(ctx, c)
	if err != nil {
		return fmt.Errorf("CannotCreateContainerError: %w", err)
	}
	opts, err := createOptions(w.t, c, w.e.cfg.Cluster, w.pauseID(), w.e.cfg, in)
	if err != nil {
		return fmt.Errorf("CannotCreateContainerError: %w", err)
	}
	if mdDir != "" {
		withMetadataMount(&opts, mdDir)
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

// adopt looks the container up by its saved name and, if Docker has it, takes it as this container.
func (w *worker) adopt(ctx context.Context, c *task.Container) bool {
	ci, err := w.e.docker.InspectContainer(ctx, c.DockerName)
	if err != nil {
		return false
	}
	c.DockerID = ci.ID
	c.KnownStatus = max(c.KnownStatus, task.ContainerCreated)
	applyInspect(c, ci)
	w.e.trackContainer(c.DockerID, w)
	w.log.Info("adopted a container created before a restart", "container", c.Name, "docker_id", shortID(c.DockerID))
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

// drain applies queued Docker events and, if asked, re-inspects every container. A container found
// exited is restarted in place when its restart policy says so (see restart.go).
func (w *worker) drain(ctx context.Context) {
	w.mu.Lock()
	events, inspect := w.events, w.inspect
	w.events, w.inspect = nil, false
	w.mu.Unlock()
	changed := false
	for _, ev := range events {
		c := w.byDockerID(ev.ID)
		if c == nil {
			continue
		}
		switch {
		case strings.HasPrefix(ev.Action, "health_status"):
			if h := healthOf(strings.TrimSpace(strings.TrimPrefix(ev.Action, "health_status:"))); h != c.Health {
				c.Health = h
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
	applyInspect(c, ci)
}

// applyInspect copies what Docker reports about a container into the model.
func applyInspect(c *task.Container, ci *docker.Container) {
	if ci.Image != "" {
		c.ImageID = ci.Image
	}
	if !ci.Created.IsZero() {
		c.CreatedAt = ci.Created.UTC()
	}
	st := ci.State
	if st.Health.Status != "" && c.HealthCheck != nil {
		c.Health = healthOf(st.Health.Status)
	}
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
		for _, c := range w.t.Containers {
			if c.KnownStatus == task.ContainerStopped || c.DockerID != "" {
				continue
			}
			// A saved name without an ID: the agent may have crashed right after Docker created it.
			if c.DockerName == "" || !w.adopt(ctx, c) {
				w.markStopped(c, w.t.StoppedReason) // never created: nothing to stop
			}
		}
		var running, ready []*task.Container
		for _, c := range w.t.Containers {
			if c.KnownStatus == task.ContainerStopped {
				continue
			}
			running = append(running, c)
			if len(w.t.StopBlockers(c)) == 0 {
				ready = append(ready, c)
			}
		}
		if len(running) == 0 || ctx.Err() != nil {
			break
		}
		if len(ready) == 0 {
			// Only a dependsOn cycle blocks every running container; stop them all rather than spin.
			ready = running
		}
		for _, c := range ready {
			if c.Pause {
				w.teardownNetwork(ctx) // CNI DEL needs the namespace, which goes with the pause container
			}
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
		w.teardownNetwork(ctx) // the pause container may have died by itself before the stop
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
	w.removeCgroup()
	w.removeMetadata() // before the task is forgotten: a crash here leaves the task to clean up again
	if err := w.e.store.DeleteTask(ctx, w.arn); err != nil {
		w.log.Warn("deleting task state failed", "error", err)
	}
	w.e.forget(w)
	w.log.Info("task cleaned up")
}

func shortID(id string) string {
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

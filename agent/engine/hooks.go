package engine

import (
	"context"
	"slices"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// Engine features as task hooks.
//
// What the engine does beyond running a task's containers — awsvpc networking, task cgroups,
// secrets, the task endpoint's variables and roles, the container metadata file, and whatever comes
// next — is a Feature. When a task reaches the engine, each feature is asked for its TaskHook for
// that task (nil: nothing to do for it), and the task's worker calls the hooks at the points they
// implement, in the order of the features: the built-ins in the order below, then Config.Features.
//
//	point          interface        called                                   when it fails
//	prepare        Preparer         once the task is accepted or restored,   the task stops with the error as its
//	                                before its worker runs; must not block   reason before anything of it is made
//	hold           Holder           once the images are pulled, before the   cannot fail: while it gives a reason the
//	                                first container is made (not for a task  task waits, PENDING with it as its
//	                                restored with containers made)           PendingReason; a stop ends the wait
//	before create  CreateHook       before Docker creates a container, with  the container is not created
//	                                the options it may change                (CannotCreateContainerError); an
//	                                                                         essential one stops the task
//	after start    StartHook        Docker started a container; RUNNING is   the container is stopped with the error
//	                                not saved yet                            as its reason
//	after commit   CommitHook       after every commit of the task, whether  cannot fail: the hook logs
//	                                it changed or not; must not commit
//	at stop        StopHook         before Docker stops each batch of        cannot fail: the hook logs, and what it
//	                                containers, and once all have stopped    leaves is for recovery
//	at cleanup     CleanupHook      the task's containers and volumes are    cannot fail: the hook logs, and what it
//	                                removed; its record is not deleted yet   leaves is for recovery
//	recovery       Recoverer        at agent start, after Restore            logged; tried again at the next start
//
// The built-ins, in order, and their points:
//
//	awsvpc           prepare (refused without task networking), after start (CNI ADD on the pause
//	                 container), at stop (CNI DEL), at cleanup (CNI DEL again if the stop's failed),
//	                 recovery (networking of unknown tasks)
//	secrets          before create (environment files, secrets, log driver secret options but those of
//	                 awsfirelens, which are the FireLens router's)
//	task cgroup      before create (the cgroup parent), at cleanup, recovery (cgroups of unknown tasks)
//	task endpoint    prepare (role credentials), hold (a task whose containers get role credentials
//	                 waits for the route to the endpoint), before create (the endpoint's variables, the
//	                 awslogs credentials endpoint), at stop (role credentials no longer refreshed), at
//	                 cleanup
//	metadata file    before create (the PENDING file and its mount), after commit (rewrites), at cleanup
//
// Secrets go before the task endpoint so that the endpoint's variables win over a secret's of the
// same name, and the metadata file goes last so that its variable wins over every other.
//
// Every hook method is called on the task's worker goroutine (prepare: before it starts), so a hook
// needs no lock for its own state.
//
// A hook whose work outlasts its call (watching a process in a container) starts it with Run.Go
// from a hook method after prepare: the goroutine's context ends when the task's stop is wanted or
// the agent stops, Engine.Wait waits for it, and it hands what it finds to the task through post,
// whose function runs on the worker goroutine (where the task may be changed) and is then committed,
// so it is saved and reported like any other change. A post after the task has stopped and its
// worker finished is dropped (post returns false).

// Feature is something the engine does for the tasks it concerns, at points of their lives.
type Feature interface {
	// Name names the feature in logs.
	Name() string
	// TaskHook returns the feature's hook for t, or nil when the feature has nothing to do for t. It is
	// called once per task and engine run (again after an agent restart), must not block, and must
	// not keep t: the hook's methods are given the task through Run.
	TaskHook(t *task.Task) TaskHook
}

// TaskHook is one feature's hook for one task: a value implementing any of Preparer, CreateHook,
// StartHook, CommitHook, StopHook and CleanupHook.
type TaskHook any

// Preparer is called once the task is saved (accepted, or restored after an agent restart), before
// its worker runs. It must not block. An error refuses the task: it stops with the error as its
// reason before any of its containers is made.
type Preparer interface {
	Prepare(r *Run) error
}

// Holder is called once the task's images are pulled, before the first of its containers is made
// (not for a task restored with containers made already). While Hold returns a reason, the task
// waits, PENDING with the reason as its PendingReason, and asks again once changed is closed
// (changed must not be nil then); a stop ends the wait. It must not block.
type Holder interface {
	Hold(r *Run) (reason string, changed <-chan struct{})
}

// CreateHook is called before Docker is asked to create container c of the task, with the options
// built from the definition; it may change them. An error means c is not created
// (CannotCreateContainerError with the error), which stops the task when c is essential; a hook that
// can do without what it failed to do logs and returns nil.
type CreateHook interface {
	BeforeCreate(ctx context.Context, r *Run, c *task.Container, opts *docker.CreateContainerOptions) error
}

// StartHook is called after Docker started container c, before its RUNNING is saved. It may change c
// (a pause container is RESOURCES_PROVISIONED once its network is set up). An error stops c with the
// error as its reason.
type StartHook interface {
	AfterStart(ctx context.Context, r *Run, c *task.Container) error
}

// CommitHook is called after every commit of the task, whether it changed or not (a change is saved
// and reported by then). It must not commit and cannot fail: it logs what goes wrong.
type CommitHook interface {
	AfterCommit(r *Run)
}

// StopHook is called as the task stops: BeforeStop before Docker is asked to stop each batch of
// containers (the pause container comes last, alone or with others), Stopped once every container
// has stopped (not when the agent is shutting down). Neither can fail nor hold the stop up: a hook
// logs, and what it leaves is for its feature's recovery at the next agent start.
type StopHook interface {
	BeforeStop(ctx context.Context, r *Run, batch []*task.Container)
	Stopped(ctx context.Context, r *Run)
}

// CleanupHook is called once the stopped task's containers and task-scoped volumes are removed, before
// its record is deleted: a crash during cleanup leaves the task to clean up again after a restart. It
// cannot fail: a hook logs, and what it leaves is for its feature's recovery.
type CleanupHook interface {
	Cleanup(ctx context.Context, r *Run)
}

// Recoverer is a Feature that removes at agent start what tasks the engine no longer holds left
// behind (an agent killed before a cleanup finished, a task forgotten with its state). known holds
// the ARNs of the tasks the engine holds. Failures are the feature's to log.
type Recoverer interface {
	RemoveLeftovers(ctx context.Context, known []string)
}

// Run is a task's worker as the task's hooks see it.
type Run struct{ w *worker }

// Task returns the task the worker owns. A hook reads it, and changes it only where its point says it
// may; it must not keep it past the call.
func (r *Run) Task() *task.Task { return r.w.t }

// Commit saves the task's changes and reports them (not from a CommitHook).
func (r *Run) Commit(ctx context.Context) { r.w.commit(ctx) }

// Log returns the task's logger.
func (r *Run) Log() *logger.Logger { return r.w.log }

// Go runs fn on a goroutine of its own for work that outlasts a hook's call; it must be called from a
// hook method other than Prepare. fn's ctx ends when the task's stop is wanted or the agent stops;
// the engine's Wait waits for fn to return. post queues a function for the task's worker goroutine,
// which runs it with the task's Run and commits the task after it; post reports false, and the
// function never runs, once the task's worker has finished. Go reports whether fn runs: not once the
// stop is wanted or the agent is stopping.
func (r *Run) Go(fn func(ctx context.Context, post func(func(*Run)) bool)) bool {
	ctx := r.w.runCtx
	if ctx == nil || ctx.Err() != nil {
		return false
	}
	return r.w.e.goTracked(func() { fn(ctx, r.w.post) })
}

// taskHooks are a task's hooks, by point, in the features' order.
type taskHooks struct {
	prepare []Preparer
	hold    []Holder
	create  []CreateHook
	start   []StartHook
	commit  []CommitHook
	stop    []StopHook
	cleanup []CleanupHook
}

// hooksFor asks every feature for its hook for t.
func hooksFor(features []Feature, t *task.Task) taskHooks {
	var hs taskHooks
	for _, f := range features {
		h := f.TaskHook(t)
		if h == nil {
			continue
		}
		if p, ok := h.(Preparer); ok {
			hs.prepare = append(hs.prepare, p)
		}
		if ho, ok := h.(Holder); ok {
			hs.hold = append(hs.hold, ho)
		}
		if c, ok := h.(CreateHook); ok {
			hs.create = append(hs.create, c)
		}
		if s, ok := h.(StartHook); ok {
			hs.start = append(hs.start, s)
		}
		if c, ok := h.(CommitHook); ok {
			hs.commit = append(hs.commit, c)
		}
		if s, ok := h.(StopHook); ok {
			hs.stop = append(hs.stop, s)
		}
		if c, ok := h.(CleanupHook); ok {
			hs.cleanup = append(hs.cleanup, c)
		}
	}
	return hs
}

// hold waits while one of the task's Holders holds it, unless a container of the task has been made
// (its name is saved before its create). It returns false when ctx ends first: a stop, or the agent
// stopping.
func (w *worker) hold(ctx context.Context) bool {
	if len(w.hooks.hold) == 0 || slices.ContainsFunc(w.t.Containers, func(c *task.Container) bool { return c.DockerName != "" }) {
		return true
	}
	held := false
	for {
		reason, changed := "", (<-chan struct{})(nil)
		for _, h := range w.hooks.hold {
			if reason, changed = h.Hold(&Run{w}); reason != "" {
				break
			}
		}
		if reason == "" {
			break
		}
		if reason != w.t.PendingReason {
			w.t.PendingReason = reason
			w.log.Info("task waits", "reason", reason)
			w.commit(ctx)
		}
		held = true
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
	if held {
		w.t.PendingReason = ""
		w.log.Info("task no longer waits")
		w.commit(ctx)
	}
	return true
}

// builtinFeatures are the engine's own features, in the order documented above.
func (e *Engine) builtinFeatures() []Feature {
	return []Feature{
		&awsvpcFeature{cfg: e.cfg.AWSVPC, docker: e.docker, log: e.log},
		secretsFeature{source: e.cfg.Secrets},
		cgroupFeature{cgroups: e.cfg.TaskCgroups, log: e.log},
		endpointFeature{cfg: e.cfg.TaskEndpoint, awslogsExecutionRole: e.cfg.AWSLogsExecutionRole},
		metadataFeature{cfg: e.cfg.ContainerMetadata, cluster: e.cfg.Cluster},
	}
}

// RemoveLeftovers has every feature remove what tasks the engine does not hold left behind: task
// networking, task cgroups. Call it after Restore.
func (e *Engine) RemoveLeftovers(ctx context.Context) {
	e.mu.Lock()
	known := make([]string, 0, len(e.workers))
	for _, w := range e.listedLocked() {
		known = append(known, w.arn)
	}
	e.mu.Unlock()
	for _, f := range e.features {
		if r, ok := f.(Recoverer); ok {
			r.RemoveLeftovers(ctx, known)
		}
	}
}

// taskIDs returns the CNI task IDs (CNITaskID) of the tasks with these ARNs.
func taskIDs(arns []string) set.Set[string] {
	var ids set.Set[string]
	for _, arn := range arns {
		ids.Add(CNITaskID(arn))
	}
	return ids
}

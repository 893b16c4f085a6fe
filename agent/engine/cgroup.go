package engine

import (
	"context"
	"fmt"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcgroup"
)

// TaskCgroups manages the cgroups of tasks with task-level limits; *taskcgroup.Manager satisfies it.
type TaskCgroups interface {
	// Create makes (or reuses) the task's cgroup with its limits and returns the cgroup parent
	// Docker takes.
	Create(taskID string, l taskcgroup.Limits) (string, error)
	// Remove deletes the task's cgroup; one already gone is fine.
	Remove(taskID string) error
	// TaskIDs lists the task cgroups that exist.
	TaskIDs() ([]string, error)
	// EveryTask reports whether every task gets a cgroup, not only those with task-level cpu or
	// memory: a limit applies to all of them (ECS_TASK_PIDS_LIMIT).
	EveryTask() bool
}

var _ TaskCgroups = (*taskcgroup.Manager)(nil)

// cgroupFeature gives a task its own cgroup, the parent of its containers' (see hooks.go). Without
// TaskCgroups it does nothing.
type cgroupFeature struct {
	cgroups TaskCgroups
	log     *logger.Logger
}

var _ Recoverer = cgroupFeature{}

func (cgroupFeature) Name() string { return "task cgroup" }

// TaskHook returns the hook of a task that gets a cgroup: task cgroups are on, and the task has
// task-level cpu or memory or every task gets one.
func (f cgroupFeature) TaskHook(t *task.Task) TaskHook {
	if f.cgroups == nil || (t.CPU == 0 && t.Memory == 0 && !f.cgroups.EveryTask()) {
		return nil
	}
	return &cgroupHook{cgroups: f.cgroups}
}

// RemoveLeftovers deletes the cgroups of tasks the engine does not hold.
func (f cgroupFeature) RemoveLeftovers(_ context.Context, known []string) {
	if f.cgroups == nil {
		return
	}
	keep := taskIDs(known)
	ids, err := f.cgroups.TaskIDs()
	if err != nil {
		f.log.Warn("listing task cgroups failed", "error", err)
		return
	}
	var removed []string
	for _, id := range ids {
		if keep.Has(id) {
			continue
		}
		if err := f.cgroups.Remove(id); err != nil {
			f.log.Warn("removing the cgroup of a task no longer known failed", "task_id", id, "error", err)
			continue
		}
		removed = append(removed, id)
	}
	if len(removed) > 0 {
		f.log.Info("removed the cgroups of tasks no longer known", "tasks", removed)
	}
}

// cgroupHook is one task's cgroup.
type cgroupHook struct {
	cgroups TaskCgroups
	parent  string // the cgroup, once made by this hook
}

var (
	_ CreateHook  = (*cgroupHook)(nil)
	_ CleanupHook = (*cgroupHook)(nil)
)

// BeforeCreate puts the container in the task's cgroup, made (or, after an agent restart, reused with
// its limits written again) at the first create.
func (h *cgroupHook) BeforeCreate(_ context.Context, r *Run, _ *task.Container, opts *docker.CreateContainerOptions) error {
	if h.parent == "" {
		t := r.Task()
		sum := 0
		for _, c := range t.Containers {
			sum += c.CPU
		}
		parent, err := h.cgroups.Create(CNITaskID(t.Arn), taskcgroup.Limits{CPUUnits: t.CPU, MemoryMiB: t.Memory, ContainerCPUUnits: sum})
		if err != nil {
			return fmt.Errorf("task cgroup: %w", err)
		}
		h.parent = parent
	}
	opts.HostConfig.CgroupParent = h.parent
	return nil
}

// Cleanup deletes the task's cgroup; a failure is logged and the cgroup is left for the next agent
// start.
func (h *cgroupHook) Cleanup(_ context.Context, r *Run) {
	if err := h.cgroups.Remove(CNITaskID(r.Task().Arn)); err != nil {
		r.Log().Warn("removing the task cgroup failed; it is retried at the next agent start", "error", err)
	}
}

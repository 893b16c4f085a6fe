package engine

import (
	"context"
	"errors"
	"fmt"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
)

// SecretSource fetches, with a task's execution role, what its containers get from AWS when they
// are created. Values are returned to the caller only: never saved, never logged.
type SecretSource interface {
	// ContainerSecrets returns the variables of c's environmentFiles (in file order) and of its
	// secrets, and the log driver options of its logConfiguration.secretOptions. An error names the
	// secret or file and the AWS error code, never a value.
	ContainerSecrets(ctx context.Context, t *task.Task, c *task.Container) (ContainerSecrets, error)
	// RepositoryAuth returns the credentials source of the pulls of a container with
	// repositoryCredentials. It does no I/O.
	RepositoryAuth(t *task.Task, c *task.Container) dockerclient.AuthSource
}

// ContainerSecrets is what a SecretSource fetched for one container.
type ContainerSecrets struct {
	FileEnv    []string // NAME=VALUE
	SecretEnv  []string // NAME=VALUE
	LogOptions map[string]string
}

// TaskCgroups manages the cgroups of tasks with task-level limits; *taskcgroup.Manager satisfies it
// through a small adapter in app.
type TaskCgroups interface {
	// Create makes (or reuses) the task's cgroup with its limits and returns the cgroup parent
	// Docker takes.
	Create(taskID string, cpuUnits, memoryMiB, containerCPUUnits int) (string, error)
	// Remove deletes the task's cgroup; one already gone is fine.
	Remove(taskID string) error
	// TaskIDs lists the task cgroups that exist.
	TaskIDs() ([]string, error)
	// EveryTask reports whether every task gets a cgroup, not only those with task-level cpu or
	// memory: a limit applies to all of them (ECS_TASK_PIDS_LIMIT).
	EveryTask() bool
}

// ErrNoSecretSource is the reason a container that asks for secrets cannot be created when the
// engine has no way to fetch them.
var ErrNoSecretSource = errors.New("this agent cannot fetch secrets")

// noRepositoryAuth fails every pull of a container whose repositoryCredentials the engine cannot
// fetch: pulling anonymously would drop part of the definition.
type noRepositoryAuth struct{}

func (noRepositoryAuth) Auth(context.Context, string) (docker.AuthConfiguration, error) {
	return docker.AuthConfiguration{}, errdefs.Permanent(fmt.Errorf("repositoryCredentials: %w", ErrNoSecretSource))
}

func (noRepositoryAuth) Invalidate(string) {}

// needsSecrets reports whether c asks for anything a SecretSource fetches at create time.
func needsSecrets(c *task.Container) bool {
	return len(c.Secrets) > 0 || len(c.EnvironmentFiles) > 0 || (c.LogConfiguration != nil && len(c.LogConfiguration.SecretOptions) > 0)
}

// gatherInputs gathers what c's create needs beyond the task: its secrets, host port ranges and
// the task's cgroup. Each failure names its cause.
func (w *worker) gatherInputs(ctx context.Context, c *task.Container) (createInputs, error) {
	var in createInputs
	if needsSecrets(c) {
		if w.e.cfg.Secrets == nil {
			return in, ErrNoSecretSource
		}
		s, err := w.e.cfg.Secrets.ContainerSecrets(ctx, w.t, c)
		if err != nil {
			return in, err
		}
		in.FileEnv, in.SecretEnv, in.LogOptions = s.FileEnv, s.SecretEnv, s.LogOptions
	}
	if w.t.NetworkMode == task.NetworkBridge {
		for i, pm := range c.PortMappings {
			if pm.ContainerPortRange == "" {
				continue
			}
			lo, hi := portRangeBounds(pm.ContainerPortRange)
			first, err := w.e.ports.pick(hi-lo+1, protocol(pm.Protocol))
			if err != nil {
				return in, fmt.Errorf("portMappings[%d] containerPortRange %s: %w", i, pm.ContainerPortRange, err)
			}
			if in.HostPorts == nil {
				in.HostPorts = map[int]int{}
			}
			in.HostPorts[i] = first
		}
	}
	parent, err := w.taskCgroup()
	if err != nil {
		return in, err
	}
	in.CgroupParent = parent
	if w.e.awslogsWithExecutionRole(c) && w.t.ExecutionCredentialsID != "" {
		// Docker's awslogs driver asks the task endpoint (169.254.170.2) for the role's credentials.
		if in.LogOptions == nil {
			in.LogOptions = map[string]string{}
		}
		in.LogOptions["awslogs-credentials-endpoint"] = "/v2/credentials/" + w.t.ExecutionCredentialsID
	}
	return in, nil
}

// taskCgroup returns the task's cgroup parent: "" for a task without task-level cpu or memory, or
// when task cgroups are off. The cgroup is made (or, after an agent restart, reused with its limits
// written again) at the first container create of this worker.
func (w *worker) taskCgroup() (string, error) {
	cg := w.e.cfg.TaskCgroups
	if !w.hasCgroup() {
		return "", nil
	}
	if w.cgroupParent != "" {
		return w.cgroupParent, nil
	}
	sum := 0
	for _, c := range w.t.Containers {
		sum += c.CPU
	}
	parent, err := cg.Create(CNITaskID(w.arn), w.t.CPU, w.t.Memory, sum)
	if err != nil {
		return "", fmt.Errorf("task cgroup: %w", err)
	}
	w.cgroupParent = parent
	return parent, nil
}

// hasCgroup reports whether the task gets a cgroup: task cgroups are on, and the task has task-level
// cpu or memory or every task gets one.
func (w *worker) hasCgroup() bool {
	cg := w.e.cfg.TaskCgroups
	return cg != nil && (w.t.CPU != 0 || w.t.Memory != 0 || cg.EveryTask())
}

// removeCgroup deletes the task's cgroup, if task cgroups are on; a failure is logged and the
// cgroup is left for the next agent start.
func (w *worker) removeCgroup() {
	if !w.hasCgroup() {
		return
	}
	if err := w.e.cfg.TaskCgroups.Remove(CNITaskID(w.arn)); err != nil {
		w.log.Warn("removing the task cgroup failed; it is retried at the next agent start", "error", err)
	}
}

// RemoveCgroupLeftovers deletes the cgroups of tasks the engine does not hold (an agent killed
// before a task's cleanup finished). Call it after Restore; without task cgroups it does nothing.
func (e *Engine) RemoveCgroupLeftovers() {
	cg := e.cfg.TaskCgroups
	if cg == nil {
		return
	}
	known := map[string]bool{}
	for _, t := range e.Tasks() {
		known[CNITaskID(t.Arn)] = true
	}
	ids, err := cg.TaskIDs()
	if err != nil {
		e.log.Warn("listing task cgroups failed", "error", err)
		return
	}
	var removed []string
	for _, id := range ids {
		if known[id] {
			continue
		}
		if err := cg.Remove(id); err != nil {
			e.log.Warn("removing the cgroup of a task no longer known failed", "task_id", id, "error", err)
			continue
		}
		removed = append(removed, id)
	}
	if len(removed) > 0 {
		e.log.Info("removed the cgroups of tasks no longer known", "tasks", removed)
	}
}

// awslogsWithExecutionRole reports whether c's awslogs driver gets the task's execution-role
// credentials: the container asks for them (LogsAuthExecutionRole) and the operator allowed it
// (AWSLogsExecutionRole).
func (e *Engine) awslogsWithExecutionRole(c *task.Container) bool {
	return e.cfg.AWSLogsExecutionRole && c.LogsAuthExecutionRole && c.LogConfiguration != nil && c.LogConfiguration.LogDriver == "awslogs"
}

// LogDriverRole returns the execution role of the task whose execution-role credentials have this
// ID, when the task is not stopped and one of its containers' awslogs driver uses them
// (awslogsWithExecutionRole).
func (e *Engine) LogDriverRole(credentialsID string) (roleArn string, ok bool) {
	if credentialsID == "" {
		return "", false
	}
	for _, t := range e.Tasks() {
		if t.ExecutionCredentialsID != credentialsID || t.KnownStatus == task.TaskStopped {
			continue
		}
		for _, c := range t.Containers {
			if e.awslogsWithExecutionRole(c) {
				return t.ExecutionRoleArn, true
			}
		}
	}
	return "", false
}

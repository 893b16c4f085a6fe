package localcp

import (
	"fmt"

	"github.com/berth-agent/berth/agent/task"
)

// Task and container statuses are the task model's, task.TaskStatus and task.ContainerStatus, and
// move forward in its order. The ECS API, the agent's state changes and this package's records use
// ECS's names, of which there are fewer: every status before RUNNING is PENDING, which reads back as
// the model's NONE.
//
//	task model:  NONE  PULLED  CREATED  RUNNING  RESOURCES_PROVISIONED (containers)  STOPPED
//	ECS name:    PENDING ─────────────  RUNNING ──────────────────────────────────  STOPPED

// pendingName is the ECS name of every status before RUNNING; the task model has no such status.
const pendingName = "PENDING"

// taskStatusName returns the ECS name of a task status: PENDING, RUNNING or STOPPED.
func taskStatusName(s task.TaskStatus) string {
	if s < task.TaskRunning {
		return pendingName
	}
	return s.String()
}

// parseTaskStatus returns the task status of an ECS name: PENDING gives task.TaskNone. It fails for
// any other name, the task model's own PULLED and CREATED included.
func parseTaskStatus(name string) (task.TaskStatus, error) {
	return parseECSName(name, "task", task.TaskNone, task.ParseTaskStatus, taskStatusName)
}

// containerStatusName returns the ECS name of a container status: PENDING, RUNNING or STOPPED.
func containerStatusName(s task.ContainerStatus) string {
	switch {
	case s < task.ContainerRunning:
		return pendingName
	case s == task.ContainerResourcesProvisioned: // the pause container's RUNNING
		return task.ContainerRunning.String()
	}
	return s.String()
}

// parseContainerStatus returns the container status of an ECS name: PENDING gives
// task.ContainerNone. It fails for any other name, the task model's own PULLED, CREATED and
// RESOURCES_PROVISIONED included.
func parseContainerStatus(name string) (task.ContainerStatus, error) {
	return parseECSName(name, "container", task.ContainerNone, task.ParseContainerStatus, containerStatusName)
}

// parseECSName reads an ECS status name with the task model's parse, accepting only the names that
// ecsName gives: PENDING (which is none) and the model's own names that ECS shares.
func parseECSName[S comparable](name, kind string, none S, parse func(string) (S, error), ecsName func(S) string) (S, error) {
	if name == pendingName {
		return none, nil
	}
	s, err := parse(name)
	if err != nil || ecsName(s) != name {
		return none, fmt.Errorf("%s status %q is not PENDING, RUNNING or STOPPED", kind, name)
	}
	return s, nil
}

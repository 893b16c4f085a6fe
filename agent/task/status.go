// Package task is Berth's model of a task and its containers: what was asked for (the definition),
// what is wanted (desired status) and what is (known status), plus what has been reported (sent
// status). It holds no I/O and imports nothing else of Berth's.
//
// A container moves forward only:
//
//	NONE ──pull──▶ PULLED ──create──▶ CREATED ──start──▶ RUNNING ──────────────▶ STOPPED
//	                                                  └▶ RESOURCES_PROVISIONED ─┘
//	  │                │                   │                                        ▲
//	  └────────────────┴───────────────────┴──── (failure or stop before running) ──┘
//
// RESOURCES_PROVISIONED is the steady state of the pause container of an awsvpc task (running, with
// its network set up); RUNNING is the steady state of every other container. A task's known status
// is derived from its containers: it is RUNNING when every container that must be running has reached
// its steady state, and STOPPED when every container has stopped.
//
//	task:  NONE ──▶ PULLED ──▶ CREATED ──▶ RUNNING ──▶ STOPPED
//
// Desired status is RUNNING or STOPPED; once a task's desired status is STOPPED it never goes back.
package task

import (
	"encoding/json"
	"fmt"
)

// ContainerStatus is where a container is in its life.
type ContainerStatus int

// Container statuses, in the order a container passes through them.
const (
	ContainerNone ContainerStatus = iota
	ContainerPulled
	ContainerCreated
	ContainerRunning
	ContainerResourcesProvisioned
	ContainerStopped
)

var containerStatusNames = [...]string{"NONE", "PULLED", "CREATED", "RUNNING", "RESOURCES_PROVISIONED", "STOPPED"}

// String returns the ECS name of the status.
func (s ContainerStatus) String() string {
	if s < 0 || int(s) >= len(containerStatusNames) {
		return fmt.Sprintf("ContainerStatus(%d)", int(s))
	}
	return containerStatusNames[s]
}

// ParseContainerStatus returns the status with the given ECS name.
func ParseContainerStatus(name string) (ContainerStatus, error) {
	for i, n := range containerStatusNames {
		if n == name {
			return ContainerStatus(i), nil
		}
	}
	return 0, fmt.Errorf("unknown container status %q", name)
}

// MarshalJSON encodes the status by name.
func (s ContainerStatus) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON decodes a status name.
func (s *ContainerStatus) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	v, err := ParseContainerStatus(name)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Terminal reports whether the status is STOPPED.
func (s ContainerStatus) Terminal() bool { return s == ContainerStopped }

// TaskStatus is where a task is in its life.
type TaskStatus int

// Task statuses, in order.
const (
	TaskNone TaskStatus = iota
	TaskPulled
	TaskCreated
	TaskRunning
	TaskStopped
)

var taskStatusNames = [...]string{"NONE", "PULLED", "CREATED", "RUNNING", "STOPPED"}

// String returns the ECS name of the status.
func (s TaskStatus) String() string {
	if s < 0 || int(s) >= len(taskStatusNames) {
		return fmt.Sprintf("TaskStatus(%d)", int(s))
	}
	return taskStatusNames[s]
}

// ParseTaskStatus returns the status with the given ECS name.
func ParseTaskStatus(name string) (TaskStatus, error) {
	for i, n := range taskStatusNames {
		if n == name {
			return TaskStatus(i), nil
		}
	}
	return 0, fmt.Errorf("unknown task status %q", name)
}

// MarshalJSON encodes the status by name.
func (s TaskStatus) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON decodes a status name.
func (s *TaskStatus) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	v, err := ParseTaskStatus(name)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Terminal reports whether the status is STOPPED.
func (s TaskStatus) Terminal() bool { return s == TaskStopped }

// taskStatusOf maps a container status onto the task status it implies.
func taskStatusOf(s ContainerStatus) TaskStatus {
	switch s {
	case ContainerPulled:
		return TaskPulled
	case ContainerCreated:
		return TaskCreated
	case ContainerRunning, ContainerResourcesProvisioned:
		return TaskRunning
	case ContainerStopped:
		return TaskStopped
	default:
		return TaskNone
	}
}

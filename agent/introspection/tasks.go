package introspection

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/task"
)

// TaskSource lists the tasks the agent holds and the running containers of no known task. It must be
// safe for concurrent use and return copies.
type TaskSource interface {
	Tasks() []*task.Task
	UnknownContainers() []task.UnknownContainer
}

// UsageSource is implemented by a TaskSource that knows the latest resource use of running
// containers; /v1/tasks then shows it.
type UsageSource interface {
	// ContainerUsage returns the latest figures of the running container dockerID; ok is false when
	// there are none.
	ContainerUsage(dockerID string) (u Usage, ok bool)
}

// Usage is a container's latest resource use.
type Usage struct {
	CPUPercent  float64 // percent of one vCPU
	MemoryBytes uint64
}

// TasksResponse is the body of GET /v1/tasks. UnknownContainers is a Berth extension, absent when
// there are none.
type TasksResponse struct {
	Tasks             []TaskResponse             `json:"Tasks"`
	UnknownContainers []UnknownContainerResponse `json:"UnknownContainers,omitempty"`
}

// UnknownContainerResponse is a running container labelled as Berth's that belongs to no task the
// agent knows: the agent left it running and does not manage it. TaskArn and Name come from its
// labels; Since is when it started.
type UnknownContainerResponse struct {
	DockerID   string    `json:"DockerId"`
	DockerName string    `json:"DockerName"`
	TaskArn    string    `json:"TaskArn,omitempty"`
	Name       string    `json:"Name,omitempty"`
	Image      string    `json:"Image"`
	Since      time.Time `json:"Since,omitzero"`
}

// TaskResponse is one task in the ECS agent's introspection shape, with its statuses as ECS names
// them (backendStatus). StoppedReason, PendingReason, CPUPercent and MemoryMiB are Berth extensions;
// CPUPercent and MemoryMiB are the sums over the task's containers whose figures are known, present
// when one is.
type TaskResponse struct {
	Arn           string              `json:"Arn"`
	DesiredStatus string              `json:"DesiredStatus,omitempty"`
	KnownStatus   string              `json:"KnownStatus"`
	Family        string              `json:"Family"`
	Version       string              `json:"Version"`
	Containers    []ContainerResponse `json:"Containers"`
	StoppedReason string              `json:"StoppedReason,omitempty"`
	PendingReason string              `json:"PendingReason,omitempty"`
	CPUPercent    *float64            `json:"CPUPercent,omitempty"`
	MemoryMiB     *float64            `json:"MemoryMiB,omitempty"`
}

// ContainerResponse is one container in the ECS agent's introspection shape. KnownStatus (the
// agent's own status of the container: NONE, PULLED, CREATED, RUNNING, RESOURCES_PROVISIONED,
// STOPPED), ExitCode, Reason, Essential, CPUPercent and MemoryMiB are Berth extensions (Essential
// present only for an essential container: `berth exec` and `berth logs` pick by it); RestartCount is present
// only for a container with an enabled restart policy, CPUPercent (of one vCPU) and MemoryMiB only
// for a running container whose stats were sampled.
type ContainerResponse struct {
	DockerID     string            `json:"DockerId"`
	DockerName   string            `json:"DockerName"`
	Name         string            `json:"Name"`
	Image        string            `json:"Image"`
	ImageID      string            `json:"ImageID"`
	CreatedAt    *time.Time        `json:"CreatedAt,omitempty"`
	StartedAt    *time.Time        `json:"StartedAt,omitempty"`
	Ports        []PortResponse    `json:"Ports,omitempty"`
	Networks     []NetworkResponse `json:"Networks,omitempty"`
	Volumes      []VolumeResponse  `json:"Volumes,omitempty"`
	RestartCount *int              `json:"RestartCount,omitempty"`
	KnownStatus  string            `json:"KnownStatus"`
	ExitCode     *int              `json:"ExitCode,omitempty"`
	Reason       string            `json:"Reason,omitempty"`
	Essential    bool              `json:"Essential,omitempty"`
	CPUPercent   *float64          `json:"CPUPercent,omitempty"`
	MemoryMiB    *float64          `json:"MemoryMiB,omitempty"`
	// ManagedAgents (Berth extension) are the container's managed agents (ECS Exec's), as the ECS
	// API's DescribeTasks names their fields; left out when none.
	ManagedAgents []ManagedAgentResponse `json:"ManagedAgents,omitempty"`
}

// ManagedAgentResponse is one managed agent of a container: its status (PENDING, RUNNING, STOPPED),
// why, and when it last started; Restarts counts the restarts of its process.
type ManagedAgentResponse struct {
	Name          string     `json:"Name"`
	LastStatus    string     `json:"LastStatus"`
	Reason        string     `json:"Reason,omitempty"`
	LastStartedAt *time.Time `json:"LastStartedAt,omitempty"`
	Restarts      int        `json:"Restarts,omitempty"`
}

// VolumeResponse is one of a container's mounts as Docker last reported them.
type VolumeResponse struct {
	DockerName  string `json:"DockerName,omitempty"`
	Source      string `json:"Source,omitempty"`
	Destination string `json:"Destination,omitempty"`
}

// PortResponse is one port of a container: its binding on the host or, before Docker bound it, its
// mapping; an awsvpc task's ports are on its own address, so HostPort is the container's port.
type PortResponse struct {
	ContainerPort uint16 `json:"ContainerPort,omitempty"`
	Protocol      string `json:"Protocol,omitempty"`
	HostPort      uint16 `json:"HostPort,omitempty"`
}

// NetworkResponse is an awsvpc task's network, the same for each of its containers.
type NetworkResponse struct {
	NetworkMode   string   `json:"NetworkMode,omitempty"`
	IPv4Addresses []string `json:"IPv4Addresses,omitempty"`
}

// backendStatus is a task status as ECS names it: RUNNING and STOPPED as they are, every earlier
// status PENDING.
func backendStatus(s task.TaskStatus) string {
	switch s {
	case task.TaskRunning, task.TaskStopped:
		return s.String()
	}
	return "PENDING"
}

// taskResponse renders a task for introspection, its internal containers (the pause container)
// left out, as the ECS agent leaves them out.
func taskResponse(t *task.Task, usage UsageSource) TaskResponse {
	known, desired := backendStatus(t.KnownStatus), backendStatus(t.DesiredStatus)
	if (known == "STOPPED" && desired != "STOPPED") || (known == "RUNNING" && desired == "PENDING") {
		desired = "" // the ECS agent does not show a desired status the task is past
	}
	r := TaskResponse{Arn: t.Arn, DesiredStatus: desired, KnownStatus: known,
		Family: t.Family, Version: strconv.Itoa(t.Revision), StoppedReason: t.StoppedReason, PendingReason: t.PendingReason,
		Containers: []ContainerResponse{}}
	awsvpc := t.NetworkMode == task.NetworkAWSVPC
	for _, c := range t.Containers {
		if c.Pause {
			continue
		}
		cr := ContainerResponse{DockerID: c.DockerID, DockerName: c.DockerName, Name: c.Name, Image: c.Image,
			ImageID: c.ImageID, CreatedAt: utc(c.CreatedAt), StartedAt: utc(c.StartedAt), KnownStatus: c.KnownStatus.String(),
			ExitCode: c.ExitCode, Reason: c.Reason, Essential: c.Essential, Ports: ports(c, awsvpc)}
		for _, m := range c.Mounts {
			cr.Volumes = append(cr.Volumes, VolumeResponse{DockerName: m.Name, Source: m.Source, Destination: m.Destination})
		}
		if c.RestartPolicy != nil && c.RestartPolicy.Enabled {
			cr.RestartCount = new(c.RestartCount)
		}
		for _, ma := range c.ManagedAgents {
			cr.ManagedAgents = append(cr.ManagedAgents, ManagedAgentResponse{Name: ma.Name, LastStatus: string(ma.Status),
				Reason: ma.Reason, LastStartedAt: utc(ma.LastStartedAt), Restarts: ma.Restarts})
		}
		if usage != nil && c.DockerID != "" {
			if u, ok := usage.ContainerUsage(c.DockerID); ok {
				cpu, mem := roundTo(u.CPUPercent, 2), roundTo(float64(u.MemoryBytes)/(1<<20), 2)
				cr.CPUPercent, cr.MemoryMiB = &cpu, &mem
				r.CPUPercent, r.MemoryMiB = add(r.CPUPercent, cpu), add(r.MemoryMiB, mem)
			}
		}
		if awsvpc && t.AWSVPC != nil && t.AWSVPC.IPv4 != "" {
			cr.Networks = []NetworkResponse{{NetworkMode: string(task.NetworkAWSVPC), IPv4Addresses: []string{t.AWSVPC.IPv4}}}
		}
		r.Containers = append(r.Containers, cr)
	}
	return r
}

// ports returns a container's ports: Docker's bindings once it bound them, else the definition's
// mappings; in awsvpc the host port is the container's.
func ports(c *task.Container, awsvpc bool) []PortResponse {
	var out []PortResponse
	add := func(containerPort, hostPort uint16, protocol string) {
		if awsvpc {
			hostPort = containerPort
		}
		if protocol == "" {
			protocol = "tcp"
		}
		out = append(out, PortResponse{ContainerPort: containerPort, Protocol: protocol, HostPort: hostPort})
	}
	if len(c.NetworkBindings) > 0 {
		for _, b := range c.NetworkBindings {
			add(b.ContainerPort, b.HostPort, b.Protocol)
		}
		return out
	}
	for _, m := range c.PortMappings {
		add(m.ContainerPort, m.HostPort, m.Protocol)
	}
	return out
}

// utc returns t in UTC, or nil when it is zero.
func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// add returns sum + v, sum being nil for none yet.
func add(sum *float64, v float64) *float64 {
	if sum != nil {
		v += *sum
	}
	return &v
}

// roundTo rounds v to n decimals.
func roundTo(v float64, n int) float64 {
	p := math.Pow10(n)
	return math.Round(v*p) / p
}

// dockerShortIDLen is the longest dockerid the ECS agent matches as a prefix; a longer one must be
// a container's whole Docker ID.
const dockerShortIDLen = 12

// serveTasks answers GET /v1/tasks as the ECS agent does: every task (then, a Berth extension, the
// running containers of no known task), or with ?taskarn= the task of that ARN, or with ?dockerid=
// the task of the container with that Docker ID: the whole ID when longer than 12 characters, else
// a prefix, which must be of one container only (400 when it is of more). Both parameters are 400, a
// task not found 404, each with the ECS agent's empty task as the body.
func serveTasks(src TaskSource) http.HandlerFunc {
	usage, _ := src.(UsageSource)
	return func(w http.ResponseWriter, r *http.Request) {
		tasks := src.Tasks()
		slices.SortFunc(tasks, func(a, b *task.Task) int { return strings.Compare(a.Arn, b.Arn) })
		q := r.URL.Query()
		arn, dockerID := q.Get("taskarn"), q.Get("dockerid")
		switch {
		case q.Has("taskarn") && q.Has("dockerid"):
			writeJSON(w, http.StatusBadRequest, emptyTask())
			return
		case q.Has("taskarn"):
			var found []*task.Task
			for _, t := range tasks {
				if t.Arn == arn {
					found = append(found, t)
				}
			}
			writeMatch(w, usage, found)
			return
		case q.Has("dockerid"):
			writeMatch(w, usage, byDockerID(tasks, dockerID))
			return
		}
		out := TasksResponse{Tasks: make([]TaskResponse, 0, len(tasks))}
		for _, t := range tasks {
			out.Tasks = append(out.Tasks, taskResponse(t, usage))
		}
		for _, u := range src.UnknownContainers() {
			out.UnknownContainers = append(out.UnknownContainers, UnknownContainerResponse{DockerID: u.DockerID,
				DockerName: u.DockerName, TaskArn: u.TaskArn, Name: u.Name, Image: u.Image, Since: u.Since.UTC()})
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// byDockerID returns the task of each container that id names, by the ECS agent's rule: an id
// longer than 12 characters is a whole Docker ID, a shorter one a prefix; a task is returned once
// per container that matches, the pause container's included.
func byDockerID(tasks []*task.Task, id string) []*task.Task {
	var out []*task.Task
	for _, t := range tasks {
		for _, c := range t.Containers {
			if c.DockerID != "" && (c.DockerID == id || len(id) <= dockerShortIDLen && strings.HasPrefix(c.DockerID, id)) {
				out = append(out, t)
			}
		}
	}
	return out
}

// writeMatch answers the one matching task, 404 for none and 400 for more than one.
func writeMatch(w http.ResponseWriter, usage UsageSource, found []*task.Task) {
	switch len(found) {
	case 0:
		writeJSON(w, http.StatusNotFound, emptyTask())
	case 1:
		writeJSON(w, http.StatusOK, taskResponse(found[0], usage))
	default:
		writeJSON(w, http.StatusBadRequest, emptyTask())
	}
}

// emptyTask is the ECS agent's body of a /v1/tasks error: an empty task, its Containers null.
func emptyTask() TaskResponse { return TaskResponse{} }

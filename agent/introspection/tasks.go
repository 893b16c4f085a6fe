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

// TaskResponse is one task in the ECS agent's introspection shape. StoppedReason, PendingReason,
// CPUPercent and MemoryMiB are Berth extensions; CPUPercent and MemoryMiB are the sums over the
// task's containers whose figures are known, present when one is.
type TaskResponse struct {
	Arn           string              `json:"Arn"`
	DesiredStatus string              `json:"DesiredStatus"`
	KnownStatus   string              `json:"KnownStatus"`
	Family        string              `json:"Family"`
	Version       string              `json:"Version"`
	Containers    []ContainerResponse `json:"Containers"`
	StoppedReason string              `json:"StoppedReason,omitempty"`
	PendingReason string              `json:"PendingReason,omitempty"`
	CPUPercent    *float64            `json:"CPUPercent,omitempty"`
	MemoryMiB     *float64            `json:"MemoryMiB,omitempty"`
}

// ContainerResponse is one container in the ECS agent's introspection shape. KnownStatus, ExitCode,
// Reason, RestartCount, CPUPercent and MemoryMiB are Berth extensions; RestartCount is present only
// for a container with an enabled restart policy, CPUPercent (of one vCPU) and MemoryMiB only for a
// running container whose stats were sampled.
type ContainerResponse struct {
	DockerID     string            `json:"DockerId"`
	DockerName   string            `json:"DockerName"`
	Name         string            `json:"Name"`
	Image        string            `json:"Image"`
	ImageID      string            `json:"ImageID"`
	Ports        []PortResponse    `json:"Ports,omitempty"`
	Networks     []NetworkResponse `json:"Networks,omitempty"`
	KnownStatus  string            `json:"KnownStatus"`
	ExitCode     *int              `json:"ExitCode,omitempty"`
	Reason       string            `json:"Reason,omitempty"`
	RestartCount *int              `json:"RestartCount,omitempty"`
	CPUPercent   *float64          `json:"CPUPercent,omitempty"`
	MemoryMiB    *float64          `json:"MemoryMiB,omitempty"`
}

// PortResponse is one port binding.
type PortResponse struct {
	ContainerPort uint16 `json:"ContainerPort"`
	Protocol      string `json:"Protocol"`
	HostPort      uint16 `json:"HostPort,omitempty"`
	HostIP        string `json:"HostIp,omitempty"`
}

// NetworkResponse is one network of a container.
type NetworkResponse struct {
	NetworkMode   string   `json:"NetworkMode"`
	IPv4Addresses []string `json:"IPv4Addresses,omitempty"`
}

// taskResponse renders a task for introspection.
func taskResponse(t *task.Task, usage UsageSource) TaskResponse {
	r := TaskResponse{Arn: t.Arn, DesiredStatus: t.DesiredStatus.String(), KnownStatus: t.KnownStatus.String(),
		Family: t.Family, Version: strconv.Itoa(t.Revision), StoppedReason: t.StoppedReason, PendingReason: t.PendingReason,
		Containers: []ContainerResponse{}}
	for _, c := range t.Containers {
		cr := ContainerResponse{DockerID: c.DockerID, DockerName: c.DockerName, Name: c.Name, Image: c.Image,
			ImageID: c.ImageID, KnownStatus: c.KnownStatus.String(), ExitCode: c.ExitCode, Reason: c.Reason}
		if c.RestartPolicy != nil && c.RestartPolicy.Enabled {
			cr.RestartCount = new(c.RestartCount)
		}
		if usage != nil && c.DockerID != "" {
			if u, ok := usage.ContainerUsage(c.DockerID); ok {
				cpu, mem := roundTo(u.CPUPercent, 2), roundTo(float64(u.MemoryBytes)/(1<<20), 2)
				cr.CPUPercent, cr.MemoryMiB = &cpu, &mem
				r.CPUPercent, r.MemoryMiB = add(r.CPUPercent, cpu), add(r.MemoryMiB, mem)
			}
		}
		for _, b := range c.NetworkBindings {
			cr.Ports = append(cr.Ports, PortResponse{ContainerPort: b.ContainerPort, Protocol: b.Protocol, HostPort: b.HostPort, HostIP: b.BindIP})
		}
		for _, n := range c.Networks {
			cr.Networks = append(cr.Networks, NetworkResponse{NetworkMode: n.Mode, IPv4Addresses: n.IPv4Addresses})
		}
		if t.NetworkMode == task.NetworkAWSVPC && t.AWSVPC != nil && t.AWSVPC.IPv4 != "" {
			// Every container of an awsvpc task shares the task's namespace and address.
			cr.Networks = []NetworkResponse{{NetworkMode: string(task.NetworkAWSVPC), IPv4Addresses: []string{t.AWSVPC.IPv4}}}
		}
		r.Containers = append(r.Containers, cr)
	}
	return r
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

// serveTasks answers GET /v1/tasks (every task, then the running containers of no known task), and
// with ?taskarn= or ?dockerid= the one matching task (404 when none). A dockerid matches a full ID or a prefix of at least 12 characters, like the Docker CLI.
func serveTasks(src TaskSource) http.HandlerFunc {
	usage, _ := src.(UsageSource)
	return func(w http.ResponseWriter, r *http.Request) {
		tasks := src.Tasks()
		slices.SortFunc(tasks, func(a, b *task.Task) int { return strings.Compare(a.Arn, b.Arn) })
		q := r.URL.Query()
		arn, dockerID := q.Get("taskarn"), q.Get("dockerid")
		switch {
		case q.Has("taskarn") && q.Has("dockerid"):
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "give taskarn or dockerid, not both"})
			return
		case q.Has("taskarn"):
			for _, t := range tasks {
				if t.Arn == arn {
					writeJSON(w, http.StatusOK, taskResponse(t, usage))
					return
				}
			}
			writeJSON(w, http.StatusNotFound, errorBody{Error: "no task with ARN " + strconv.Quote(arn)})
			return
		case q.Has("dockerid"):
			if len(dockerID) >= 12 {
				for _, t := range tasks {
					for _, c := range t.Containers {
						if c.DockerID != "" && strings.HasPrefix(c.DockerID, dockerID) {
							writeJSON(w, http.StatusOK, taskResponse(t, usage))
							return
						}
					}
				}
			}
			writeJSON(w, http.StatusNotFound, errorBody{Error: "no task with a container whose Docker ID is " + strconv.Quote(dockerID)})
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

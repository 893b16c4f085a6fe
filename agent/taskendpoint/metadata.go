package taskendpoint

import (
	"net/http"
	"strconv"
	"time"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// The labels every container Berth creates carries (see the engine's labels); Docker shows them, and
// so do the metadata endpoints.
const (
	labelManaged       = "com.berth-agent.managed"
	labelTaskARN       = "com.amazonaws.ecs.task-arn"
	labelContainerName = "com.amazonaws.ecs.container-name"
	labelTaskFamily    = "com.amazonaws.ecs.task-definition-family"
	labelTaskRevision  = "com.amazonaws.ecs.task-definition-version"
	labelCluster       = "com.amazonaws.ecs.cluster"
)

// taskResponse is a task as the metadata endpoints show it. LaunchType, Errors, VPCID, ServiceName,
// FaultInjectionEnabled and AvailabilityZoneID are v4's; v2 and v3 leave them out. The tags are
// only /taskWithTags' (and v2's /metadataWithTags').
type taskResponse struct {
	Cluster               string              `json:"Cluster"`
	TaskARN               string              `json:"TaskARN"`
	Family                string              `json:"Family"`
	Revision              string              `json:"Revision"`
	DesiredStatus         string              `json:"DesiredStatus,omitempty"`
	KnownStatus           string              `json:"KnownStatus"`
	Containers            []containerResponse `json:"Containers,omitempty"`
	Limits                *taskLimits         `json:"Limits,omitempty"`
	PullStartedAt         *time.Time          `json:"PullStartedAt,omitempty"`
	PullStoppedAt         *time.Time          `json:"PullStoppedAt,omitempty"`
	ExecutionStoppedAt    *time.Time          `json:"ExecutionStoppedAt,omitempty"`
	AvailabilityZone      string              `json:"AvailabilityZone,omitempty"`
	TaskTags              map[string]string   `json:"TaskTags,omitempty"`
	ContainerInstanceTags map[string]string   `json:"ContainerInstanceTags,omitempty"`
	LaunchType            string              `json:"LaunchType,omitempty"`
	Errors                []errorResponse     `json:"Errors,omitempty"`
	VPCID                 string              `json:"VPCID,omitempty"`
	ServiceName           string              `json:"ServiceName,omitempty"`
	FaultInjectionEnabled *bool               `json:"FaultInjectionEnabled,omitempty"`
	AvailabilityZoneID    string              `json:"AvailabilityZoneID,omitempty"`
}

// errorResponse is one failure to get the tags of /taskWithTags (v4): which field it left out, the
// ECS API's error code and message (the error's text when the API did not answer), the HTTP status
// and request ID of the answer, and the resource asked about.
type errorResponse struct {
	ErrorField   string `json:"ErrorField,omitempty"`
	ErrorCode    string `json:"ErrorCode,omitempty"`
	ErrorMessage string `json:"ErrorMessage,omitempty"`
	StatusCode   int    `json:"StatusCode,omitempty"`
	RequestID    string `json:"RequestId,omitempty"`
	ResourceARN  string `json:"ResourceARN,omitempty"`
}

// taskLimits are the task-level limits: CPU in vCPUs, memory in MiB, each left out when unset.
type taskLimits struct {
	CPU    *float64 `json:"CPU,omitempty"`
	Memory *int64   `json:"Memory,omitempty"`
}

// containerLimits are a container's limits: CPU units (at least 2, what Docker is given for less)
// and memory in MiB, always present.
type containerLimits struct {
	CPU    float64 `json:"CPU"`
	Memory int64   `json:"Memory"`
}

// minimumCPUUnits is the least CPU a container is shown with: Docker gets 2 shares for 0 and 1.
const minimumCPUUnits = 2

// containerResponse is a container as the metadata endpoints show it. LogDriver, LogOptions,
// ContainerARN and RestartCount are v4's.
type containerResponse struct {
	DockerID      string            `json:"DockerId"`
	Name          string            `json:"Name"`
	DockerName    string            `json:"DockerName"`
	Image         string            `json:"Image"`
	ImageID       string            `json:"ImageID"`
	Ports         []portResponse    `json:"Ports,omitempty"`
	Labels        map[string]string `json:"Labels,omitempty"`
	DesiredStatus string            `json:"DesiredStatus"`
	KnownStatus   string            `json:"KnownStatus"`
	ExitCode      *int              `json:"ExitCode,omitempty"`
	Limits        containerLimits   `json:"Limits"`
	CreatedAt     *time.Time        `json:"CreatedAt,omitempty"`
	StartedAt     *time.Time        `json:"StartedAt,omitempty"`
	FinishedAt    *time.Time        `json:"FinishedAt,omitempty"`
	Type          string            `json:"Type"`
	Networks      []networkResponse `json:"Networks,omitempty"`
	Health        *healthResponse   `json:"Health,omitempty"`
	Volumes       []volumeResponse  `json:"Volumes,omitempty"`
	LogDriver     string            `json:"LogDriver,omitempty"`
	LogOptions    map[string]string `json:"LogOptions,omitempty"`
	ContainerARN  string            `json:"ContainerARN,omitempty"`
	RestartCount  *int              `json:"RestartCount,omitempty"` // v4, with an enabled restart policy
	// ManagedAgents (v4, Berth extension) are the container's ECS Exec agent's state, as the ECS
	// API's DescribeTasks names its fields; left out when none.
	ManagedAgents []managedAgentResponse `json:"ManagedAgents,omitempty"`
}

// managedAgentResponse is a container's managed agent: its status (PENDING, RUNNING, STOPPED), why,
// and when it last started.
type managedAgentResponse struct {
	Name          string     `json:"Name"`
	LastStatus    string     `json:"LastStatus"`
	Reason        string     `json:"Reason,omitempty"`
	LastStartedAt *time.Time `json:"LastStartedAt,omitempty"`
}

// volumeResponse is one mount of a container, as Docker reports it.
type volumeResponse struct {
	DockerName  string `json:"DockerName,omitempty"`
	Source      string `json:"Source,omitempty"`
	Destination string `json:"Destination,omitempty"`
}

// portResponse is one port of a container.
type portResponse struct {
	ContainerPort uint16 `json:"ContainerPort,omitempty"`
	Protocol      string `json:"Protocol,omitempty"`
	HostPort      uint16 `json:"HostPort,omitempty"`
	HostIP        string `json:"HostIp,omitempty"`
}

// networkResponse is one network of a container; the interface fields are v4's, for awsvpc tasks
// with an ENI.
type networkResponse struct {
	NetworkMode              string   `json:"NetworkMode"`
	IPv4Addresses            []string `json:"IPv4Addresses,omitempty"`
	AttachmentIndex          *int     `json:"AttachmentIndex,omitempty"`
	MACAddress               string   `json:"MACAddress,omitempty"`
	IPv4SubnetCIDRBlock      string   `json:"IPv4SubnetCIDRBlock,omitempty"`
	PrivateDNSName           string   `json:"PrivateDNSName,omitempty"`
	DomainNameServers        []string `json:"DomainNameServers,omitempty"`
	DomainNameSearchList     []string `json:"DomainNameSearchList,omitempty"`
	SubnetGatewayIpv4Address string   `json:"SubnetGatewayIpv4Address,omitempty"`
}

// healthResponse is a container's health, for containers with a health check: its status (left
// out while UNKNOWN), when it last changed, and the output and, for UNHEALTHY, the exit code of the
// check that changed it.
type healthResponse struct {
	Status   string     `json:"status,omitempty"`
	Since    *time.Time `json:"statusSince,omitempty"`
	ExitCode int        `json:"exitCode,omitempty"`
	Output   string     `json:"output,omitempty"`
}

// shape says which version's fields a response carries.
type shape int

const (
	shapeV2 shape = 2 // no Docker networks for bridge and host containers
	shapeV3 shape = 3
	shapeV4 shape = 4 // adds log driver, container ARN, ENI fields, launch type, service, VPC, fault injection
)

// newTaskResponse renders a task and its containers: in v2 and v3 those Docker has, in v4 those
// pulled too, as the ECS agent lists them.
func (h *Handler) newTaskResponse(t *task.Task, s shape) taskResponse {
	r := taskResponse{
		Cluster:          h.instance.Cluster,
		TaskARN:          t.Arn,
		Family:           t.Family,
		Revision:         strconv.Itoa(t.Revision),
		DesiredStatus:    t.DesiredStatus.String(),
		KnownStatus:      t.KnownStatus.String(),
		AvailabilityZone: h.instance.AvailabilityZone,
	}
	if t.CPU != 0 || t.Memory != 0 {
		r.Limits = &taskLimits{}
		if t.CPU != 0 {
			vcpu := float64(t.CPU) / 1024
			r.Limits.CPU = &vcpu
		}
		if t.Memory != 0 {
			mem := int64(t.Memory)
			r.Limits.Memory = &mem
		}
	}
	r.ExecutionStoppedAt = utc(t.StoppedAt)
	r.PullStartedAt, r.PullStoppedAt = utc(t.PullStartedAt), utc(t.PullStoppedAt)
	for _, c := range t.Containers {
		if c.DockerID == "" && (s != shapeV4 || c.KnownStatus < task.ContainerPulled) {
			continue
		}
		r.Containers = append(r.Containers, h.newContainerResponse(t, c, s))
	}
	if s == shapeV4 {
		r.LaunchType = t.LaunchType
		r.ServiceName = t.ServiceName
		r.VPCID = h.instance.VPCID
		r.AvailabilityZoneID = h.instance.AvailabilityZoneID
		enabled := t.EnableFaultInjection
		r.FaultInjectionEnabled = &enabled
	}
	return r
}

// newContainerResponse renders one container of t.
func (h *Handler) newContainerResponse(t *task.Task, c *task.Container, s shape) containerResponse {
	r := containerResponse{
		DockerID:      c.DockerID,
		Name:          c.Name,
		DockerName:    c.DockerName,
		Image:         c.Image,
		ImageID:       c.ImageID,
		Labels:        h.labels(t, c),
		DesiredStatus: c.DesiredStatus.String(),
		KnownStatus:   c.KnownStatus.String(),
		ExitCode:      c.ExitCode,
		Limits:        containerLimits{CPU: float64(max(c.CPU, minimumCPUUnits)), Memory: int64(c.Memory)},
		CreatedAt:     utc(c.CreatedAt),
		StartedAt:     utc(c.StartedAt),
		FinishedAt:    utc(c.FinishedAt),
		Type:          "NORMAL",
		Ports:         ports(t, c, s),
		Networks:      networks(t, c, s),
	}
	if c.Pause {
		r.Type = "CNI_PAUSE"
	}
	if c.HealthCheck != nil {
		r.Health = &healthResponse{Since: utc(c.HealthSince), Output: c.HealthOutput, ExitCode: c.HealthExitCode}
		if c.Health != "" && c.Health != task.HealthUnknown {
			r.Health.Status = string(c.Health)
		}
	}
	for _, m := range c.Mounts {
		r.Volumes = append(r.Volumes, volumeResponse{DockerName: m.Name, Source: m.Source, Destination: m.Destination})
	}
	if s == shapeV4 {
		r.ContainerARN = c.ARN
		if c.RestartPolicy != nil && c.RestartPolicy.Enabled {
			r.RestartCount = new(c.RestartCount)
		}
		for _, ma := range c.ManagedAgents {
			r.ManagedAgents = append(r.ManagedAgents, managedAgentResponse{Name: ma.Name, LastStatus: string(ma.Status),
				Reason: ma.Reason, LastStartedAt: utc(ma.LastStartedAt)})
		}
		if c.LogConfiguration != nil {
			r.LogDriver, r.LogOptions = c.LogConfiguration.LogDriver, c.LogConfiguration.Options
		}
	}
	return r
}

// labels returns the container's Docker labels: its dockerLabels plus those Berth adds, which win.
func (h *Handler) labels(t *task.Task, c *task.Container) map[string]string {
	out := make(map[string]string, len(c.DockerLabels)+6)
	for k, v := range c.DockerLabels {
		out[k] = v
	}
	out[labelManaged] = "true"
	out[labelTaskARN] = t.Arn
	out[labelContainerName] = c.Name
	out[labelTaskFamily] = t.Family
	out[labelTaskRevision] = strconv.Itoa(t.Revision)
	out[labelCluster] = h.instance.Cluster
	return out
}

// ports returns the container's ports: in awsvpc mode its port mappings, where the host port is the
// container port; otherwise the bindings Docker made, with the host address in v4 only.
func ports(t *task.Task, c *task.Container, s shape) []portResponse {
	var out []portResponse
	if t.NetworkMode == task.NetworkAWSVPC {
		for _, pm := range c.PortMappings {
			out = append(out, portResponse{ContainerPort: pm.ContainerPort, Protocol: protocol(pm.Protocol), HostPort: pm.ContainerPort})
		}
		return out
	}
	for _, b := range c.NetworkBindings {
		p := portResponse{ContainerPort: b.ContainerPort, Protocol: protocol(b.Protocol), HostPort: b.HostPort}
		if s == shapeV4 {
			p.HostIP = b.BindIP
		}
		out = append(out, p)
	}
	return out
}

func protocol(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}

// networks returns the container's networks. Every container of an awsvpc task shows the task's one
// awsvpc network (with the ENI's properties in v4); others show the Docker networks they are on,
// except in v2, which shows none.
func networks(t *task.Task, c *task.Container, s shape) []networkResponse {
	if t.NetworkMode == task.NetworkAWSVPC {
		n := networkResponse{NetworkMode: string(task.NetworkAWSVPC)}
		eni := t.ENI
		switch {
		case eni != nil && eni.IPv4.IsValid():
			n.IPv4Addresses = []string{eni.IPv4.Addr().String()}
		case t.AWSVPC != nil && t.AWSVPC.IPv4 != "":
			n.IPv4Addresses = []string{t.AWSVPC.IPv4}
		}
		if s == shapeV4 && eni != nil {
			index := 0 // Berth attaches one ENI per task
			n.AttachmentIndex = &index
			n.MACAddress = eni.MAC
			n.PrivateDNSName = eni.PrivateDNSName
			if eni.IPv4.IsValid() {
				n.IPv4SubnetCIDRBlock = eni.IPv4.Masked().String()
				if eni.Gateway.IsValid() {
					n.SubnetGatewayIpv4Address = eni.Gateway.String() + "/" + strconv.Itoa(eni.IPv4.Bits())
				}
			}
			n.DomainNameServers = eni.DNSServers
			n.DomainNameSearchList = eni.SearchDomains
		}
		if n.IPv4Addresses == nil && eni == nil {
			return nil // not set up yet
		}
		return []networkResponse{n}
	}
	if s == shapeV2 {
		return nil
	}
	var out []networkResponse
	for _, n := range c.Networks {
		addrs := n.IPv4Addresses
		if len(addrs) == 0 {
			addrs = []string{""} // Docker's empty address, as the ECS agent shows it (network mode host)
		}
		out = append(out, networkResponse{NetworkMode: n.Mode, IPv4Addresses: addrs})
	}
	return out
}

// utc returns a pointer to t in UTC, or nil for the zero time.
func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// serveToken answers the v3 and v4 requests, for the task and container ByToken found (found false:
// nobody holds the token).
func (h *Handler) serveToken(w http.ResponseWriter, r *http.Request, rt route, t *task.Task, name string, found bool) {
	var c *task.Container
	if found {
		c = t.Container(name)
	}
	if c == nil {
		h.log.Debug("task metadata token unknown", "token", taskcreds.ShortID(rt.arg), "api_version", rt.version)
		status, body := unknownToken(rt)
		writeJSON(w, status, body)
		return
	}
	s := shape(rt.version)
	switch rt.kind {
	case tokenContainer:
		writeJSON(w, http.StatusOK, h.newContainerResponse(t, c, s))
	case tokenTask:
		writeJSON(w, http.StatusOK, h.newTaskResponse(t, s))
	case tokenTaskWithTags:
		resp := h.newTaskResponse(t, s)
		h.addTags(r, t, &resp, s == shapeV4)
		writeJSON(w, http.StatusOK, resp)
	case tokenContainerStats:
		h.serveContainerStats(w, r, t, c, s)
	case tokenTaskStats:
		h.serveTaskStats(w, r, t, s)
	}
}

// unknownToken returns the ECS agent's answer to a token nobody holds: 404 in v4; in v3, 500 for
// metadata and 400 for stats. The body is a JSON string naming the handler, what it looked up
// first (the container for container metadata, the task for the rest) and the token.
func unknownToken(rt route) (int, string) {
	const (
		noContainer = "unable to get container ID from request: unable to get docker ID from v3 endpoint ID: "
		noTask      = "unable to get task arn from request: unable to get task Arn from v3 endpoint ID: "
	)
	handler, what, stats := "container metadata handler", noContainer, false
	switch rt.kind {
	case tokenTask, tokenTaskWithTags:
		handler, what = "task metadata handler", noTask
	case tokenContainerStats:
		handler, what, stats = "container stats handler", noTask, true
	case tokenTaskStats:
		handler, what, stats = "task stats handler", noTask, true
	}
	status := http.StatusNotFound
	switch {
	case rt.version == 3 && stats:
		status = http.StatusBadRequest
	case rt.version == 3:
		status = http.StatusInternalServerError
	}
	return status, "V" + strconv.Itoa(rt.version) + " " + handler + ": " + what + rt.arg
}

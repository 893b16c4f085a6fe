package task

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// NetworkMode is a task definition's networkMode.
type NetworkMode string

// The network modes Berth runs.
const (
	NetworkBridge NetworkMode = "bridge"
	NetworkHost   NetworkMode = "host"
	NetworkNone   NetworkMode = "none"
	NetworkAWSVPC NetworkMode = "awsvpc"
)

// Condition is a dependsOn condition.
type Condition string

// The dependsOn conditions of ECS.
const (
	ConditionStart    Condition = "START"
	ConditionComplete Condition = "COMPLETE"
	ConditionSuccess  Condition = "SUCCESS"
	ConditionHealthy  Condition = "HEALTHY"
)

// HealthStatus is a container's health as its health check reports it.
type HealthStatus string

// Health statuses, as ECS names them.
const (
	HealthUnknown   HealthStatus = "UNKNOWN"
	HealthHealthy   HealthStatus = "HEALTHY"
	HealthUnhealthy HealthStatus = "UNHEALTHY"
)

// StopReasonEssentialExited is the stop reason of a task whose essential container stopped.
const StopReasonEssentialExited = "Essential container in task exited"

// KeyValue is one environment variable.
type KeyValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// PortMapping maps a container port to a host port; HostPort 0 asks for a dynamic port in bridge mode.
type PortMapping struct {
	ContainerPort uint16 `json:"containerPort"`
	HostPort      uint16 `json:"hostPort"`
	Protocol      string `json:"protocol"` // tcp or udp
	// ContainerPortRange, when set ("8000-8010"), maps a range of ports instead of ContainerPort:
	// to the same host ports in host and awsvpc mode, to a range of host ports the agent picks from
	// ECS_DYNAMIC_HOST_PORT_RANGE in bridge mode.
	ContainerPortRange string `json:"containerPortRange,omitempty"`
}

// NetworkBinding is a port binding as Docker made it.
type NetworkBinding struct {
	BindIP        string `json:"bindIP"`
	ContainerPort uint16 `json:"containerPort"`
	HostPort      uint16 `json:"hostPort"`
	Protocol      string `json:"protocol"`
}

// Network is one network a container is attached to, with its addresses.
type Network struct {
	Mode          string   `json:"mode"`
	IPv4Addresses []string `json:"ipv4Addresses,omitempty"`
}

// MountPoint mounts a task volume into a container.
type MountPoint struct {
	SourceVolume  string `json:"sourceVolume"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// VolumeFrom mounts every volume of another container of the task.
type VolumeFrom struct {
	SourceContainer string `json:"sourceContainer"`
	ReadOnly        bool   `json:"readOnly"`
}

// Dependency is one dependsOn entry.
type Dependency struct {
	ContainerName string    `json:"containerName"`
	Condition     Condition `json:"condition"`
}

// HealthCheck is a container health check; durations are already defaulted.
type HealthCheck struct {
	Command     []string      `json:"command"`
	Interval    time.Duration `json:"interval"`
	Timeout     time.Duration `json:"timeout"`
	Retries     int           `json:"retries"`
	StartPeriod time.Duration `json:"startPeriod"`
}

// Ulimit is one resource limit.
type Ulimit struct {
	Name      string `json:"name"`
	SoftLimit int64  `json:"softLimit"`
	HardLimit int64  `json:"hardLimit"`
}

// LogConfiguration selects a Docker logging driver.
type LogConfiguration struct {
	LogDriver     string            `json:"logDriver"`
	Options       map[string]string `json:"options,omitempty"`
	SecretOptions []Secret          `json:"secretOptions,omitempty"`
}

// FirelensConfiguration makes a container its task's log router (FireLens): the containers of the
// task that log with the awsfirelens driver send their output to it, and the agent writes its
// configuration.
type FirelensConfiguration struct {
	// Type is the router: FirelensFluentbit or FirelensFluentd.
	Type string `json:"type"`
	// Options are the definition's firelensConfiguration options: enable-ecs-log-metadata,
	// config-file-type (file or s3) and config-file-value.
	Options map[string]string `json:"options,omitempty"`
}

// The FireLens router types and the log driver of the containers that log through the router.
const (
	FirelensFluentbit = "fluentbit"
	FirelensFluentd   = "fluentd"
	LogDriverFirelens = "awsfirelens"
)

// Volume is a task volume. Exactly one of Host and Docker is set. A Host volume without a SourcePath
// is a task-scoped empty volume that lives as long as the task.
type Volume struct {
	Name   string        `json:"name"`
	Host   *HostVolume   `json:"host,omitempty"`
	Docker *DockerVolume `json:"docker,omitempty"`
}

// HostVolume is a bind mount of a host path, or a task-scoped empty volume when SourcePath is empty.
type HostVolume struct {
	SourcePath string `json:"sourcePath,omitempty"`
}

// DockerVolume is a Docker named volume (dockerVolumeConfiguration).
type DockerVolume struct {
	Scope         string            `json:"scope"` // task or shared
	Autoprovision bool              `json:"autoprovision"`
	Driver        string            `json:"driver,omitempty"`
	DriverOpts    map[string]string `json:"driverOpts,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// ECRAuth says how a container's image is pulled from Amazon ECR when the agent's own credentials
// are not the ones to use (ACS's registryAuthentication of type ecr).
type ECRAuth struct {
	// UseExecutionRole pulls an ECR image with a token fetched with the task's execution role
	// (ExecutionRoleArn, its credentials under ExecutionCredentialsID). An image outside ECR is
	// pulled as any other.
	UseExecutionRole bool `json:"useExecutionRole,omitempty"`
	// Region and RegistryID name the image's ECR registry, and EndpointOverride the ECR API endpoint,
	// as the control plane sent them; empty: read from the image's host, and the SDK's endpoint.
	Region           string `json:"region,omitempty"`
	RegistryID       string `json:"registryId,omitempty"`
	EndpointOverride string `json:"endpointOverride,omitempty"`
}

// Container is one container of a task: its definition and its runtime state.
type Container struct {
	// Definition.
	Name                   string            `json:"name"`
	Image                  string            `json:"image"`
	CPU                    int               `json:"cpu,omitempty"`
	Memory                 int               `json:"memory,omitempty"`            // MiB, hard limit
	MemoryReservation      int               `json:"memoryReservation,omitempty"` // MiB, soft limit
	Essential              bool              `json:"essential"`
	EntryPoint             []string          `json:"entryPoint,omitempty"`
	Command                []string          `json:"command,omitempty"`
	Environment            []KeyValue        `json:"environment,omitempty"`
	PortMappings           []PortMapping     `json:"portMappings,omitempty"`
	MountPoints            []MountPoint      `json:"mountPoints,omitempty"`
	VolumesFrom            []VolumeFrom      `json:"volumesFrom,omitempty"`
	DependsOn              []Dependency      `json:"dependsOn,omitempty"`
	HealthCheck            *HealthCheck      `json:"healthCheck,omitempty"`
	StopTimeout            time.Duration     `json:"stopTimeout,omitempty"`  // 0: the agent's default
	StartTimeout           time.Duration     `json:"startTimeout,omitempty"` // 0: the agent's default
	User                   string            `json:"user,omitempty"`
	WorkingDirectory       string            `json:"workingDirectory,omitempty"`
	Ulimits                []Ulimit          `json:"ulimits,omitempty"`
	DockerLabels           map[string]string `json:"dockerLabels,omitempty"`
	LogConfiguration       *LogConfiguration `json:"logConfiguration,omitempty"`
	Privileged             bool              `json:"privileged,omitempty"`
	ReadonlyRootFilesystem bool              `json:"readonlyRootFilesystem,omitempty"`
	InitProcessEnabled     bool              `json:"initProcessEnabled,omitempty"`
	Linux                  *LinuxParameters  `json:"linux,omitempty"`
	Links                  []string          `json:"links,omitempty"` // name:alias or name, bridge mode
	Hostname               string            `json:"hostname,omitempty"`
	DNSServers             []string          `json:"dnsServers,omitempty"`
	DNSSearchDomains       []string          `json:"dnsSearchDomains,omitempty"`
	ExtraHosts             []HostEntry       `json:"extraHosts,omitempty"`
	SystemControls         []SystemControl   `json:"systemControls,omitempty"`
	DockerSecurityOptions  []string          `json:"dockerSecurityOptions,omitempty"`
	PseudoTerminal         bool              `json:"pseudoTerminal,omitempty"`
	Interactive            bool              `json:"interactive,omitempty"`
	DisableNetworking      bool              `json:"disableNetworking,omitempty"`
	// Secrets and EnvironmentFiles add to the environment, LogConfiguration.SecretOptions to the log
	// driver's options, and RepositoryCredentials authenticates the pull: all fetched with the task's
	// execution role when the container is created, never stored.
	Secrets               []Secret               `json:"secrets,omitempty"`
	EnvironmentFiles      []EnvironmentFile      `json:"environmentFiles,omitempty"`
	RepositoryCredentials *RepositoryCredentials `json:"repositoryCredentials,omitempty"`
	// LogsAuthExecutionRole gives the awslogs driver the execution role's credentials (ACS's
	// logsAuthStrategy ExecutionRole).
	LogsAuthExecutionRole bool           `json:"logsAuthExecutionRole,omitempty"`
	RestartPolicy         *RestartPolicy `json:"restartPolicy,omitempty"`
	// ECRAuth, when set, says how the image is pulled from ECR; nil: with the agent's own credentials.
	ECRAuth *ECRAuth `json:"ecrAuth,omitempty"`
	// Pause marks the pause container Berth adds to an awsvpc task; it is not in the definition.
	Pause bool `json:"pause,omitempty"`
	// MetadataToken identifies the container to the task metadata endpoint (the last part of
	// ECS_CONTAINER_METADATA_URI_V4): random, given when the task reaches the engine, never changed.
	MetadataToken string `json:"metadataToken,omitempty"`

	// Runtime state.
	DesiredStatus   ContainerStatus  `json:"desiredStatus"`
	KnownStatus     ContainerStatus  `json:"knownStatus"`
	DockerID        string           `json:"dockerId,omitempty"`
	DockerName      string           `json:"dockerName,omitempty"`
	ImageID         string           `json:"imageId,omitempty"`
	ExitCode        *int             `json:"exitCode,omitempty"`
	Reason          string           `json:"reason,omitempty"`
	Health          HealthStatus     `json:"health,omitempty"`
	NetworkBindings []NetworkBinding `json:"networkBindings,omitempty"`
	Networks        []Network        `json:"networks,omitempty"`
	CreatedAt       time.Time        `json:"createdAt,omitzero"`
	StartedAt       time.Time        `json:"startedAt,omitzero"`
	FinishedAt      time.Time        `json:"finishedAt,omitzero"`
	// RestartCount counts the restarts of RestartPolicy; RestartedAt is the last one.
	RestartCount int       `json:"restartCount,omitempty"`
	RestartedAt  time.Time `json:"restartedAt,omitzero"`

	// ImageDigest is the manifest digest of the image as pulled ("sha256:…"), which state changes
	// report: the one pinned in Image, else the one of the image's repo digests for Image's
	// repository; empty when the image has none (built or loaded on the host).
	ImageDigest string `json:"imageDigest,omitempty"`

	// ARN is the container's ARN as the control plane gave it (ACS containerArn); empty for a
	// container no control plane knows (static tasks).
	ARN string `json:"arn,omitempty"`
	// HealthSince is when Health last changed; HealthOutput the output of the health check run
	// that changed it (at most 1024 bytes, as Docker keeps); HealthExitCode that run's exit code,
	// set when it made the container unhealthy and kept until the next such change.
	HealthSince    time.Time `json:"healthSince,omitzero"`
	HealthOutput   string    `json:"healthOutput,omitempty"`
	HealthExitCode int       `json:"healthExitCode,omitempty"`
	// Mounts are the container's mounts as Docker last reported them (its inspect's Mounts).
	Mounts []Mount `json:"mounts,omitempty"`
	// ManagedAgents are the agents ECS asked to run inside the container (ECS Exec's), with their
	// state; Clone copies them.
	ManagedAgents []ManagedAgent `json:"managedAgents,omitempty"`
	// Firelens, when set, makes the container its task's log router (firelensConfiguration).
	Firelens *FirelensConfiguration `json:"firelensConfiguration,omitempty"`
}

// Mount is one mount of a running container as Docker reports it: the Docker volume's name (empty
// for a bind mount), the host path and the path in the container.
type Mount struct {
	Name        string `json:"name,omitempty"`
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
}

// SteadyState is the status the container settles in while its task runs.
func (c *Container) SteadyState() ContainerStatus {
	if c.Pause {
		return ContainerResourcesProvisioned
	}
	return ContainerRunning
}

// Started reports whether the container has reached its steady state at some point (it may have
// stopped since).
func (c *Container) Started() bool {
	return !c.StartedAt.IsZero() || c.KnownStatus == ContainerRunning || c.KnownStatus == ContainerResourcesProvisioned
}

// ENI is the elastic network interface ECS attached to the host for an awsvpc task.
// Its addresses are parsed where it arrives (see acs.TranslateTask), so the engine never meets a
// malformed one.
type ENI struct {
	AttachmentArn string       `json:"attachmentArn,omitempty"`
	MAC           string       `json:"mac"`
	IPv4          netip.Prefix `json:"ipv4Cidr"` // primary address with the subnet's prefix, e.g. 10.0.1.5/24
	Gateway       netip.Addr   `json:"gateway"`  // the subnet gateway's address
	DNSServers    []string     `json:"dnsServers,omitempty"`
	SearchDomains []string     `json:"searchDomains,omitempty"`
	// PrivateDNSName is the ENI's private DNS name (ip-10-0-1-5.ec2.internal), when ECS gave one.
	PrivateDNSName string `json:"privateDnsName,omitempty"`
}

// AWSVPC is what Berth set up for an awsvpc task's network namespace.
type AWSVPC struct {
	NetNS      string `json:"netns"`              // the pause container's namespace, e.g. /proc/1234/ns/net
	IPv4       string `json:"ipv4"`               // the task's address on eth0 (the ENI, or the local network)
	BridgeIPv4 string `json:"bridgeIpv4"`         // its address on the task bridge (ecs-eth0)
	TornDown   bool   `json:"tornDown,omitempty"` // the networking was deleted
}

// Task is one task: its definition, its containers and its state.
type Task struct {
	Arn         string      `json:"arn"`
	Family      string      `json:"family"`
	Revision    int         `json:"revision"`
	NetworkMode NetworkMode `json:"networkMode"`
	CPU         int         `json:"cpu,omitempty"`    // CPU units for the whole task, 0 when unset
	Memory      int         `json:"memory,omitempty"` // MiB for the whole task, 0 when unset
	// PidMode and IpcMode share a namespace among the task's containers (task) or with the host
	// (host); empty: each container has its own.
	PidMode    string       `json:"pidMode,omitempty"`
	IpcMode    string       `json:"ipcMode,omitempty"`
	Volumes    []Volume     `json:"volumes,omitempty"`
	Containers []*Container `json:"containers"`
	// Static marks a task of ECS_STATIC_TASKS_DIR: the host's own, unknown to any control plane.
	Static bool `json:"static,omitempty"`
	// ENI is the interface ECS attached for an awsvpc task; nil in local mode.
	ENI *ENI `json:"eni,omitempty"`
	// AWSVPC is set once the task's network namespace is set up.
	AWSVPC *AWSVPC `json:"awsvpc,omitempty"`
	// RoleArn is the task role its containers get credentials of (taskRoleArn); ExecutionRoleArn the
	// role the agent acts with for the task (executionRoleArn). Either may be empty.
	RoleArn          string `json:"roleArn,omitempty"`
	ExecutionRoleArn string `json:"executionRoleArn,omitempty"`
	// CredentialsID and ExecutionCredentialsID name the roles' credentials at the task endpoint: the
	// control plane's IDs in ecs mode, random ones otherwise. The credentials themselves are never
	// part of the task (nor of berth.db).
	CredentialsID          string `json:"credentialsId,omitempty"`
	ExecutionCredentialsID string `json:"executionCredentialsId,omitempty"`

	DesiredStatus TaskStatus `json:"desiredStatus"`
	KnownStatus   TaskStatus `json:"knownStatus"`
	StoppedReason string     `json:"stoppedReason,omitempty"`
	PendingReason string     `json:"pendingReason,omitempty"` // why the task waits (host resources, networking)
	CreatedAt     time.Time  `json:"createdAt,omitzero"`
	PullStartedAt time.Time  `json:"pullStartedAt,omitzero"` // the first image pull began
	PullStoppedAt time.Time  `json:"pullStoppedAt,omitzero"` // the last image pull ended
	StartedAt     time.Time  `json:"startedAt,omitzero"`
	StoppedAt     time.Time  `json:"stoppedAt,omitzero"`

	// ServiceName is the ECS service the task belongs to and LaunchType how it was launched (EC2,
	// EXTERNAL), as the control plane said (ACS serviceName, launchType); empty when it said nothing.
	ServiceName string `json:"serviceName,omitempty"`
	LaunchType  string `json:"launchType,omitempty"`

	// EnableFaultInjection lets the task's containers inject network faults into its own network
	// through the task endpoint's fault routes (the definition's enableFaultInjection; awsvpc and
	// host network modes only).
	EnableFaultInjection bool `json:"enableFaultInjection,omitempty"`
}

// Clone returns a copy of the task that shares nothing mutable with it: the task and each container
// are copied, and so are the containers' managed agents, whose state changes in place. Slices and maps
// of the definition are shared; the model treats them as read-only and replaces runtime slices
// (NetworkBindings) and pointers (ExitCode) wholesale instead of mutating them.
func (t *Task) Clone() *Task {
	c := *t
	if t.AWSVPC != nil {
		v := *t.AWSVPC
		c.AWSVPC = &v
	}
	c.Containers = make([]*Container, len(t.Containers))
	for i, ct := range t.Containers {
		cc := *ct
		cc.ManagedAgents = slices.Clone(ct.ManagedAgents)
		c.Containers[i] = &cc
	}
	return &c
}

// Container returns the container with the given name, or nil.
func (t *Task) Container(name string) *Container {
	for _, c := range t.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// NetworkNamespace is the network namespace whose interfaces are the networks of t's containers: an
// awsvpc task's, /proc/PID/ns/net of its pause container, while it is set up; "" for the others,
// whose networks Docker knows.
func (t *Task) NetworkNamespace() string {
	if t.NetworkMode != NetworkAWSVPC || t.AWSVPC == nil || t.AWSVPC.TornDown {
		return ""
	}
	return t.AWSVPC.NetNS
}

// DeriveKnownStatus computes the task's known status from its containers: the lowest status every
// container has reached, counting a stopped non-essential container as having passed every earlier
// status; STOPPED once every container is stopped. Once an essential container is stopped the task
// does not move until every container is stopped (as in the ECS agent): a task whose essential
// container never ran is not RUNNING. It never moves the task's status backwards.
func (t *Task) DeriveKnownStatus() TaskStatus {
	if len(t.Containers) == 0 {
		return t.KnownStatus
	}
	allStopped, essentialStopped := true, false
	lowest := TaskRunning
	for _, c := range t.Containers {
		if c.KnownStatus == ContainerStopped && c.Essential {
			essentialStopped = true
		}
		if c.KnownStatus != ContainerStopped {
			allStopped = false
			if s := taskStatusOf(c.KnownStatus); s < lowest {
				lowest = s
			}
		}
	}
	derived := lowest
	switch {
	case allStopped:
		derived = TaskStopped
	case essentialStopped:
		return t.KnownStatus
	}
	if derived < t.KnownStatus {
		return t.KnownStatus
	}
	return derived
}

// StartBlock says why a container cannot start yet. A zero StartBlock means it may start.
type StartBlock struct {
	// Wait names what the container waits for; the caller bounds the wait by the container's start timeout.
	Wait string
	// Fail is set when the container can never start: a dependency ended in a way its condition rules out.
	Fail error
}

// CanStart evaluates c's dependsOn against the current state of the task's other containers. A link
// is a dependency with condition START: Docker links only to a container that runs. A container that
// logs through the task's FireLens router depends on it too (see dependencies).
func (t *Task) CanStart(c *Container) StartBlock {
	for _, d := range t.dependencies(c) {
		dep := t.Container(d.ContainerName)
		if dep == nil {
			return StartBlock{Fail: fmt.Errorf("dependency %q is not a container of the task", d.ContainerName)}
		}
		stopped := dep.KnownStatus == ContainerStopped
		switch d.Condition {
		case ConditionStart:
			if dep.Started() {
				continue
			}
			if stopped {
				return StartBlock{Fail: fmt.Errorf("dependency %q stopped before it started (condition START)", dep.Name)}
			}
			return StartBlock{Wait: fmt.Sprintf("waiting for %q to start (condition START)", dep.Name)}
		case ConditionComplete:
			if stopped {
				continue
			}
			return StartBlock{Wait: fmt.Sprintf("waiting for %q to complete (condition COMPLETE)", dep.Name)}
		case ConditionSuccess:
			if stopped && dep.ExitCode != nil && *dep.ExitCode == 0 {
				continue
			}
			if stopped {
				return StartBlock{Fail: fmt.Errorf("dependency %q exited with %s (condition SUCCESS needs exit code 0)", dep.Name, exitText(dep.ExitCode))}
			}
			return StartBlock{Wait: fmt.Sprintf("waiting for %q to exit successfully (condition SUCCESS)", dep.Name)}
		case ConditionHealthy:
			if dep.Health == HealthHealthy && !stopped {
				continue
			}
			if stopped {
				return StartBlock{Fail: fmt.Errorf("dependency %q stopped before it became healthy (condition HEALTHY)", dep.Name)}
			}
			return StartBlock{Wait: fmt.Sprintf("waiting for %q to become healthy (condition HEALTHY)", dep.Name)}
		default:
			return StartBlock{Fail: fmt.Errorf("dependency %q has unknown condition %q", dep.Name, d.Condition)}
		}
	}
	return StartBlock{}
}

func exitText(code *int) string {
	if code == nil {
		return "no exit code"
	}
	return fmt.Sprintf("exit code %d", *code)
}

// dependencies returns c's dependsOn; for each link, a START dependency on its target; and, for a
// container that logs with the awsfirelens driver, one on the task's FireLens router, as the ECS agent
// adds (addFirelensContainerDependency): START, or HEALTHY when the router has a health check. The
// router's dependency is not added when c already depends on the router (its own condition holds) or
// when the router has dependsOn or links of its own (they could make a cycle), as in the ECS agent.
func (t *Task) dependencies(c *Container) []Dependency {
	deps := c.DependsOn
	if len(c.Links) > 0 {
		deps = slices.Clone(deps)
		for _, l := range c.Links {
			name, _, _ := strings.Cut(l, ":")
			deps = append(deps, Dependency{ContainerName: name, Condition: ConditionStart})
		}
	}
	if d, ok := t.routerDependency(c); ok {
		deps = append(slices.Clip(deps), d)
	}
	return deps
}

// FirelensRouter returns the task's FireLens log router (the container with a
// firelensConfiguration), or nil.
func (t *Task) FirelensRouter() *Container {
	for _, c := range t.Containers {
		if c.Firelens != nil {
			return c
		}
	}
	return nil
}

// LogsToRouter reports whether c sends its output to its task's FireLens router: it logs with the
// awsfirelens driver.
func (c *Container) LogsToRouter() bool {
	return c.LogConfiguration != nil && c.LogConfiguration.LogDriver == LogDriverFirelens
}

// routerDependency returns the dependency on the task's FireLens router that dependencies adds for c.
func (t *Task) routerDependency(c *Container) (Dependency, bool) {
	if !c.LogsToRouter() {
		return Dependency{}, false
	}
	r := t.FirelensRouter()
	if r == nil || r == c || len(r.DependsOn) > 0 || len(r.Links) > 0 {
		return Dependency{}, false
	}
	if slices.ContainsFunc(c.DependsOn, func(d Dependency) bool { return d.ContainerName == r.Name }) {
		return Dependency{}, false
	}
	cond := ConditionStart
	if r.HealthCheck != nil {
		cond = ConditionHealthy
	}
	return Dependency{ContainerName: r.Name, Condition: cond}, true
}

// StopBlockers returns the containers that must stop before c may: those that depend on (or link to)
// c and have not stopped yet, so shutdown runs in reverse dependency order (a FireLens router stops
// after the containers that log through it). Every container of an awsvpc task also stops before its
// pause container.
func (t *Task) StopBlockers(c *Container) []string {
	var out []string
	for _, other := range t.Containers {
		if other == c || other.KnownStatus == ContainerStopped {
			continue
		}
		if c.Pause && other.KnownStatus != ContainerNone {
			out = append(out, other.Name)
			continue
		}
		for _, d := range t.dependencies(other) {
			if d.ContainerName == c.Name && other.KnownStatus != ContainerNone {
				out = append(out, other.Name)
				break
			}
		}
	}
	return out
}

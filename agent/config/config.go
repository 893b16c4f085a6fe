// Package config builds the agent's configuration from its sources, highest precedence first:
//
//	flags > process environment > env file (/etc/ecs/ecs.config) > JSON file (/etc/ecs/ecs.config.json) > defaults
//
// Every key is declared once in the key table (keys.go) with its ECS_* name, its ECS agent JSON field
// name, its default and its parser; Load applies the same rules to every key: a value that does not
// parse is an error naming the key and its source, a value below its minimum is raised with a warning,
// an unknown ECS_* key in a file is a warning with its line, and secret values never appear in errors,
// warnings or Show output.
package config

import (
	"errors"
	"fmt"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
)

// Default locations of the configuration files.
const (
	DefaultEnvFile  = "/etc/ecs/ecs.config"
	DefaultJSONFile = "/etc/ecs/ecs.config.json"
)

// Mode is the control plane the agent talks to.
type Mode string

// The two modes of DESIGN §1.
const (
	ModeLocal Mode = "local"
	ModeECS   Mode = "ecs"
)

// ImagePullBehavior is ECS_IMAGE_PULL_BEHAVIOR.
type ImagePullBehavior string

// The values of ECS_IMAGE_PULL_BEHAVIOR.
const (
	PullDefault      ImagePullBehavior = "default"
	PullAlways       ImagePullBehavior = "always"
	PullOnce         ImagePullBehavior = "once"
	PullPreferCached ImagePullBehavior = "prefer-cached"
)

// The values of ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM.
const (
	PropagateTagsNone        = "none"
	PropagateTagsEC2Instance = "ec2_instance"
)

// The values of ECS_TASK_SECURITY_POLICY.
const (
	TaskSecurityPolicyNone     = "none"
	TaskSecurityPolicyBaseline = "baseline"
)

// RegistryECR is the only registry vendor ECS_REGISTRY_REQUIRE knows.
const RegistryECR = "ecr"

// Secret holds a value that must never be printed. Its String, GoString and MarshalJSON redact it;
// Reveal returns the value to the one place that needs it.
type Secret string

const redacted = "<redacted>"

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString redacts the secret for %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON redacts the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", s.String())), nil }

// Reveal returns the secret value itself.
func (s Secret) Reveal() string { return string(s) }

// ECRRegions is ECS_REGISTRY_ECR_REGIONS. Unset (Configured false) means "use the region detected for
// this host"; set to an empty list means "ECR credentials are off".
type ECRRegions struct {
	Configured bool
	Regions    set.Set[string]
}

// Registry holds the registry-credential keys of DESIGN §6.
type Registry struct {
	Require         set.Set[string]
	ECRRegions      ECRRegions
	IncludeAccounts set.Set[string] // empty: every account
	ExcludeAccounts set.Set[string]
}

// Config is the agent's effective configuration. Load returns it fully validated; components take
// the fields they need through their own small config structs.
type Config struct {
	Cluster     string
	AWSRegion   string
	BackendHost string
	DockerHost  string
	DataDir     string
	Checkpoint  bool
	Log         logger.Config

	TaskCleanupWaitDuration    time.Duration
	TaskCleanupWaitJitter      time.Duration
	DockerStopTimeout          time.Duration
	ContainerStartTimeout      time.Duration
	ContainerCreateTimeout     time.Duration
	ImagePullTimeout           time.Duration
	ImagePullInactivityTimeout time.Duration
	ImagePullBehavior          ImagePullBehavior
	ImagePullMaxConcurrent     int
	ImageCleanupInterval       time.Duration
	ImageMinimumCleanupAge     time.Duration
	NumImagesToDeletePerCycle  int
	ImageCleanupDisabled       bool
	DiskHighWaterPercent       int
	DiskLowWaterPercent        int

	EngineAuthType string
	EngineAuthData Secret

	ReservedMemoryMiB  int
	ReservedPorts      []uint16
	ReservedPortsUDP   []uint16
	InstanceAttributes map[string]string
	// AvailableLoggingDrivers keeps the operator's order, for the registered capabilities.
	AvailableLoggingDrivers []string
	PrivilegedDisabled      bool
	// TaskSecurityPolicy is ECS_TASK_SECURITY_POLICY: TaskSecurityPolicyNone, or
	// TaskSecurityPolicyBaseline, which refuses tasks that ask for the host.
	TaskSecurityPolicy string
	// BridgeBlockIMDS drops bridge-mode containers' traffic to the instance metadata service.
	BridgeBlockIMDS bool
	// TaskIAMRoleEnabled and TaskIAMRoleNetworkHost serve task role credentials to containers (the
	// latter: of host-network tasks too); TaskMetadataRPS and TaskMetadataBurst bound each container's
	// requests to the task endpoint.
	TaskIAMRoleEnabled     bool
	TaskIAMRoleNetworkHost bool
	TaskMetadataRPS        int
	TaskMetadataBurst      int
	// TaskCredentialsBindToTask answers a bridge or awsvpc task's role credentials only to its own
	// containers and the host (ECS_TASK_CREDENTIALS_BIND_TO_TASK, a Berth extension).
	TaskCredentialsBindToTask bool
	// ContainerMetadataEnabled writes the container metadata file of every container
	// (ECS_ENABLE_CONTAINER_METADATA).
	ContainerMetadataEnabled bool
	// TaskCPUMemLimit gives each task with task-level cpu or memory its own cgroup under
	// CgroupPath/ecs, with CgroupCPUPeriod as the CFS period of its CPU quota.
	TaskCPUMemLimit bool
	CgroupPath      string
	CgroupCPUPeriod time.Duration
	// DynamicHostPortRange is where containerPortRange mappings get host ports in bridge mode;
	// zero: the kernel's ephemeral range (ip_local_port_range), else 49153-65535.
	DynamicHostPortRange [2]int

	// TaskPidsLimit is every task cgroup's pids.max (0: none); with it every task gets a cgroup.
	TaskPidsLimit int
	// AWSLogsExecutionRole lets awslogs use the task's execution role (and registers the capability).
	AWSLogsExecutionRole bool
	// ExcludeIPv6PortBindings leaves "::" host bindings out of state changes.
	ExcludeIPv6PortBindings bool
	// TaskMetadataAZDisabled leaves the availability zone out of the task metadata endpoint.
	TaskMetadataAZDisabled bool

	// Telemetry, spot draining, warm pools, instance tags, ECS Anywhere, security option capabilities.
	MetricsDisabled                    bool
	DockerHealthCheckDisabled          bool
	PollMetrics                        bool
	PollingMetricsWaitDuration         time.Duration
	SpotInstanceDrainingEnabled        bool
	WarmPoolsCheck                     bool
	ContainerInstanceTags              map[string]string
	ContainerInstancePropagateTagsFrom string
	External                           bool
	SELinuxCapable                     bool
	AppArmorCapable                    bool

	// UntrackedImageCleanup also removes unused images Berth did not pull, created at least
	// UntrackedImageMinimumAge ago; ImageCleanupExclusionList names images cleanup never removes.
	UntrackedImageCleanup     bool
	UntrackedImageMinimumAge  time.Duration
	ImageCleanupExclusionList []string
	// OffhostIntrospectionAccess lets the introspection API listen off loopback.
	OffhostIntrospectionAccess bool

	TaskENIEnabled                 bool
	CNIPluginsPath                 string
	AWSVPCBlockIMDS                bool
	AWSVPCAdditionalLocalRoutes    []cnitypes.IPNet
	OverrideAWSVPCLocalIPv4Address *cnitypes.IPNet
	AWSVPCLocalSubnet              cnitypes.IPNet
	PauseImageTarball              string

	Registry Registry

	StaticTasksDir string
	// ExecDepsDir holds the SSM agent ECS Exec runs (bin/<version>/, certs/) and the configuration
	// generated for it (config/); ExecLogDir its logs, by task and container.
	ExecDepsDir           string
	ExecLogDir            string
	IntrospectionAddr     string
	LocalControlPlaneAddr string
	// LocalControlPlane runs the embedded control plane even when ECS_CLUSTER is set.
	LocalControlPlane bool

	// EnvFile and JSONFile are the configuration files that were read (or would have been).
	EnvFile  string
	JSONFile string

	// Mode and ModeReason say which control plane Load chose and why.
	Mode       Mode
	ModeReason string
}

// SourceKind names where a value came from.
type SourceKind string

// The sources, in ascending precedence.
const (
	SourceDefault  SourceKind = "default"
	SourceJSONFile SourceKind = "json-file"
	SourceEnvFile  SourceKind = "env-file"
	SourceEnv      SourceKind = "env"
	SourceFlag     SourceKind = "flag"
)

// Origin is where one value came from: its source and, for files, the file and line.
type Origin struct {
	Kind SourceKind
	File string
	Line int
}

// String formats the origin as `berth config` prints it: flag, env, env-file:LINE, json-file:LINE, default.
func (o Origin) String() string {
	if o.Line > 0 {
		return fmt.Sprintf("%s:%d", o.Kind, o.Line)
	}
	return string(o.Kind)
}

// where formats the origin for messages, with the file's path.
func (o Origin) where() string {
	switch {
	case o.File != "" && o.Line > 0:
		return fmt.Sprintf("%s %s:%d", o.Kind, o.File, o.Line)
	case o.File != "":
		return fmt.Sprintf("%s %s", o.Kind, o.File)
	default:
		return string(o.Kind)
	}
}

// Error is a configuration error about one key (or one file, when Key is empty). Its text names the
// key and the source and never contains a secret value.
type Error struct {
	Key    string
	Origin Origin
	Err    error
}

// Error formats the error as "KEY (source file:line): reason".
func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %v", e.Origin.where(), e.Err)
	}
	return fmt.Sprintf("%s (%s): %v", e.Key, e.Origin.where(), e.Err)
}

// Unwrap returns the underlying parse error.
func (e *Error) Unwrap() error { return e.Err }

// Is makes every *Error match ErrInvalid and its class, errdefs.ErrInvalidArgument.
func (e *Error) Is(target error) bool { return errors.Is(ErrInvalid, target) }

// ErrInvalid matches (errors.Is) every error Load returns for a value or file that does not parse.
// An errdefs.ErrInvalidArgument.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid configuration")

// Warning is something Load corrected or ignored: a value raised to its minimum, an unknown key.
type Warning struct {
	Key    string
	Origin Origin
	Msg    string
}

// String formats the warning like an Error.
func (w Warning) String() string {
	if w.Key == "" {
		return fmt.Sprintf("%s: %s", w.Origin.where(), w.Msg)
	}
	return fmt.Sprintf("%s (%s): %s", w.Key, w.Origin.where(), w.Msg)
}

// Result is what Load returns: the configuration, where each key's value came from, and the warnings
// to log once logging is set up.
type Result struct {
	Config   *Config
	Origins  map[string]Origin
	Warnings []Warning
}

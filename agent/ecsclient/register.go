package ecsclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Attribute names Berth registers.
const (
	AttrDockerRemoteAPIPrefix = "com.amazonaws.ecs.capability.docker-remote-api."
	AttrLoggingDriverPrefix   = "com.amazonaws.ecs.capability.logging-driver."
	AttrTaskENI               = "ecs.capability.task-eni"
	AttrContainerHealthCheck  = "ecs.capability.container-health-check"
	AttrECRAuth               = "com.amazonaws.ecs.capability.ecr-auth"
	AttrExecutionRoleECRPull  = "ecs.capability.execution-role-ecr-pull"
	AttrContainerOrdering     = "ecs.capability.container-ordering"
	AttrDockerPluginLocal     = "ecs.capability.docker-plugin.local"
	AttrPrivilegedContainer   = "com.amazonaws.ecs.capability.privileged-container"
	AttrTaskIAMRole           = "com.amazonaws.ecs.capability.task-iam-role"
	AttrTaskIAMRoleHost       = "com.amazonaws.ecs.capability.task-iam-role-network-host"
	AttrSecretsSSMEnv         = "ecs.capability.secrets.ssm.environment-variables"
	AttrSecretsASMEnv         = "ecs.capability.secrets.asm.environment-variables"
	AttrSecretsSSMLogDriver   = "ecs.capability.secrets.ssm.bootstrap.log-driver"
	AttrSecretsASMLogDriver   = "ecs.capability.secrets.asm.bootstrap.log-driver"
	AttrPrivateRegistryASM    = "ecs.capability.private-registry-authentication.secretsmanager"
	AttrEnvFilesS3            = "ecs.capability.env-files.s3"
	AttrExecutionRoleAWSLogs  = "ecs.capability.execution-role-awslogs"
	AttrContainerPortRange    = "ecs.capability.network.container-port-range"
	AttrContainerRestart      = "ecs.capability.container-restart-policy"
	AttrTaskCPUMemLimit       = "ecs.capability.task-cpu-mem-limit"
	AttrPIDIPCSharing         = "ecs.capability.pid-ipc-namespace-sharing"
	AttrSELinux               = "com.amazonaws.ecs.capability.selinux"
	AttrAppArmor              = "com.amazonaws.ecs.capability.apparmor"
	AttrOSType                = "ecs.os-type"
	AttrOSFamily              = "ecs.os-family"
	AttrCPUArchitecture       = "ecs.cpu-architecture"
)

// minDockerAPIMinor is the oldest Docker remote API (1.17) ECS knows a capability for.
const minDockerAPIMinor = 17

// echoedAttributes are the attributes a registration response must carry back.
var echoedAttributes = []string{AttrOSType, AttrOSFamily, AttrCPUArchitecture}

// Registration is what RegisterContainerInstance registers.
type Registration struct {
	// ContainerInstanceArn is the ARN saved from an earlier registration; empty registers anew.
	ContainerInstanceArn string
	// InstanceIdentityDocument and its signature identify an EC2 instance; empty off EC2.
	InstanceIdentityDocument          string
	InstanceIdentityDocumentSignature string

	// CPU is the instance's CPU units (1024 per core).
	CPU int
	// MemoryMiB is the memory available to tasks, already net of ECS_RESERVED_MEMORY.
	MemoryMiB int
	// ReservedPorts and ReservedPortsUDP are host ports tasks may not use.
	ReservedPorts    []uint16
	ReservedPortsUDP []uint16

	AgentVersion  string
	AgentHash     string
	DockerVersion string

	// DockerAPIVersion is the Engine's API version, e.g. "1.43"; it selects the docker-remote-api
	// capabilities (1.17 up to it).
	DockerAPIVersion string
	// LoggingDrivers are ECS_AVAILABLE_LOGGING_DRIVERS.
	LoggingDrivers []string
	// TaskENI registers ecs.capability.task-eni (awsvpc tasks).
	TaskENI bool
	// Privileged registers the privileged-container capability (unless ECS_DISABLE_PRIVILEGED).
	Privileged bool
	// TaskCPUMemLimit registers task-cpu-mem-limit: tasks get cgroups with their task-level limits.
	TaskCPUMemLimit bool
	// SELinux and AppArmor register the selinux and apparmor capabilities (ECS_SELINUX_CAPABLE,
	// ECS_APPARMOR_CAPABLE): the host has them for dockerSecurityOptions label:… and apparmor:….
	SELinux, AppArmor bool
	// PIDIPCSharing registers pid-ipc-namespace-sharing: pidMode and ipcMode task can run (the
	// pause image is there).
	PIDIPCSharing bool
	// AWSLogsExecutionRole registers execution-role-awslogs (ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE),
	// given awslogs among LoggingDrivers and TaskIAMRoleNetworkHost.
	AWSLogsExecutionRole bool
	// HealthCheckDisabled leaves out container-health-check (ECS_DISABLE_DOCKER_HEALTH_CHECK).
	HealthCheckDisabled bool
	// TaskIAMRole and TaskIAMRoleNetworkHost register the task-iam-role capabilities: containers get
	// their task role's credentials (of host-network tasks too, for the second).
	TaskIAMRole, TaskIAMRoleNetworkHost bool
	// Attributes are the operator's ECS_INSTANCE_ATTRIBUTES; they win over Berth's on a name clash.
	Attributes map[string]string
	// Tags are the container instance's resource tags (ECS_CONTAINER_INSTANCE_TAGS, and the EC2
	// instance's with ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM=ec2_instance).
	Tags map[string]string
}

// RegisterContainerInstance registers (or re-registers, re-using r.ContainerInstanceArn) the instance
// with its resources, version and attributes and returns its ARN. It retries retriable errors with
// backoff until ctx is done. A response that does not echo ecs.os-type, ecs.os-family and
// ecs.cpu-architecture yields an error wrapping ErrAttributesNotEchoed.
func (c *Client) RegisterContainerInstance(ctx context.Context, r Registration) (string, error) {
	attrs, err := Attributes(r, runtime.GOARCH)
	if err != nil {
		return "", fmt.Errorf("register container instance: %w", err)
	}
	in := &ecs.RegisterContainerInstanceInput{
		Cluster:              aws.String(c.cluster),
		ContainerInstanceArn: optString(r.ContainerInstanceArn),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: int32(r.CPU)},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: int32(r.MemoryMiB)},
			{Name: aws.String("PORTS"), Type: aws.String("STRINGSET"), StringSetValue: portStrings(r.ReservedPorts)},
			{Name: aws.String("PORTS_UDP"), Type: aws.String("STRINGSET"), StringSetValue: portStrings(r.ReservedPortsUDP)},
		},
		VersionInfo: &types.VersionInfo{
			AgentVersion:  aws.String(r.AgentVersion),
			AgentHash:     aws.String(r.AgentHash),
			DockerVersion: aws.String(r.DockerVersion),
		},
		InstanceIdentityDocument:          optString(r.InstanceIdentityDocument),
		InstanceIdentityDocumentSignature: optString(r.InstanceIdentityDocumentSignature),
	}
	for _, k := range slices.Sorted(maps.Keys(r.Tags)) {
		in.Tags = append(in.Tags, types.Tag{Key: aws.String(k), Value: aws.String(r.Tags[k])})
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		a := types.Attribute{Name: aws.String(name)}
		if v := attrs[name]; v != "" {
			a.Value = aws.String(v)
		}
		in.Attributes = append(in.Attributes, a)
	}

	var arn string
	err = c.retry(ctx, func() error {
		out, err := c.api.RegisterContainerInstance(ctx, in)
		if err != nil {
			c.log.Debug("register container instance failed", "cluster", c.cluster, "error", err)
			return translate("RegisterContainerInstance", err)
		}
		if out.ContainerInstance == nil || aws.ToString(out.ContainerInstance.ContainerInstanceArn) == "" {
			return errdefs.Permanent(errors.New("ecs RegisterContainerInstance: response has no container instance ARN"))
		}
		if err := checkEchoed(attrs, out.ContainerInstance.Attributes); err != nil {
			return err // ErrAttributesNotEchoed: not retriable
		}
		arn = aws.ToString(out.ContainerInstance.ContainerInstanceArn)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("register container instance in cluster %q: %w", c.cluster, err)
	}
	c.log.Info("container instance registered", "cluster", c.cluster, "container_instance", arn)
	return arn, nil
}

func checkEchoed(sent map[string]string, got []types.Attribute) error {
	have := make(map[string]string, len(got))
	for _, a := range got {
		have[aws.ToString(a.Name)] = aws.ToString(a.Value)
	}
	var missing []string
	for _, name := range echoedAttributes {
		if v, ok := have[name]; !ok || v != sent[name] {
			missing = append(missing, name+"="+sent[name])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrAttributesNotEchoed, strings.Join(missing, ", "))
	}
	return nil
}

// Attributes returns the attributes a registration carries, by name (capabilities have an empty
// value), for an agent built for goarch. It fails when r.DockerAPIVersion is not "1.N".
func Attributes(r Registration, goarch string) (map[string]string, error) {
	minor, err := dockerAPIMinor(r.DockerAPIVersion)
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{
		AttrContainerHealthCheck: "",
		AttrECRAuth:              "",
		AttrExecutionRoleECRPull: "",
		AttrContainerOrdering:    "",
		AttrDockerPluginLocal:    "",
		AttrSecretsSSMEnv:        "",
		AttrSecretsASMEnv:        "",
		AttrSecretsSSMLogDriver:  "",
		AttrSecretsASMLogDriver:  "",
		AttrPrivateRegistryASM:   "",
		AttrEnvFilesS3:           "",
		AttrContainerPortRange:   "",
		AttrContainerRestart:     "",
		AttrOSType:               "linux",
		AttrOSFamily:             "LINUX",
		AttrCPUArchitecture:      cpuArchitecture(goarch),
	}
	for v := minDockerAPIMinor; v <= minor; v++ {
		attrs[AttrDockerRemoteAPIPrefix+"1."+strconv.Itoa(v)] = ""
	}
	for _, d := range r.LoggingDrivers {
		if d = strings.TrimSpace(d); d != "" {
			attrs[AttrLoggingDriverPrefix+d] = ""
		}
	}
	if r.HealthCheckDisabled {
		delete(attrs, AttrContainerHealthCheck)
	}
	if r.TaskENI {
		attrs[AttrTaskENI] = ""
	}
	if r.TaskCPUMemLimit {
		attrs[AttrTaskCPUMemLimit] = ""
	}
	if r.PIDIPCSharing {
		attrs[AttrPIDIPCSharing] = ""
	}
	if r.SELinux {
		attrs[AttrSELinux] = ""
	}
	if r.AppArmor {
		attrs[AttrAppArmor] = ""
	}
	if slices.Contains(r.LoggingDrivers, "awslogs") && r.AWSLogsExecutionRole && r.TaskIAMRoleNetworkHost {
		// The Docker daemon's awslogs driver reaches the credentials endpoint from the host.
		attrs[AttrExecutionRoleAWSLogs] = ""
	}
	if r.TaskIAMRole {
		attrs[AttrTaskIAMRole] = ""
		if r.TaskIAMRoleNetworkHost {
			attrs[AttrTaskIAMRoleHost] = ""
		}
	}
	if r.Privileged {
		attrs[AttrPrivilegedContainer] = ""
	}
	for k, v := range r.Attributes {
		attrs[k] = v
	}
	return attrs, nil
}

func dockerAPIMinor(v string) (int, error) {
	major, rest, ok := strings.Cut(strings.TrimSpace(v), ".")
	if ok {
		rest, _, _ = strings.Cut(rest, ".")
	}
	minor, err := strconv.Atoi(rest)
	if !ok || major != "1" || err != nil || minor < 0 {
		return 0, fmt.Errorf("docker API version %q is not of the form 1.N", v)
	}
	return minor, nil
}

func cpuArchitecture(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	default:
		return goarch
	}
}

func portStrings(ports []uint16) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, strconv.Itoa(int(p)))
	}
	return out
}

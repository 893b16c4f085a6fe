package ecsclient

import (
	"cmp"
	"context"
	"crypto/rand"
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
	AttrIncreasedTaskCPU      = "ecs.capability.increased-task-cpu-limit"
	AttrTaskENIBlockIMDS      = "ecs.capability.task-eni-block-instance-metadata"
	AttrCNIPluginVersion      = "ecs.capability.cni-plugin-version"
	AttrFullSync              = "ecs.capability.full-sync"
	AttrECREndpoint           = "ecs.capability.ecr-endpoint"
	AttrExternal              = "ecs.capability.external"
	AttrExecuteCommand        = "ecs.capability.execute-command"
	AttrFaultInjection        = "ecs.capability.fault-injection"
	AttrFirelensFluentd       = "ecs.capability.firelens.fluentd"
	AttrFirelensFluentbit     = "ecs.capability.firelens.fluentbit"
	AttrFirelensDriver        = "com.amazonaws.ecs.capability.logging-driver.awsfirelens"
	AttrFirelensBufferLimit   = "ecs.capability.logging-driver.awsfirelens.log-driver-buffer-limit"
	AttrFirelensConfigFile    = "ecs.capability.firelens.options.config.file"
	AttrFirelensConfigS3      = "ecs.capability.firelens.options.config.s3"
	AttrFirelensNonRootUser   = "ecs.capability.firelens.non-root-user"
	AttrOSType                = "ecs.os-type"
	AttrOSFamily              = "ecs.os-family"
	AttrOSTypeDetailed        = "ecs.os-type-detailed"
	AttrCPUArchitecture       = "ecs.cpu-architecture"
)

// The Docker remote API versions (minor numbers of 1.N) the ECS agent knows and, of those, the ones
// it registers a docker-remote-api capability for (agent/dockerclient/versions.go,
// agent/app/agent_capability.go): 1.17 to 1.32 but 1.26, 1.27 and 1.31, each one the Engine
// supports (every known version up to the Engine's own: the agent extends the Engine's list down to
// 1.17 once the Engine's minimum is 1.24 or more).
const (
	minDockerAPIMinor       = 17
	lastCapabilityAPIMinor  = 32
	maxKnownDockerAPIMinor  = 44
	dockerAPIForECRAuth     = 19 // ecr-auth, execution-role-ecr-pull, task-iam-role, task-iam-role-network-host
	dockerAPIForTaskLimits  = 22 // task-cpu-mem-limit, and so increased-task-cpu-limit
	dockerAPIForHealthCheck = 24 // container-health-check
)

// skippedCapabilityAPIMinors are the versions below lastCapabilityAPIMinor the ECS agent does not
// register.
var skippedCapabilityAPIMinors = []int{26, 27, 31}

// loggingDriverMinAPI is the Docker remote API minor each logging driver needs before the ECS agent
// registers its capability (agent/dockerclient/logging_drivers.go); a driver missing here (such as
// awsfirelens, which Registration.Firelens registers) is never registered from
// ECS_AVAILABLE_LOGGING_DRIVERS.
var loggingDriverMinAPI = map[string]int{
	"json-file": 18, "syslog": 18, "journald": 19, "gelf": 20, "fluentd": 20, "awslogs": 21,
	"splunk": 22, "logentries": 25, "sumologic": 29, "none": 19,
}

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

	// AgentVersion, AgentHash and DockerVersion are the registration's versionInfo (DockerVersion as
	// the Engine reports it, "24.0.7"; it is sent as "DockerVersion: 24.0.7", the form ECS shows).
	AgentVersion  string
	AgentHash     string
	DockerVersion string
	// OSFamilyDetailed is ecs.os-type-detailed ("amzn_2023", "debian_12"); empty: "LINUX".
	OSFamilyDetailed string
	// External registers ecs.capability.external and ecs.cpu-architecture and leaves out what ECS
	// Anywhere hosts cannot run (task-eni and its attributes), as the ECS agent does (ECS_EXTERNAL).
	External bool
	// BlockIMDS registers task-eni-block-instance-metadata with TaskENI (ECS_AWSVPC_BLOCK_IMDS).
	BlockIMDS bool
	// CNIPluginVersion is ecs.capability.cni-plugin-version, registered with TaskENI: the version of
	// the CNI plugins awsvpc tasks run with.
	CNIPluginVersion string

	// DockerAPIVersion is the Engine's API version, e.g. "1.43"; it selects the docker-remote-api
	// capabilities (1.17 up to it).
	DockerAPIVersion string
	// LoggingDrivers are ECS_AVAILABLE_LOGGING_DRIVERS.
	LoggingDrivers []string
	// TaskENI registers ecs.capability.task-eni (awsvpc tasks).
	TaskENI bool
	// Privileged registers the privileged-container capability (unless ECS_DISABLE_PRIVILEGED or
	// ECS_TASK_SECURITY_POLICY=baseline refuses privileged containers).
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
	// FaultInjection registers fault-injection (not with External, as the ECS agent): the host has
	// iptables, tc and netem, which tasks' network faults need.
	FaultInjection bool
	// TaskIAMRole and TaskIAMRoleNetworkHost register the task-iam-role capabilities: containers get
	// their task role's credentials (of host-network tasks too, for the second).
	TaskIAMRole, TaskIAMRoleNetworkHost bool
	// ExecuteCommand registers execute-command (ECS Exec): a complete SSM agent is present.
	ExecuteCommand bool
	// Firelens registers FireLens's capabilities, as the ECS agent does on Linux: both router types,
	// the awsfirelens logging driver with its log-driver-buffer-limit option, config files from the
	// router's image and from S3, and routers that run as a non-root user.
	Firelens bool
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
			DockerVersion: aws.String("DockerVersion: " + r.DockerVersion),
		},
		InstanceIdentityDocument:          optString(r.InstanceIdentityDocument),
		InstanceIdentityDocumentSignature: optString(r.InstanceIdentityDocumentSignature),
	}
	// One token for every attempt of this registration, a new one for the next: a retry after a lost
	// answer is the same registration to ECS, not a second container instance (the ECS agent makes
	// one UUID per registration, agent/app/agent.go).
	token := withClientToken(newClientToken())
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
		out, err := c.api.RegisterContainerInstance(ctx, in, token)
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

// checkEchoed checks that the response carries every attribute sent, with its value, as the ECS
// agent checks it (ecs-agent/api/ecs/client/ecs_client.go, validateRegisteredAttributes).
func checkEchoed(sent map[string]string, got []types.Attribute) error {
	have := make(map[string]string, len(got))
	for _, a := range got {
		have[aws.ToString(a.Name)] = aws.ToString(a.Value)
	}
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(sent)) {
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
// value), for an agent built for goarch, computed as the ECS agent computes them
// (agent/app/agent_capability.go, agent/app/agent_capability_unix.go,
// ecs-agent/api/ecs/client/ecs_client.go); docs/parity/ECS-API.md lists each one. It fails when
// r.DockerAPIVersion is not "1.N".
func Attributes(r Registration, goarch string) (map[string]string, error) {
	api, err := dockerAPIMinor(r.DockerAPIVersion)
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{
		AttrContainerOrdering:   "",
		AttrDockerPluginLocal:   "",
		AttrSecretsSSMEnv:       "",
		AttrSecretsASMEnv:       "",
		AttrSecretsSSMLogDriver: "",
		AttrSecretsASMLogDriver: "",
		AttrPrivateRegistryASM:  "",
		AttrEnvFilesS3:          "",
		AttrContainerPortRange:  "",
		AttrContainerRestart:    "",
		AttrFullSync:            "",
		AttrECREndpoint:         "",
		AttrOSType:              "linux",
		AttrOSFamily:            "LINUX",
		AttrOSTypeDetailed:      cmp.Or(r.OSFamilyDetailed, "LINUX"),
	}
	set := func(on bool, names ...string) {
		if on {
			for _, n := range names {
				attrs[n] = ""
			}
		}
	}
	for v := minDockerAPIMinor; v <= min(api, lastCapabilityAPIMinor); v++ {
		set(!slices.Contains(skippedCapabilityAPIMinors, v), AttrDockerRemoteAPIPrefix+"1."+strconv.Itoa(v))
	}
	for _, d := range r.LoggingDrivers {
		need, known := loggingDriverMinAPI[strings.TrimSpace(d)]
		set(known && api >= need, AttrLoggingDriverPrefix+strings.TrimSpace(d))
	}
	set(api >= dockerAPIForECRAuth, AttrECRAuth, AttrExecutionRoleECRPull)
	set(api >= dockerAPIForHealthCheck && !r.HealthCheckDisabled, AttrContainerHealthCheck)
	set(r.TaskCPUMemLimit && api >= dockerAPIForTaskLimits, AttrTaskCPUMemLimit, AttrIncreasedTaskCPU)
	set(r.PIDIPCSharing, AttrPIDIPCSharing)
	set(r.SELinux, AttrSELinux)
	set(r.AppArmor, AttrAppArmor)
	set(r.Privileged, AttrPrivilegedContainer)
	set(r.ExecuteCommand, AttrExecuteCommand)
	set(r.Firelens, AttrFirelensFluentd, AttrFirelensFluentbit, AttrFirelensDriver, AttrFirelensBufferLimit,
		AttrFirelensConfigFile, AttrFirelensConfigS3, AttrFirelensNonRootUser)
	// The Docker daemon's awslogs driver reaches the credentials endpoint from the host.
	set(slices.Contains(r.LoggingDrivers, "awslogs") && r.AWSLogsExecutionRole && r.TaskIAMRoleNetworkHost, AttrExecutionRoleAWSLogs)
	set(r.TaskIAMRole && api >= dockerAPIForECRAuth, AttrTaskIAMRole)
	set(r.TaskIAMRole && r.TaskIAMRoleNetworkHost && api >= dockerAPIForECRAuth, AttrTaskIAMRoleHost)
	if r.TaskENI && !r.External {
		attrs[AttrTaskENI] = ""
		if r.CNIPluginVersion != "" {
			attrs[AttrCNIPluginVersion] = r.CNIPluginVersion
		}
		set(r.BlockIMDS, AttrTaskENIBlockIMDS)
	}
	set(r.FaultInjection && !r.External, AttrFaultInjection)
	if r.External {
		attrs[AttrExternal] = ""
		// On EC2 ECS reads the architecture from the instance identity document.
		attrs[AttrCPUArchitecture] = cpuArchitecture(goarch)
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
	case "386":
		return "i386"
	default:
		return goarch
	}
}

// newClientToken returns a random UUID (version 4), a registration's idempotency token.
func newClientToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func portStrings(ports []uint16) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, strconv.Itoa(int(p)))
	}
	return out
}

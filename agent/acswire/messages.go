// Package acswire is the wire of the ECS Agent Communication Service: the frames the agent's ACS
// client (agent/acs) and a control plane (agent/localcp) exchange. The envelope is agent/wire's;
// CloseMessage, ServerException and BadRequestException are wire's too. Translation to and from the
// task model is agent/acstranslate's.
//
// Some types (MountPoint, VolumeFrom, EnvironmentFile, Device, …) have the JSON shape of taskdef's
// namesakes. They are declared here all the same: the wire then depends on nothing but agent/wire, and
// a change to the task-definition JSON cannot change what goes over ACS.
package acswire

import (
	"encoding/json"
	"fmt"

	"github.com/berth-agent/berth/agent/wire"
)

// Message is the body of one ACS frame. MessageType is the frame's "type", the ACS shape name.
// Every message type of this package implements it, so the embedded control plane can Encode the same
// frames the client Decodes, and the reverse.
type Message = wire.Message

// Frame types, as they appear in a frame's "type".
const (
	TypePayloadMessage                     = "PayloadMessage"
	TypeAckRequest                         = "AckRequest"
	TypeHeartbeatMessage                   = "HeartbeatMessage"
	TypeHeartbeatAckRequest                = "HeartbeatAckRequest"
	TypeIAMRoleCredentialsMessage          = "IAMRoleCredentialsMessage"
	TypeIAMRoleCredentialsAckRequest       = "IAMRoleCredentialsAckRequest"
	TypeAttachTaskNetworkInterfacesMessage = "AttachTaskNetworkInterfacesMessage"
	TypeErrorMessage                       = "ErrorMessage"
	TypeInvalidClusterException            = "InvalidClusterException"
	TypeInvalidInstanceException           = "InvalidInstanceException"
	TypeAccessDeniedException              = "AccessDeniedException"
	TypeInactiveInstanceException          = "InactiveInstanceException"
)

// Role types of IAMRoleCredentialsMessage.roleType.
const (
	RoleTypeTaskApplication = "TaskApplication"
	RoleTypeTaskExecution   = "TaskExecution"
)

// PayloadMessage delivers tasks to run or stop. The agent answers with an AckRequest once the tasks
// are accepted, then one IAMRoleCredentialsAckRequest per credentials the payload carried.
type PayloadMessage struct {
	MessageID            string  `json:"messageId"`
	ClusterArn           string  `json:"clusterArn,omitempty"`
	ContainerInstanceArn string  `json:"containerInstanceArn,omitempty"`
	SeqNum               int64   `json:"seqNum"`
	GeneratedAt          int64   `json:"generatedAt,omitempty"` // Unix epoch, as ACS sends it
	Tasks                []*Task `json:"tasks"`
}

// Task is a task as ACS sends it. CPU is in vCPUs (a double: 0.25 is 256 CPU units), Memory in MiB.
type Task struct {
	Arn                      string                     `json:"arn"`
	Family                   string                     `json:"family"`
	Version                  string                     `json:"version"` // the task definition revision, as a string
	DesiredStatus            string                     `json:"desiredStatus"`
	NetworkMode              string                     `json:"networkMode,omitempty"`
	CPU                      float64                    `json:"cpu,omitempty"`
	Memory                   int64                      `json:"memory,omitempty"`
	Containers               []*Container               `json:"containers"`
	Volumes                  []*Volume                  `json:"volumes,omitempty"`
	ElasticNetworkInterfaces []*ElasticNetworkInterface `json:"elasticNetworkInterfaces,omitempty"`
	RoleCredentials          *IAMRoleCredentials        `json:"roleCredentials,omitempty"`
	ExecutionRoleCredentials *IAMRoleCredentials        `json:"executionRoleCredentials,omitempty"`
	PidMode                  string                     `json:"pidMode,omitempty"`
	IpcMode                  string                     `json:"ipcMode,omitempty"`
	LaunchType               string                     `json:"launchType,omitempty"`
	ServiceName              string                     `json:"serviceName,omitempty"`
	TaskDefinitionAccountID  string                     `json:"taskDefinitionAccountId,omitempty"`

	// EnableFaultInjection lets the task's containers inject network faults (the task endpoint's
	// fault routes).
	EnableFaultInjection bool `json:"enableFaultInjection,omitempty"`

	// What Berth cannot do, kept raw so that a task asking for it is refused by name:
	// elastic inference and GPU associations, App Mesh, Service Connect and EBS attachments,
	// trusted execution.
	Associations                  json.RawMessage `json:"associations,omitempty"`
	ProxyConfiguration            json.RawMessage `json:"proxyConfiguration,omitempty"`
	Attachments                   json.RawMessage `json:"attachments,omitempty"`
	TrustedExecutionConfiguration json.RawMessage `json:"trustedExecutionConfiguration,omitempty"`
}

// Container is a container of a Task. Essential is true when absent (the ECS default). Settings that
// have no field of their own travel as Docker JSON in DockerConfig.
type Container struct {
	Name                   string                  `json:"name"`
	ContainerArn           string                  `json:"containerArn,omitempty"`
	Image                  string                  `json:"image"`
	CPU                    int64                   `json:"cpu,omitempty"`
	Memory                 int64                   `json:"memory,omitempty"` // MiB, hard limit
	Essential              *bool                   `json:"essential,omitempty"`
	EntryPoint             []string                `json:"entryPoint,omitempty"`
	Command                []string                `json:"command,omitempty"`
	Environment            map[string]string       `json:"environment,omitempty"`
	PortMappings           []PortMapping           `json:"portMappings,omitempty"`
	MountPoints            []MountPoint            `json:"mountPoints,omitempty"`
	VolumesFrom            []VolumeFrom            `json:"volumesFrom,omitempty"`
	Links                  []string                `json:"links,omitempty"`
	DependsOn              []ContainerDependency   `json:"dependsOn,omitempty"`
	StartTimeout           int64                   `json:"startTimeout,omitempty"` // seconds
	StopTimeout            int64                   `json:"stopTimeout,omitempty"`  // seconds
	HealthCheckType        string                  `json:"healthCheckType,omitempty"`
	DockerConfig           *DockerConfig           `json:"dockerConfig,omitempty"`
	RegistryAuthentication *RegistryAuthentication `json:"registryAuthentication,omitempty"`
	Privileged             bool                    `json:"privileged,omitempty"`
	LinuxParameters        *LinuxParameters        `json:"linuxParameters,omitempty"`
	Secrets                []Secret                `json:"secrets,omitempty"`
	EnvironmentFiles       []EnvironmentFile       `json:"environmentFiles,omitempty"`
	RestartPolicy          *RestartPolicy          `json:"restartPolicy,omitempty"`
	LogsAuthStrategy       string                  `json:"logsAuthStrategy,omitempty"` // ExecutionRole
	ManagedAgents          []ManagedAgent          `json:"managedAgents,omitempty"`
	// FirelensConfiguration makes the container its task's log router (FireLens).
	FirelensConfiguration *FirelensConfiguration `json:"firelensConfiguration,omitempty"`

	// What Berth cannot do, kept raw so that a task asking for it is refused by name: GPUs, gMSA
	// credential specs.
	ResourceRequirements json.RawMessage `json:"resourceRequirements,omitempty"`
	CredentialSpecs      json.RawMessage `json:"credentialSpecs,omitempty"`
}

// FirelensConfiguration is a log router's type (fluentbit or fluentd) and options
// (enable-ecs-log-metadata, config-file-type, config-file-value), as the task definition gives them.
type FirelensConfiguration struct {
	Type    string            `json:"type"`
	Options map[string]string `json:"options,omitempty"`
}

// ManagedAgent is an agent ECS asks the agent to run inside a container: ECS Exec's
// "ExecuteCommandAgent", with properties such as "sessionLimit".
type ManagedAgent struct {
	Name       string            `json:"name"`
	Properties map[string]string `json:"properties,omitempty"`
}

// EnvironmentFile is an S3 object of VAR=VALUE lines; Type is s3.
type EnvironmentFile struct {
	Value string `json:"value"`
	Type  string `json:"type"`
}

// RestartPolicy restarts a container in place when it exits; RestartAttemptPeriod is in seconds.
type RestartPolicy struct {
	Enabled              bool    `json:"enabled"`
	IgnoredExitCodes     []int64 `json:"ignoredExitCodes,omitempty"`
	RestartAttemptPeriod *int64  `json:"restartAttemptPeriod,omitempty"`
}

// PortMapping publishes a container port; Protocol is tcp or udp.
type PortMapping struct {
	ContainerPort      int64  `json:"containerPort,omitempty"`
	HostPort           int64  `json:"hostPort,omitempty"`
	Protocol           string `json:"protocol,omitempty"`
	ContainerPortRange string `json:"containerPortRange,omitempty"`
}

// MountPoint mounts a task volume into a container.
type MountPoint struct {
	SourceVolume  string `json:"sourceVolume"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// VolumeFrom mounts every volume of another container.
type VolumeFrom struct {
	SourceContainer string `json:"sourceContainer"`
	ReadOnly        bool   `json:"readOnly,omitempty"`
}

// ContainerDependency is one dependsOn entry; Condition is START, COMPLETE, SUCCESS or HEALTHY.
type ContainerDependency struct {
	ContainerName string `json:"containerName"`
	Condition     string `json:"condition"`
}

// DockerConfig carries Docker's container config and host config as JSON strings.
type DockerConfig struct {
	Config     string `json:"config,omitempty"`
	HostConfig string `json:"hostConfig,omitempty"`
	Version    string `json:"version,omitempty"`
}

// LinuxParameters holds the Linux settings of a container that ACS sends as fields.
type LinuxParameters struct {
	Capabilities       *KernelCapabilities `json:"capabilities,omitempty"`
	Devices            []Device            `json:"devices,omitempty"`
	InitProcessEnabled *bool               `json:"initProcessEnabled,omitempty"`
	SharedMemorySize   *int64              `json:"sharedMemorySize,omitempty"` // MiB
}

// KernelCapabilities are Linux capabilities to add and drop.
type KernelCapabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

// Device is a host device exposed to a container; Permissions are read, write and mknod.
type Device struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath,omitempty"`
	Permissions   []string `json:"permissions,omitempty"`
}

// RegistryAuthentication says how to authenticate the image pull; Type is ecr or asm.
type RegistryAuthentication struct {
	Type        string       `json:"type"`
	ECRAuthData *ECRAuthData `json:"ecrAuthData,omitempty"`
	ASMAuthData *ASMAuthData `json:"asmAuthData,omitempty"`
}

// ECRAuthData names the ECR registry of an image and whether to pull with the task execution role.
type ECRAuthData struct {
	RegistryID       string `json:"registryId,omitempty"`
	Region           string `json:"region,omitempty"`
	EndpointOverride string `json:"endpointOverride,omitempty"`
	UseExecutionRole bool   `json:"useExecutionRole,omitempty"`
}

// ASMAuthData names a Secrets Manager secret holding registry credentials.
type ASMAuthData struct {
	CredentialsParameter string `json:"credentialsParameter,omitempty"`
	Region               string `json:"region,omitempty"`
}

// Secret is a secret to inject into a container: Provider ssm or asm, Type ENVIRONMENT_VARIABLE
// (Berth's only type), Target CONTAINER (an environment variable) or LOG_DRIVER (a log option).
type Secret struct {
	Name          string `json:"name"`
	ValueFrom     string `json:"valueFrom"`
	Type          string `json:"type,omitempty"`
	Provider      string `json:"provider,omitempty"`
	Region        string `json:"region,omitempty"`
	ContainerPath string `json:"containerPath,omitempty"`
	Target        string `json:"target,omitempty"`
}

// Volume is a task volume. Type is host, docker or a type Berth does not support (efs, …); a host
// volume without sourcePath is a task-scoped empty volume.
type Volume struct {
	Name                      string                     `json:"name"`
	Type                      string                     `json:"type,omitempty"`
	Host                      *HostVolume                `json:"host,omitempty"`
	DockerVolumeConfiguration *DockerVolumeConfiguration `json:"dockerVolumeConfiguration,omitempty"`
}

// HostVolume is the host part of a Volume.
type HostVolume struct {
	SourcePath string `json:"sourcePath,omitempty"`
}

// DockerVolumeConfiguration is a Docker named volume; Scope is task or shared.
type DockerVolumeConfiguration struct {
	Scope         string            `json:"scope,omitempty"`
	Autoprovision bool              `json:"autoprovision,omitempty"`
	Driver        string            `json:"driver,omitempty"`
	DriverOpts    map[string]string `json:"driverOpts,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// ElasticNetworkInterface is an ENI attached to the instance for an awsvpc task.
type ElasticNetworkInterface struct {
	Ec2ID                        string          `json:"ec2Id"`
	MacAddress                   string          `json:"macAddress"`
	AttachmentArn                string          `json:"attachmentArn"`
	IPv4Addresses                []IPv4Address   `json:"ipv4Addresses,omitempty"`
	IPv6Addresses                []IPv6Address   `json:"ipv6Addresses,omitempty"`
	SubnetGatewayIPv4Address     string          `json:"subnetGatewayIpv4Address,omitempty"` // CIDR, e.g. 10.0.0.1/24
	DomainName                   []string        `json:"domainName,omitempty"`
	DomainNameServers            []string        `json:"domainNameServers,omitempty"`
	PrivateDNSName               string          `json:"privateDnsName,omitempty"`
	InterfaceAssociationProtocol string          `json:"interfaceAssociationProtocol,omitempty"` // default when empty
	InterfaceVlanProperties      *VlanProperties `json:"interfaceVlanProperties,omitempty"`
	Index                        *int64          `json:"index,omitempty"`
}

// IPv4Address is one IPv4 address of an ENI.
type IPv4Address struct {
	PrivateAddress string `json:"privateAddress"`
	Primary        bool   `json:"primary,omitempty"`
}

// IPv6Address is one IPv6 address of an ENI.
type IPv6Address struct {
	Address string `json:"address"`
	Primary bool   `json:"primary,omitempty"`
}

// VlanProperties describes a branch ENI reached through a trunk interface.
type VlanProperties struct {
	VlanID                   string `json:"vlanId"`
	TrunkInterfaceMacAddress string `json:"trunkInterfaceMacAddress"`
}

// IAMRoleCredentials are temporary credentials of a task role. They are secrets: never log them.
type IAMRoleCredentials struct {
	CredentialsID   string `json:"credentialsId"`
	RoleArn         string `json:"roleArn,omitempty"`
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	SessionToken    string `json:"sessionToken,omitempty"`
	Expiration      string `json:"expiration,omitempty"` // RFC 3339, as ACS sends it
}

// String hides the secret parts so that credentials printed by accident leak nothing.
func (c IAMRoleCredentials) String() string {
	return fmt.Sprintf("IAMRoleCredentials{credentialsId: %s, roleArn: %s, expiration: %s}", c.CredentialsID, c.RoleArn, c.Expiration)
}

// AckRequest acknowledges a PayloadMessage or an AttachTaskNetworkInterfacesMessage.
type AckRequest struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
	MessageID         string `json:"messageId"`
}

// HeartbeatMessage tells the agent the connection is alive.
type HeartbeatMessage struct {
	MessageID string `json:"messageId"`
	Healthy   bool   `json:"healthy"`
}

// HeartbeatAckRequest answers a HeartbeatMessage.
type HeartbeatAckRequest struct {
	MessageID string `json:"messageId"`
}

// IAMRoleCredentialsMessage delivers fresh credentials of a task's role.
type IAMRoleCredentialsMessage struct {
	MessageID       string             `json:"messageId"`
	TaskArn         string             `json:"taskArn"`
	RoleType        string             `json:"roleType"` // TaskApplication or TaskExecution
	RoleCredentials IAMRoleCredentials `json:"roleCredentials"`
}

// IAMRoleCredentialsAckRequest acknowledges credentials, from an IAMRoleCredentialsMessage or a payload.
type IAMRoleCredentialsAckRequest struct {
	MessageID     string `json:"messageId"`
	CredentialsID string `json:"credentialsId"`
	Expiration    string `json:"expiration"`
}

// AttachTaskNetworkInterfacesMessage announces ENIs for a task, before the task's payload.
type AttachTaskNetworkInterfacesMessage struct {
	MessageID                string                     `json:"messageId"`
	ClusterArn               string                     `json:"clusterArn,omitempty"`
	ContainerInstanceArn     string                     `json:"containerInstanceArn,omitempty"`
	TaskArn                  string                     `json:"taskArn"`
	GeneratedAt              int64                      `json:"generatedAt,omitempty"`
	WaitTimeoutMs            int64                      `json:"waitTimeoutMs,omitempty"`
	ElasticNetworkInterfaces []*ElasticNetworkInterface `json:"elasticNetworkInterfaces"`
}

// ErrorMessage reports an error of the control plane; the agent reconnects.
type ErrorMessage struct {
	Message string `json:"message,omitempty"`
}

// InvalidClusterException says the cluster does not exist.
type InvalidClusterException struct {
	Message string `json:"message,omitempty"`
}

// InvalidInstanceException says the container instance is unknown.
type InvalidInstanceException struct {
	Message string `json:"message,omitempty"`
}

// AccessDeniedException says the credentials may not connect.
type AccessDeniedException struct {
	Message string `json:"message,omitempty"`
}

// InactiveInstanceException says the container instance was deregistered.
type InactiveInstanceException struct {
	Message string `json:"message,omitempty"`
}

// MessageType returns "PayloadMessage".
func (*PayloadMessage) MessageType() string { return TypePayloadMessage }

// MessageType returns "AckRequest".
func (*AckRequest) MessageType() string { return TypeAckRequest }

// MessageType returns "HeartbeatMessage".
func (*HeartbeatMessage) MessageType() string { return TypeHeartbeatMessage }

// MessageType returns "HeartbeatAckRequest".
func (*HeartbeatAckRequest) MessageType() string { return TypeHeartbeatAckRequest }

// MessageType returns "IAMRoleCredentialsMessage".
func (*IAMRoleCredentialsMessage) MessageType() string { return TypeIAMRoleCredentialsMessage }

// MessageType returns "IAMRoleCredentialsAckRequest".
func (*IAMRoleCredentialsAckRequest) MessageType() string { return TypeIAMRoleCredentialsAckRequest }

// MessageType returns "AttachTaskNetworkInterfacesMessage".
func (*AttachTaskNetworkInterfacesMessage) MessageType() string {
	return TypeAttachTaskNetworkInterfacesMessage
}

// MessageType returns "ErrorMessage".
func (*ErrorMessage) MessageType() string { return TypeErrorMessage }

// MessageType returns "InvalidClusterException".
func (*InvalidClusterException) MessageType() string { return TypeInvalidClusterException }

// MessageType returns "InvalidInstanceException".
func (*InvalidInstanceException) MessageType() string { return TypeInvalidInstanceException }

// MessageType returns "AccessDeniedException".
func (*AccessDeniedException) MessageType() string { return TypeAccessDeniedException }

// MessageType returns "InactiveInstanceException".
func (*InactiveInstanceException) MessageType() string { return TypeInactiveInstanceException }

// newMessage returns an empty message of the named type, or nil for an unknown type.
func newMessage(typ string) Message {
	switch typ {
	case TypePayloadMessage:
		return &PayloadMessage{}
	case TypeAckRequest:
		return &AckRequest{}
	case TypeHeartbeatMessage:
		return &HeartbeatMessage{}
	case TypeHeartbeatAckRequest:
		return &HeartbeatAckRequest{}
	case TypeIAMRoleCredentialsMessage:
		return &IAMRoleCredentialsMessage{}
	case TypeIAMRoleCredentialsAckRequest:
		return &IAMRoleCredentialsAckRequest{}
	case TypeAttachTaskNetworkInterfacesMessage:
		return &AttachTaskNetworkInterfacesMessage{}
	case wire.TypeCloseMessage:
		return &wire.CloseMessage{}
	case TypeErrorMessage:
		return &ErrorMessage{}
	case wire.TypeServerException:
		return &wire.ServerException{}
	case wire.TypeBadRequestException:
		return &wire.BadRequestException{}
	case TypeInvalidClusterException:
		return &InvalidClusterException{}
	case TypeInvalidInstanceException:
		return &InvalidInstanceException{}
	case TypeAccessDeniedException:
		return &AccessDeniedException{}
	case TypeInactiveInstanceException:
		return &InactiveInstanceException{}
	case TypeTaskManifestMessage:
		return &TaskManifestMessage{}
	case TypeTaskStopVerificationMessage:
		return &TaskStopVerificationMessage{}
	case TypeTaskStopVerificationAck:
		return &TaskStopVerificationAck{}
	case TypeAttachInstanceNetworkInterfacesMessage:
		return &AttachInstanceNetworkInterfacesMessage{}
	case TypeConfirmAttachmentMessage:
		return &ConfirmAttachmentMessage{}
	case TypeStageUpdateMessage:
		return &StageUpdateMessage{}
	case TypePerformUpdateMessage:
		return &PerformUpdateMessage{}
	case TypeNackRequest:
		return &NackRequest{}
	}
	return nil
}

// protocol is ACS's vocabulary. A frame must carry its message.
func protocol() wire.Protocol {
	return wire.Protocol{Name: "ACS", New: newMessage, MessageRequired: true}
}

// Encode returns the text frame {"type": m.MessageType(), "message": m}.
func Encode(m Message) ([]byte, error) { return protocol().Encode(m) }

// Decode parses a frame into a pointer to the message type its "type" names. A frame that is not
// JSON, or whose message is absent or does not fit its type, gives a *wire.MalformedFrameError
// (matching wire.ErrMalformedFrame, an errdefs.ErrInvalidArgument); a frame of an unknown type gives
// a *wire.UnknownTypeError. Error texts never quote the frame's contents.
func Decode(data []byte) (Message, error) { return protocol().Decode(data) }

// Package taskdef reads ECS task definitions and turns them into Berth's task model. It is the only
// such translation: static task files, the embedded control plane and ACS payloads all go through
// Parse (or Validate) and NewTask.
//
// A Definition mirrors the ECS JSON for the fields Berth honours and marshals back to it, so it can be
// stored and returned as ECS would. Fields (the table Fields) lists every field of ECS's task
// definition with what Berth does with it. Every problem that would make ECS reject the definition,
// and every field Berth cannot honour, is a *FieldError whose Path names the field the way the JSON
// spells it, e.g. containerDefinitions[1].dependsOn[0].containerName.
package taskdef

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/task"
)

// Definition is an ECS task definition, limited to the fields Berth runs. Zero values mean "not set";
// ECS defaults are applied by NewTask, not written back, so a Definition marshals to what was given.
type Definition struct {
	Family           string           `json:"family"`
	Revision         int              `json:"revision,omitempty"`
	TaskRoleArn      string           `json:"taskRoleArn,omitempty"`
	ExecutionRoleArn string           `json:"executionRoleArn,omitempty"`
	NetworkMode      task.NetworkMode `json:"networkMode,omitempty"` // bridge when empty
	CPU              CPUUnits         `json:"cpu,omitempty"`
	Memory           MiB              `json:"memory,omitempty"`
	PidMode          string           `json:"pidMode,omitempty"` // host or task
	IpcMode          string           `json:"ipcMode,omitempty"` // host, task or none
	// EnableFaultInjection lets the task's containers inject network faults (awsvpc and host
	// network modes only).
	EnableFaultInjection bool `json:"enableFaultInjection,omitempty"`
	// RequiresCompatibilities is kept for round trips and otherwise ignored.
	RequiresCompatibilities []string              `json:"requiresCompatibilities,omitempty"`
	Volumes                 []Volume              `json:"volumes,omitempty"`
	ContainerDefinitions    []ContainerDefinition `json:"containerDefinitions"`
}

// ContainerDefinition is one entry of containerDefinitions.
type ContainerDefinition struct {
	Name                   string                 `json:"name"`
	Image                  string                 `json:"image"`
	CPU                    int                    `json:"cpu,omitempty"`
	Memory                 *int                   `json:"memory,omitempty"`            // MiB, hard limit
	MemoryReservation      *int                   `json:"memoryReservation,omitempty"` // MiB, soft limit
	Essential              *bool                  `json:"essential,omitempty"`         // true when nil
	EntryPoint             []string               `json:"entryPoint,omitempty"`
	Command                []string               `json:"command,omitempty"`
	Environment            []KeyValue             `json:"environment,omitempty"`
	PortMappings           []PortMapping          `json:"portMappings,omitempty"`
	MountPoints            []MountPoint           `json:"mountPoints,omitempty"`
	VolumesFrom            []VolumeFrom           `json:"volumesFrom,omitempty"`
	DependsOn              []Dependency           `json:"dependsOn,omitempty"`
	HealthCheck            *HealthCheck           `json:"healthCheck,omitempty"`
	StopTimeout            int                    `json:"stopTimeout,omitempty"`  // seconds, 0: the agent's default
	StartTimeout           int                    `json:"startTimeout,omitempty"` // seconds, 0: the agent's default
	User                   string                 `json:"user,omitempty"`
	WorkingDirectory       string                 `json:"workingDirectory,omitempty"`
	Ulimits                []Ulimit               `json:"ulimits,omitempty"`
	DockerLabels           map[string]string      `json:"dockerLabels,omitempty"`
	LogConfiguration       *LogConfiguration      `json:"logConfiguration,omitempty"`
	Privileged             bool                   `json:"privileged,omitempty"`
	ReadonlyRootFilesystem bool                   `json:"readonlyRootFilesystem,omitempty"`
	LinuxParameters        *LinuxParameters       `json:"linuxParameters,omitempty"`
	Links                  []string               `json:"links,omitempty"`
	Hostname               string                 `json:"hostname,omitempty"`
	DNSServers             []string               `json:"dnsServers,omitempty"`
	DNSSearchDomains       []string               `json:"dnsSearchDomains,omitempty"`
	ExtraHosts             []HostEntry            `json:"extraHosts,omitempty"`
	SystemControls         []SystemControl        `json:"systemControls,omitempty"`
	DockerSecurityOptions  []string               `json:"dockerSecurityOptions,omitempty"`
	PseudoTerminal         bool                   `json:"pseudoTerminal,omitempty"`
	Interactive            bool                   `json:"interactive,omitempty"`
	DisableNetworking      bool                   `json:"disableNetworking,omitempty"`
	Secrets                []Secret               `json:"secrets,omitempty"`
	EnvironmentFiles       []EnvironmentFile      `json:"environmentFiles,omitempty"`
	RepositoryCredentials  *RepositoryCredentials `json:"repositoryCredentials,omitempty"`
	RestartPolicy          *RestartPolicy         `json:"restartPolicy,omitempty"`
	// FirelensConfiguration makes the container its task's log router (FireLens).
	FirelensConfiguration *FirelensConfiguration `json:"firelensConfiguration,omitempty"`
}

// FirelensConfiguration is a container's firelensConfiguration: the router's type (fluentbit or
// fluentd) and its options (enable-ecs-log-metadata, config-file-type, config-file-value).
type FirelensConfiguration struct {
	Type    string            `json:"type"`
	Options map[string]string `json:"options,omitempty"`
}

// HostEntry is one extraHosts entry.
type HostEntry struct {
	Hostname  string `json:"hostname"`
	IPAddress string `json:"ipAddress"`
}

// SystemControl is one systemControls entry.
type SystemControl struct {
	Namespace string `json:"namespace"`
	Value     string `json:"value"`
}

// Secret is one secrets or logConfiguration.secretOptions entry: an SSM parameter (name or ARN) or a
// Secrets Manager secret (ARN, optionally with :json-key:version-stage:version-id, or name).
type Secret struct {
	Name      string `json:"name"`
	ValueFrom string `json:"valueFrom"`
}

// EnvironmentFile is one environmentFiles entry: an S3 object ARN; Type must be s3.
type EnvironmentFile struct {
	Value string `json:"value"`
	Type  string `json:"type"`
}

// RepositoryCredentials names the Secrets Manager secret with a private registry's credentials.
type RepositoryCredentials struct {
	CredentialsParameter string `json:"credentialsParameter"`
}

// RestartPolicy is a container's restartPolicy; times in seconds, nil: ECS's default (300).
type RestartPolicy struct {
	Enabled              bool  `json:"enabled"`
	IgnoredExitCodes     []int `json:"ignoredExitCodes,omitempty"`
	RestartAttemptPeriod *int  `json:"restartAttemptPeriod,omitempty"`
}

// KeyValue is one environment variable.
type KeyValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// PortMapping publishes a container port. HostPort 0 asks for a dynamic port in bridge mode and means
// "the container port" in host and awsvpc mode; Protocol is tcp when empty.
type PortMapping struct {
	ContainerPort      int    `json:"containerPort,omitempty"`
	HostPort           int    `json:"hostPort,omitempty"`
	Protocol           string `json:"protocol,omitempty"`
	ContainerPortRange string `json:"containerPortRange,omitempty"` // "8000-8010", instead of containerPort
	// Name and AppProtocol name the mapping for Service Connect; Berth keeps them and otherwise
	// ignores them, as the ECS agent does.
	Name        string `json:"name,omitempty"`
	AppProtocol string `json:"appProtocol,omitempty"`
}

// MountPoint mounts a task volume into the container.
type MountPoint struct {
	SourceVolume  string `json:"sourceVolume"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// VolumeFrom mounts every volume of another container of the task.
type VolumeFrom struct {
	SourceContainer string `json:"sourceContainer"`
	ReadOnly        bool   `json:"readOnly,omitempty"`
}

// Dependency is one dependsOn entry.
type Dependency struct {
	ContainerName string         `json:"containerName"`
	Condition     task.Condition `json:"condition"`
}

// HealthCheck is a container health check; times are in seconds and nil fields take the ECS defaults
// (interval 30, timeout 5, retries 3, startPeriod 0).
type HealthCheck struct {
	Command     []string `json:"command"`
	Interval    *int     `json:"interval,omitempty"`
	Timeout     *int     `json:"timeout,omitempty"`
	Retries     *int     `json:"retries,omitempty"`
	StartPeriod *int     `json:"startPeriod,omitempty"`
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

// LinuxParameters holds a container's Linux-specific settings. Sizes are in MiB.
type LinuxParameters struct {
	Capabilities       *KernelCapabilities `json:"capabilities,omitempty"`
	Devices            []Device            `json:"devices,omitempty"`
	InitProcessEnabled bool                `json:"initProcessEnabled,omitempty"`
	SharedMemorySize   *int                `json:"sharedMemorySize,omitempty"`
	Tmpfs              []Tmpfs             `json:"tmpfs,omitempty"`
	MaxSwap            *int                `json:"maxSwap,omitempty"`
	Swappiness         *int                `json:"swappiness,omitempty"`
}

// KernelCapabilities are the Linux capabilities added to and dropped from Docker's default set.
type KernelCapabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

// Device is a host device exposed to the container.
type Device struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath,omitempty"`
	Permissions   []string `json:"permissions,omitempty"`
}

// Tmpfs is a tmpfs mount of Size MiB.
type Tmpfs struct {
	ContainerPath string   `json:"containerPath"`
	Size          int      `json:"size"`
	MountOptions  []string `json:"mountOptions,omitempty"`
}

// Volume is a task volume. With neither Host nor DockerVolumeConfiguration it is a task-scoped empty
// volume, as it is with a Host that has no SourcePath.
type Volume struct {
	Name                      string                     `json:"name"`
	Host                      *HostVolume                `json:"host,omitempty"`
	DockerVolumeConfiguration *DockerVolumeConfiguration `json:"dockerVolumeConfiguration,omitempty"`
}

// HostVolume bind-mounts SourcePath, or is a task-scoped empty volume when SourcePath is empty.
type HostVolume struct {
	SourcePath string `json:"sourcePath,omitempty"`
}

// DockerVolumeConfiguration is a Docker named volume. Scope is task when empty.
type DockerVolumeConfiguration struct {
	Scope         string            `json:"scope,omitempty"`
	Autoprovision bool              `json:"autoprovision,omitempty"`
	Driver        string            `json:"driver,omitempty"`
	DriverOpts    map[string]string `json:"driverOpts,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// Parse reads a task definition: either the bare object register-task-definition takes or the
// {"taskDefinition": {...}} wrapper describe-task-definition prints (whose other members are
// ignored). It validates the result. The returned error joins one *FieldError per problem, each
// matching ErrInvalid: a syntax error gives the line and column, every other problem the path of the
// offending field; type errors are all reported, and validation runs only when there are none.
//
// Every field is answered as the table of fields (Fields) says: a field Berth cannot honour (EFS
// volumes, GPUs, …) or that ECS does not have is an error naming it, so a definition never runs
// without part of itself; informational fields are accepted. A definition over one of Validate's
// count limits is refused before it is decoded, with only those errors; at most maxErrors errors are
// listed, the last one counting the rest.
func Parse(data []byte) (*Definition, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, syntaxError(data, dec, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &FieldError{Msg: fmt.Sprintf("%s: unexpected data after the task definition", position(data, dec.InputOffset()))}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, &FieldError{Msg: "the task definition must be a JSON object, got " + describe(doc)}
	}
	if inner, ok := obj["taskDefinition"]; ok {
		obj, ok = inner.(map[string]any)
		if !ok {
			return nil, &FieldError{Path: "taskDefinition", Msg: "want an object, got " + describe(inner)}
		}
	}
	if errs := countErrors(jsonCounts(obj)); len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	def := &Definition{}
	d := &decoder{}
	d.decode("", obj, reflectValue(def))
	if len(d.errs) > 0 {
		return nil, joinErrors(d.errs)
	}
	if err := def.Validate(); err != nil {
		return nil, err
	}
	return def, nil
}

// syntaxError turns a json decoding error into a *FieldError that gives the line and column.
func syntaxError(data []byte, dec *json.Decoder, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// Offset counts the offending byte; point at it.
		return &FieldError{Msg: fmt.Sprintf("%s: %v", position(data, se.Offset-1), err)}
	case errors.Is(err, io.EOF):
		return &FieldError{Msg: "empty task definition"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &FieldError{Msg: fmt.Sprintf("%s: unexpected end of JSON", position(data, int64(len(data))))}
	default:
		return &FieldError{Msg: fmt.Sprintf("%s: %v", position(data, dec.InputOffset()), err)}
	}
}

// position formats a byte offset of data as "line L, column C" (both from 1, columns in bytes).
func position(data []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// Canonical returns the JSON encoding of def that the control plane stores and returns: fields in a
// fixed order, map keys sorted, no HTML escaping. Equal definitions encode equally.
func Canonical(def *Definition) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(def); err != nil {
		return nil, fmt.Errorf("encode task definition %q: %w", def.Family, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Digest returns the lowercase hex SHA-256 of the canonical JSON of d; it changes exactly when the
// canonical JSON does.
func (d *Definition) Digest() (string, error) {
	b, err := Canonical(d)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// CPUUnits is a task's cpu: a number of CPU units (1024 per vCPU). It decodes from a JSON number, a
// numeric string ("256") or a vCPU string ("0.25 vCPU"), and encodes as a numeric string, as ECS does.
type CPUUnits int

// MarshalJSON encodes the units as a numeric string.
func (c CPUUnits) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.Itoa(int(c)))
}

// UnmarshalJSON decodes a number of units or a vCPU string; null and "" leave it unset.
func (c *CPUUnits) UnmarshalJSON(b []byte) error {
	v, err := parseQuantity(b, map[string]float64{"": 1, "vcpu": 1024, "vcpus": 1024},
		"a number of CPU units or a string such as \"256\" or \"0.25 vCPU\"")
	if err != nil {
		return err
	}
	*c = CPUUnits(v)
	return nil
}

// MiB is a task's memory in mebibytes. It decodes from a JSON number, a numeric string ("512") or a
// string with a unit ("512 MiB", "1 GB"; ECS reads GB as GiB), and encodes as a numeric string.
type MiB int

// MarshalJSON encodes the size as a numeric string.
func (m MiB) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.Itoa(int(m)))
}

// UnmarshalJSON decodes a number of MiB or a size string; null and "" leave it unset.
func (m *MiB) UnmarshalJSON(b []byte) error {
	v, err := parseQuantity(b, map[string]float64{"": 1, "mb": 1, "mib": 1, "gb": 1024, "gib": 1024},
		"a number of MiB or a string such as \"512\", \"512 MiB\" or \"1 GB\"")
	if err != nil {
		return err
	}
	*m = MiB(v)
	return nil
}

// maxQuantity bounds CPU units and MiB so that any accepted value fits an int32.
const maxQuantity = math.MaxInt32

// parseQuantity decodes a JSON number or string holding a non-negative number with an optional unit
// (case-insensitive, spaces ignored) into a whole number of base units. A bare number must be whole.
func parseQuantity(b []byte, units map[string]float64, want string) (int, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return 0, nil
	}
	text := string(b)
	quoted := len(b) > 0 && b[0] == '"'
	if quoted {
		if err := json.Unmarshal(b, &text); err != nil {
			return 0, fmt.Errorf("want %s: %w", want, err)
		}
		text = strings.ToLower(strings.Join(strings.Fields(text), ""))
		if text == "" {
			return 0, nil
		}
	}
	num := strings.TrimRight(text, "abcdefghijklmnopqrstuvwxyz")
	unit := text[len(num):]
	mult, ok := units[unit]
	if !ok || num == "" || (!quoted && unit != "") {
		return 0, fmt.Errorf("want %s, got %s", want, b)
	}
	if mult == 1 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 || n > maxQuantity {
			return 0, fmt.Errorf("want %s (a whole number from 0 to %d), got %s", want, maxQuantity, b)
		}
		return int(n), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f*mult > maxQuantity {
		return 0, fmt.Errorf("want %s, got %s", want, b)
	}
	return int(math.Round(f * mult)), nil
}

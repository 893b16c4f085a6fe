package task

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// HostEntry is one extraHosts entry: a line added to the container's /etc/hosts.
type HostEntry struct {
	Hostname  string `json:"hostname"`
	IPAddress string `json:"ipAddress"`
}

// SystemControl is one systemControls entry: a namespaced kernel parameter set in the container.
type SystemControl struct {
	Namespace string `json:"namespace"`
	Value     string `json:"value"`
}

// Device is a host device exposed to the container (linuxParameters.devices). Permissions are ECS's
// words: read, write, mknod; none means all three.
type Device struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath,omitempty"`
	Permissions   []string `json:"permissions,omitempty"`
}

// CgroupPermissions returns the permissions as Docker spells them ("rwm"); none means all three.
func (d Device) CgroupPermissions() string {
	if len(d.Permissions) == 0 {
		return "rwm"
	}
	var b strings.Builder
	for _, p := range []string{"read", "write", "mknod"} {
		if slices.Contains(d.Permissions, p) {
			b.WriteByte(p[0])
		}
	}
	return b.String()
}

// Tmpfs is a tmpfs mount (linuxParameters.tmpfs); Size is in MiB.
type Tmpfs struct {
	ContainerPath string   `json:"containerPath"`
	Size          int      `json:"size"`
	MountOptions  []string `json:"mountOptions,omitempty"`
}

// DockerOptions returns the mount's options with its size as Docker's tmpfs option string.
func (t Tmpfs) DockerOptions() string {
	return strings.Join(append(slices.Clone(t.MountOptions), fmt.Sprintf("size=%dm", t.Size)), ",")
}

// LinuxParameters are a container's Linux-specific settings beyond init (linuxParameters).
type LinuxParameters struct {
	CapAdd           []string `json:"capAdd,omitempty"`
	CapDrop          []string `json:"capDrop,omitempty"`
	Devices          []Device `json:"devices,omitempty"`
	SharedMemorySize int      `json:"sharedMemorySize,omitempty"` // MiB, 0: Docker's default
	Tmpfs            []Tmpfs  `json:"tmpfs,omitempty"`
	// MaxSwap is the swap the container may use in MiB (Docker's MemorySwap is memory plus this);
	// nil: Docker's default, 0: no swap. Swappiness is 0-100; nil: the host's default (60 in ECS).
	MaxSwap    *int `json:"maxSwap,omitempty"`
	Swappiness *int `json:"swappiness,omitempty"`
}

// Secret is one secret a container gets (secrets or logConfiguration.secretOptions): Name becomes an
// environment variable (or a log driver option) whose value the agent fetches from ValueFrom when it
// creates the container. The value is never part of the task.
type Secret struct {
	Name      string `json:"name"`
	ValueFrom string `json:"valueFrom"`
	// Provider is ssm or asm, Region the region to ask; empty: read from ValueFrom.
	Provider string `json:"provider,omitempty"`
	Region   string `json:"region,omitempty"`
}

// EnvironmentFile is an S3 object (environmentFiles) of VAR=VALUE lines added to the environment;
// Value is the object's ARN.
type EnvironmentFile struct {
	Value string `json:"value"`
	Type  string `json:"type"` // s3
}

// RepositoryCredentials names the Secrets Manager secret holding a private registry's username and
// password (repositoryCredentials.credentialsParameter).
type RepositoryCredentials struct {
	CredentialsParameter string `json:"credentialsParameter"`
	Region               string `json:"region,omitempty"`
}

// RestartPolicy restarts a container in place when it exits (restartPolicy), unless its exit code
// is ignored or it ran for less than AttemptPeriod since it last (re)started.
type RestartPolicy struct {
	Enabled          bool          `json:"enabled"`
	IgnoredExitCodes []int         `json:"ignoredExitCodes,omitempty"`
	AttemptPeriod    time.Duration `json:"attemptPeriod"`
}

// DefaultRestartAttemptPeriod is ECS's restartAttemptPeriod when the definition gives none.
const DefaultRestartAttemptPeriod = 300 * time.Second

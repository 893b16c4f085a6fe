package acstranslate

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
)

// WireTask renders a task of the model as ACS sends it, the inverse of TranslateTask: what
// TranslateTask makes of the result is the task again (see the round-trip test). The desired status
// is the task's by name; the account is the caller's to set. The model holds no
// credentials, so the task and execution roles travel as ARNs, without keys. An error names the
// container whose Docker config cannot be encoded.
func WireTask(m *task.Task) (*acswire.Task, error) {
	out := &acswire.Task{
		Arn:           m.Arn,
		Family:        m.Family,
		Version:       strconv.Itoa(m.Revision),
		DesiredStatus: m.DesiredStatus.String(),
		NetworkMode:   string(m.NetworkMode),
		CPU:           float64(m.CPU) / 1024,
		Memory:        int64(m.Memory),
		Containers:    make([]*acswire.Container, 0, len(m.Containers)),
		PidMode:       m.PidMode,
		IpcMode:       m.IpcMode,
		LaunchType:    m.LaunchType,
		ServiceName:   m.ServiceName,

		EnableFaultInjection: m.EnableFaultInjection,
	}
	if m.RoleArn != "" {
		out.RoleCredentials = &acswire.IAMRoleCredentials{RoleArn: m.RoleArn}
	}
	if m.ExecutionRoleArn != "" {
		out.ExecutionRoleCredentials = &acswire.IAMRoleCredentials{RoleArn: m.ExecutionRoleArn}
	}
	for _, v := range m.Volumes {
		out.Volumes = append(out.Volumes, wireVolume(v))
	}
	for _, c := range m.Containers {
		wc, err := wireContainer(c)
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
		out.Containers = append(out.Containers, wc)
	}
	return out, nil
}

// wireVolume renders a task volume: a docker volume, or a host one (task-scoped without a source
// path).
func wireVolume(v task.Volume) *acswire.Volume {
	if d := v.Docker; d != nil {
		return &acswire.Volume{Name: v.Name, Type: "docker", DockerVolumeConfiguration: &acswire.DockerVolumeConfiguration{
			Scope: d.Scope, Autoprovision: d.Autoprovision, Driver: d.Driver,
			DriverOpts: maps.Clone(d.DriverOpts), Labels: maps.Clone(d.Labels),
		}}
	}
	out := &acswire.Volume{Name: v.Name, Type: "host", Host: &acswire.HostVolume{}}
	if v.Host != nil {
		out.Host.SourcePath = v.Host.SourcePath
	}
	return out
}

// wireContainer renders a container: its own fields, and Docker's config and host config for the
// rest, as ACS sends them.
func wireContainer(c *task.Container) (*acswire.Container, error) {
	out := &acswire.Container{
		Name:         c.Name,
		ContainerArn: c.ARN,
		Image:        c.Image,
		CPU:          int64(c.CPU),
		Memory:       int64(c.Memory),
		Essential:    new(c.Essential), // sent either way: absent would mean true
		EntryPoint:   slices.Clone(c.EntryPoint),
		Command:      slices.Clone(c.Command),
		Environment:  make(map[string]string, len(c.Environment)),
		StartTimeout: int64(c.StartTimeout / time.Second),
		StopTimeout:  int64(c.StopTimeout / time.Second),
		Privileged:   c.Privileged,
	}
	if f := c.Firelens; f != nil {
		out.FirelensConfiguration = &acswire.FirelensConfiguration{Type: f.Type, Options: maps.Clone(f.Options)}
	}
	for _, m := range c.ManagedAgents {
		out.ManagedAgents = append(out.ManagedAgents, acswire.ManagedAgent{Name: m.Name, Properties: maps.Clone(m.Properties)})
	}
	if a := c.ECRAuth; a != nil && a.UseExecutionRole {
		// As Amazon ECS sends it for a task with an executionRoleArn; the agent applies it to ECR images.
		out.RegistryAuthentication = &acswire.RegistryAuthentication{Type: "ecr", ECRAuthData: &acswire.ECRAuthData{
			UseExecutionRole: true, Region: a.Region, RegistryID: a.RegistryID, EndpointOverride: a.EndpointOverride}}
	}
	for _, kv := range c.Environment {
		out.Environment[kv.Name] = kv.Value
	}
	for _, p := range c.PortMappings {
		out.PortMappings = append(out.PortMappings, acswire.PortMapping{ContainerPort: int64(p.ContainerPort), HostPort: int64(p.HostPort),
			Protocol: p.Protocol, ContainerPortRange: p.ContainerPortRange})
	}
	for _, mp := range c.MountPoints {
		out.MountPoints = append(out.MountPoints, acswire.MountPoint{SourceVolume: mp.SourceVolume, ContainerPath: mp.ContainerPath, ReadOnly: mp.ReadOnly})
	}
	for _, vf := range c.VolumesFrom {
		out.VolumesFrom = append(out.VolumesFrom, acswire.VolumeFrom{SourceContainer: vf.SourceContainer, ReadOnly: vf.ReadOnly})
	}
	for _, d := range c.DependsOn {
		out.DependsOn = append(out.DependsOn, acswire.ContainerDependency{ContainerName: d.ContainerName, Condition: string(d.Condition)})
	}
	if rc := c.RepositoryCredentials; rc != nil {
		out.RegistryAuthentication = &acswire.RegistryAuthentication{Type: "asm", ASMAuthData: &acswire.ASMAuthData{CredentialsParameter: rc.CredentialsParameter}}
	}
	if c.LogsAuthExecutionRole {
		out.LogsAuthStrategy = "ExecutionRole"
	}
	out.Links = slices.Clone(c.Links)
	for _, sec := range c.Secrets {
		out.Secrets = append(out.Secrets, acswire.Secret{Name: sec.Name, ValueFrom: sec.ValueFrom, Type: "ENVIRONMENT_VARIABLE", Target: "CONTAINER", Provider: secretProvider(sec.ValueFrom)})
	}
	if lc := c.LogConfiguration; lc != nil {
		for _, sec := range lc.SecretOptions {
			out.Secrets = append(out.Secrets, acswire.Secret{Name: sec.Name, ValueFrom: sec.ValueFrom, Type: "ENVIRONMENT_VARIABLE", Target: "LOG_DRIVER", Provider: secretProvider(sec.ValueFrom)})
		}
	}
	for _, f := range c.EnvironmentFiles {
		out.EnvironmentFiles = append(out.EnvironmentFiles, acswire.EnvironmentFile(f))
	}
	if rp := c.RestartPolicy; rp != nil {
		out.RestartPolicy = &acswire.RestartPolicy{Enabled: rp.Enabled, RestartAttemptPeriod: new(int64(rp.AttemptPeriod / time.Second))}
		for _, code := range rp.IgnoredExitCodes {
			out.RestartPolicy.IgnoredExitCodes = append(out.RestartPolicy.IgnoredExitCodes, int64(code))
		}
	}
	cfg := DockerContainerConfig{Labels: maps.Clone(c.DockerLabels), User: c.User, WorkingDir: c.WorkingDirectory,
		Hostname: c.Hostname, Tty: c.PseudoTerminal, OpenStdin: c.Interactive, NetworkDisabled: c.DisableNetworking}
	if hc := c.HealthCheck; hc != nil {
		out.HealthCheckType = "docker"
		cfg.Healthcheck = &DockerHealthcheck{Test: slices.Clone(hc.Command), Interval: int64(hc.Interval), Timeout: int64(hc.Timeout), StartPeriod: int64(hc.StartPeriod), Retries: hc.Retries}
	}
	host := DockerHostConfig{
		Privileged:        c.Privileged,
		ReadonlyRootfs:    c.ReadonlyRootFilesystem,
		MemoryReservation: int64(c.MemoryReservation) << 20,
		DNS:               slices.Clone(c.DNSServers),
		DNSSearch:         slices.Clone(c.DNSSearchDomains),
		SecurityOpt:       slices.Clone(c.DockerSecurityOptions),
	}
	for _, h := range c.ExtraHosts {
		host.ExtraHosts = append(host.ExtraHosts, h.Hostname+":"+h.IPAddress)
	}
	if len(c.SystemControls) > 0 {
		host.Sysctls = make(map[string]string, len(c.SystemControls))
		for _, sc := range c.SystemControls {
			host.Sysctls[sc.Namespace] = sc.Value
		}
	}
	if c.InitProcessEnabled {
		out.LinuxParameters = &acswire.LinuxParameters{InitProcessEnabled: new(true)}
	}
	if l := c.Linux; l != nil {
		// As ACS sends them: capabilities, devices and shared memory as fields, the rest as Docker's.
		if out.LinuxParameters == nil {
			out.LinuxParameters = &acswire.LinuxParameters{}
		}
		lp := out.LinuxParameters
		if len(l.CapAdd)+len(l.CapDrop) > 0 {
			lp.Capabilities = &acswire.KernelCapabilities{Add: slices.Clone(l.CapAdd), Drop: slices.Clone(l.CapDrop)}
		}
		for _, d := range l.Devices {
			lp.Devices = append(lp.Devices, acswire.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: slices.Clone(d.Permissions)})
		}
		if l.SharedMemorySize > 0 {
			lp.SharedMemorySize = new(int64(l.SharedMemorySize))
		}
		if len(l.Tmpfs) > 0 {
			host.Tmpfs = make(map[string]string, len(l.Tmpfs))
			for _, t := range l.Tmpfs {
				host.Tmpfs[t.ContainerPath] = t.DockerOptions()
			}
		}
		if l.MaxSwap != nil {
			host.MemorySwap = int64(c.Memory+*l.MaxSwap) << 20
		}
		if l.Swappiness != nil {
			host.MemorySwappiness = new(int64(*l.Swappiness))
		}
		if reflect.ValueOf(*lp).IsZero() {
			out.LinuxParameters = nil
		}
	}
	for _, u := range c.Ulimits {
		host.Ulimits = append(host.Ulimits, DockerUlimit{Name: u.Name, Soft: u.SoftLimit, Hard: u.HardLimit})
	}
	if lc := c.LogConfiguration; lc != nil {
		host.LogConfig = &DockerLogConfig{Type: lc.LogDriver, Config: maps.Clone(lc.Options)}
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode docker config: %w", err)
	}
	hb, err := json.Marshal(host)
	if err != nil {
		return nil, fmt.Errorf("encode docker host config: %w", err)
	}
	out.DockerConfig = &acswire.DockerConfig{Config: string(cb), HostConfig: string(hb)}
	return out, nil
}

// secretProvider says which service holds a secret, as Amazon ECS decides it from valueFrom.
func secretProvider(valueFrom string) string {
	if strings.HasPrefix(valueFrom, "arn:") && strings.Contains(valueFrom, ":secretsmanager:") {
		return "asm"
	}
	return "ssm"
}

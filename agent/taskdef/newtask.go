package taskdef

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/berth-agent/berth/agent/task"
)

// NewTask builds a task to run from d, which should have passed Validate: its containers in definition
// order with the ECS defaults applied (essential true, protocol tcp, network mode bridge, health check
// timings), desired status RUNNING and every other status NONE. The task shares no memory with d. It
// adds no pause container; whoever runs an awsvpc task does.
//
// A definition with an executionRoleArn pulls its ECR images with that role, as Amazon ECS decides
// for EC2 tasks (it then sends registryAuthentication with useExecutionRole): every container gets
// ECRAuth{UseExecutionRole: true}, which the pull path applies to ECR images only.
func (d *Definition) NewTask(arn string) *task.Task {
	t := &task.Task{
		Arn:           arn,
		Family:        d.Family,
		Revision:      d.Revision,
		NetworkMode:   cmp.Or(d.NetworkMode, task.NetworkBridge),
		CPU:           int(d.CPU),
		Memory:        int(d.Memory),
		PidMode:       d.PidMode,
		IpcMode:       d.IpcMode,
		Containers:    make([]*task.Container, 0, len(d.ContainerDefinitions)),
		DesiredStatus: task.TaskRunning,

		RoleArn:          d.TaskRoleArn,
		ExecutionRoleArn: d.ExecutionRoleArn,

		EnableFaultInjection: d.EnableFaultInjection,
	}
	for _, v := range d.Volumes {
		t.Volumes = append(t.Volumes, newVolume(v))
	}
	for i := range d.ContainerDefinitions {
		c := newContainer(&d.ContainerDefinitions[i])
		if d.ExecutionRoleArn != "" {
			c.ECRAuth = &task.ECRAuth{UseExecutionRole: true}
			// As Amazon ECS decides it: awslogs gets the execution role's credentials.
			c.LogsAuthExecutionRole = c.LogConfiguration != nil && c.LogConfiguration.LogDriver == "awslogs"
		}
		t.Containers = append(t.Containers, c)
	}
	return t
}

func newVolume(v Volume) task.Volume {
	out := task.Volume{Name: v.Name}
	if dv := v.DockerVolumeConfiguration; dv != nil {
		out.Docker = &task.DockerVolume{
			Scope:         cmp.Or(dv.Scope, "task"),
			Autoprovision: dv.Autoprovision,
			Driver:        dv.Driver,
			DriverOpts:    maps.Clone(dv.DriverOpts),
			Labels:        maps.Clone(dv.Labels),
		}
		return out
	}
	out.Host = &task.HostVolume{}
	if v.Host != nil {
		out.Host.SourcePath = v.Host.SourcePath
	}
	return out
}

func newContainer(c *ContainerDefinition) *task.Container {
	out := &task.Container{
		Name:                   c.Name,
		Image:                  c.Image,
		CPU:                    c.CPU,
		Memory:                 deref(c.Memory, 0),
		MemoryReservation:      deref(c.MemoryReservation, 0),
		Essential:              essential(c),
		EntryPoint:             slices.Clone(c.EntryPoint),
		Command:                slices.Clone(c.Command),
		StopTimeout:            seconds(c.StopTimeout),
		StartTimeout:           seconds(c.StartTimeout),
		User:                   c.User,
		WorkingDirectory:       c.WorkingDirectory,
		DockerLabels:           maps.Clone(c.DockerLabels),
		Privileged:             c.Privileged,
		ReadonlyRootFilesystem: c.ReadonlyRootFilesystem,
		InitProcessEnabled:     c.LinuxParameters != nil && c.LinuxParameters.InitProcessEnabled,
		Linux:                  newLinux(c.LinuxParameters),
		Links:                  slices.Clone(c.Links),
		Hostname:               c.Hostname,
		DNSServers:             slices.Clone(c.DNSServers),
		DNSSearchDomains:       slices.Clone(c.DNSSearchDomains),
		DockerSecurityOptions:  slices.Clone(c.DockerSecurityOptions),
		PseudoTerminal:         c.PseudoTerminal,
		Interactive:            c.Interactive,
		DisableNetworking:      c.DisableNetworking,
		Secrets:                newSecrets(c.Secrets),
		DesiredStatus:          task.ContainerRunning,
	}
	for _, h := range c.ExtraHosts {
		out.ExtraHosts = append(out.ExtraHosts, task.HostEntry(h))
	}
	for _, sc := range c.SystemControls {
		out.SystemControls = append(out.SystemControls, task.SystemControl(sc))
	}
	for _, f := range c.EnvironmentFiles {
		out.EnvironmentFiles = append(out.EnvironmentFiles, task.EnvironmentFile(f))
	}
	if rc := c.RepositoryCredentials; rc != nil {
		out.RepositoryCredentials = &task.RepositoryCredentials{CredentialsParameter: rc.CredentialsParameter}
	}
	if rp := c.RestartPolicy; rp != nil {
		out.RestartPolicy = &task.RestartPolicy{
			Enabled:          rp.Enabled,
			IgnoredExitCodes: slices.Clone(rp.IgnoredExitCodes),
			AttemptPeriod:    task.DefaultRestartAttemptPeriod,
		}
		if rp.RestartAttemptPeriod != nil {
			out.RestartPolicy.AttemptPeriod = seconds(*rp.RestartAttemptPeriod)
		}
	}
	for _, kv := range c.Environment {
		out.Environment = append(out.Environment, task.KeyValue{Name: kv.Name, Value: kv.Value})
	}
	for _, pm := range c.PortMappings {
		out.PortMappings = append(out.PortMappings, task.PortMapping{
			ContainerPort: uint16(pm.ContainerPort),
			HostPort:      uint16(pm.HostPort),
			Protocol:      cmp.Or(pm.Protocol, "tcp"),

			ContainerPortRange: pm.ContainerPortRange,
		})
	}
	for _, m := range c.MountPoints {
		out.MountPoints = append(out.MountPoints, task.MountPoint{SourceVolume: m.SourceVolume, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, vf := range c.VolumesFrom {
		out.VolumesFrom = append(out.VolumesFrom, task.VolumeFrom{SourceContainer: vf.SourceContainer, ReadOnly: vf.ReadOnly})
	}
	for _, dep := range c.DependsOn {
		out.DependsOn = append(out.DependsOn, task.Dependency{ContainerName: dep.ContainerName, Condition: dep.Condition})
	}
	if hc := c.HealthCheck; hc != nil {
		out.HealthCheck = &task.HealthCheck{
			Command:     slices.Clone(hc.Command),
			Interval:    seconds(deref(hc.Interval, defaultHealthInterval)),
			Timeout:     seconds(deref(hc.Timeout, defaultHealthTimeout)),
			Retries:     deref(hc.Retries, defaultHealthRetries),
			StartPeriod: seconds(deref(hc.StartPeriod, defaultHealthStartPeriod)),
		}
		out.Health = task.HealthUnknown
	}
	for _, u := range c.Ulimits {
		out.Ulimits = append(out.Ulimits, task.Ulimit{Name: u.Name, SoftLimit: u.SoftLimit, HardLimit: u.HardLimit})
	}
	if fc := c.FirelensConfiguration; fc != nil {
		out.Firelens = &task.FirelensConfiguration{Type: fc.Type, Options: maps.Clone(fc.Options)}
	}
	if lc := c.LogConfiguration; lc != nil {
		out.LogConfiguration = &task.LogConfiguration{LogDriver: lc.LogDriver, Options: maps.Clone(lc.Options),
			SecretOptions: newSecrets(lc.SecretOptions)}
	}
	return out
}

// newLinux returns the linuxParameters beyond initProcessEnabled, or nil when there are none.
func newLinux(lp *LinuxParameters) *task.LinuxParameters {
	if lp == nil {
		return nil
	}
	out := &task.LinuxParameters{
		SharedMemorySize: deref(lp.SharedMemorySize, 0),
		MaxSwap:          cloneInt(lp.MaxSwap),
		Swappiness:       cloneInt(lp.Swappiness),
	}
	if c := lp.Capabilities; c != nil {
		out.CapAdd, out.CapDrop = slices.Clone(c.Add), slices.Clone(c.Drop)
	}
	for _, d := range lp.Devices {
		out.Devices = append(out.Devices, task.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: slices.Clone(d.Permissions)})
	}
	for _, t := range lp.Tmpfs {
		out.Tmpfs = append(out.Tmpfs, task.Tmpfs{ContainerPath: t.ContainerPath, Size: t.Size, MountOptions: slices.Clone(t.MountOptions)})
	}
	if out.SharedMemorySize == 0 && out.MaxSwap == nil && out.Swappiness == nil && len(out.CapAdd)+len(out.CapDrop)+len(out.Devices)+len(out.Tmpfs) == 0 {
		return nil
	}
	return out
}

func newSecrets(in []Secret) []task.Secret {
	var out []task.Secret
	for _, s := range in {
		out = append(out, task.Secret{Name: s.Name, ValueFrom: s.ValueFrom})
	}
	return out
}

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

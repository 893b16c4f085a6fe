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
		Containers:    make([]*task.Container, 0, len(d.ContainerDefinitions)),
		DesiredStatus: task.TaskRunning,

		RoleArn:          d.TaskRoleArn,
		ExecutionRoleArn: d.ExecutionRoleArn,
	}
	for _, v := range d.Volumes {
		t.Volumes = append(t.Volumes, newVolume(v))
	}
	for i := range d.ContainerDefinitions {
		c := newContainer(&d.ContainerDefinitions[i])
		if d.ExecutionRoleArn != "" {
			c.ECRAuth = &task.ECRAuth{UseExecutionRole: true}
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
		DesiredStatus:          task.ContainerRunning,
	}
	for _, kv := range c.Environment {
		out.Environment = append(out.Environment, task.KeyValue{Name: kv.Name, Value: kv.Value})
	}
	for _, pm := range c.PortMappings {
		out.PortMappings = append(out.PortMappings, task.PortMapping{
			ContainerPort: uint16(pm.ContainerPort),
			HostPort:      uint16(pm.HostPort),
			Protocol:      cmp.Or(pm.Protocol, "tcp"),
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
	if lc := c.LogConfiguration; lc != nil {
		out.LogConfiguration = &task.LogConfiguration{LogDriver: lc.LogDriver, Options: maps.Clone(lc.Options)}
	}
	return out
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

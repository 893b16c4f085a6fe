package engine

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/task"
)

// Labels every container Berth creates carries; recovery and cleanup find Berth's containers by them.
const (
	LabelManaged       = "com.berth-agent.managed"
	LabelTaskARN       = "com.amazonaws.ecs.task-arn"
	LabelContainerName = "com.amazonaws.ecs.container-name"
	LabelTaskFamily    = "com.amazonaws.ecs.task-definition-family"
	LabelTaskRevision  = "com.amazonaws.ecs.task-definition-version"
	LabelCluster       = "com.amazonaws.ecs.cluster"
)

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// containerName returns a readable Docker name unique per task: ecs-<family>-<revision>-<container>-<random>.
func containerName(t *task.Task, c *task.Container) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("ecs-%s-%d-%s-%s", t.Family, t.Revision, c.Name, hex.EncodeToString(b[:]))
	return unsafeName.ReplaceAllString(name, "-")
}

// labels returns the labels of a container: the task definition's dockerLabels plus Berth's own, which
// win on a clash.
func labels(t *task.Task, c *task.Container, cluster string) map[string]string {
	out := make(map[string]string, len(c.DockerLabels)+6)
	for k, v := range c.DockerLabels {
		out[k] = v
	}
	out[LabelManaged] = "true"
	out[LabelTaskARN] = t.Arn
	out[LabelContainerName] = c.Name
	out[LabelTaskFamily] = t.Family
	out[LabelTaskRevision] = strconv.Itoa(t.Revision)
	out[LabelCluster] = cluster
	return out
}

// volumeName is the Docker volume backing a task-scoped empty volume.
func volumeName(t *task.Task, v task.Volume) string {
	id := t.Arn
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	return unsafeName.ReplaceAllString(fmt.Sprintf("ecs-%s-%d-%s-%s", t.Family, t.Revision, v.Name, id), "-")
}

// createOptions translates a task container into Docker's create request. pauseID is the pause
// container of the task, whose network namespace (awsvpc) and PID and IPC namespaces (pidMode,
// ipcMode task) the container joins. It fails, naming the field, when a memory size in bytes does
// not fit an int64.
func createOptions(t *task.Task, c *task.Container, cluster, pauseID string, cfg Config, in createInputs) (docker.CreateContainerOptions, error) {
	memory, err := mibToBytes(c.Memory)
	if err != nil {
		return docker.CreateContainerOptions{}, fmt.Errorf("container %q: memory: %w", c.Name, err)
	}
	reservation, err := mibToBytes(c.MemoryReservation)
	if err != nil {
		return docker.CreateContainerOptions{}, fmt.Errorf("container %q: memoryReservation: %w", c.Name, err)
	}
	env := make([]string, 0, len(c.Environment))
	for _, kv := range c.Environment {
		env = append(env, kv.Name+"="+kv.Value)
	}
	env = mergeEnv(env)
	stopTimeout := int(effectiveStopTimeout(c, cfg).Seconds())
	conf := &docker.Config{
		Image:       c.Image,
		Cmd:         c.Command,
		Entrypoint:  c.EntryPoint,
		Env:         env,
		Labels:      labels(t, c, cluster),
		User:        c.User,
		WorkingDir:  c.WorkingDirectory,
		StopTimeout: stopTimeout,
	}
	host := &docker.HostConfig{
		Privileged:     c.Privileged,
		ReadonlyRootfs: c.ReadonlyRootFilesystem,
		CPUShares:      int64(max(c.CPU, 2)),
		Memory:         memory,
		// 0 when unset, which Docker reads as "no reservation".
		MemoryReservation: reservation,
	}
	host.Init = c.InitProcessEnabled
	if c.LogConfiguration != nil {
		host.LogConfig = docker.LogConfig{Type: c.LogConfiguration.LogDriver, Config: c.LogConfiguration.Options}
	}
	for _, u := range c.Ulimits {
		host.Ulimits = append(host.Ulimits, docker.ULimit{Name: u.Name, Soft: u.SoftLimit, Hard: u.HardLimit})
	}
	if hc := c.HealthCheck; hc != nil {
		conf.Healthcheck = &docker.HealthConfig{Test: hc.Command, Interval: hc.Interval, Timeout: hc.Timeout,
			Retries: hc.Retries, StartPeriod: hc.StartPeriod}
	}

	switch {
	case c.Pause:
		host.NetworkMode = "none"
		if t.IpcMode == "task" {
			host.IpcMode = "shareable"
		}
		if t.ENI != nil { // the task's containers share the pause container's resolv.conf
			host.DNS, host.DNSSearch = t.ENI.DNSServers, t.ENI.SearchDomains
		}
	case t.NetworkMode == task.NetworkAWSVPC:
		host.NetworkMode = "container:" + pauseID
	default:
		host.NetworkMode = string(t.NetworkMode)
	}
	if t.NetworkMode == task.NetworkBridge && len(c.PortMappings) > 0 {
		conf.ExposedPorts = map[docker.Port]struct{}{}
		host.PortBindings = map[docker.Port][]docker.PortBinding{}
		for i, pm := range c.PortMappings {
			if pm.ContainerPortRange != "" {
				lo, hi := portRangeBounds(pm.ContainerPortRange)
				for n := 0; n <= hi-lo; n++ {
					port := docker.Port(fmt.Sprintf("%d/%s", lo+n, protocol(pm.Protocol)))
					conf.ExposedPorts[port] = struct{}{}
					host.PortBindings[port] = append(host.PortBindings[port], docker.PortBinding{HostPort: strconv.Itoa(in.HostPorts[i] + n)})
				}
				continue
			}
			port := docker.Port(fmt.Sprintf("%d/%s", pm.ContainerPort, protocol(pm.Protocol)))
			conf.ExposedPorts[port] = struct{}{}
			hostPort := ""
			if pm.HostPort != 0 {
				hostPort = strconv.Itoa(int(pm.HostPort))
			}
			host.PortBindings[port] = append(host.PortBindings[port], docker.PortBinding{HostPort: hostPort})
		}
	}

	for _, mp := range c.MountPoints {
		v := findVolume(t, mp.SourceVolume)
		if v == nil {
			continue // taskdef validation rules this out
		}
		m := docker.HostMount{Target: mp.ContainerPath, ReadOnly: mp.ReadOnly}
		switch {
		case v.Host != nil && v.Host.SourcePath != "":
			m.Type, m.Source = "bind", v.Host.SourcePath
		case v.Docker != nil:
			m.Type, m.Source = "volume", v.Name
			if v.Docker.Scope != "shared" {
				m.Source = volumeName(t, *v)
			}
			m.VolumeOptions = &docker.VolumeOptions{Labels: v.Docker.Labels,
				DriverConfig: docker.VolumeDriverConfig{Name: v.Docker.Driver, Options: v.Docker.DriverOpts}}
		default:
			m.Type, m.Source = "volume", volumeName(t, *v)
			m.VolumeOptions = &docker.VolumeOptions{Labels: map[string]string{LabelManaged: "true", LabelTaskARN: t.Arn}}
		}
		host.Mounts = append(host.Mounts, m)
	}
	for _, vf := range c.VolumesFrom {
		src := t.Container(vf.SourceContainer)
		if src == nil || src.DockerID == "" {
			continue
		}
		spec := src.DockerID
		if vf.ReadOnly {
			spec += ":ro"
		}
		host.VolumesFrom = append(host.VolumesFrom, spec)
	}
	applyOptions(t, c, pauseID, conf, host)
	return docker.CreateContainerOptions{Name: c.DockerName, Config: conf, HostConfig: host}, nil
}

func protocol(p string) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(p)
}

func findVolume(t *task.Task, name string) *task.Volume {
	for i := range t.Volumes {
		if t.Volumes[i].Name == name {
			return &t.Volumes[i]
		}
	}
	return nil
}

// effectiveStopTimeout is the container's stopTimeout, or the agent's default.
func effectiveStopTimeout(c *task.Container, cfg Config) time.Duration {
	if c.StopTimeout > 0 {
		return c.StopTimeout
	}
	return cfg.StopTimeout
}

// effectiveStartTimeout bounds how long a container waits for its dependencies.
func effectiveStartTimeout(c *task.Container, cfg Config) time.Duration {
	if c.StartTimeout > 0 {
		return c.StartTimeout
	}
	return cfg.StartTimeout
}

// networks reads the networks Docker attached the container to, with their IPv4 addresses, in name order.
func networks(ci *docker.Container) []task.Network {
	if ci.NetworkSettings == nil {
		return nil
	}
	names := make([]string, 0, len(ci.NetworkSettings.Networks))
	for name := range ci.NetworkSettings.Networks {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []task.Network
	for _, name := range names {
		n := ci.NetworkSettings.Networks[name]
		if name == "none" {
			continue
		}
		var addrs []string
		if n.IPAddress != "" {
			addrs = []string{n.IPAddress}
		}
		out = append(out, task.Network{Mode: name, IPv4Addresses: addrs})
	}
	return out
}

// bindings reads the port bindings Docker made, including dynamic host ports.
func bindings(ci *docker.Container) []task.NetworkBinding {
	if ci == nil || ci.NetworkSettings == nil {
		return nil
	}
	var out []task.NetworkBinding
	for port, binds := range ci.NetworkSettings.Ports {
		cp, err := strconv.Atoi(port.Port())
		if err != nil {
			continue
		}
		for _, b := range binds {
			hp, err := strconv.Atoi(b.HostPort)
			if err != nil {
				continue
			}
			out = append(out, task.NetworkBinding{BindIP: b.HostIP, ContainerPort: uint16(cp), HostPort: uint16(hp), Protocol: port.Proto()})
		}
	}
	slices.SortFunc(out, func(a, b task.NetworkBinding) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), strings.Compare(a.Protocol, b.Protocol), strings.Compare(a.BindIP, b.BindIP))
	})
	return out
}

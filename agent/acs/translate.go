package acs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// Accepted is a payload task translated into the task model.
type Accepted struct {
	// Task is ready to hand to the engine, with the payload's desired status.
	Task *task.Task
	// Definition is the validated task definition the task was built from.
	Definition *taskdef.Definition
	// RoleCredentials are the task role's credentials, or nil.
	RoleCredentials *IAMRoleCredentials
	// ExecutionRoleCredentials are the execution role's credentials, or nil.
	ExecutionRoleCredentials *IAMRoleCredentials
	// Warnings names each ACS field that was ignored, as "path: reason".
	Warnings []string
}

// Rejected is a payload task that could not be translated. The caller reports it STOPPED with
// Err.Error() as the reason.
type Rejected struct {
	Arn string
	Err error // matches taskdef.ErrInvalid
}

// TranslateTask builds the task model for an ACS task through taskdef: it makes a
// *taskdef.Definition, validates it and calls NewTask. Errors match taskdef.ErrInvalid and name the
// offending field; a task Berth cannot run as asked (secrets, EFS volumes, …) is an error, not a
// warning.
func TranslateTask(t *Task) (Accepted, error) {
	if t == nil {
		return Accepted{}, &taskdef.FieldError{Msg: "null task"}
	}
	def, warnings, err := Definition(t)
	if err != nil {
		return Accepted{}, err
	}
	if err := def.Validate(); err != nil {
		return Accepted{}, err
	}
	if t.Arn == "" {
		return Accepted{}, &taskdef.FieldError{Path: "arn", Msg: "required"}
	}
	desired, err := desiredStatus(t.DesiredStatus)
	if err != nil {
		return Accepted{}, err
	}
	tk := def.NewTask(t.Arn)
	tk.DesiredStatus = desired
	if desired == task.TaskStopped {
		for _, c := range tk.Containers {
			c.DesiredStatus = task.ContainerStopped
		}
	}
	if tk.ENI, err = taskENI(t.ElasticNetworkInterfaces); err != nil {
		return Accepted{}, err
	}
	for i, c := range t.Containers {
		auth, warning := ecrAuth(c.RegistryAuthentication)
		tk.Containers[i].ECRAuth = auth
		if warning != "" {
			warnings = append(warnings, fmt.Sprintf("containers[%d].registryAuthentication: %s", i, warning))
		}
	}
	return Accepted{Task: tk, Definition: def, RoleCredentials: t.RoleCredentials,
		ExecutionRoleCredentials: t.ExecutionRoleCredentials, Warnings: warnings}, nil
}

// ecrAuth translates a container's registryAuthentication: type ecr with useExecutionRole pulls
// with the task's execution role; type ecr without it is what the agent does anyway (its own
// credentials). Anything else is ignored, with a warning saying so.
func ecrAuth(ra *RegistryAuthentication) (*task.ECRAuth, string) {
	switch {
	case ra == nil:
		return nil, ""
	case ra.Type != "ecr":
		return nil, fmt.Sprintf("type %q is not supported by Berth, ignored; the image is pulled with the agent's own registry credentials", ra.Type)
	case ra.ECRAuthData == nil || !ra.ECRAuthData.UseExecutionRole:
		return nil, ""
	}
	d := ra.ECRAuthData
	return &task.ECRAuth{UseExecutionRole: true, Region: d.Region, RegistryID: d.RegistryID, EndpointOverride: d.EndpointOverride}, ""
}

// taskENI parses the task's ENI (ACS sends at most one per task) into the model. Every address must
// parse; the error names the field.
func taskENI(enis []*ElasticNetworkInterface) (*task.ENI, error) {
	if len(enis) == 0 {
		return nil, nil
	}
	const path = "elasticNetworkInterfaces[0]"
	if len(enis) > 1 {
		return nil, &taskdef.FieldError{Path: "elasticNetworkInterfaces", Msg: fmt.Sprintf("%d interfaces; a task takes one", len(enis))}
	}
	e := enis[0]
	if e == nil {
		return nil, &taskdef.FieldError{Path: path, Msg: "null"}
	}
	mac, err := net.ParseMAC(e.MacAddress)
	if err != nil {
		return nil, &taskdef.FieldError{Path: path + ".macAddress", Msg: fmt.Sprintf("%q is not a MAC address", e.MacAddress)}
	}
	var addr netip.Addr
	for i, a := range e.IPv4Addresses {
		ip, err := netip.ParseAddr(a.PrivateAddress)
		if err != nil || !ip.Is4() {
			return nil, &taskdef.FieldError{Path: fmt.Sprintf("%s.ipv4Addresses[%d].privateAddress", path, i), Msg: fmt.Sprintf("%q is not an IPv4 address", a.PrivateAddress)}
		}
		if a.Primary || !addr.IsValid() {
			addr = ip
		}
	}
	if !addr.IsValid() {
		return nil, &taskdef.FieldError{Path: path + ".ipv4Addresses", Msg: "no IPv4 address"}
	}
	gw, err := netip.ParsePrefix(e.SubnetGatewayIPv4Address)
	if err != nil || !gw.Addr().Is4() {
		return nil, &taskdef.FieldError{Path: path + ".subnetGatewayIpv4Address", Msg: fmt.Sprintf("%q is not an IPv4 address with a prefix length, such as 10.0.0.1/24", e.SubnetGatewayIPv4Address)}
	}
	if !gw.Masked().Contains(addr) {
		return nil, &taskdef.FieldError{Path: path, Msg: fmt.Sprintf("address %s is outside the gateway's subnet %s", addr, gw.Masked())}
	}
	for i, dns := range e.DomainNameServers {
		if _, err := netip.ParseAddr(dns); err != nil {
			return nil, &taskdef.FieldError{Path: fmt.Sprintf("%s.domainNameServers[%d]", path, i), Msg: fmt.Sprintf("%q is not an IP address", dns)}
		}
	}
	return &task.ENI{AttachmentArn: e.AttachmentArn, MAC: mac.String(), IPv4: netip.PrefixFrom(addr, gw.Bits()),
		Gateway: gw.Addr(), DNSServers: e.DomainNameServers, SearchDomains: e.DomainName, PrivateDNSName: e.PrivateDNSName}, nil
}

// TranslatePayload translates every task of a payload; a task that fails is listed in rejected and
// does not affect the others.
func TranslatePayload(m *PayloadMessage) (accepted []Accepted, rejected []Rejected) {
	for _, t := range m.Tasks {
		a, err := TranslateTask(t)
		if err != nil {
			arn := ""
			if t != nil {
				arn = t.Arn
			}
			rejected = append(rejected, Rejected{Arn: arn, Err: err})
			continue
		}
		accepted = append(accepted, a)
	}
	return accepted, rejected
}

func desiredStatus(s string) (task.TaskStatus, error) {
	switch s {
	case "RUNNING", "":
		return task.TaskRunning, nil
	case "STOPPED":
		return task.TaskStopped, nil
	}
	return 0, &taskdef.FieldError{Path: "desiredStatus", Msg: fmt.Sprintf("unknown desired status %q (want RUNNING or STOPPED)", s)}
}

// dockerContainerConfig is the part of Docker's container Config that Berth reads.
type dockerContainerConfig struct {
	Healthcheck *struct {
		Test        []string `json:"Test"`
		Interval    int64    `json:"Interval"`    // ns
		Timeout     int64    `json:"Timeout"`     // ns
		Retries     *int     `json:"Retries"`     //
		StartPeriod int64    `json:"StartPeriod"` // ns
	} `json:"Healthcheck"`
	Labels     map[string]string `json:"Labels"`
	User       string            `json:"User"`
	WorkingDir string            `json:"WorkingDir"`
}

// dockerHostConfig is the part of Docker's HostConfig that Berth reads.
type dockerHostConfig struct {
	Ulimits []struct {
		Name string `json:"Name"`
		Soft int64  `json:"Soft"`
		Hard int64  `json:"Hard"`
	} `json:"Ulimits"`
	LogConfig *struct {
		Type   string            `json:"Type"`
		Config map[string]string `json:"Config"`
	} `json:"LogConfig"`
	Privileged        bool  `json:"Privileged"`
	ReadonlyRootfs    bool  `json:"ReadonlyRootfs"`
	Init              *bool `json:"Init"`
	MemoryReservation int64 `json:"MemoryReservation"` // bytes
}

// Definition builds the task definition of an ACS task without validating it, and returns the
// ignored fields as warnings. Errors (matching taskdef.ErrInvalid) are for fields that cannot be
// read or that Berth cannot honour.
//
// A task with more containers or volumes than taskdef allows is refused before any of them is
// translated. CPU and memory outside what taskdef accepts are errors naming the field, never clamped
// or wrapped into range.
func Definition(t *Task) (*taskdef.Definition, []string, error) {
	var errs fieldErrors
	if len(t.Containers) > taskdef.MaxContainers {
		errs.add("containerDefinitions", "%d entries; at most %d are allowed", len(t.Containers), taskdef.MaxContainers)
	}
	if len(t.Volumes) > taskdef.MaxEntries {
		errs.add("volumes", "%d entries; at most %d are allowed", len(t.Volumes), taskdef.MaxEntries)
	}
	if err := errs.join(); err != nil {
		return nil, nil, err
	}
	var warnings []string
	def := &taskdef.Definition{
		Family:      t.Family,
		NetworkMode: task.NetworkMode(t.NetworkMode),
		Memory:      taskdef.MiB(t.Memory),
	}
	if t.Version != "" {
		rev, err := strconv.Atoi(t.Version)
		if err != nil {
			errs.add("version", "%q is not a revision number", t.Version)
		}
		def.Revision = rev
	}
	if t.CPU < 0 || math.IsNaN(t.CPU) || t.CPU*1024 > math.MaxInt32 {
		errs.add("cpu", "%v vCPU is out of range", t.CPU)
	} else {
		def.CPU = taskdef.CPUUnits(math.Round(t.CPU * 1024))
	}
	if t.Memory < 0 || t.Memory > math.MaxInt32 {
		errs.add("memory", "%d MiB is out of range", t.Memory)
	}
	for _, f := range []struct{ name, value string }{{"pidMode", t.PidMode}, {"ipcMode", t.IpcMode}} {
		if f.value != "" {
			warnings = append(warnings, f.name+": not supported by Berth, ignored")
		}
	}
	for i, v := range t.Volumes {
		p := fmt.Sprintf("volumes[%d]", i)
		if v == nil {
			errs.add(p, "null volume")
			continue
		}
		vol := taskdef.Volume{Name: v.Name}
		switch v.Type {
		case "", "host":
			if v.DockerVolumeConfiguration != nil && v.Type == "" {
				vol.DockerVolumeConfiguration = dockerVolume(v.DockerVolumeConfiguration)
			} else if v.Host != nil {
				vol.Host = &taskdef.HostVolume{SourcePath: v.Host.SourcePath}
			}
		case "docker":
			if v.DockerVolumeConfiguration == nil {
				errs.add(p+".dockerVolumeConfiguration", "required for a docker volume")
				continue
			}
			vol.DockerVolumeConfiguration = dockerVolume(v.DockerVolumeConfiguration)
		default:
			errs.add(p+".type", "volume type %q is not supported by Berth", v.Type)
			continue
		}
		def.Volumes = append(def.Volumes, vol)
	}
	for i, c := range t.Containers {
		p := fmt.Sprintf("containerDefinitions[%d]", i) // named as taskdef names it
		if c == nil {
			errs.add(p, "null container")
			continue
		}
		cd, w := containerDefinition(p, c, &errs)
		warnings = append(warnings, w...)
		def.ContainerDefinitions = append(def.ContainerDefinitions, cd)
	}
	if err := errs.join(); err != nil {
		return nil, nil, err
	}
	def.Warnings = warnings
	return def, warnings, nil
}

func dockerVolume(dv *DockerVolumeConfiguration) *taskdef.DockerVolumeConfiguration {
	return &taskdef.DockerVolumeConfiguration{
		Scope:         dv.Scope,
		Autoprovision: dv.Autoprovision,
		Driver:        dv.Driver,
		DriverOpts:    dv.DriverOpts,
		Labels:        dv.Labels,
	}
}

func containerDefinition(p string, c *Container, errs *fieldErrors) (taskdef.ContainerDefinition, []string) {
	var warnings []string
	cd := taskdef.ContainerDefinition{
		Name:         c.Name,
		Image:        c.Image,
		CPU:          errs.int32(p+".cpu", c.CPU, "CPU units"),
		Essential:    c.Essential,
		EntryPoint:   slices.Clone(c.EntryPoint),
		Command:      slices.Clone(c.Command),
		StartTimeout: int(clamp(c.StartTimeout)),
		StopTimeout:  int(clamp(c.StopTimeout)),
		Privileged:   c.Privileged,
	}
	if c.Memory != 0 {
		m := errs.int32(p+".memory", c.Memory, "MiB")
		cd.Memory = &m
	}
	names := make([]string, 0, len(c.Environment))
	for k := range c.Environment {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		cd.Environment = append(cd.Environment, taskdef.KeyValue{Name: k, Value: c.Environment[k]})
	}
	for _, pm := range c.PortMappings {
		cd.PortMappings = append(cd.PortMappings, taskdef.PortMapping{
			ContainerPort: int(clamp(pm.ContainerPort)),
			HostPort:      int(clamp(pm.HostPort)),
			Protocol:      pm.Protocol,
		})
	}
	for _, m := range c.MountPoints {
		cd.MountPoints = append(cd.MountPoints, taskdef.MountPoint(m))
	}
	for _, vf := range c.VolumesFrom {
		cd.VolumesFrom = append(cd.VolumesFrom, taskdef.VolumeFrom(vf))
	}
	for _, d := range c.DependsOn {
		cd.DependsOn = append(cd.DependsOn, taskdef.Dependency{ContainerName: d.ContainerName, Condition: task.Condition(d.Condition)})
	}
	if len(c.Links) > 0 {
		warnings = append(warnings, p+".links: not supported by Berth, ignored")
	}
	if len(c.Secrets) > 0 {
		errs.add(p+".secrets", "not supported by Berth")
	}
	if c.LinuxParameters != nil && c.LinuxParameters.InitProcessEnabled != nil && *c.LinuxParameters.InitProcessEnabled {
		cd.LinuxParameters = &taskdef.LinuxParameters{InitProcessEnabled: true}
	}
	if c.DockerConfig == nil {
		return cd, warnings
	}
	if s := c.DockerConfig.Config; s != "" {
		var cfg dockerContainerConfig
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			errs.add(p+".dockerConfig.config", "not a Docker container config: %s", jsonErrorKind(err))
		} else {
			applyConfig(&cd, &cfg)
		}
	}
	if s := c.DockerConfig.HostConfig; s != "" {
		var hc dockerHostConfig
		if err := json.Unmarshal([]byte(s), &hc); err != nil {
			errs.add(p+".dockerConfig.hostConfig", "not a Docker host config: %s", jsonErrorKind(err))
		} else {
			applyHostConfig(p, &cd, &hc, errs)
		}
	}
	return cd, warnings
}

func applyConfig(cd *taskdef.ContainerDefinition, cfg *dockerContainerConfig) {
	cd.DockerLabels = cfg.Labels
	cd.User = cfg.User
	cd.WorkingDirectory = cfg.WorkingDir
	hc := cfg.Healthcheck
	if hc == nil || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
		return
	}
	cd.HealthCheck = &taskdef.HealthCheck{
		Command:     slices.Clone(hc.Test),
		Interval:    nsToSeconds(hc.Interval),
		Timeout:     nsToSeconds(hc.Timeout),
		Retries:     hc.Retries,
		StartPeriod: nsToSeconds(hc.StartPeriod),
	}
	if hc.Retries != nil && *hc.Retries == 0 {
		cd.HealthCheck.Retries = nil // Docker's 0 means "the default"
	}
}

func applyHostConfig(p string, cd *taskdef.ContainerDefinition, hc *dockerHostConfig, errs *fieldErrors) {
	for _, u := range hc.Ulimits {
		cd.Ulimits = append(cd.Ulimits, taskdef.Ulimit{Name: u.Name, SoftLimit: u.Soft, HardLimit: u.Hard})
	}
	if lc := hc.LogConfig; lc != nil && lc.Type != "" {
		cd.LogConfiguration = &taskdef.LogConfiguration{LogDriver: lc.Type, Options: lc.Config}
	}
	cd.Privileged = cd.Privileged || hc.Privileged
	cd.ReadonlyRootFilesystem = hc.ReadonlyRootfs
	if hc.Init != nil && *hc.Init {
		cd.LinuxParameters = &taskdef.LinuxParameters{InitProcessEnabled: true}
	}
	if hc.MemoryReservation > 0 {
		m := errs.int32(p+".memoryReservation", hc.MemoryReservation>>20, "MiB")
		cd.MemoryReservation = &m
	}
}

// nsToSeconds converts a Docker duration in nanoseconds to whole seconds, rounding up; 0 (Docker's
// "default") gives nil, the ECS default.
func nsToSeconds(ns int64) *int {
	if ns <= 0 {
		return nil
	}
	s := int(clamp((ns + int64(time.Second) - 1) / int64(time.Second)))
	return &s
}

// clamp bounds an ACS integer to an int32 so that validation sees out-of-range values as such
// rather than wrapped. Only for fields whose valid range validation bounds well inside an int32
// (ports, timeouts); cpu and memory use fieldErrors.int32.
func clamp(n int64) int64 {
	return min(max(n, math.MinInt32), math.MaxInt32)
}

// int32 returns n when it fits an int32, else records an error naming path and returns 0. Clamping
// would turn 2^44 MiB of memory into 2^31-1, which validation accepts.
func (e *fieldErrors) int32(path string, n int64, unit string) int {
	if n < math.MinInt32 || n > math.MaxInt32 {
		e.add(path, "%d %s is out of range", n, unit)
		return 0
	}
	return int(n)
}

type fieldErrors []error

func (e *fieldErrors) add(path, format string, args ...any) {
	*e = append(*e, &taskdef.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (e fieldErrors) join() error {
	if len(e) == 0 {
		return nil
	}
	return errors.Join(e...)
}

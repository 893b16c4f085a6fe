// Package acstranslate translates between the tasks of ACS payloads (agent/acswire) and the task
// model, both ways and beside their round-trip test: TranslateTask (through a validated taskdef
// Definition) for the agent's ACS client, WireTask for the embedded control plane. Every field ACS
// sends is either translated or refused by name, never dropped.
package acstranslate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/acswire"
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
	RoleCredentials *acswire.IAMRoleCredentials
	// ExecutionRoleCredentials are the execution role's credentials, or nil.
	ExecutionRoleCredentials *acswire.IAMRoleCredentials
}

// Rejected is a payload task that could not be translated. The caller reports it STOPPED with
// Err.Error() as the reason.
type Rejected struct {
	Arn string
	Err error // matches taskdef.ErrInvalid
}

// TranslateTask builds the task model for an ACS task through taskdef: it makes a
// *taskdef.Definition, validates it and calls NewTask. Errors match taskdef.ErrInvalid and name the
// offending field; a task Berth cannot run as asked (EFS volumes, GPUs, …) is an error.
func TranslateTask(t *acswire.Task) (Accepted, error) {
	if t == nil {
		return Accepted{}, &taskdef.FieldError{Msg: "null task"}
	}
	def, err := Definition(t)
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
	tk.ServiceName, tk.LaunchType = t.ServiceName, t.LaunchType
	for i, c := range t.Containers {
		tk.Containers[i].ARN = c.ContainerArn
		tk.Containers[i].ECRAuth = ecrAuth(c.RegistryAuthentication)
		tk.Containers[i].LogsAuthExecutionRole = c.LogsAuthStrategy == "ExecutionRole"
		tk.Containers[i].ManagedAgents = managedAgents(c.ManagedAgents)
	}
	return Accepted{Task: tk, Definition: def, RoleCredentials: t.RoleCredentials,
		ExecutionRoleCredentials: t.ExecutionRoleCredentials}, nil
}

// managedAgents translates a container's managed agents (Definition has refused any but
// ExecuteCommandAgent), each PENDING until the engine starts it.
func managedAgents(in []acswire.ManagedAgent) []task.ManagedAgent {
	var out []task.ManagedAgent
	for _, m := range in {
		out = append(out, task.ManagedAgent{Name: m.Name, Properties: maps.Clone(m.Properties), Status: task.ManagedAgentPending})
	}
	return out
}

// ecrAuth translates a container's registryAuthentication of type ecr: with useExecutionRole the
// image is pulled with the task's execution role; without it, with the agent's own credentials,
// which is what the agent does anyway. Type asm is translated to repositoryCredentials by
// Definition.
func ecrAuth(ra *acswire.RegistryAuthentication) *task.ECRAuth {
	if ra == nil || ra.Type != "ecr" || ra.ECRAuthData == nil || !ra.ECRAuthData.UseExecutionRole {
		return nil
	}
	d := ra.ECRAuthData
	return &task.ECRAuth{UseExecutionRole: true, Region: d.Region, RegistryID: d.RegistryID, EndpointOverride: d.EndpointOverride}
}

// taskENI parses the task's ENI (ACS sends at most one per task) into the model. Every address must
// parse; the error names the field.
func taskENI(enis []*acswire.ElasticNetworkInterface) (*task.ENI, error) {
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
func TranslatePayload(m *acswire.PayloadMessage) (accepted []Accepted, rejected []Rejected) {
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

// Definition builds the task definition of an ACS task without validating it. Errors (matching
// taskdef.ErrInvalid) are for fields that cannot be read or that Berth cannot honour: every field
// ACS sends is either translated or refused by name, never dropped.
//
// A task with more containers or volumes than taskdef allows is refused before any of them is
// translated. CPU and memory outside what taskdef accepts are errors naming the field, never clamped
// or wrapped into range.
func Definition(t *acswire.Task) (*taskdef.Definition, error) {
	var errs fieldErrors
	if len(t.Containers) > taskdef.MaxContainers {
		errs.add("containerDefinitions", "%d entries; at most %d are allowed", len(t.Containers), taskdef.MaxContainers)
	}
	if len(t.Volumes) > taskdef.MaxEntries {
		errs.add("volumes", "%d entries; at most %d are allowed", len(t.Volumes), taskdef.MaxEntries)
	}
	if err := errs.join(); err != nil {
		return nil, err
	}
	def := &taskdef.Definition{
		Family:      t.Family,
		NetworkMode: task.NetworkMode(t.NetworkMode),
		Memory:      taskdef.MiB(t.Memory),
		PidMode:     t.PidMode,
		IpcMode:     t.IpcMode,

		EnableFaultInjection: t.EnableFaultInjection,
	}
	if rc := t.RoleCredentials; rc != nil {
		def.TaskRoleArn = rc.RoleArn
	}
	if rc := t.ExecutionRoleCredentials; rc != nil {
		def.ExecutionRoleArn = rc.RoleArn
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
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		why  string
	}{
		{"associations", t.Associations, "GPUs and elastic inference accelerators are not supported by Berth yet"},
		{"proxyConfiguration", t.ProxyConfiguration, "App Mesh proxy configuration is not supported by Berth yet"},
		{"attachments", t.Attachments, "Service Connect and EBS attachments are not supported by Berth yet"},
		{"trustedExecutionConfiguration", t.TrustedExecutionConfiguration, "not supported by Berth yet"},
	} {
		if !emptyJSON(f.raw) && len(f.raw) > 0 {
			errs.add(f.name, "%s", f.why)
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
		def.ContainerDefinitions = append(def.ContainerDefinitions, containerDefinition(p, c, &errs))
	}
	if err := errs.join(); err != nil {
		return nil, err
	}
	return def, nil
}

func dockerVolume(dv *acswire.DockerVolumeConfiguration) *taskdef.DockerVolumeConfiguration {
	return &taskdef.DockerVolumeConfiguration{
		Scope:         dv.Scope,
		Autoprovision: dv.Autoprovision,
		Driver:        dv.Driver,
		DriverOpts:    dv.DriverOpts,
		Labels:        dv.Labels,
	}
}

func containerDefinition(p string, c *acswire.Container, errs *fieldErrors) taskdef.ContainerDefinition {
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
		Links:        slices.Clone(c.Links),
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
			ContainerPort:      int(clamp(pm.ContainerPort)),
			HostPort:           int(clamp(pm.HostPort)),
			Protocol:           pm.Protocol,
			ContainerPortRange: pm.ContainerPortRange,
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
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		why  string
	}{
		{"resourceRequirements", c.ResourceRequirements, "GPUs and inference accelerators are not supported by Berth yet"},
		{"credentialSpecs", c.CredentialSpecs, "applies to Windows containers only (gMSA)"},
	} {
		if len(f.raw) > 0 && !emptyJSON(f.raw) {
			errs.add(p+"."+f.name, "%s", f.why)
		}
	}
	if fc := c.FirelensConfiguration; fc != nil {
		cd.FirelensConfiguration = &taskdef.FirelensConfiguration{Type: fc.Type, Options: maps.Clone(fc.Options)}
	}
	seen := map[string]bool{}
	for j, m := range c.ManagedAgents {
		mp := fmt.Sprintf("%s.managedAgents[%d]", p, j)
		switch {
		case m.Name != task.ExecuteCommandAgent:
			errs.add(mp+".name", "managed agent %q is not supported by Berth (only %s)", m.Name, task.ExecuteCommandAgent)
		case seen[m.Name]:
			errs.add(mp+".name", "managed agent %q given twice", m.Name)
		}
		seen[m.Name] = true
	}
	var logSecrets []taskdef.Secret
	for j, s := range c.Secrets {
		sp := fmt.Sprintf("%s.secrets[%d]", p, j)
		if s.Type != "" && s.Type != "ENVIRONMENT_VARIABLE" {
			errs.add(sp+".type", "secret type %q is not supported by Berth", s.Type)
			continue
		}
		sec := taskdef.Secret{Name: s.Name, ValueFrom: s.ValueFrom}
		switch s.Target {
		case "", "CONTAINER":
			cd.Secrets = append(cd.Secrets, sec)
		case "LOG_DRIVER":
			logSecrets = append(logSecrets, sec)
		default:
			errs.add(sp+".target", "secret target %q is not supported by Berth", s.Target)
		}
	}
	for _, f := range c.EnvironmentFiles {
		cd.EnvironmentFiles = append(cd.EnvironmentFiles, taskdef.EnvironmentFile(f))
	}
	if rp := c.RestartPolicy; rp != nil {
		cd.RestartPolicy = &taskdef.RestartPolicy{Enabled: rp.Enabled}
		for _, code := range rp.IgnoredExitCodes {
			cd.RestartPolicy.IgnoredExitCodes = append(cd.RestartPolicy.IgnoredExitCodes, int(clamp(code)))
		}
		if rp.RestartAttemptPeriod != nil {
			cd.RestartPolicy.RestartAttemptPeriod = new(int(clamp(*rp.RestartAttemptPeriod)))
		}
	}
	if ra := c.RegistryAuthentication; ra != nil && ra.Type != "ecr" && ra.Type != "asm" {
		errs.add(p+".registryAuthentication.type", "%q is not supported by Berth (want ecr or asm)", ra.Type)
	}
	if ra := c.RegistryAuthentication; ra != nil && ra.Type == "asm" {
		if ra.ASMAuthData == nil || ra.ASMAuthData.CredentialsParameter == "" {
			errs.add(p+".registryAuthentication.asmAuthData.credentialsParameter", "required for type asm")
		} else {
			cd.RepositoryCredentials = &taskdef.RepositoryCredentials{CredentialsParameter: ra.ASMAuthData.CredentialsParameter}
		}
	}
	if lp := c.LinuxParameters; lp != nil {
		linux := linuxOf(&cd)
		if caps := lp.Capabilities; caps != nil && len(caps.Add)+len(caps.Drop) > 0 {
			linux.Capabilities = &taskdef.KernelCapabilities{Add: slices.Clone(caps.Add), Drop: slices.Clone(caps.Drop)}
		}
		for _, d := range lp.Devices {
			linux.Devices = append(linux.Devices, taskdef.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: slices.Clone(d.Permissions)})
		}
		linux.InitProcessEnabled = lp.InitProcessEnabled != nil && *lp.InitProcessEnabled
		if lp.SharedMemorySize != nil {
			linux.SharedMemorySize = new(errs.int32(p+".linuxParameters.sharedMemorySize", *lp.SharedMemorySize, "MiB"))
		}
	}
	if c.DockerConfig != nil {
		if s := c.DockerConfig.Config; s != "" {
			var cfg DockerContainerConfig
			decodeDockerJSON(p+".dockerConfig.config", s, &cfg, errs)
			applyConfig(&cd, &cfg)
		}
		if s := c.DockerConfig.HostConfig; s != "" {
			var hc DockerHostConfig
			decodeDockerJSON(p+".dockerConfig.hostConfig", s, &hc, errs)
			applyHostConfig(p+".dockerConfig.hostConfig", &cd, &hc, errs)
		}
	}
	if len(logSecrets) > 0 {
		if cd.LogConfiguration == nil {
			errs.add(p+".secrets", "log driver secrets without a log driver")
		} else {
			cd.LogConfiguration.SecretOptions = logSecrets
		}
	}
	if cd.LinuxParameters != nil && reflect.ValueOf(*cd.LinuxParameters).IsZero() {
		cd.LinuxParameters = nil
	}
	return cd
}

// linuxOf returns cd's linuxParameters, adding them when there are none.
func linuxOf(cd *taskdef.ContainerDefinition) *taskdef.LinuxParameters {
	if cd.LinuxParameters == nil {
		cd.LinuxParameters = &taskdef.LinuxParameters{}
	}
	return cd.LinuxParameters
}

func applyConfig(cd *taskdef.ContainerDefinition, cfg *DockerContainerConfig) {
	cd.DockerLabels = cfg.Labels
	cd.User = cfg.User
	cd.WorkingDirectory = cfg.WorkingDir
	cd.Hostname = cfg.Hostname
	cd.PseudoTerminal = cfg.Tty
	cd.Interactive = cfg.OpenStdin
	cd.DisableNetworking = cfg.NetworkDisabled
	hc := cfg.Healthcheck
	if hc == nil || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
		return
	}
	cd.HealthCheck = &taskdef.HealthCheck{
		Command:     slices.Clone(hc.Test),
		Interval:    nsToSeconds(hc.Interval),
		Timeout:     nsToSeconds(hc.Timeout),
		StartPeriod: nsToSeconds(hc.StartPeriod),
	}
	if hc.Retries != 0 { // Docker's 0 means "the default"
		cd.HealthCheck.Retries = new(hc.Retries)
	}
}

func applyHostConfig(p string, cd *taskdef.ContainerDefinition, hc *DockerHostConfig, errs *fieldErrors) {
	for _, u := range hc.Ulimits {
		cd.Ulimits = append(cd.Ulimits, taskdef.Ulimit{Name: u.Name, SoftLimit: u.Soft, HardLimit: u.Hard})
	}
	if lc := hc.LogConfig; lc != nil && lc.Type != "" {
		cd.LogConfiguration = &taskdef.LogConfiguration{LogDriver: lc.Type, Options: lc.Config}
	}
	cd.Privileged = cd.Privileged || hc.Privileged
	cd.ReadonlyRootFilesystem = hc.ReadonlyRootfs
	if hc.MemoryReservation > 0 {
		cd.MemoryReservation = new(errs.int32(p+".MemoryReservation", hc.MemoryReservation>>20, "MiB"))
	}
	cd.DNSServers = slices.Clone(hc.DNS)
	cd.DNSSearchDomains = slices.Clone(hc.DNSSearch)
	cd.DockerSecurityOptions = slices.Clone(hc.SecurityOpt)
	for j, h := range hc.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok {
			errs.add(fmt.Sprintf("%s.ExtraHosts[%d]", p, j), "want host:address")
			continue
		}
		cd.ExtraHosts = append(cd.ExtraHosts, taskdef.HostEntry{Hostname: name, IPAddress: ip})
	}
	for _, k := range slices.Sorted(maps.Keys(hc.Sysctls)) {
		cd.SystemControls = append(cd.SystemControls, taskdef.SystemControl{Namespace: k, Value: hc.Sysctls[k]})
	}
	if hc.Init != nil && *hc.Init {
		linuxOf(cd).InitProcessEnabled = true
	}
	if len(hc.CapAdd)+len(hc.CapDrop) > 0 {
		linuxOf(cd).Capabilities = &taskdef.KernelCapabilities{Add: slices.Clone(hc.CapAdd), Drop: slices.Clone(hc.CapDrop)}
	}
	for j, d := range hc.Devices {
		perms, err := devicePermissions(d.CgroupPermissions)
		if err != nil {
			errs.add(fmt.Sprintf("%s.Devices[%d].CgroupPermissions", p, j), "%v", err)
		}
		lp := linuxOf(cd)
		lp.Devices = append(lp.Devices, taskdef.Device{HostPath: d.PathOnHost, ContainerPath: d.PathInContainer, Permissions: perms})
	}
	if hc.ShmSize > 0 {
		linuxOf(cd).SharedMemorySize = new(errs.int32(p+".ShmSize", hc.ShmSize>>20, "MiB"))
	}
	for _, path := range slices.Sorted(maps.Keys(hc.Tmpfs)) {
		size, opts, err := tmpfsOptions(hc.Tmpfs[path])
		if err != nil {
			errs.add(fmt.Sprintf("%s.Tmpfs[%q]", p, path), "%v", err)
			continue
		}
		lp := linuxOf(cd)
		lp.Tmpfs = append(lp.Tmpfs, taskdef.Tmpfs{ContainerPath: path, Size: size, MountOptions: opts})
	}
	switch {
	case hc.MemorySwap < 0:
		errs.add(p+".MemorySwap", "unlimited swap cannot be expressed as maxSwap")
	case hc.MemorySwap > 0:
		if cd.Memory == nil {
			errs.add(p+".MemorySwap", "needs the container's memory")
			break
		}
		linuxOf(cd).MaxSwap = new(errs.int32(p+".MemorySwap", hc.MemorySwap>>20-int64(*cd.Memory), "MiB"))
	}
	if hc.MemorySwappiness != nil {
		linuxOf(cd).Swappiness = new(errs.int32(p+".MemorySwappiness", *hc.MemorySwappiness, ""))
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

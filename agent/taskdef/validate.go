package taskdef

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// ErrInvalid matches (errors.Is) every error Parse and Validate return. An
// errdefs.ErrInvalidArgument.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid task definition")

// FieldError is one problem with a task definition. Path names the field as the JSON spells it, e.g.
// containerDefinitions[1].dependsOn[0].containerName; it is empty for a problem with the document as
// a whole, such as a syntax error, whose Msg then starts with the line and column.
type FieldError struct {
	Path string
	Msg  string
}

// Error formats the error as "path: message".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Is makes every *FieldError match ErrInvalid and its class, errdefs.ErrInvalidArgument.
func (e *FieldError) Is(target error) bool { return errors.Is(ErrInvalid, target) }

// Limits ECS applies (seconds unless noted).
const (
	minContainerMemory = 6 // MiB
	maxStopTimeout     = 120
	maxStartTimeout    = 600

	// MaxContainers is ECS's quota "Containers per task definition" (10, not adjustable).
	MaxContainers = 10
	// maxTaskCPU is the largest task-level cpu ECS accepts for EC2 and external instances: 192 vCPU.
	maxTaskCPU = 196608
	// maxContainerCPU is the largest cpu.shares the Linux kernel takes, which a container's cpu
	// becomes; the ECS agent passes no more to Docker either.
	maxContainerCPU = 262144
	// maxMemory bounds every memory field in MiB. ECS's API holds them in 32-bit integers; in bytes
	// the largest is 2^51, so a task's containers summed still fit an int64.
	maxMemory = maxQuantity
	// MaxEntries bounds each list and map of a task definition other than containerDefinitions and
	// ulimits (volumes, and per container environment, portMappings, mountPoints, volumesFrom,
	// dependsOn, dockerLabels). ECS caps a whole task definition at 64 KiB of JSON, which holds
	// fewer entries than this in any one list; the bound keeps validation and memory small.
	MaxEntries = 4096
	// maxUlimits is the number of ulimit names; each may appear once.
	maxUlimits = 15
	// maxErrors bounds the errors one definition reports; the rest are counted in a last error.
	maxErrors = 50

	defaultHealthInterval    = 30
	defaultHealthTimeout     = 5
	defaultHealthRetries     = 3
	defaultHealthStartPeriod = 0
)

// Validate reports every reason ECS would reject d, or Berth could not run it, as one *FieldError each
// (all matching ErrInvalid), joined. It returns nil for a valid definition and does not modify d.
//
// A definition over a count limit (more than MaxContainers containers, a list longer than
// MaxEntries, …) gets only those errors: nothing else is checked, so the cost of refusing it does
// not grow with its size. At most maxErrors errors are reported; a last one says how many more there
// were.
func (d *Definition) Validate() error {
	if errs := countErrors(goCounts(d)); len(errs) > 0 {
		return joinErrors(errs)
	}
	v := &validator{def: d, index: make(map[string]int, len(d.ContainerDefinitions))}
	v.task()
	v.taskModes()
	v.checkVolumes()
	for i := range d.ContainerDefinitions {
		v.container(i)
	}
	v.essential()
	v.firelens()
	v.dependencies()
	v.hostPorts()
	return joinErrors(v.errs)
}

// joinErrors joins errs, keeping the first maxErrors and counting the rest in a last *FieldError.
func joinErrors(errs []error) error {
	if len(errs) > maxErrors {
		more := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], &FieldError{Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return errors.Join(errs...)
}

// counted is a list or map of a task definition whose length has a limit.
type counted struct {
	path     string
	len, max int
}

// countErrors reports each count over its limit.
func countErrors(counts []counted) []error {
	var errs []error
	for _, c := range counts {
		if c.len > c.max {
			errs = append(errs, &FieldError{Path: c.path, Msg: fmt.Sprintf("%d entries; at most %d are allowed", c.len, c.max)})
		}
	}
	return errs
}

// containerLists names each limited list or map of a container definition with its limit.
var containerLists = []struct {
	name string
	max  int
	len  func(c *ContainerDefinition) int
}{
	{"environment", MaxEntries, func(c *ContainerDefinition) int { return len(c.Environment) }},
	{"portMappings", MaxEntries, func(c *ContainerDefinition) int { return len(c.PortMappings) }},
	{"mountPoints", MaxEntries, func(c *ContainerDefinition) int { return len(c.MountPoints) }},
	{"volumesFrom", MaxEntries, func(c *ContainerDefinition) int { return len(c.VolumesFrom) }},
	{"dependsOn", MaxEntries, func(c *ContainerDefinition) int { return len(c.DependsOn) }},
	{"ulimits", maxUlimits, func(c *ContainerDefinition) int { return len(c.Ulimits) }},
	{"dockerLabels", MaxEntries, func(c *ContainerDefinition) int { return len(c.DockerLabels) }},
	{"links", MaxEntries, func(c *ContainerDefinition) int { return len(c.Links) }},
	{"dnsServers", MaxEntries, func(c *ContainerDefinition) int { return len(c.DNSServers) }},
	{"dnsSearchDomains", MaxEntries, func(c *ContainerDefinition) int { return len(c.DNSSearchDomains) }},
	{"extraHosts", MaxEntries, func(c *ContainerDefinition) int { return len(c.ExtraHosts) }},
	{"systemControls", MaxEntries, func(c *ContainerDefinition) int { return len(c.SystemControls) }},
	{"dockerSecurityOptions", MaxEntries, func(c *ContainerDefinition) int { return len(c.DockerSecurityOptions) }},
	{"secrets", MaxEntries, func(c *ContainerDefinition) int { return len(c.Secrets) }},
	{"environmentFiles", MaxEntries, func(c *ContainerDefinition) int { return len(c.EnvironmentFiles) }},
}

// goCounts returns the limited counts of d. The containers' lists are counted only when the number
// of containers is within its limit.
func goCounts(d *Definition) []counted {
	counts := []counted{
		{"containerDefinitions", len(d.ContainerDefinitions), MaxContainers},
		{"volumes", len(d.Volumes), MaxEntries},
	}
	if len(d.ContainerDefinitions) > MaxContainers {
		return counts
	}
	for i := range d.ContainerDefinitions {
		for _, l := range containerLists {
			counts = append(counts, counted{fmt.Sprintf("containerDefinitions[%d].%s", i, l.name), l.len(&d.ContainerDefinitions[i]), l.max})
		}
	}
	return counts
}

// jsonCounts returns the limited counts of a task definition still in its generic JSON form, so
// that Parse refuses an oversized one before decoding it. Values of the wrong type count 0; decoding
// reports them.
func jsonCounts(obj map[string]any) []counted {
	containers, _ := obj["containerDefinitions"].([]any)
	counts := []counted{
		{"containerDefinitions", size(containers), MaxContainers},
		{"volumes", size(obj["volumes"]), MaxEntries},
	}
	if len(containers) > MaxContainers {
		return counts
	}
	for i, c := range containers {
		m, _ := c.(map[string]any)
		for _, l := range containerLists {
			counts = append(counts, counted{fmt.Sprintf("containerDefinitions[%d].%s", i, l.name), size(m[l.name]), l.max})
		}
	}
	return counts
}

// size returns the length of a JSON array or object, else 0.
func size(v any) int {
	switch v := v.(type) {
	case []any:
		return len(v)
	case map[string]any:
		return len(v)
	}
	return 0
}

type validator struct {
	def     *Definition
	errs    []error
	index   map[string]int  // container name to the index of its first definition
	volumes set.Set[string] // names of the task's volumes
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) task() {
	d := v.def
	v.name("family", d.Family)
	if d.Revision < 0 {
		v.fail("revision", "%d is negative", d.Revision)
	}
	switch d.NetworkMode {
	case "", task.NetworkBridge, task.NetworkHost, task.NetworkNone, task.NetworkAWSVPC:
	default:
		v.fail("networkMode", "unknown network mode %q (want bridge, host, none or awsvpc)", d.NetworkMode)
	}
	if mode := cmp.Or(d.NetworkMode, task.NetworkBridge); d.EnableFaultInjection && mode != task.NetworkAWSVPC && mode != task.NetworkHost {
		v.fail("enableFaultInjection", "only allowed with networkMode awsvpc or host, not %s", mode)
	}
	switch {
	case d.CPU < 0:
		v.fail("cpu", "%d is negative", d.CPU)
	case d.CPU > maxTaskCPU:
		v.fail("cpu", "%d CPU units is above the maximum of %d (192 vCPU)", d.CPU, maxTaskCPU)
	}
	switch {
	case d.Memory < 0:
		v.fail("memory", "%d is negative", d.Memory)
	case d.Memory > maxMemory:
		v.fail("memory", "%d MiB is above the maximum of %d MiB", d.Memory, maxMemory)
	}
	if len(d.ContainerDefinitions) == 0 {
		v.fail("containerDefinitions", "at least one container is required")
	}
	for i, c := range d.ContainerDefinitions {
		if _, dup := v.index[c.Name]; !dup {
			v.index[c.Name] = i
		}
	}
}

// name checks a family, container or volume name: 1-255 letters, digits, hyphens and underscores.
func (v *validator) name(path, name string) bool {
	if name == "" {
		v.fail(path, "required")
		return false
	}
	if len(name) > 255 {
		v.fail(path, "longer than 255 characters")
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			v.fail(path, "%q may hold only letters, digits, hyphens and underscores", name)
			return false
		}
	}
	return true
}

func (v *validator) checkVolumes() {
	var seen set.Set[string]
	for i, vol := range v.def.Volumes {
		v.volumes.Add(vol.Name)
		p := fmt.Sprintf("volumes[%d]", i)
		if v.name(p+".name", vol.Name) {
			if seen.Has(vol.Name) {
				v.fail(p+".name", "duplicate volume name %q", vol.Name)
			}
			seen.Add(vol.Name)
		}
		if vol.Host != nil && vol.DockerVolumeConfiguration != nil {
			v.fail(p, "host and dockerVolumeConfiguration are mutually exclusive")
		}
		if vol.Host != nil && vol.Host.SourcePath != "" && !strings.HasPrefix(vol.Host.SourcePath, "/") {
			v.fail(p+".host.sourcePath", "%q is not an absolute path", vol.Host.SourcePath)
		}
		if dv := vol.DockerVolumeConfiguration; dv != nil {
			switch dv.Scope {
			case "", "task":
				if dv.Autoprovision {
					v.fail(p+".dockerVolumeConfiguration.autoprovision", "only allowed with scope shared")
				}
			case "shared":
			default:
				v.fail(p+".dockerVolumeConfiguration.scope", "unknown scope %q (want task or shared)", dv.Scope)
			}
		}
	}
}

func (v *validator) container(i int) {
	c := &v.def.ContainerDefinitions[i]
	p := fmt.Sprintf("containerDefinitions[%d]", i)
	if v.name(p+".name", c.Name) && v.index[c.Name] != i {
		v.fail(p+".name", "duplicate container name %q", c.Name)
	}
	if c.Image == "" {
		v.fail(p+".image", "required")
	}
	switch {
	case c.CPU < 0:
		v.fail(p+".cpu", "%d is negative", c.CPU)
	case c.CPU > maxContainerCPU:
		v.fail(p+".cpu", "%d CPU units is above the maximum of %d", c.CPU, maxContainerCPU)
	}
	v.memory(p, c)
	for j, kv := range c.Environment {
		if kv.Name == "" {
			v.fail(fmt.Sprintf("%s.environment[%d].name", p, j), "required")
		}
	}
	v.portMappings(p, c)
	for j, m := range c.MountPoints {
		mp := fmt.Sprintf("%s.mountPoints[%d]", p, j)
		switch {
		case m.SourceVolume == "":
			v.fail(mp+".sourceVolume", "required")
		case !v.volumes.Has(m.SourceVolume):
			v.fail(mp+".sourceVolume", "no volume named %q", m.SourceVolume)
		}
		switch {
		case m.ContainerPath == "":
			v.fail(mp+".containerPath", "required")
		case !strings.HasPrefix(m.ContainerPath, "/"):
			v.fail(mp+".containerPath", "%q is not an absolute path", m.ContainerPath)
		}
	}
	for j, vf := range c.VolumesFrom {
		vp := fmt.Sprintf("%s.volumesFrom[%d].sourceContainer", p, j)
		v.reference(vp, vf.SourceContainer, c.Name, "a container cannot mount its own volumes")
	}
	for j, dep := range c.DependsOn {
		v.dependency(fmt.Sprintf("%s.dependsOn[%d]", p, j), c.Name, dep)
	}
	if c.HealthCheck != nil {
		v.healthCheck(p+".healthCheck", c.HealthCheck)
	}
	v.bounds(p+".stopTimeout", c.StopTimeout, 0, maxStopTimeout, " seconds")
	v.bounds(p+".startTimeout", c.StartTimeout, 0, maxStartTimeout, " seconds")
	v.ulimits(p, c.Ulimits)
	if c.LogConfiguration != nil && c.LogConfiguration.LogDriver == "" {
		v.fail(p+".logConfiguration.logDriver", "required")
	}
	v.options(p, c)
}

func (v *validator) memory(p string, c *ContainerDefinition) {
	for _, f := range []struct {
		name string
		mib  *int
	}{{"memory", c.Memory}, {"memoryReservation", c.MemoryReservation}} {
		switch {
		case f.mib == nil:
		case *f.mib < minContainerMemory:
			v.fail(p+"."+f.name, "%d MiB is below the minimum of %d MiB", *f.mib, minContainerMemory)
		case *f.mib > maxMemory:
			v.fail(p+"."+f.name, "%d MiB is above the maximum of %d MiB", *f.mib, maxMemory)
		}
	}
	if c.Memory != nil && c.MemoryReservation != nil && *c.MemoryReservation > *c.Memory {
		v.fail(p+".memoryReservation", "%d MiB exceeds memory (%d MiB)", *c.MemoryReservation, *c.Memory)
	}
	if c.Memory == nil && c.MemoryReservation == nil && v.def.Memory == 0 {
		v.fail(p+".memory", "required when neither memoryReservation nor the task's memory is set")
	}
}

func (v *validator) portMappings(p string, c *ContainerDefinition) {
	mode := v.def.NetworkMode
	if mode == task.NetworkNone && len(c.PortMappings) > 0 {
		v.fail(p+".portMappings", "not allowed with networkMode none")
		return
	}
	for j, pm := range c.PortMappings {
		pp := fmt.Sprintf("%s.portMappings[%d]", p, j)
		if pm.ContainerPortRange != "" {
			v.portRangeMapping(pp, pm)
			continue
		}
		v.bounds(pp+".containerPort", pm.ContainerPort, 1, 65535, "")
		v.bounds(pp+".hostPort", pm.HostPort, 0, 65535, "")
		switch pm.Protocol {
		case "", "tcp", "udp":
		default:
			v.fail(pp+".protocol", "unknown protocol %q (want tcp or udp)", pm.Protocol)
		}
		if (mode == task.NetworkHost || mode == task.NetworkAWSVPC) && pm.HostPort != 0 && pm.HostPort != pm.ContainerPort {
			v.fail(pp+".hostPort", "must be 0 or equal containerPort (%d) in %s network mode", pm.ContainerPort, mode)
		}
	}
}

// portRangeMapping checks a mapping with a containerPortRange: ECS allows it in bridge and awsvpc
// mode, without containerPort or hostPort.
func (v *validator) portRangeMapping(pp string, pm PortMapping) {
	mode := v.def.NetworkMode
	if mode != "" && mode != task.NetworkBridge && mode != task.NetworkAWSVPC {
		v.fail(pp+".containerPortRange", "only allowed with networkMode bridge or awsvpc, not %s", mode)
	}
	if _, _, ok := portRange(pm.ContainerPortRange); !ok {
		v.fail(pp+".containerPortRange", "%q is not a port range such as 8000-8010", clip(pm.ContainerPortRange))
	}
	if pm.ContainerPort != 0 {
		v.fail(pp+".containerPort", "not allowed with containerPortRange")
	}
	if pm.HostPort != 0 {
		v.fail(pp+".hostPort", "not allowed with containerPortRange (the agent picks the host ports)")
	}
	switch pm.Protocol {
	case "", "tcp", "udp":
	default:
		v.fail(pp+".protocol", "unknown protocol %q (want tcp or udp)", pm.Protocol)
	}
}

// hostPorts reports a host port and protocol that two port mappings of the task claim. Dynamic ports
// (hostPort 0 in bridge mode) never conflict.
func (v *validator) hostPorts() {
	type key struct {
		port  int
		proto string
	}
	mode := v.def.NetworkMode
	if mode == task.NetworkNone {
		return
	}
	first := make(map[key]string)
	for i, c := range v.def.ContainerDefinitions {
		for j, pm := range c.PortMappings {
			port := pm.HostPort
			if port == 0 && (mode == task.NetworkHost || mode == task.NetworkAWSVPC) {
				port = pm.ContainerPort
			}
			if port < 1 || port > 65535 {
				continue
			}
			k := key{port, cmp.Or(pm.Protocol, "tcp")}
			p := fmt.Sprintf("containerDefinitions[%d].portMappings[%d]", i, j)
			if prev, dup := first[k]; dup {
				v.fail(p+".hostPort", "host port %d/%s already used by %s", k.port, k.proto, prev)
				continue
			}
			first[k] = p
		}
	}
}

// reference checks that name, found at path, names another container of the task.
func (v *validator) reference(path, name, self, selfMsg string) bool {
	switch _, ok := v.index[name]; {
	case name == "":
		v.fail(path, "required")
	case name == self:
		v.fail(path, "%s", selfMsg)
	case !ok:
		v.fail(path, "no container named %q", name)
	default:
		return true
	}
	return false
}

func (v *validator) dependency(p, self string, dep Dependency) {
	ok := v.reference(p+".containerName", dep.ContainerName, self, "a container cannot depend on itself")
	switch dep.Condition {
	case "":
		v.fail(p+".condition", "required")
		return
	case task.ConditionStart, task.ConditionComplete, task.ConditionSuccess, task.ConditionHealthy:
	default:
		v.fail(p+".condition", "unknown condition %q (want START, COMPLETE, SUCCESS or HEALTHY)", dep.Condition)
		return
	}
	if !ok {
		return
	}
	target := &v.def.ContainerDefinitions[v.index[dep.ContainerName]]
	switch dep.Condition {
	case task.ConditionHealthy:
		if target.HealthCheck == nil {
			v.fail(p+".condition", "HEALTHY needs a healthCheck on container %q", target.Name)
		}
	case task.ConditionComplete, task.ConditionSuccess:
		if essential(target) {
			v.fail(p+".condition", "%s cannot be used with essential container %q", dep.Condition, target.Name)
		}
	}
}

func (v *validator) healthCheck(p string, hc *HealthCheck) {
	switch {
	case len(hc.Command) == 0:
		v.fail(p+".command", "required")
	case hc.Command[0] != "CMD" && hc.Command[0] != "CMD-SHELL":
		v.fail(p+".command", "must start with CMD or CMD-SHELL")
	case len(hc.Command) < 2:
		v.fail(p+".command", "%s needs a command to run", hc.Command[0])
	}
	v.bounds(p+".interval", deref(hc.Interval, defaultHealthInterval), 5, 300, " seconds")
	v.bounds(p+".timeout", deref(hc.Timeout, defaultHealthTimeout), 2, 60, " seconds")
	v.bounds(p+".retries", deref(hc.Retries, defaultHealthRetries), 1, 10, "")
	v.bounds(p+".startPeriod", deref(hc.StartPeriod, defaultHealthStartPeriod), 0, 300, " seconds")
}

func (v *validator) bounds(path string, n, lo, hi int, unit string) {
	if n < lo || n > hi {
		v.fail(path, "%d is out of range %d-%d%s", n, lo, hi, unit)
	}
}

func (v *validator) ulimits(p string, ulimits []Ulimit) {
	var seen set.Set[string]
	for j, u := range ulimits {
		up := fmt.Sprintf("%s.ulimits[%d]", p, j)
		switch {
		case !knownUlimit(u.Name):
			v.fail(up+".name", "unknown ulimit %q", u.Name)
		case seen.Has(u.Name):
			v.fail(up+".name", "duplicate ulimit %q", u.Name)
		}
		seen.Add(u.Name)
		if u.SoftLimit > u.HardLimit {
			v.fail(up+".softLimit", "%d exceeds hardLimit %d", u.SoftLimit, u.HardLimit)
		}
	}
}

func knownUlimit(name string) bool {
	switch name {
	case "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
		"rss", "rtprio", "rttime", "sigpending", "stack":
		return true
	}
	return false
}

func (v *validator) essential() {
	if len(v.def.ContainerDefinitions) > 0 && !slices.ContainsFunc(v.def.ContainerDefinitions, func(c ContainerDefinition) bool { return essential(&c) }) {
		v.fail("containerDefinitions", "no essential container")
	}
}

// dependencies reports dependsOn cycles, each once, at the dependsOn entry that leaves the first
// container of the cycle the search met. Unknown and self references are reported elsewhere.
func (v *validator) dependencies() {
	defs := v.def.ContainerDefinitions
	const (
		unvisited = iota
		onPath
		done
	)
	state := make([]int, len(defs))
	type step struct{ container, dep int }
	var path []step
	var visit func(c int)
	visit = func(c int) {
		state[c] = onPath
		for j, dep := range defs[c].DependsOn {
			t, ok := v.index[dep.ContainerName]
			if !ok || t == c {
				continue
			}
			path = append(path, step{c, j})
			switch state[t] {
			case unvisited:
				visit(t)
			case onPath:
				k := slices.IndexFunc(path, func(s step) bool { return s.container == t })
				names := make([]string, 0, len(path)-k+1)
				for _, s := range path[k:] {
					names = append(names, defs[s.container].Name)
				}
				names = append(names, defs[t].Name)
				v.fail(fmt.Sprintf("containerDefinitions[%d].dependsOn[%d]", path[k].container, path[k].dep),
					"circular dependency %s", strings.Join(names, " -> "))
			}
			path = path[:len(path)-1]
		}
		state[c] = done
	}
	for i, c := range defs {
		if state[i] == unvisited && v.index[c.Name] == i {
			visit(i)
		}
	}
}

// essential reports whether c is essential, which it is unless it says otherwise.
func essential(c *ContainerDefinition) bool { return c.Essential == nil || *c.Essential }

func deref(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

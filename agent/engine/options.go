package engine

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/task"
)

// createInputs is what a container's create needs beyond its task and the features' hooks: host
// resources picked for it now.
type createInputs struct {
	// HostPorts maps each port mapping with a containerPortRange (by its index) to the first host
	// port of the range picked for it, in bridge mode.
	HostPorts map[int]int
}

// mergeEnv returns the container's environment: each name once, later layers winning.
func mergeEnv(layers ...[]string) []string {
	var out []string
	index := map[string]int{}
	for _, layer := range layers {
		for _, kv := range layer {
			name, _, _ := strings.Cut(kv, "=")
			if i, ok := index[name]; ok {
				out[i] = kv
				continue
			}
			index[name] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// applyOptions sets the container options that Docker takes more or less as the task definition
// states them: links, host name, DNS, extra hosts, sysctls, security options, terminal and stdin,
// networking off, Linux parameters, PID and IPC namespaces.
func applyOptions(t *task.Task, c *task.Container, pauseID string, conf *docker.Config, host *docker.HostConfig) {
	for _, l := range c.Links {
		name, alias, _ := strings.Cut(l, ":")
		if target := t.Container(name); target != nil && target.DockerName != "" {
			host.Links = append(host.Links, target.DockerName+":"+cmp.Or(alias, name))
		}
	}
	conf.Hostname = c.Hostname
	if len(c.DNSServers) > 0 { // an awsvpc pause container has its ENI's already
		host.DNS = slices.Clone(c.DNSServers)
	}
	if len(c.DNSSearchDomains) > 0 {
		host.DNSSearch = slices.Clone(c.DNSSearchDomains)
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
	host.SecurityOpt = slices.Clone(c.DockerSecurityOptions)
	conf.Tty = c.PseudoTerminal
	conf.OpenStdin = c.Interactive
	conf.NetworkDisabled = c.DisableNetworking
	if l := c.Linux; l != nil {
		host.CapAdd, host.CapDrop = slices.Clone(l.CapAdd), slices.Clone(l.CapDrop)
		for _, d := range l.Devices {
			host.Devices = append(host.Devices, docker.Device{PathOnHost: d.HostPath,
				PathInContainer: cmp.Or(d.ContainerPath, d.HostPath), CgroupPermissions: d.CgroupPermissions()})
		}
		host.ShmSize = int64(l.SharedMemorySize) << 20
		if len(l.Tmpfs) > 0 {
			host.Tmpfs = make(map[string]string, len(l.Tmpfs))
			for _, tf := range l.Tmpfs {
				host.Tmpfs[tf.ContainerPath] = tf.DockerOptions()
			}
		}
		if l.MaxSwap != nil {
			host.MemorySwap = int64(c.Memory+*l.MaxSwap) << 20
		}
		if l.Swappiness != nil {
			host.MemorySwappiness = new(int64(*l.Swappiness))
		}
	}
	if !c.Pause {
		host.PidMode = namespaceMode(t.PidMode, pauseID)
		host.IpcMode = namespaceMode(t.IpcMode, pauseID)
	}
}

// namespaceMode translates a task's pidMode or ipcMode into Docker's: task shares the pause
// container's namespace, host the host's.
func namespaceMode(mode, pauseID string) string {
	switch mode {
	case "task":
		if pauseID != "" {
			return "container:" + pauseID
		}
	case "host", "none":
		return mode
	}
	return ""
}

// portRangeBounds parses a containerPortRange ("8000-8010"), which taskdef has validated.
func portRangeBounds(s string) (lo, hi int) {
	a, b, _ := strings.Cut(s, "-")
	lo, _ = strconv.Atoi(a)
	hi, _ = strconv.Atoi(b)
	return lo, hi
}

// hostPortPicker finds free host port ranges for containerPortRange mappings in bridge mode, in
// ECS_DYNAMIC_HOST_PORT_RANGE, as the ECS agent does: it probes ports by binding them, and starts
// each search after the last range it gave, so two creates in a row do not get the same range
// before Docker binds the first. It is safe for concurrent use.
type hostPortPicker struct {
	lo, hi int
	mu     sync.Mutex
	next   int
}

func newHostPortPicker(lo, hi int) *hostPortPicker {
	return &hostPortPicker{lo: lo, hi: hi, next: lo}
}

// pick returns the first port of n consecutive free ports for protocol (tcp or udp).
func (p *hostPortPicker) pick(n int, protocol string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := p.hi - p.lo + 1
	if n > size {
		return 0, fmt.Errorf("a range of %d ports does not fit the dynamic host port range %d-%d (ECS_DYNAMIC_HOST_PORT_RANGE)", n, p.lo, p.hi)
	}
	start := p.next
	for tried := 0; tried < size; {
		if start+n-1 > p.hi {
			tried += p.hi - start + 1
			start = p.lo
			continue
		}
		ok := true
		for port := start; port < start+n; port++ {
			if !portFree(port, protocol) {
				tried += port - start + 1
				start = port + 1
				ok = false
				break
			}
		}
		if ok {
			p.next = start + n
			if p.next > p.hi {
				p.next = p.lo
			}
			return start, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free %s ports in the dynamic host port range %d-%d (ECS_DYNAMIC_HOST_PORT_RANGE)", n, protocol, p.lo, p.hi)
}

// forRanges picks the host ports of c's port mappings with a containerPortRange: the first port of
// each range by the mapping's index, nil when it has none.
func (p *hostPortPicker) forRanges(c *task.Container) (map[int]int, error) {
	var ports map[int]int
	for i, pm := range c.PortMappings {
		if pm.ContainerPortRange == "" {
			continue
		}
		lo, hi := portRangeBounds(pm.ContainerPortRange)
		first, err := p.pick(hi-lo+1, protocol(pm.Protocol))
		if err != nil {
			return nil, fmt.Errorf("portMappings[%d] containerPortRange %s: %w", i, pm.ContainerPortRange, err)
		}
		if ports == nil {
			ports = map[int]int{}
		}
		ports[i] = first
	}
	return ports, nil
}

// portFree reports whether the port can be bound on every address for protocol now.
func portFree(port int, protocol string) bool {
	addr := net.JoinHostPort("", strconv.Itoa(port))
	if protocol == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

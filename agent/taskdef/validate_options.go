package taskdef

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// ECS's bounds for the container options below.
const (
	minRestartAttemptPeriod = 60   // seconds
	maxRestartAttemptPeriod = 1800 // seconds
	maxIgnoredExitCodes     = 50
	maxSwappiness           = 100
)

// taskModes checks pidMode and ipcMode.
func (v *validator) taskModes() {
	switch v.def.PidMode {
	case "", "host", "task":
	default:
		v.fail("pidMode", "unknown pid mode %q (want host or task)", v.def.PidMode)
	}
	switch v.def.IpcMode {
	case "", "host", "task", "none":
	default:
		v.fail("ipcMode", "unknown ipc mode %q (want host, task or none)", v.def.IpcMode)
	}
}

// options checks the container options Docker takes more or less as they are: links, hostname, DNS,
// extra hosts, sysctls, security options, Linux parameters, secrets, environment files, registry
// credentials and the restart policy. ECS's network-mode rules apply: links only in bridge mode,
// hostname not in awsvpc or host mode, DNS settings and extra hosts not in awsvpc mode.
func (v *validator) options(p string, c *ContainerDefinition) {
	mode := v.def.NetworkMode
	if mode == "" {
		mode = task.NetworkBridge
	}
	if len(c.Links) > 0 && mode != task.NetworkBridge {
		v.fail(p+".links", "only allowed with networkMode bridge, not %s", mode)
	}
	for j, l := range c.Links {
		name, alias, _ := strings.Cut(l, ":")
		lp := fmt.Sprintf("%s.links[%d]", p, j)
		if v.reference(lp, name, c.Name, "a container cannot link to itself") && alias != "" && !hostnameLike(alias) {
			v.fail(lp, "alias %q may hold only letters, digits, hyphens, underscores and dots", alias)
		}
	}
	if c.Hostname != "" {
		switch {
		case mode == task.NetworkAWSVPC || mode == task.NetworkHost:
			v.fail(p+".hostname", "not allowed with networkMode %s", mode)
		case len(c.Hostname) > 255 || !hostnameLike(c.Hostname):
			v.fail(p+".hostname", "%q is not a host name", c.Hostname)
		}
	}
	if mode == task.NetworkAWSVPC {
		for _, f := range []struct {
			name string
			n    int
		}{{"dnsServers", len(c.DNSServers)}, {"dnsSearchDomains", len(c.DNSSearchDomains)}, {"extraHosts", len(c.ExtraHosts)}} {
			if f.n > 0 {
				v.fail(p+"."+f.name, "not allowed with networkMode awsvpc (the task's interface sets DNS)")
			}
		}
	}
	for j, s := range c.DNSServers {
		if _, err := netip.ParseAddr(s); err != nil {
			v.fail(fmt.Sprintf("%s.dnsServers[%d]", p, j), "%q is not an IP address", s)
		}
	}
	for j, h := range c.ExtraHosts {
		hp := fmt.Sprintf("%s.extraHosts[%d]", p, j)
		if h.Hostname == "" || !hostnameLike(h.Hostname) {
			v.fail(hp+".hostname", "%q is not a host name", h.Hostname)
		}
		if _, err := netip.ParseAddr(h.IPAddress); err != nil {
			v.fail(hp+".ipAddress", "%q is not an IP address", h.IPAddress)
		}
	}
	for j, sc := range c.SystemControls {
		sp := fmt.Sprintf("%s.systemControls[%d]", p, j)
		switch {
		case sc.Namespace == "":
			v.fail(sp+".namespace", "required")
		case mode == task.NetworkHost && strings.HasPrefix(sc.Namespace, "net."):
			v.fail(sp+".namespace", "%s cannot be set with networkMode host: it would change the host's own setting", sc.Namespace)
		}
	}
	for j, o := range c.DockerSecurityOptions {
		kind, _, _ := strings.Cut(o, ":")
		switch {
		case o == "no-new-privileges", kind == "apparmor", kind == "label":
		default:
			v.fail(fmt.Sprintf("%s.dockerSecurityOptions[%d]", p, j), "%q is not supported (want no-new-privileges, apparmor:PROFILE or label:VALUE)", o)
		}
	}
	if lp := c.LinuxParameters; lp != nil {
		v.linux(p+".linuxParameters", lp, c)
	}
	v.secrets(p+".secrets", c.Secrets)
	if lc := c.LogConfiguration; lc != nil {
		v.secrets(p+".logConfiguration.secretOptions", lc.SecretOptions)
	}
	for j, f := range c.EnvironmentFiles {
		fp := fmt.Sprintf("%s.environmentFiles[%d]", p, j)
		if f.Type != "s3" {
			v.fail(fp+".type", "unknown type %q (want s3)", f.Type)
		}
		if !isS3ObjectARN(f.Value) {
			v.fail(fp+".value", "%q is not an S3 object ARN (arn:aws:s3:::bucket/key.env)", clip(f.Value))
		}
	}
	if rc := c.RepositoryCredentials; rc != nil && rc.CredentialsParameter == "" {
		v.fail(p+".repositoryCredentials.credentialsParameter", "required")
	}
	if rp := c.RestartPolicy; rp != nil {
		if len(rp.IgnoredExitCodes) > maxIgnoredExitCodes {
			v.fail(p+".restartPolicy.ignoredExitCodes", "%d entries; at most %d are allowed", len(rp.IgnoredExitCodes), maxIgnoredExitCodes)
		}
		if rp.RestartAttemptPeriod != nil {
			v.bounds(p+".restartPolicy.restartAttemptPeriod", *rp.RestartAttemptPeriod, minRestartAttemptPeriod, maxRestartAttemptPeriod, " seconds")
		}
	}
}

func (v *validator) linux(p string, lp *LinuxParameters, c *ContainerDefinition) {
	if caps := lp.Capabilities; caps != nil {
		for _, l := range []struct {
			name  string
			names []string
		}{{"add", caps.Add}, {"drop", caps.Drop}} {
			for j, name := range l.names {
				if !knownCapabilities.Has(name) {
					v.fail(fmt.Sprintf("%s.capabilities.%s[%d]", p, l.name, j), "unknown capability %q", clip(name))
				}
			}
		}
	}
	for j, d := range lp.Devices {
		dp := fmt.Sprintf("%s.devices[%d]", p, j)
		if !strings.HasPrefix(d.HostPath, "/") {
			v.fail(dp+".hostPath", "%q is not an absolute path", clip(d.HostPath))
		}
		if d.ContainerPath != "" && !strings.HasPrefix(d.ContainerPath, "/") {
			v.fail(dp+".containerPath", "%q is not an absolute path", clip(d.ContainerPath))
		}
		for k, perm := range d.Permissions {
			if perm != "read" && perm != "write" && perm != "mknod" {
				v.fail(fmt.Sprintf("%s.permissions[%d]", dp, k), "unknown permission %q (want read, write or mknod)", clip(perm))
			}
		}
	}
	if lp.SharedMemorySize != nil {
		v.bounds(p+".sharedMemorySize", *lp.SharedMemorySize, 1, maxMemory, " MiB")
	}
	for j, t := range lp.Tmpfs {
		tp := fmt.Sprintf("%s.tmpfs[%d]", p, j)
		if !strings.HasPrefix(t.ContainerPath, "/") {
			v.fail(tp+".containerPath", "%q is not an absolute path", clip(t.ContainerPath))
		}
		v.bounds(tp+".size", t.Size, 1, maxMemory, " MiB")
		for k, o := range t.MountOptions {
			name, _, _ := strings.Cut(o, "=")
			if !tmpfsOptions.Has(name) {
				v.fail(fmt.Sprintf("%s.mountOptions[%d]", tp, k), "unknown tmpfs mount option %q", clip(o))
			}
		}
	}
	if lp.MaxSwap != nil {
		v.bounds(p+".maxSwap", *lp.MaxSwap, 0, maxMemory, " MiB")
		if c.Memory == nil {
			v.fail(p+".maxSwap", "needs the container's memory (swap is allowed on top of a hard limit)")
		}
	}
	if lp.Swappiness != nil {
		v.bounds(p+".swappiness", *lp.Swappiness, 0, maxSwappiness, "")
	}
}

func (v *validator) secrets(p string, secrets []Secret) {
	var seen set.Set[string]
	for j, s := range secrets {
		sp := fmt.Sprintf("%s[%d]", p, j)
		switch {
		case s.Name == "":
			v.fail(sp+".name", "required")
		case seen.Has(s.Name):
			v.fail(sp+".name", "duplicate name %q", s.Name)
		}
		seen.Add(s.Name)
		if s.ValueFrom == "" {
			v.fail(sp+".valueFrom", "required")
		}
	}
}

// portRange parses a containerPortRange such as "8000-8010".
func portRange(s string) (lo, hi int, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo >= hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// hostnameLike reports whether s holds only letters, digits, hyphens, underscores and dots.
func hostnameLike(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}

// isS3ObjectARN reports whether s is arn:<partition>:s3:::<bucket>/<key>.
func isS3ObjectARN(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[2] != "s3" || parts[3] != "" || parts[4] != "" {
		return false
	}
	bucket, key, ok := strings.Cut(parts[5], "/")
	return ok && bucket != "" && key != ""
}

// clip shortens a user-supplied value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// knownCapabilities are the names linuxParameters.capabilities takes (ECS's list).
var knownCapabilities = set.Of("ALL", "AUDIT_CONTROL", "AUDIT_WRITE", "BLOCK_SUSPEND", "CHOWN", "DAC_OVERRIDE",
	"DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE",
	"MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW",
	"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE",
	"SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG",
	"SYSLOG", "WAKE_ALARM")

// tmpfsOptions are the mount options linuxParameters.tmpfs takes (ECS's list); mode, uid, gid,
// nr_inodes, nr_blocks and mpol take a value after "=".
var tmpfsOptions = set.Of("defaults", "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "sync",
	"async", "dirsync", "remount", "mand", "nomand", "atime", "noatime", "diratime", "nodiratime", "bind",
	"rbind", "unbindable", "runbindable", "private", "rprivate", "shared", "rshared", "slave", "rslave",
	"relatime", "norelatime", "strictatime", "nostrictatime", "mode", "uid", "gid", "nr_inodes",
	"nr_blocks", "mpol")

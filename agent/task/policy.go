package task

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Policy is what the host refuses of a task (see Refuse). The zero Policy refuses nothing, as the
// ECS agent with its defaults.
type Policy struct {
	// NoPrivileged refuses privileged containers (ECS_DISABLE_PRIVILEGED=true).
	NoPrivileged bool
	// Baseline refuses what gives a container the host (ECS_TASK_SECURITY_POLICY=baseline):
	// privileged mode, capabilities beyond Docker's default set, the host's pid, ipc or network
	// namespace, devices, bind mounts of /, /proc, /sys, the Docker and containerd sockets and DataDir
	// (and of what is under them or holds them), and unconfined seccomp, AppArmor, SELinux or system
	// paths.
	Baseline bool
	// DataDir is the agent's data directory (ECS_DATADIR), which Baseline refuses to bind.
	DataDir string
	// Resolve, when set, returns a host path with its symbolic links followed (filepath.EvalSymlinks):
	// a bind source is refused when either it or what it resolves to is. A path that does not
	// resolve is judged as written.
	Resolve func(path string) (string, error)
}

// ErrRefused is wrapped by every error of Refuse.
var ErrRefused = errors.New("refused by this host's task security policy")

// RefusedError is Refuse's error: the task definition field the policy refuses, its value and the
// setting that refuses it. It wraps ErrRefused.
type RefusedError struct {
	Field string // the task definition's name of it: containerDefinitions[0].linuxParameters.capabilities.add[1]
	Value string // what it holds: SYS_ADMIN
	By    string // the setting: ECS_TASK_SECURITY_POLICY=baseline
}

// Error names the field, its value and the setting.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: %s is refused by %s", e.Field, e.Value, e.By)
}

// Unwrap returns ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// The settings a RefusedError names.
const (
	byNoPrivileged = "ECS_DISABLE_PRIVILEGED=true"
	byBaseline     = "ECS_TASK_SECURITY_POLICY=baseline"
)

// dockerDefaultCapabilities are the capabilities Docker gives every container that is not privileged
// (moby oci/caps/defaults.go): adding one of them changes nothing.
var dockerDefaultCapabilities = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
	"MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// sensitivePaths are the host paths Baseline refuses to bind, with what is under them and what holds
// them: the kernel's interfaces, and the container runtimes' sockets and data, each of which gives
// the host.
var sensitivePaths = []string{"/proc", "/sys", "/var/run/docker.sock", "/run/docker.sock", "/var/run/containerd",
	"/run/containerd", "/var/lib/docker", "/var/lib/containerd"}

// unconfinedOptions are the dockerSecurityOptions that lift a confinement, with ":" for "=" (Docker
// takes both): seccomp, AppArmor, the masked and read-only /proc and /sys paths, SELinux.
var unconfinedOptions = []string{"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined", "label=disable",
	"label=type=spc_t"}

// Refuse returns a *RefusedError naming the first field of t that p refuses, or nil when p takes t.
// Fields are named as in an ECS task definition; containers are counted without the pause container
// the engine adds, so the index is the definition's. It runs in time linear in the task's size (and
// calls p.Resolve once per bind source).
func (t *Task) Refuse(p Policy) error {
	if p.Baseline {
		if err := t.refuseTaskFields(p); err != nil {
			return err
		}
	}
	i := 0
	for _, c := range t.Containers {
		if c.Pause {
			continue
		}
		if err := c.refuse(p, fmt.Sprintf("containerDefinitions[%d]", i)); err != nil {
			return err
		}
		i++
	}
	return nil
}

// refuseTaskFields is Refuse for the task's own fields under Baseline.
func (t *Task) refuseTaskFields(p Policy) error {
	refused := func(field, value string) error { return &RefusedError{Field: field, Value: value, By: byBaseline} }
	switch {
	case t.NetworkMode == NetworkHost:
		return refused("networkMode", string(t.NetworkMode))
	case t.PidMode == "host":
		return refused("pidMode", t.PidMode)
	case t.IpcMode == "host":
		return refused("ipcMode", t.IpcMode)
	}
	for k, v := range t.Volumes {
		if v.Host != nil && v.Host.SourcePath != "" && p.sensitive(v.Host.SourcePath) {
			return refused(fmt.Sprintf("volumes[%d].host.sourcePath", k), v.Host.SourcePath)
		}
		if d := v.Docker; d != nil && (d.Driver == "" || d.Driver == "local") {
			if dev := d.DriverOpts["device"]; localDeviceRefused(d.DriverOpts, p) {
				return refused(fmt.Sprintf("volumes[%d].dockerVolumeConfiguration.driverOpts.device", k), dev)
			}
		}
	}
	return nil
}

// localDeviceRefused reports whether a local-driver volume with these options mounts what Baseline
// refuses: a bind of a sensitive path, or a host block device's filesystem.
func localDeviceRefused(opts map[string]string, p Policy) bool {
	dev := opts["device"]
	if o := strings.Split(opts["o"], ","); slices.Contains(o, "bind") || slices.Contains(o, "rbind") {
		return p.sensitive(dev)
	}
	// A host path that is not a bind is a block device (nfs and cifs name a remote one, tmpfs none).
	return strings.HasPrefix(dev, "/") && !strings.HasPrefix(dev, "//")
}

// refuse is Refuse for one container, named field.
func (c *Container) refuse(p Policy, field string) error {
	if c.Privileged && (p.NoPrivileged || p.Baseline) {
		by := byBaseline
		if p.NoPrivileged {
			by = byNoPrivileged
		}
		return &RefusedError{Field: field + ".privileged", Value: "true", By: by}
	}
	if !p.Baseline {
		return nil
	}
	refused := func(f, value string) error { return &RefusedError{Field: field + f, Value: value, By: byBaseline} }
	if l := c.Linux; l != nil {
		for j, name := range l.CapAdd {
			if !slices.Contains(dockerDefaultCapabilities, strings.TrimPrefix(strings.ToUpper(name), "CAP_")) {
				return refused(fmt.Sprintf(".linuxParameters.capabilities.add[%d]", j), name)
			}
		}
		if len(l.Devices) > 0 {
			return refused(".linuxParameters.devices[0]", l.Devices[0].HostPath)
		}
	}
	for j, o := range c.DockerSecurityOptions {
		kind, value, _ := strings.Cut(strings.ReplaceAll(strings.ToLower(o), ":", "="), "=")
		if slices.Contains(unconfinedOptions, kind+"="+value) {
			return refused(fmt.Sprintf(".dockerSecurityOptions[%d]", j), o)
		}
	}
	return nil
}

// sensitive reports whether Baseline refuses to bind the host path: / itself, a sensitive path or the
// data directory, anything under one, or anything that holds one. With Resolve, what the path
// resolves to is judged too.
func (p Policy) sensitive(path string) bool {
	if p.sensitiveLexically(path) {
		return true
	}
	if p.Resolve == nil {
		return false
	}
	resolved, err := p.Resolve(path)
	return err == nil && p.sensitiveLexically(resolved)
}

func (p Policy) sensitiveLexically(path string) bool {
	path = filepath.Clean("/" + path)
	refused := sensitivePaths
	if p.DataDir != "" {
		refused = append(slices.Clip(refused), filepath.Clean("/"+p.DataDir))
	}
	for _, r := range refused {
		if within(path, r) || within(r, path) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or under it; both are clean and absolute.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

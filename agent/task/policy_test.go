package task

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policyTask is a bridge task of two plain containers that every policy takes; change alters it.
func policyTask(change func(t *Task)) *Task {
	t := &Task{Arn: "arn:policy", NetworkMode: NetworkBridge, PidMode: "task", IpcMode: "none",
		Volumes: []Volume{{Name: "data", Host: &HostVolume{SourcePath: "/srv/data"}}, {Name: "scratch", Host: &HostVolume{}},
			{Name: "named", Docker: &DockerVolume{Scope: "task", Driver: "local", DriverOpts: map[string]string{"type": "tmpfs", "device": "tmpfs"}}}},
		Containers: []*Container{
			{Name: "pause", Pause: true, Linux: &LinuxParameters{CapAdd: []string{"NET_ADMIN"}}},
			{Name: "app", Linux: &LinuxParameters{CapAdd: []string{"NET_BIND_SERVICE", "CAP_chown"}, CapDrop: []string{"ALL"}},
				DockerSecurityOptions: []string{"no-new-privileges", "apparmor:docker-default", "label:type:container_t"}},
			{Name: "web"},
		}}
	if change != nil {
		change(t)
	}
	return t
}

func web(t *Task) *Container { return t.Containers[2] }

// TestRefuseBaseline: each field baseline refuses is refused on a hand-written task, named as in the
// task definition (the pause container the engine adds is not counted), with its value and the key.
func TestRefuseBaseline(t *testing.T) {
	baseline := Policy{Baseline: true, DataDir: "/var/lib/ecs/data/"}
	for _, tc := range []struct {
		name   string
		change func(t *Task)
		want   string // the error
	}{
		{"privileged", func(t *Task) { web(t).Privileged = true },
			"containerDefinitions[1].privileged: true is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"capability SYS_ADMIN", func(t *Task) { web(t).Linux = &LinuxParameters{CapAdd: []string{"CHOWN", "SYS_ADMIN"}} },
			"containerDefinitions[1].linuxParameters.capabilities.add[1]: SYS_ADMIN is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"capability ALL", func(t *Task) { web(t).Linux = &LinuxParameters{CapAdd: []string{"ALL"}} },
			"containerDefinitions[1].linuxParameters.capabilities.add[0]: ALL is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"capability in Docker's spelling", func(t *Task) { web(t).Linux = &LinuxParameters{CapAdd: []string{"cap_net_admin"}} },
			"containerDefinitions[1].linuxParameters.capabilities.add[0]: cap_net_admin is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"device", func(t *Task) {
			web(t).Linux = &LinuxParameters{Devices: []Device{{HostPath: "/dev/sda", ContainerPath: "/dev/xvda"}}}
		}, "containerDefinitions[1].linuxParameters.devices[0]: /dev/sda is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"host network", func(t *Task) { t.NetworkMode = NetworkHost },
			"networkMode: host is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"host pid", func(t *Task) { t.PidMode = "host" },
			"pidMode: host is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"host ipc", func(t *Task) { t.IpcMode = "host" },
			"ipcMode: host is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"seccomp unconfined", func(t *Task) { web(t).DockerSecurityOptions = []string{"no-new-privileges", "seccomp=unconfined"} },
			"containerDefinitions[1].dockerSecurityOptions[1]: seccomp=unconfined is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"apparmor unconfined", func(t *Task) { web(t).DockerSecurityOptions = []string{"apparmor:unconfined"} },
			"containerDefinitions[1].dockerSecurityOptions[0]: apparmor:unconfined is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"systempaths unconfined", func(t *Task) { web(t).DockerSecurityOptions = []string{"systempaths=unconfined"} },
			"containerDefinitions[1].dockerSecurityOptions[0]: systempaths=unconfined is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"selinux disabled", func(t *Task) { web(t).DockerSecurityOptions = []string{"label:disable"} },
			"containerDefinitions[1].dockerSecurityOptions[0]: label:disable is refused by ECS_TASK_SECURITY_POLICY=baseline"},
		{"selinux spc_t", func(t *Task) { web(t).DockerSecurityOptions = []string{"label:type:spc_t"} },
			"containerDefinitions[1].dockerSecurityOptions[0]: label:type:spc_t is refused by ECS_TASK_SECURITY_POLICY=baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := policyTask(tc.change).Refuse(baseline)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			assert.ErrorIs(t, err, ErrRefused)
			var re *RefusedError
			assert.ErrorAs(t, err, &re)
		})
	}
}

// TestRefuseBaselineBindMounts: a bind of /, /proc, /sys, a runtime's socket or data, or the data
// directory is refused, with what is under them (/proc/sysrq-trigger) and what holds them (the
// socket's directory); other host paths pass. A local volume binding one, or mounting a host device,
// is refused too.
func TestRefuseBaselineBindMounts(t *testing.T) {
	baseline := Policy{Baseline: true, DataDir: "/var/lib/ecs/data/"}
	for _, path := range []string{"/", "//", "/proc", "/proc/sysrq-trigger", "/proc/1/root", "/sys", "/sys/fs/cgroup/",
		"/var/run/docker.sock", "/run/docker.sock", "/var/run", "/run", "/var", "/run/containerd/containerd.sock",
		"/var/lib/docker/containers", "/var/lib/ecs/data", "/var/lib/ecs/data/berth.db", "/var/lib/ecs", "/srv/../proc/kcore"} {
		t.Run(path, func(t *testing.T) {
			bind := func(t *Task) { t.Volumes[0].Host.SourcePath = path }
			err := policyTask(bind).Refuse(baseline)
			want := "volumes[0].host.sourcePath: " + path + " is refused by ECS_TASK_SECURITY_POLICY=baseline"
			if assert.Error(t, err) {
				assert.Equal(t, want, err.Error())
			}
			local := func(t *Task) {
				t.Volumes[2].Docker.DriverOpts = map[string]string{"type": "none", "o": "ro,bind", "device": path}
			}
			err = policyTask(local).Refuse(baseline)
			want = "volumes[2].dockerVolumeConfiguration.driverOpts.device: " + path + " is refused by ECS_TASK_SECURITY_POLICY=baseline"
			if assert.Error(t, err) {
				assert.Equal(t, want, err.Error())
			}
		})
	}
	for _, path := range []string{"/srv/data", "/var/log/app", "/var/lib/ecs-other", "/procfs", "/run-data", "/var/lib/dockerd"} {
		bind := func(t *Task) { t.Volumes[0].Host.SourcePath = path }
		assert.NoError(t, policyTask(bind).Refuse(baseline), path)
	}
	ext4 := func(t *Task) {
		t.Volumes[2].Docker.DriverOpts = map[string]string{"type": "ext4", "device": "/dev/nvme0n1p1"}
	}
	assert.EqualError(t, policyTask(ext4).Refuse(baseline),
		"volumes[2].dockerVolumeConfiguration.driverOpts.device: /dev/nvme0n1p1 is refused by ECS_TASK_SECURITY_POLICY=baseline")
	nfs := func(t *Task) {
		t.Volumes[2].Docker.DriverOpts = map[string]string{"type": "nfs", "o": "addr=10.0.0.1", "device": ":/export"}
	}
	assert.NoError(t, policyTask(nfs).Refuse(baseline))
	plugin := func(t *Task) {
		t.Volumes[2].Docker = &DockerVolume{Driver: "rexray/ebs", DriverOpts: map[string]string{"device": "/"}}
	}
	assert.NoError(t, policyTask(plugin).Refuse(baseline), "another driver's options are its own")
}

// A bind source that is a symbolic link to / (made, say, by an earlier container in a directory it
// could write) is refused when the policy resolves links; a link to a plain directory passes.
func TestRefuseBaselineFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Symlink("/", filepath.Join(dir, "root")))
	require.NoError(t, os.Symlink(dir, filepath.Join(dir, "self")))
	policy := Policy{Baseline: true, Resolve: filepath.EvalSymlinks}
	link := filepath.Join(dir, "root")
	err := policyTask(func(t *Task) { t.Volumes[0].Host.SourcePath = link }).Refuse(policy)
	assert.EqualError(t, err, "volumes[0].host.sourcePath: "+link+" is refused by ECS_TASK_SECURITY_POLICY=baseline")
	assert.NoError(t, policyTask(func(t *Task) { t.Volumes[0].Host.SourcePath = filepath.Join(dir, "self") }).Refuse(policy))
	assert.NoError(t, policyTask(func(t *Task) { t.Volumes[0].Host.SourcePath = filepath.Join(dir, "missing") }).Refuse(policy),
		"a path that does not resolve is judged as written")
}

// The default policy (none) takes every field baseline refuses; ECS_DISABLE_PRIVILEGED refuses
// privileged alone, and names itself.
func TestRefuseDefaultTakesEverything(t *testing.T) {
	everything := policyTask(func(t *Task) {
		t.NetworkMode, t.PidMode, t.IpcMode = NetworkHost, "host", "host"
		t.Volumes[0].Host.SourcePath = "/"
		t.Volumes[2].Docker.DriverOpts = map[string]string{"type": "none", "o": "bind", "device": "/var/run/docker.sock"}
		web(t).Privileged = true
		web(t).Linux = &LinuxParameters{CapAdd: []string{"ALL", "SYS_ADMIN"}, Devices: []Device{{HostPath: "/dev/kmsg"}}}
		web(t).DockerSecurityOptions = []string{"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
	})
	assert.NoError(t, everything.Refuse(Policy{}))
	assert.NoError(t, policyTask(nil).Refuse(Policy{Baseline: true, DataDir: "/var/lib/ecs/data"}), "the plain task passes baseline")

	err := everything.Refuse(Policy{NoPrivileged: true})
	assert.EqualError(t, err, "containerDefinitions[1].privileged: true is refused by ECS_DISABLE_PRIVILEGED=true")
	assert.True(t, errors.Is(err, ErrRefused))
	web(everything).Privileged = false
	assert.NoError(t, everything.Refuse(Policy{NoPrivileged: true}))
}

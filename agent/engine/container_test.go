package engine

import (
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func TestCreateOptions(t *testing.T) {
	cfg := Config{StopTimeout: 30 * time.Second}
	base := func(mods ...func(tk *task.Task, c *task.Container)) (*task.Task, *task.Container) {
		c := &task.Container{Name: "web", Image: "nginx:1", Essential: true, DockerName: "ecs-fam-3-web-abc"}
		tk := &task.Task{Arn: "arn:aws:ecs:eu-west-1:1:task/c/t1", Family: "fam", Revision: 3, NetworkMode: task.NetworkBridge,
			Containers: []*task.Container{c}}
		for _, m := range mods {
			m(tk, c)
		}
		return tk, c
	}
	tests := []struct {
		name    string
		mod     func(tk *task.Task, c *task.Container)
		pauseID string
		check   func(t *testing.T, o docker.CreateContainerOptions)
	}{
		{
			name: "basics and labels",
			mod: func(_ *task.Task, c *task.Container) {
				c.Command, c.EntryPoint = []string{"-g", "daemon off;"}, []string{"nginx"}
				c.Environment = []task.KeyValue{{Name: "A", Value: "1"}, {Name: "B", Value: "x=y"}}
				c.User, c.WorkingDirectory = "nobody", "/srv"
				c.CPU, c.Memory, c.MemoryReservation = 256, 512, 128
				c.Privileged, c.ReadonlyRootFilesystem = true, true
				c.DockerLabels = map[string]string{"team": "blue", LabelTaskARN: "spoofed"}
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, "ecs-fam-3-web-abc", o.Name)
				assert.Equal(t, "nginx:1", o.Config.Image)
				assert.Equal(t, []string{"-g", "daemon off;"}, o.Config.Cmd)
				assert.Equal(t, []string{"nginx"}, o.Config.Entrypoint)
				assert.Equal(t, []string{"A=1", "B=x=y"}, o.Config.Env)
				assert.Equal(t, "nobody", o.Config.User)
				assert.Equal(t, "/srv", o.Config.WorkingDir)
				assert.Equal(t, map[string]string{
					"team":             "blue",
					LabelManaged:       "true",
					LabelTaskARN:       "arn:aws:ecs:eu-west-1:1:task/c/t1",
					LabelContainerName: "web",
					LabelTaskFamily:    "fam",
					LabelTaskRevision:  "3",
					LabelCluster:       "prod",
				}, o.Config.Labels)
				assert.EqualValues(t, 256, o.HostConfig.CPUShares)
				assert.EqualValues(t, 512<<20, o.HostConfig.Memory)
				assert.EqualValues(t, 128<<20, o.HostConfig.MemoryReservation)
				assert.True(t, o.HostConfig.Privileged)
				assert.True(t, o.HostConfig.ReadonlyRootfs)
				assert.Equal(t, "bridge", o.HostConfig.NetworkMode)
				assert.Nil(t, o.Config.Healthcheck)
				assert.False(t, o.HostConfig.Init)
			},
		},
		{
			name: "CPU shares at least 2",
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.EqualValues(t, 2, o.HostConfig.CPUShares)
				assert.Zero(t, o.HostConfig.MemoryReservation)
			},
		},
		{
			name: "host network",
			mod: func(tk *task.Task, c *task.Container) {
				tk.NetworkMode = task.NetworkHost
				c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: 80}}
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, "host", o.HostConfig.NetworkMode)
				assert.Empty(t, o.HostConfig.PortBindings, "host networking binds no ports")
			},
		},
		{
			name: "none network",
			mod:  func(tk *task.Task, _ *task.Container) { tk.NetworkMode = task.NetworkNone },
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, "none", o.HostConfig.NetworkMode)
			},
		},
		{
			name:    "awsvpc joins the pause container",
			mod:     func(tk *task.Task, _ *task.Container) { tk.NetworkMode = task.NetworkAWSVPC },
			pauseID: "pause123",
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, "container:pause123", o.HostConfig.NetworkMode)
			},
		},
		{
			name: "awsvpc pause container itself",
			mod: func(tk *task.Task, c *task.Container) {
				tk.NetworkMode = task.NetworkAWSVPC
				tk.ENI = &task.ENI{DNSServers: []string{"10.77.0.2"}, SearchDomains: []string{"ec2.internal"}}
				c.Pause = true
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, "none", o.HostConfig.NetworkMode)
				assert.Equal(t, []string{"10.77.0.2"}, o.HostConfig.DNS, "the ENI's DNS servers are the task's")
				assert.Equal(t, []string{"ec2.internal"}, o.HostConfig.DNSSearch)
			},
		},
		{
			name: "bridge port bindings, static and dynamic",
			mod: func(_ *task.Task, c *task.Container) {
				c.PortMappings = []task.PortMapping{
					{ContainerPort: 80, HostPort: 8080},
					{ContainerPort: 443},
					{ContainerPort: 53, HostPort: 53, Protocol: "UDP"},
					{ContainerPort: 80, HostPort: 8081},
				}
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, map[docker.Port]struct{}{"80/tcp": {}, "443/tcp": {}, "53/udp": {}}, o.Config.ExposedPorts)
				assert.Equal(t, map[docker.Port][]docker.PortBinding{
					"80/tcp":  {{HostPort: "8080"}, {HostPort: "8081"}},
					"443/tcp": {{HostPort: ""}},
					"53/udp":  {{HostPort: "53"}},
				}, o.HostConfig.PortBindings)
			},
		},
		{
			name: "mounts of the three volume kinds",
			mod: func(tk *task.Task, c *task.Container) {
				tk.Volumes = []task.Volume{
					{Name: "logs", Host: &task.HostVolume{SourcePath: "/var/log/app"}},
					{Name: "scratch", Host: &task.HostVolume{}},
					{Name: "data", Docker: &task.DockerVolume{Scope: "task", Driver: "local", DriverOpts: map[string]string{"type": "tmpfs"}, Labels: map[string]string{"k": "v"}}},
					{Name: "cache", Docker: &task.DockerVolume{Scope: "shared", Autoprovision: true, Driver: "local"}},
				}
				c.MountPoints = []task.MountPoint{
					{SourceVolume: "logs", ContainerPath: "/logs", ReadOnly: true},
					{SourceVolume: "scratch", ContainerPath: "/tmp/scratch"},
					{SourceVolume: "data", ContainerPath: "/data"},
					{SourceVolume: "cache", ContainerPath: "/cache"},
					{SourceVolume: "missing", ContainerPath: "/nowhere"},
				}
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				require.Len(t, o.HostConfig.Mounts, 4, "the mount of an unknown volume is skipped")
				assert.Equal(t, docker.HostMount{Type: "bind", Source: "/var/log/app", Target: "/logs", ReadOnly: true}, o.HostConfig.Mounts[0])
				assert.Equal(t, docker.HostMount{Type: "volume", Source: "ecs-fam-3-scratch-t1", Target: "/tmp/scratch",
					VolumeOptions: &docker.VolumeOptions{Labels: map[string]string{LabelManaged: "true", LabelTaskARN: "arn:aws:ecs:eu-west-1:1:task/c/t1"}}},
					o.HostConfig.Mounts[1])
				assert.Equal(t, docker.HostMount{Type: "volume", Source: "ecs-fam-3-data-t1", Target: "/data",
					VolumeOptions: &docker.VolumeOptions{Labels: map[string]string{"k": "v"},
						DriverConfig: docker.VolumeDriverConfig{Name: "local", Options: map[string]string{"type": "tmpfs"}}}},
					o.HostConfig.Mounts[2])
				assert.Equal(t, "volume", o.HostConfig.Mounts[3].Type)
				assert.Equal(t, "cache", o.HostConfig.Mounts[3].Source, "a shared volume keeps its name")
			},
		},
		{
			name: "volumesFrom",
			mod: func(tk *task.Task, c *task.Container) {
				tk.Containers = append(tk.Containers,
					&task.Container{Name: "data", DockerID: "d1"}, &task.Container{Name: "conf", DockerID: "d2"}, &task.Container{Name: "notyet"})
				c.VolumesFrom = []task.VolumeFrom{{SourceContainer: "data"}, {SourceContainer: "conf", ReadOnly: true}, {SourceContainer: "notyet"}}
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, []string{"d1", "d2:ro"}, o.HostConfig.VolumesFrom)
			},
		},
		{
			name: "health check, ulimits, log configuration, init, stop timeout",
			mod: func(_ *task.Task, c *task.Container) {
				c.HealthCheck = &task.HealthCheck{Command: []string{"CMD-SHELL", "curl -f localhost"}, Interval: 5 * time.Second,
					Timeout: 2 * time.Second, Retries: 4, StartPeriod: 10 * time.Second}
				c.Ulimits = []task.Ulimit{{Name: "nofile", SoftLimit: 1024, HardLimit: 4096}}
				c.LogConfiguration = &task.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}}
				c.InitProcessEnabled = true
				c.StopTimeout = 90 * time.Second
			},
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, &docker.HealthConfig{Test: []string{"CMD-SHELL", "curl -f localhost"}, Interval: 5 * time.Second,
					Timeout: 2 * time.Second, Retries: 4, StartPeriod: 10 * time.Second}, o.Config.Healthcheck)
				assert.Equal(t, []docker.ULimit{{Name: "nofile", Soft: 1024, Hard: 4096}}, o.HostConfig.Ulimits)
				assert.Equal(t, docker.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m"}}, o.HostConfig.LogConfig)
				assert.True(t, o.HostConfig.Init)
				assert.Equal(t, 90, o.Config.StopTimeout)
			},
		},
		{
			name: "default stop timeout",
			check: func(t *testing.T, o docker.CreateContainerOptions) {
				assert.Equal(t, 30, o.Config.StopTimeout)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tk *task.Task
			var c *task.Container
			if tc.mod != nil {
				tk, c = base(tc.mod)
			} else {
				tk, c = base()
			}
			opts, err := createOptions(tk, c, "prod", tc.pauseID, cfg, createInputs{})
			require.NoError(t, err)
			tc.check(t, opts)
		})
	}
}

func TestContainerName(t *testing.T) {
	tk := &task.Task{Family: "my/fam", Revision: 12}
	c := &task.Container{Name: "web app"}
	seen := map[string]bool{}
	for range 100 {
		n := containerName(tk, c)
		assert.Regexp(t, `^ecs-my-fam-12-web-app-[0-9a-f]{12}$`, n)
		assert.False(t, seen[n], "duplicate name %s", n)
		seen[n] = true
	}
}

func TestEffectiveTimeouts(t *testing.T) {
	cfg := Config{StopTimeout: 30 * time.Second, StartTimeout: 3 * time.Minute}
	assert.Equal(t, 30*time.Second, effectiveStopTimeout(&task.Container{}, cfg))
	assert.Equal(t, 5*time.Second, effectiveStopTimeout(&task.Container{StopTimeout: 5 * time.Second}, cfg))
	assert.Equal(t, 3*time.Minute, effectiveStartTimeout(&task.Container{}, cfg))
	assert.Equal(t, time.Second, effectiveStartTimeout(&task.Container{StartTimeout: time.Second}, cfg))
}

func TestApplyInspect(t *testing.T) {
	started := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	inspectedAt := time.Date(2024, 1, 2, 3, 5, 0, 0, time.UTC)
	longOutput := strings.Repeat("x", 1500)
	tests := []struct {
		name string
		c    task.Container
		ci   docker.Container
		want func(t *testing.T, c *task.Container)
	}{
		{
			name: "running with dynamic ports",
			c:    task.Container{KnownStatus: task.ContainerCreated},
			ci: docker.Container{Image: "sha256:abc", State: docker.State{Running: true, StartedAt: started},
				NetworkSettings: &docker.NetworkSettings{
					Ports: map[docker.Port][]docker.PortBinding{
						"80/tcp": {{HostIP: "0.0.0.0", HostPort: "32768"}, {HostIP: "::", HostPort: "32768"}},
						"9/udp":  nil,
					},
					Networks: map[string]docker.ContainerNetwork{"bridge": {IPAddress: "172.17.0.5"}},
				}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.ContainerRunning, c.KnownStatus)
				assert.Equal(t, "sha256:abc", c.ImageID)
				assert.Equal(t, started, c.StartedAt)
				assert.Equal(t, []task.NetworkBinding{
					{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
					{BindIP: "::", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
				}, c.NetworkBindings)
				assert.Equal(t, []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.5"}}}, c.Networks)
			},
		},
		{
			name: "a running pause container is RUNNING until its network is set up",
			c:    task.Container{Pause: true, KnownStatus: task.ContainerCreated},
			ci:   docker.Container{State: docker.State{Running: true, StartedAt: started}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.ContainerRunning, c.KnownStatus)
			},
		},
		{
			name: "a provisioned pause container stays provisioned",
			c:    task.Container{Pause: true, KnownStatus: task.ContainerResourcesProvisioned},
			ci:   docker.Container{State: docker.State{Running: true, StartedAt: started}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.ContainerResourcesProvisioned, c.KnownStatus)
			},
		},
		{
			name: "exited with code",
			c:    task.Container{KnownStatus: task.ContainerRunning},
			ci:   docker.Container{State: docker.State{ExitCode: 3, StartedAt: started, FinishedAt: started.Add(time.Minute)}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.ContainerStopped, c.KnownStatus)
				require.NotNil(t, c.ExitCode)
				assert.Equal(t, 3, *c.ExitCode)
				assert.Equal(t, started.Add(time.Minute), c.FinishedAt)
				assert.Empty(t, c.Reason)
			},
		},
		{
			name: "OOM killed",
			c:    task.Container{KnownStatus: task.ContainerRunning},
			ci:   docker.Container{State: docker.State{ExitCode: 137, OOMKilled: true, StartedAt: started, FinishedAt: started}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, reasonOOM, c.Reason)
			},
		},
		{
			name: "Docker's error as the reason",
			c:    task.Container{KnownStatus: task.ContainerRunning},
			ci:   docker.Container{State: docker.State{ExitCode: 128, Error: "mount failed", StartedAt: started, FinishedAt: started}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, "mount failed", c.Reason)
			},
		},
		{
			name: "created, never started",
			c:    task.Container{KnownStatus: task.ContainerCreated},
			ci:   docker.Container{State: docker.State{Status: "created"}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.ContainerCreated, c.KnownStatus)
				assert.Nil(t, c.ExitCode)
			},
		},
		{
			name: "health only with a health check",
			c:    task.Container{KnownStatus: task.ContainerRunning, HealthCheck: &task.HealthCheck{}},
			ci:   docker.Container{State: docker.State{Running: true, Health: docker.Health{Status: "healthy"}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.HealthHealthy, c.Health)
				assert.Equal(t, inspectedAt, c.HealthSince)
			},
		},
		{
			name: "unhealthy: the latest run's output, cut at 1024 bytes, and exit code",
			c:    task.Container{KnownStatus: task.ContainerRunning, HealthCheck: &task.HealthCheck{}, Health: task.HealthHealthy},
			ci: docker.Container{State: docker.State{Running: true, Health: docker.Health{Status: "unhealthy", Log: []docker.HealthCheck{
				{ExitCode: 0, Output: "ok"}, {ExitCode: 3, Output: longOutput}}}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, task.HealthUnhealthy, c.Health)
				assert.Equal(t, inspectedAt, c.HealthSince)
				assert.Equal(t, longOutput[:1024], c.HealthOutput)
				assert.Equal(t, 3, c.HealthExitCode)
			},
		},
		{
			name: "healthy again: the output changes, the failed run's exit code stays (as the ECS agent keeps it)",
			c: task.Container{KnownStatus: task.ContainerRunning, HealthCheck: &task.HealthCheck{}, Health: task.HealthUnhealthy,
				HealthSince: started, HealthOutput: "down", HealthExitCode: 3},
			ci: docker.Container{State: docker.State{Running: true, Health: docker.Health{Status: "healthy", Log: []docker.HealthCheck{
				{ExitCode: 0, Output: "up"}}}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, inspectedAt, c.HealthSince)
				assert.Equal(t, "up", c.HealthOutput)
				assert.Equal(t, 3, c.HealthExitCode)
			},
		},
		{
			name: "no change: since and output stay",
			c: task.Container{KnownStatus: task.ContainerRunning, HealthCheck: &task.HealthCheck{}, Health: task.HealthHealthy,
				HealthSince: started, HealthOutput: "up"},
			ci: docker.Container{State: docker.State{Running: true, Health: docker.Health{Status: "healthy", Log: []docker.HealthCheck{
				{ExitCode: 0, Output: "later run"}}}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, started, c.HealthSince)
				assert.Equal(t, "up", c.HealthOutput)
			},
		},
		{
			name: "network mode none: no network",
			c:    task.Container{KnownStatus: task.ContainerRunning},
			ci: docker.Container{State: docker.State{Running: true}, NetworkSettings: &docker.NetworkSettings{
				Networks: map[string]docker.ContainerNetwork{"none": {}}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Empty(t, c.Networks)
			},
		},
		{
			name: "mounts as Docker reports them",
			c:    task.Container{KnownStatus: task.ContainerRunning},
			ci: docker.Container{State: docker.State{Running: true}, Mounts: []docker.Mount{
				{Name: "data", Source: "/var/lib/docker/volumes/data/_data", Destination: "/data", Driver: "local"},
				{Source: "/etc/app", Destination: "/config"}}},
			want: func(t *testing.T, c *task.Container) {
				assert.Equal(t, []task.Mount{{Name: "data", Source: "/var/lib/docker/volumes/data/_data", Destination: "/data"},
					{Source: "/etc/app", Destination: "/config"}}, c.Mounts)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			applyInspect(&c, &tc.ci, inspectedAt)
			tc.want(t, &c)
		})
	}
}

package engine

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// TestCreateOptionsEveryOption: a container with every option the definition may give is created
// with each one in Docker's words, and the engine's create hooks, in their order, layer its
// environment file < definition < secret < task endpoint, merge the log driver's secret options into
// a copy of the task's options and put it in the task cgroup.
func TestCreateOptionsEveryOption(t *testing.T) {
	cfg := Config{StopTimeout: 30 * time.Second,
		TaskEndpoint: TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true}}
	app := &task.Container{Name: "app", Image: "app:1", Essential: true, DockerName: "ecs-fam-3-app-111111111111"}
	pause := &task.Container{Name: PauseContainerName, Image: "berth/pause", Essential: true, Pause: true, DockerID: "pauseid"}
	logOpts := map[string]string{"awslogs-group": "g"}
	web := &task.Container{Name: "web", Image: "web:1", Essential: true, DockerName: "ecs-fam-3-web-222222222222",
		Memory: 256, MetadataToken: "tok",
		Environment: []task.KeyValue{{Name: "A", Value: "def"}, {Name: "B", Value: "def"}, {Name: "C", Value: "def"}},
		PortMappings: []task.PortMapping{{ContainerPort: 80},
			{ContainerPortRange: "9000-9002", Protocol: "udp"}},
		LogConfiguration: &task.LogConfiguration{LogDriver: "awslogs", Options: logOpts,
			SecretOptions: []task.Secret{{Name: "secret-opt", ValueFrom: "arn:aws:ssm:r:1:parameter/x"}}},
		Links:                 []string{"app:backend", "app", "missing"},
		Hostname:              "web.local",
		DNSServers:            []string{"10.0.0.2"},
		DNSSearchDomains:      []string{"example.com"},
		ExtraHosts:            []task.HostEntry{{Hostname: "db", IPAddress: "10.0.0.5"}},
		SystemControls:        []task.SystemControl{{Namespace: "net.core.somaxconn", Value: "1024"}},
		DockerSecurityOptions: []string{"no-new-privileges"},
		PseudoTerminal:        true,
		Interactive:           true,
		DisableNetworking:     true,
		Linux: &task.LinuxParameters{
			CapAdd:  []string{"NET_ADMIN"},
			CapDrop: []string{"MKNOD"},
			Devices: []task.Device{
				{HostPath: "/dev/fuse", Permissions: []string{"write", "read"}},
				{HostPath: "/dev/sda", ContainerPath: "/dev/xvda"},
			},
			SharedMemorySize: 64,
			Tmpfs:            []task.Tmpfs{{ContainerPath: "/run", Size: 16, MountOptions: []string{"rw", "noexec"}}},
			MaxSwap:          intp(128),
			Swappiness:       intp(10),
		},
	}
	tk := &task.Task{Arn: "arn:aws:ecs:r:1:task/c/t1", Family: "fam", Revision: 3, NetworkMode: task.NetworkBridge,
		PidMode: "task", IpcMode: "task", CredentialsID: "cid", Containers: []*task.Container{pause, app, web}}
	cfg.Secrets = &fakeSecrets{values: map[string]ContainerSecrets{"web": {
		FileEnv:    []string{"A=file", "F=file", "B=file"},
		SecretEnv:  []string{"B=secret", "S=secret"},
		LogOptions: map[string]string{"secret-opt": "s3cr3t"},
	}}}
	cfg.TaskCgroups = &fakeCgroups{everyTask: true}

	o, err := createOptions(tk, web, "prod", "pauseid", cfg, createInputs{HostPorts: map[int]int{1: 41000}})
	require.NoError(t, err)
	beforeCreate(t, cfg, tk, web, &o)
	conf, host := o.Config, o.HostConfig

	assert.Equal(t, []string{"A=def", "F=file", "B=secret", "C=def", "S=secret",
		"ECS_CONTAINER_METADATA_URI=http://169.254.170.2/v3/tok",
		"ECS_CONTAINER_METADATA_URI_V4=http://169.254.170.2/v4/tok",
		"ECS_AGENT_URI=http://169.254.170.2/api/tok",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/v2/credentials/cid"}, conf.Env,
		"file < definition < secret, each name once, then the task endpoint's variables")
	assert.Equal(t, []string{"ecs-fam-3-app-111111111111:backend", "ecs-fam-3-app-111111111111:app"}, host.Links,
		"links name the target's Docker name; a link to no container of the task is dropped")
	assert.Equal(t, "web.local", conf.Hostname)
	assert.Equal(t, []string{"10.0.0.2"}, host.DNS)
	assert.Equal(t, []string{"example.com"}, host.DNSSearch)
	assert.Equal(t, []string{"db:10.0.0.5"}, host.ExtraHosts)
	assert.Equal(t, map[string]string{"net.core.somaxconn": "1024"}, host.Sysctls)
	assert.Equal(t, []string{"no-new-privileges"}, host.SecurityOpt)
	assert.True(t, conf.Tty)
	assert.True(t, conf.OpenStdin)
	assert.True(t, conf.NetworkDisabled)
	assert.Equal(t, []string{"NET_ADMIN"}, host.CapAdd)
	assert.Equal(t, []string{"MKNOD"}, host.CapDrop)
	assert.Equal(t, []docker.Device{
		{PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rw"},
		{PathOnHost: "/dev/sda", PathInContainer: "/dev/xvda", CgroupPermissions: "rwm"},
	}, host.Devices)
	assert.EqualValues(t, 64<<20, host.ShmSize)
	assert.Equal(t, map[string]string{"/run": "rw,noexec,size=16m"}, host.Tmpfs)
	assert.EqualValues(t, 256<<20, host.Memory)
	assert.EqualValues(t, (256+128)<<20, host.MemorySwap, "memory plus maxSwap, in bytes")
	require.NotNil(t, host.MemorySwappiness)
	assert.EqualValues(t, 10, *host.MemorySwappiness)
	assert.Equal(t, "container:pauseid", host.PidMode)
	assert.Equal(t, "container:pauseid", host.IpcMode)
	assert.Equal(t, "bridge", host.NetworkMode)
	assert.Equal(t, "/ecs/t1", host.CgroupParent)
	assert.Equal(t, "awslogs", host.LogConfig.Type)
	assert.Equal(t, map[string]string{"awslogs-group": "g", "secret-opt": "s3cr3t"}, host.LogConfig.Config)
	assert.Equal(t, map[string]string{"awslogs-group": "g"}, logOpts, "the task's log options are not changed")
	assert.Equal(t, map[docker.Port]struct{}{"80/tcp": {}, "9000/udp": {}, "9001/udp": {}, "9002/udp": {}}, conf.ExposedPorts)
	assert.Equal(t, map[docker.Port][]docker.PortBinding{
		"80/tcp":   {{HostPort: ""}},
		"9000/udp": {{HostPort: "41000"}},
		"9001/udp": {{HostPort: "41001"}},
		"9002/udp": {{HostPort: "41002"}},
	}, host.PortBindings, "the range is bound to the picked host ports, in order")
}

// TestCreateOptionsWithoutOptions: a container that sets none of the options gets Docker's defaults,
// and the log driver's options are the task's own map, untouched.
func TestCreateOptionsWithoutOptions(t *testing.T) {
	logOpts := map[string]string{"max-size": "1m"}
	c := &task.Container{Name: "web", Image: "web:1", Memory: 64, DockerName: "ecs-fam-3-web-1",
		LogConfiguration: &task.LogConfiguration{LogDriver: "json-file", Options: logOpts}}
	tk := &task.Task{Arn: "arn:aws:ecs:r:1:task/c/t1", Family: "fam", Revision: 3, NetworkMode: task.NetworkBridge,
		Containers: []*task.Container{c}}
	o, err := createOptions(tk, c, "prod", "", Config{}, createInputs{})
	require.NoError(t, err)
	host := o.HostConfig
	assert.Empty(t, o.Config.Env)
	assert.Nil(t, host.Links)
	assert.Nil(t, host.Sysctls)
	assert.Nil(t, host.Devices)
	assert.Nil(t, host.Tmpfs)
	assert.Zero(t, host.ShmSize)
	assert.Zero(t, host.MemorySwap)
	assert.Nil(t, host.MemorySwappiness)
	assert.Empty(t, host.PidMode)
	assert.Empty(t, host.IpcMode)
	assert.Empty(t, host.CgroupParent)
	assert.False(t, o.Config.Tty || o.Config.OpenStdin || o.Config.NetworkDisabled)
	assert.Equal(t, map[string]string{"max-size": "1m"}, host.LogConfig.Config)
}

// TestCreateOptionsNamespaces: pidMode and ipcMode task join the pause container's namespaces, host
// and none pass through, and the pause container itself shares its IPC namespace (ipcMode task)
// without joining anything.
func TestCreateOptionsNamespaces(t *testing.T) {
	tests := []struct {
		name             string
		pidMode, ipcMode string
		pause            bool
		pauseID          string
		wantPid, wantIpc string
	}{
		{name: "task", pidMode: "task", ipcMode: "task", pauseID: "p1", wantPid: "container:p1", wantIpc: "container:p1"},
		{name: "task pid only", pidMode: "task", pauseID: "p1", wantPid: "container:p1"},
		{name: "task without a pause container", pidMode: "task", ipcMode: "task"},
		{name: "host", pidMode: "host", ipcMode: "host", pauseID: "p1", wantPid: "host", wantIpc: "host"},
		{name: "ipc none", ipcMode: "none", wantIpc: "none"},
		{name: "unset", pauseID: "p1"},
		{name: "pause with ipcMode task", pidMode: "task", ipcMode: "task", pause: true, pauseID: "p1", wantIpc: "shareable"},
		{name: "pause with pidMode task only", pidMode: "task", pause: true, pauseID: "p1"},
		{name: "pause with ipcMode host", ipcMode: "host", pause: true, pauseID: "p1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &task.Container{Name: "c", Image: "c:1", Pause: tt.pause, DockerName: "ecs-fam-3-c-1"}
			tk := &task.Task{Arn: "arn:aws:ecs:r:1:task/c/t1", Family: "fam", Revision: 3, NetworkMode: task.NetworkBridge,
				PidMode: tt.pidMode, IpcMode: tt.ipcMode, Containers: []*task.Container{c}}
			o, err := createOptions(tk, c, "prod", tt.pauseID, Config{}, createInputs{})
			require.NoError(t, err)
			assert.Equal(t, tt.wantPid, o.HostConfig.PidMode, "PidMode")
			assert.Equal(t, tt.wantIpc, o.HostConfig.IpcMode, "IpcMode")
			if tt.pause {
				assert.Equal(t, "none", o.HostConfig.NetworkMode, "a pause container outside awsvpc has no network")
			}
		})
	}
}

func TestMergeEnv(t *testing.T) {
	tests := []struct {
		name   string
		layers [][]string
		want   []string
	}{
		{name: "nothing", want: nil},
		{name: "one layer kept in order", layers: [][]string{{"B=1", "A=2"}}, want: []string{"B=1", "A=2"}},
		{name: "later layers win in place", layers: [][]string{{"A=file", "B=file"}, {"B=def", "C=def"}, {"A=secret"}},
			want: []string{"A=secret", "B=def", "C=def"}},
		{name: "a name repeated in one layer: the last wins", layers: [][]string{{"A=1", "A=2"}}, want: []string{"A=2"}},
		{name: "values with =", layers: [][]string{{"A=x=y"}, {"A=p=q"}}, want: []string{"A=p=q"}},
		{name: "an empty value still wins", layers: [][]string{{"A=1"}, {"A="}}, want: []string{"A="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, mergeEnv(tt.layers...))
		})
	}
}

func TestNamespaceMode(t *testing.T) {
	tests := []struct{ mode, pauseID, want string }{
		{"task", "p", "container:p"},
		{"task", "", ""},
		{"host", "p", "host"},
		{"none", "", "none"},
		{"", "p", ""},
		{"shareable", "p", ""},
	}
	for _, tt := range tests {
		t.Run(tt.mode+"/"+tt.pauseID, func(t *testing.T) {
			assert.Equal(t, tt.want, namespaceMode(tt.mode, tt.pauseID))
		})
	}
}

func TestPortRangeBounds(t *testing.T) {
	lo, hi := portRangeBounds("9000-9002")
	assert.Equal(t, [2]int{9000, 9002}, [2]int{lo, hi})
	lo, hi = portRangeBounds("80-80")
	assert.Equal(t, [2]int{80, 80}, [2]int{lo, hi})
}

// pickerRange returns the first range of n host ports from base on, all free for tcp and udp now,
// for a picker test. The bases are below Linux's ephemeral ports (32768 and up), which the other
// packages' tests take for their outgoing connections while this one runs.
func pickerRange(t *testing.T, base, n int) (lo, hi int) {
	t.Helper()
	lo = base
	for port := base; port < base+n+200; port++ {
		if !portFree(port, "tcp") || !portFree(port, "udp") {
			lo = port + 1
			continue
		}
		if port-lo+1 == n {
			return lo, port
		}
	}
	require.FailNow(t, "test prerequisite: free host ports", "no %d free consecutive ports from %d", n, base)
	return 0, 0
}

// hold binds port for tcp until the test ends.
func hold(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
}

func TestHostPortPicker(t *testing.T) {
	t.Run("consecutive ranges that do not overlap", func(t *testing.T) {
		lo, hi := pickerRange(t, 20000, 20)
		p := newHostPortPicker(lo, hi)
		for _, want := range []struct {
			n        int
			protocol string
			first    int
		}{{3, "tcp", lo}, {3, "tcp", lo + 3}, {2, "udp", lo + 6}, {1, "tcp", lo + 8}} {
			got, err := p.pick(want.n, want.protocol)
			require.NoError(t, err)
			assert.Equal(t, want.first, got, "%d %s ports", want.n, want.protocol)
		}
	})
	t.Run("a port in use is skipped", func(t *testing.T) {
		lo, hi := pickerRange(t, 20020, 10)
		hold(t, lo+1)
		assert.False(t, portFree(lo+1, "tcp"))
		first, err := newHostPortPicker(lo, hi).pick(3, "tcp")
		require.NoError(t, err)
		assert.Equal(t, lo+2, first, "the range starts after the held port")
		first, err = newHostPortPicker(lo, hi).pick(3, "udp")
		require.NoError(t, err)
		assert.Equal(t, lo, first, "a tcp port in use does not hold back udp")
	})
	t.Run("wraps around", func(t *testing.T) {
		lo, hi := pickerRange(t, 20030, 10)
		p := newHostPortPicker(lo, hi)
		for _, want := range []int{lo, lo + 4, lo, lo + 4, lo + 8, lo} {
			n := 4
			if want == lo+8 {
				n = 2 // exactly to the end of the range: the next pick starts over
			}
			got, err := p.pick(n, "tcp")
			require.NoError(t, err)
			assert.Equal(t, want, got)
		}
	})
	t.Run("wraps around past ports in use", func(t *testing.T) {
		lo, hi := pickerRange(t, 20040, 10)
		p := newHostPortPicker(lo, hi)
		first, err := p.pick(6, "tcp")
		require.NoError(t, err)
		require.Equal(t, lo, first)
		hold(t, lo+7) // lo+6..lo+9 cannot hold 3 ports now
		first, err = p.pick(3, "tcp")
		require.NoError(t, err)
		assert.Equal(t, lo, first, "the search wraps to the start of the range")
	})
	t.Run("a range larger than the span", func(t *testing.T) {
		_, err := newHostPortPicker(40050, 40059).pick(11, "tcp")
		require.Error(t, err)
		assert.ErrorContains(t, err, "40050-40059")
	})
	t.Run("no free range", func(t *testing.T) {
		lo, hi := pickerRange(t, 20060, 3)
		hold(t, lo+1)
		_, err := newHostPortPicker(lo, hi).pick(2, "tcp")
		require.Error(t, err)
		assert.ErrorContains(t, err, "ECS_DYNAMIC_HOST_PORT_RANGE")
		assert.ErrorContains(t, err, fmt.Sprintf("%d-%d", lo, hi))
	})
	t.Run("concurrent picks do not overlap", func(t *testing.T) {
		lo, hi := pickerRange(t, 20070, 30)
		p := newHostPortPicker(lo, hi)
		var wg sync.WaitGroup
		firsts := make([]int, 10)
		errs := make([]error, 10)
		for i := range firsts {
			wg.Go(func() { firsts[i], errs[i] = p.pick(3, "udp") })
		}
		wg.Wait()
		used := map[int]bool{}
		for i, first := range firsts {
			require.NoError(t, errs[i])
			for port := first; port < first+3; port++ {
				assert.False(t, used[port], "port %d given twice", port)
				assert.True(t, port >= lo && port <= hi)
				used[port] = true
			}
		}
	})
}

// beforeCreate runs the CreateHooks of an engine with cfg on c's options, in their order, as the
// task's worker does.
func beforeCreate(t *testing.T, cfg Config, tk *task.Task, c *task.Container, opts *docker.CreateContainerOptions) {
	t.Helper()
	e := &Engine{cfg: cfg, log: logger.Nop()}
	w := &worker{e: e, arn: tk.Arn, t: tk, log: logger.Nop()}
	for _, h := range hooksFor(e.builtinFeatures(), tk).create {
		require.NoError(t, h.BeforeCreate(context.Background(), &Run{w}, c, opts))
	}
}

package firelens

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// fakeSecrets hands out fixed values, or err, and records what it was asked.
type fakeSecrets struct {
	options map[string]map[string]string // container → option → value
	files   map[string][]byte            // ARN → body
	err     error
	asked   []string
}

var _ Secrets = (*fakeSecrets)(nil)

func (f *fakeSecrets) LogSecretOptions(_ context.Context, _ *task.Task, c *task.Container) (map[string]string, error) {
	f.asked = append(f.asked, "options "+c.Name)
	if f.err != nil {
		return nil, f.err
	}
	return f.options[c.Name], nil
}

func (f *fakeSecrets) ConfigFile(_ context.Context, _ *task.Task, arn string) ([]byte, error) {
	f.asked = append(f.asked, "file "+arn)
	if f.err != nil {
		return nil, f.err
	}
	b, ok := f.files[arn]
	if !ok {
		return nil, errors.New("firelens configuration file " + arn + ": NoSuchKey")
	}
	return b, nil
}

const (
	taskARN   = "arn:aws:ecs:us-west-2:012345678901:task/prod/0123456789abcdef0123456789abcdef"
	taskID    = "0123456789abcdef0123456789abcdef"
	s3ARN     = "arn:aws:s3:::conf-bucket/fluent/extra.conf"
	apiKey    = "dd-api-key-5e3f1a"
	s3Body    = "[FILTER]\n    Name grep\n"
	routerTyp = task.FirelensFluentbit
)

// firelensTask is a task with a fluentbit router (an s3 configuration file) and an app container
// that logs through it with a secret option and a buffer limit.
func firelensTask(mode task.NetworkMode) *task.Task {
	router := &task.Container{Name: "log_router", Image: "fluent-bit", Essential: true, Memory: 100,
		Firelens: &task.FirelensConfiguration{Type: routerTyp, Options: map[string]string{
			OptionConfigFileType: "s3", OptionConfigFileValue: s3ARN}}}
	app := &task.Container{Name: "app", Image: "app", Essential: true,
		LogConfiguration: &task.LogConfiguration{LogDriver: task.LogDriverFirelens,
			Options:       map[string]string{"Name": "datadog", "dd_service": "web", "log-driver-buffer-limit": "2097152"},
			SecretOptions: []task.Secret{{Name: "apikey", ValueFrom: "arn:aws:ssm:us-west-2:012345678901:parameter/dd"}}}}
	side := &task.Container{Name: "side", Image: "side", LogConfiguration: &task.LogConfiguration{LogDriver: "json-file"}}
	return &task.Task{Arn: taskARN, Family: "web", Revision: 7, NetworkMode: mode,
		Containers: []*task.Container{router, app, side}}
}

func newOpts() *docker.CreateContainerOptions {
	return &docker.CreateContainerOptions{Config: &docker.Config{Env: []string{"A=1"}}, HostConfig: &docker.HostConfig{}}
}

func testFeature(t *testing.T, s Secrets) (*Feature, string) {
	t.Helper()
	dir := t.TempDir()
	return New(Config{DataDir: dir, Cluster: "prod", Secrets: s, EC2InstanceID: func() string { return "i-0abc" }}, logger.Nop()), dir
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// TestRouterSetUp: before the router is created its configuration (with the outputs' secret values)
// and the S3 file are written, private, under ECS_DATADIR/firelens/<task id>, and mounted where the
// ECS agent mounts them (agent/api/task/task.go firelensConfigBindFormatFluentbit,
// firelensS3ConfigBindFormat, firelensSocketBindFormat).
func TestRouterSetUp(t *testing.T) {
	secrets := &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": apiKey}}, files: map[string][]byte{s3ARN: []byte(s3Body)}}
	f, dataDir := testFeature(t, secrets)
	tk := firelensTask(task.NetworkAWSVPC)
	opts := newOpts()
	require.NoError(t, f.setUpRouter(context.Background(), tk, tk.Containers[0], opts))

	base := dataDir + "/firelens/" + taskID
	assert.Equal(t, []string{
		base + "/config/fluent.conf:/fluent-bit/etc/fluent-bit.conf",
		base + "/socket/:/var/run/",
		base + "/config/external.conf:/fluent-bit/etc/external.conf",
	}, opts.HostConfig.Binds)
	for _, d := range []string{dataDir + "/firelens", base, base + "/config", base + "/socket"} {
		assert.Equal(t, os.FileMode(0o700), mode(t, d), d)
	}
	for _, p := range []string{base + "/config/fluent.conf", base + "/config/external.conf"} {
		assert.Equal(t, os.FileMode(0o600), mode(t, p), p)
	}
	conf, err := os.ReadFile(base + "/config/fluent.conf")
	require.NoError(t, err)
	assert.Contains(t, string(conf), apiKey, "the secret option's value is in the router's configuration")
	assert.NotContains(t, string(conf), "2097152", "log-driver-buffer-limit is the driver's, not an output option")
	ext, err := os.ReadFile(base + "/config/external.conf")
	require.NoError(t, err)
	assert.Equal(t, s3Body, string(ext))
	assert.Equal(t, []string{"A=1"}, opts.Config.Env, "a fluentbit router gets no FLUENT_UID")
	assert.ElementsMatch(t, []string{"file " + s3ARN, "options app"}, secrets.asked, "each fetched once")
	entries, err := os.ReadDir(base + "/config")
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary file is left")

	t.Run("fluentd", func(t *testing.T) {
		f, dataDir := testFeature(t, secrets)
		tk := firelensTask(task.NetworkBridge)
		tk.Containers[0].Firelens = &task.FirelensConfiguration{Type: task.FirelensFluentd}
		tk.Containers[1].LogConfiguration.Options = map[string]string{"@type": "datadog"}
		opts := newOpts()
		require.NoError(t, f.setUpRouter(context.Background(), tk, tk.Containers[0], opts))
		base := dataDir + "/firelens/" + taskID
		assert.Equal(t, []string{base + "/config/fluent.conf:/fluentd/etc/fluent.conf", base + "/socket/:/var/run/"}, opts.HostConfig.Binds)
		assert.Equal(t, []string{"A=1", "FLUENT_UID=0"}, opts.Config.Env, "the ECS agent runs fluentd as root to read the socket")
		assert.NoFileExists(t, base+"/config/external.conf")
	})
	t.Run("the router's user owns its directories and files", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chown needs root")
		}
		f, dataDir := testFeature(t, secrets)
		tk := firelensTask(task.NetworkAWSVPC)
		tk.Containers[0].User = "1000:2000"
		require.NoError(t, f.setUpRouter(context.Background(), tk, tk.Containers[0], newOpts()))
		base := dataDir + "/firelens/" + taskID
		for _, p := range []string{base + "/config", base + "/socket", base + "/config/fluent.conf", base + "/config/external.conf"} {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			st := fi.Sys().(*syscall.Stat_t)
			assert.Equal(t, [2]uint32{1000, 2000}, [2]uint32{st.Uid, st.Gid}, p)
		}
	})
}

// TestSpec: what the configuration is generated from: the ECS metadata (unless
// enable-ecs-log-metadata is false), the external file, the router's memory, and one output per
// container that logs with awsfirelens, in task order, its secret options resolved.
func TestSpec(t *testing.T) {
	secrets := &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": apiKey}}}
	f, _ := testFeature(t, secrets)
	tk := firelensTask(task.NetworkBridge)
	router := tk.Containers[0]
	router.Firelens.Options = map[string]string{OptionConfigFileType: "file", OptionConfigFileValue: "/extra.conf"}
	second := &task.Container{Name: "worker", LogConfiguration: &task.LogConfiguration{LogDriver: task.LogDriverFirelens, Options: map[string]string{"Name": "stdout"}}}
	tk.Containers = append(tk.Containers, second)

	s, arn, err := f.spec(context.Background(), tk, router)
	require.NoError(t, err)
	assert.Empty(t, arn)
	assert.Equal(t, Spec{Type: routerTyp, NetworkMode: task.NetworkBridge, TaskID: taskID,
		Metadata:    &Metadata{Cluster: "prod", TaskARN: taskARN, TaskDefinition: "web:7", EC2InstanceID: "i-0abc"},
		External:    External{Kind: "file", Path: "/extra.conf"},
		MemBufLimit: MemBufLimit(100, 0),
		Outputs: []Output{
			{Container: "app", Options: map[string]string{"Name": "datadog", "dd_service": "web", "apikey": apiKey}},
			{Container: "worker", Options: map[string]string{"Name": "stdout"}},
		}}, s)
	assert.Equal(t, map[string]string{"Name": "datadog", "dd_service": "web", "log-driver-buffer-limit": "2097152"},
		tk.Containers[1].LogConfiguration.Options, "the task's options are not changed")

	for v, want := range map[string]bool{"false": false, "FALSE": false, "true": true, "nonsense": false} {
		router.Firelens.Options = map[string]string{OptionEnableECSLogMetadata: v}
		s, _, err := f.spec(context.Background(), tk, router)
		require.NoError(t, err)
		assert.Equal(t, want, s.Metadata != nil, "enable-ecs-log-metadata %q", v)
	}
	noEC2 := New(Config{DataDir: t.TempDir(), Cluster: "prod", Secrets: secrets}, logger.Nop())
	router.Firelens.Options = nil
	s, _, err = noEC2.spec(context.Background(), tk, router)
	require.NoError(t, err)
	assert.Empty(t, s.Metadata.EC2InstanceID, "off EC2 the instance ID is left out")
}

// TestRouterSetUpFails: a router whose configuration cannot be made is not created, with a reason
// naming the cause, and nothing of the task's FireLens directory is left.
func TestRouterSetUpFails(t *testing.T) {
	tests := []struct {
		name    string
		secrets Secrets
		change  func(*task.Task)
		want    []string
	}{
		{name: "a secret AWS refuses", secrets: &fakeSecrets{err: errors.New("secret apikey (valueFrom /dd): AccessDeniedException")},
			change: func(tk *task.Task) { tk.Containers[0].Firelens.Options = nil },
			want:   []string{"firelens", "container app", "secretOptions", "AccessDeniedException"}},
		{name: "the S3 object is missing", secrets: &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": apiKey}}},
			want: []string{"firelens", "config-file-value", s3ARN, "NoSuchKey"}},
		{name: "no way to fetch", change: func(tk *task.Task) { tk.Containers[0].Firelens.Options = nil },
			want: []string{"container app", ErrNoSecrets.Error()}},
		{name: "an output without Name", secrets: &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": apiKey}}},
			change: func(tk *task.Task) {
				tk.Containers[0].Firelens.Options = nil
				delete(tk.Containers[1].LogConfiguration.Options, "Name")
			},
			want: []string{"firelens", "app"}},
		{name: "an unknown config-file-type", secrets: &fakeSecrets{},
			change: func(tk *task.Task) {
				tk.Containers[0].Firelens.Options = map[string]string{OptionConfigFileType: "http", OptionConfigFileValue: "x"}
			},
			want: []string{"config-file-type", `"http"`}},
		{name: "config-file-type without a value", secrets: &fakeSecrets{},
			change: func(tk *task.Task) {
				tk.Containers[0].Firelens.Options = map[string]string{OptionConfigFileType: "file"}
			},
			want: []string{"config-file-value", "not set"}},
		{name: "an unknown type", secrets: &fakeSecrets{},
			change: func(tk *task.Task) { tk.Containers[0].Firelens.Type = "logstash" },
			want:   []string{"type", `"logstash"`}},
		{name: "a user name", secrets: &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": apiKey}}},
			change: func(tk *task.Task) { tk.Containers[0].Firelens.Options = nil; tk.Containers[0].User = "fluent" },
			want:   []string{"user", `"fluent"`, "numeric"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, dataDir := testFeature(t, tt.secrets)
			tk := firelensTask(task.NetworkAWSVPC)
			if tt.change != nil {
				tt.change(tk)
			}
			opts := newOpts()
			err := f.setUpRouter(context.Background(), tk, tk.Containers[0], opts)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), apiKey)
			assert.Empty(t, opts.HostConfig.Binds)
			assert.NoDirExists(t, filepath.Join(dataDir, "firelens", taskID))
		})
	}
}

// TestLogToRouter: a container that logs with awsfirelens is created with Docker's fluentd driver
// and the ECS agent's options (getFirelensLogConfig: tag <container>-firelens-<task id>,
// fluentd-address unix://<data dir>/firelens/<task id>/socket/fluent.sock, sub-second precision, the
// buffer limit from log-driver-buffer-limit, fluentd-async true by default, fluentd-async-connect
// before Docker 20.10), and FLUENT_HOST/FLUENT_PORT; none of its awsfirelens options or secret
// values reach Docker.
func TestLogToRouter(t *testing.T) {
	f, dataDir := testFeature(t, &fakeSecrets{})
	tk := firelensTask(task.NetworkAWSVPC)
	opts := newOpts()
	opts.HostConfig.LogConfig = docker.LogConfig{Type: task.LogDriverFirelens, Config: tk.Containers[1].LogConfiguration.Options}
	require.NoError(t, f.logToRouter(tk, tk.Containers[1], opts))
	assert.Equal(t, docker.LogConfig{Type: "fluentd", Config: map[string]string{
		"tag":                          "app-firelens-" + taskID,
		"fluentd-address":              "unix://" + dataDir + "/firelens/" + taskID + "/socket/fluent.sock",
		"fluentd-sub-second-precision": "true",
		"fluentd-buffer-limit":         "2097152",
		"fluentd-async":                "true",
	}}, opts.HostConfig.LogConfig)
	assert.Equal(t, []string{"A=1", "FLUENT_HOST=127.0.0.1", "FLUENT_PORT=24224"}, opts.Config.Env)

	t.Run("bridge: the router's address", func(t *testing.T) {
		tk := firelensTask(task.NetworkBridge)
		tk.Containers[0].Networks = []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.5"}}}
		opts := newOpts()
		opts.Config.Env = []string{"FLUENT_HOST=wrong"}
		require.NoError(t, f.logToRouter(tk, tk.Containers[1], opts))
		assert.Equal(t, []string{"FLUENT_HOST=172.17.0.5", "FLUENT_PORT=24224"}, opts.Config.Env)
		tk.Containers[0].Networks = nil
		err := f.logToRouter(tk, tk.Containers[1], newOpts())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "log_router")
	})
	t.Run("host: no variables", func(t *testing.T) {
		tk := firelensTask(task.NetworkHost)
		opts := newOpts()
		require.NoError(t, f.logToRouter(tk, tk.Containers[1], opts))
		assert.Equal(t, []string{"A=1"}, opts.Config.Env)
	})
	t.Run("Docker before 20.10", func(t *testing.T) {
		old := New(Config{DataDir: dataDir, DockerVersion: "19.03.15"}, logger.Nop())
		opts := newOpts()
		require.NoError(t, old.logToRouter(firelensTask(task.NetworkHost), tk.Containers[1], opts))
		assert.Equal(t, "true", opts.HostConfig.LogConfig.Config["fluentd-async-connect"])
		assert.NotContains(t, opts.HostConfig.LogConfig.Config, "fluentd-async")
	})
	t.Run("no router", func(t *testing.T) {
		tk := firelensTask(task.NetworkHost)
		tk.Containers = tk.Containers[1:]
		err := f.logToRouter(tk, tk.Containers[0], newOpts())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no firelensConfiguration container")
	})
	t.Run("a socket path too long for Linux", func(t *testing.T) {
		long := New(Config{DataDir: "/" + strings.Repeat("d", 80)}, logger.Nop())
		err := long.logToRouter(firelensTask(task.NetworkHost), tk.Containers[1], newOpts())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ECS_DATADIR")
	})
}

// TestTaskHook: only a task with a router or an awsfirelens container gets the hook.
func TestTaskHook(t *testing.T) {
	f, _ := testFeature(t, nil)
	assert.NotNil(t, f.TaskHook(firelensTask(task.NetworkBridge)))
	assert.Nil(t, f.TaskHook(&task.Task{Containers: []*task.Container{{Name: "plain"}}}))
}

// TestRemoveLeftovers: the directories of tasks the engine no longer holds are removed; those of
// the tasks it holds are kept.
func TestRemoveLeftovers(t *testing.T) {
	f, dataDir := testFeature(t, nil)
	kept := filepath.Join(dataDir, "firelens", taskID, "config")
	gone := filepath.Join(dataDir, "firelens", "feedfacefeedfacefeedfacefeedface", "socket")
	require.NoError(t, os.MkdirAll(kept, 0o700))
	require.NoError(t, os.MkdirAll(gone, 0o700))
	f.RemoveLeftovers(context.Background(), []string{taskARN})
	assert.DirExists(t, kept)
	assert.NoDirExists(t, filepath.Dir(gone))

	empty, _ := testFeature(t, nil)
	empty.RemoveLeftovers(context.Background(), nil) // no firelens directory: nothing to do
}

// A task ID longer than an ECS task ID (a static task's) gets a directory named by 32 hex digits of
// its SHA-256, so that the router's socket path fits a unix socket; an ECS task ID is used as is.
func TestDirName(t *testing.T) {
	assert.Equal(t, "0123456789abcdef0123456789abcdef", dirName("arn:aws:ecs:us-west-2:012345678901:task/default/0123456789abcdef0123456789abcdef"))
	static := "arn:aws:ecs:local:000000000000:task/default/static-firelens-static-05aa01f2-6fefb4b34333-r6"
	// sha256("static-firelens-static-05aa01f2-6fefb4b34333-r6"), by sha256sum.
	assert.Equal(t, "efeaf653341247a29f895b27374d98bf", dirName(static))

	f, dataDir := testFeature(t, nil)
	kept := filepath.Join(dataDir, "firelens", dirName(static))
	require.NoError(t, os.MkdirAll(kept, 0o700))
	f.RemoveLeftovers(context.Background(), []string{static})
	assert.DirExists(t, kept, "a static task's directory is its hashed name")
}

func TestParseOwner(t *testing.T) {
	gid := os.Getgid()
	tests := []struct {
		user string
		want owner
		err  bool
	}{
		{user: "", want: owner{}},
		{user: "1000", want: owner{set: true, uid: 1000, gid: gid}},
		{user: "1000:2000", want: owner{set: true, uid: 1000, gid: 2000}},
		{user: "1000:fluent", want: owner{set: true, uid: 1000, gid: gid}},
		{user: "root", want: owner{set: true, uid: 0, gid: gid}},
		{user: "fluent", err: true},
		{user: "-1", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			got, err := parseOwner(tt.user)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

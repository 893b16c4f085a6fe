package firelens

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// The Docker fluentd log driver's options the ECS agent sets on a container that logs with
// awsfirelens (agent/engine/docker_task_engine.go); the buffer limit is the definition's
// OptionLogDriverBufferLimit.
const (
	dockerDriverFluentd   = "fluentd"
	optTag                = "tag"
	optFluentdAddress     = "fluentd-address"
	optSubSecondPrecision = "fluentd-sub-second-precision"
	optBufferLimit        = "fluentd-buffer-limit"
	optAsync              = "fluentd-async"
	optAsyncConnect       = "fluentd-async-connect" // Docker before 20.10 (removed in 28.0)
)

// The variables the ECS agent gives the containers that log through the router (FLUENT_HOST and
// FLUENT_PORT: where its TCP forward input listens) and the router of type fluentd (FLUENT_UID=0, so
// that fluentd can read the socket Docker's driver writes to).
const (
	envFluentHost   = "FLUENT_HOST"
	envFluentPort   = "FLUENT_PORT"
	envFluentUID    = "FLUENT_UID"
	fluentPort      = "24224"
	fluentAWSVPCIP  = "127.0.0.1"
	configFileName  = "fluent.conf"
	s3FileName      = "external.conf"
	socketName      = "fluent.sock"
	socketMountPath = "/var/run/"
	// maxSocketPath is the longest path of a unix socket Linux takes (sun_path less its NUL).
	maxSocketPath = 107
)

// ErrNoSecrets is the reason a router cannot be created when it needs what only a task's execution
// role can fetch (an output's secretOptions, an s3 configuration file) and the agent has no way to.
var ErrNoSecrets = errors.New("this agent cannot fetch with a task's execution role")

// Secrets fetches with a task's execution role what its router's configuration needs. Values are
// returned to the caller only; errors never hold one.
type Secrets interface {
	// LogSecretOptions returns the values of c's logConfiguration.secretOptions by option name.
	LogSecretOptions(ctx context.Context, t *task.Task, c *task.Container) (map[string]string, error)
	// ConfigFile returns the S3 object arn (arn:<partition>:s3:::<bucket>/<key>) names.
	ConfigFile(ctx context.Context, t *task.Task, arn string) ([]byte, error)
}

// Config configures the feature.
type Config struct {
	// DataDir is the agent's data directory (ECS_DATADIR): a task's files are under
	// DataDir/firelens/<task id>.
	DataDir string
	// Cluster is the cluster the metadata names (ecs_cluster).
	Cluster string
	// Secrets fetches outputs' secret options and s3 configuration files; nil: a router that needs
	// either cannot be created (ErrNoSecrets).
	Secrets Secrets
	// EC2InstanceID returns the EC2 instance the metadata names (ec2_instance_id), "" when the agent
	// does not run on EC2 in ecs mode; nil: none. It is called when a router is created.
	EC2InstanceID func() string
	// DockerVersion is the Docker Engine's version ("27.3.1"): before 20.10 the fluentd driver takes
	// fluentd-async-connect instead of fluentd-async, as in the ECS agent. Empty: 20.10 or later.
	DockerVersion string
}

// Feature is FireLens as an engine feature (an engine.Feature and engine.Recoverer): for a task with a
// log router (a container with a firelensConfiguration) it writes the router's configuration before
// the router is created and mounts it, with the socket directory, into the router; it turns the
// awsfirelens log configuration of the task's other containers into Docker's fluentd driver writing to
// the router's socket; and it removes the task's files at cleanup. That those containers start after
// the router is the task model's rule (task.Task.CanStart).
type Feature struct {
	cfg Config
	log *logger.Logger
}

var (
	_ engine.Feature   = (*Feature)(nil)
	_ engine.Recoverer = (*Feature)(nil)
)

// New returns the feature.
func New(cfg Config, log *logger.Logger) *Feature { return &Feature{cfg: cfg, log: log} }

// Name names the feature in logs.
func (f *Feature) Name() string { return "firelens" }

// TaskHook returns the hook of a task with a router or a container that logs with awsfirelens.
func (f *Feature) TaskHook(t *task.Task) engine.TaskHook {
	for _, c := range t.Containers {
		if c.Firelens != nil || c.LogsToRouter() {
			return &hook{f: f}
		}
	}
	return nil
}

// taskDir is where t's files are.
func (f *Feature) taskDir(t *task.Task) string {
	return filepath.Join(f.root(), dirName(t.Arn))
}

// maxDirName is the longest name of a task's directory: an ECS task ID's length.
const maxDirName = 32

// dirName is the name of the directory of the task with this ARN: its task ID, or, for an ID longer
// than an ECS task ID (a static task's holds its file's name), the first 32 hex digits of the ID's
// SHA-256, so that the router's socket path stays within what a unix socket takes.
func dirName(arn string) string {
	id := engine.CNITaskID(arn)
	if len(id) <= maxDirName {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:maxDirName]
}

func (f *Feature) root() string { return filepath.Join(f.cfg.DataDir, "firelens") }

// RemoveLeftovers removes the directories of tasks the engine does not hold.
func (f *Feature) RemoveLeftovers(_ context.Context, known []string) {
	var keep set.Set[string]
	for _, arn := range known {
		keep.Add(dirName(arn))
	}
	entries, err := os.ReadDir(f.root())
	if err != nil {
		if !os.IsNotExist(err) {
			f.log.Warn("cannot list FireLens leftovers", "dir", f.root(), "error", err)
		}
		return
	}
	for _, e := range entries {
		if keep.Has(e.Name()) {
			continue
		}
		dir := filepath.Join(f.root(), e.Name())
		if err := os.RemoveAll(dir); err != nil {
			f.log.Warn("removing FireLens leftovers failed", "dir", dir, "error", err)
			continue
		}
		f.log.Info("removed the FireLens files of a task no longer held", "dir", dir)
	}
}

// hook is one task's.
type hook struct{ f *Feature }

var (
	_ engine.CreateHook  = (*hook)(nil)
	_ engine.CleanupHook = (*hook)(nil)
)

// BeforeCreate writes the router's files and mounts them into it, and sends the output of a
// container that logs with awsfirelens to the router.
func (h *hook) BeforeCreate(ctx context.Context, r *engine.Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	t := r.Task()
	if c.Firelens != nil {
		if err := h.f.setUpRouter(ctx, t, c, opts); err != nil {
			return err
		}
		r.Log().Info("wrote the FireLens router's configuration", "container", c.Name, "dir", h.f.taskDir(t))
	}
	if c.LogsToRouter() {
		return h.f.logToRouter(t, c, opts)
	}
	return nil
}

// Cleanup removes the task's files.
func (h *hook) Cleanup(_ context.Context, r *engine.Run) {
	dir := h.f.taskDir(r.Task())
	if err := os.RemoveAll(dir); err != nil {
		r.Log().Warn("removing the task's FireLens files failed; the next agent start retries", "dir", dir, "error", err)
	}
}

// setUpRouter writes router's files (undoing what it wrote when a step fails) and adds its binds.
func (f *Feature) setUpRouter(ctx context.Context, t *task.Task, router *task.Container, opts *docker.CreateContainerOptions) (err error) {
	typ := router.Firelens.Type
	if typ != task.FirelensFluentbit && typ != task.FirelensFluentd {
		return fmt.Errorf("firelens: unknown firelensConfiguration type %q", typ)
	}
	spec, s3ARN, err := f.spec(ctx, t, router)
	if err != nil {
		return fmt.Errorf("firelens: %w", err)
	}
	conf, err := Generate(spec)
	if err != nil {
		return fmt.Errorf("firelens: generate the router's configuration: %w", err)
	}
	var s3Conf []byte
	if s3ARN != "" {
		if f.cfg.Secrets == nil {
			return fmt.Errorf("firelens: %s %s: %w", OptionConfigFileValue, s3ARN, ErrNoSecrets)
		}
		if s3Conf, err = f.cfg.Secrets.ConfigFile(ctx, t, s3ARN); err != nil {
			return fmt.Errorf("firelens: download %s: %w", OptionConfigFileValue, err)
		}
	}
	owner, err := parseOwner(router.User)
	if err != nil {
		return fmt.Errorf("firelens: %w", err)
	}
	dir := f.taskDir(t)
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	configDir, socketDir := filepath.Join(dir, "config"), filepath.Join(dir, "socket")
	for _, d := range []string{f.root(), dir, configDir, socketDir} {
		if err := mkdirPrivate(d); err != nil {
			return fmt.Errorf("firelens: %w", err)
		}
	}
	owned := []string{configDir, socketDir}
	files := map[string][]byte{filepath.Join(configDir, configFileName): conf}
	if s3ARN != "" {
		files[filepath.Join(configDir, s3FileName)] = s3Conf
	}
	for path, b := range files {
		if err := writePrivate(path, b); err != nil {
			return fmt.Errorf("firelens: %w", err)
		}
		owned = append(owned, path)
	}
	if err := owner.chown(owned...); err != nil {
		return fmt.Errorf("firelens: %w", err)
	}
	hc := opts.HostConfig
	hc.Binds = append(hc.Binds, filepath.Join(configDir, configFileName)+":"+ConfigPath(typ), socketDir+"/:"+socketMountPath)
	if s3ARN != "" {
		hc.Binds = append(hc.Binds, filepath.Join(configDir, s3FileName)+":"+S3ConfigPath(typ))
	}
	if typ == task.FirelensFluentd {
		opts.Config.Env = setEnv(opts.Config.Env, envFluentUID, "0")
	}
	return nil
}

// spec returns what the router's configuration is generated from, with the S3 ARN of its
// configuration file when config-file-type is s3. Output options' secret values are fetched here.
func (f *Feature) spec(ctx context.Context, t *task.Task, router *task.Container) (Spec, string, error) {
	taskID := engine.CNITaskID(t.Arn)
	s := Spec{Type: router.Firelens.Type, NetworkMode: t.NetworkMode, TaskID: taskID,
		MemBufLimit: MemBufLimit(router.Memory, router.MemoryReservation)}
	options := router.Firelens.Options
	// As the ECS agent: metadata unless the option parses as false; a value that does not parse
	// leaves it out too (the ECS agent warns and keeps its zero value, false).
	if v, ok := options[OptionEnableECSLogMetadata]; !ok || parseTrue(v) {
		m := &Metadata{Cluster: f.cfg.Cluster, TaskARN: t.Arn, TaskDefinition: t.Family + ":" + strconv.Itoa(t.Revision)}
		if f.cfg.EC2InstanceID != nil {
			m.EC2InstanceID = f.cfg.EC2InstanceID()
		}
		s.Metadata = m
	}
	var s3ARN string
	if kind, ok := options[OptionConfigFileType]; ok {
		value := options[OptionConfigFileValue]
		if value == "" {
			return s, "", fmt.Errorf("option %s is %q but %s is not set", OptionConfigFileType, kind, OptionConfigFileValue)
		}
		switch kind {
		case ConfigFileTypeFile:
			s.External = External{Kind: kind, Path: value}
		case ConfigFileTypeS3:
			s.External = External{Kind: kind, Path: S3ConfigPath(router.Firelens.Type)}
			s3ARN = value
		default:
			return s, "", fmt.Errorf("option %s is %q: want %s or %s", OptionConfigFileType, kind, ConfigFileTypeFile, ConfigFileTypeS3)
		}
	}
	for _, c := range t.Containers {
		if !c.LogsToRouter() {
			continue
		}
		o := Output{Container: c.Name, Options: map[string]string{}}
		for k, v := range c.LogConfiguration.Options {
			if k != OptionLogDriverBufferLimit {
				o.Options[k] = v
			}
		}
		if len(c.LogConfiguration.SecretOptions) > 0 {
			if f.cfg.Secrets == nil {
				return s, "", fmt.Errorf("container %s: secretOptions: %w", c.Name, ErrNoSecrets)
			}
			values, err := f.cfg.Secrets.LogSecretOptions(ctx, t, c)
			if err != nil {
				return s, "", fmt.Errorf("container %s: secretOptions: %w", c.Name, err)
			}
			for _, so := range c.LogConfiguration.SecretOptions {
				o.Options[so.Name] = values[so.Name]
			}
		}
		s.Outputs = append(s.Outputs, o)
	}
	return s, s3ARN, nil
}

// parseTrue reports whether v is a true strconv.ParseBool takes.
func parseTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// logToRouter replaces c's awsfirelens log configuration with Docker's fluentd driver writing to the
// router's socket, with the ECS agent's options, and tells c where the router's TCP input is.
func (f *Feature) logToRouter(t *task.Task, c *task.Container, opts *docker.CreateContainerOptions) error {
	router := t.FirelensRouter()
	if router == nil {
		return errors.New("firelens: the container logs with awsfirelens but the task has no firelensConfiguration container")
	}
	taskID := engine.CNITaskID(t.Arn)
	socket := filepath.Join(f.taskDir(t), "socket", socketName)
	if len(socket) > maxSocketPath {
		return fmt.Errorf("firelens: the router's socket path %s is longer than %d bytes; choose a shorter ECS_DATADIR", socket, maxSocketPath)
	}
	conf := map[string]string{
		optTag:                OutputTag(c.Name, taskID),
		optFluentdAddress:     "unix://" + socket,
		optSubSecondPrecision: "true",
	}
	if v, ok := c.LogConfiguration.Options[OptionLogDriverBufferLimit]; ok {
		conf[optBufferLimit] = v
	}
	if asyncBefore2010(f.cfg.DockerVersion) {
		conf[optAsyncConnect] = "true"
	} else {
		conf[optAsync] = "true"
	}
	opts.HostConfig.LogConfig = docker.LogConfig{Type: dockerDriverFluentd, Config: conf}
	switch {
	case t.NetworkMode == task.NetworkAWSVPC:
		opts.Config.Env = setEnv(setEnv(opts.Config.Env, envFluentHost, fluentAWSVPCIP), envFluentPort, fluentPort)
	case t.NetworkMode == task.NetworkBridge && router != c:
		ip := bridgeIP(router)
		if ip == "" {
			return fmt.Errorf("firelens: the router %s has no bridge address yet", router.Name)
		}
		opts.Config.Env = setEnv(setEnv(opts.Config.Env, envFluentHost, ip), envFluentPort, fluentPort)
	}
	return nil
}

// bridgeIP returns the router's first IPv4 address, "" when Docker has not reported one.
func bridgeIP(router *task.Container) string {
	for _, n := range router.Networks {
		if len(n.IPv4Addresses) > 0 {
			return n.IPv4Addresses[0]
		}
	}
	return ""
}

// asyncBefore2010 reports whether a Docker Engine of version v (major.minor…) is older than 20.10,
// whose fluentd driver takes fluentd-async-connect; a version that does not parse is taken as newer.
func asyncBefore2010(v string) bool {
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma < 20 || ma == 20 && mi < 10
}

// setEnv sets name to value in env (NAME=VALUE entries), replacing an entry of that name.
func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if n, _, _ := strings.Cut(e, "="); n != name {
			out = append(out, e)
		}
	}
	return append(out, name+"="+value)
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
)

// SecretSource fetches, with a task's execution role, what its containers get from AWS when they
// are created. Values are returned to the caller only: never saved, never logged.
type SecretSource interface {
	// ContainerSecrets returns the variables of c's environmentFiles (in file order) and of its
	// secrets, and the log driver options of its logConfiguration.secretOptions. An error names the
	// secret or file and the AWS error code, never a value.
	ContainerSecrets(ctx context.Context, t *task.Task, c *task.Container) (ContainerSecrets, error)
	// RepositoryAuth returns the credentials source of the pulls of a container with
	// repositoryCredentials. It does no I/O.
	RepositoryAuth(t *task.Task, c *task.Container) dockerclient.AuthSource
}

// ContainerSecrets is what a SecretSource fetched for one container.
type ContainerSecrets struct {
	FileEnv    []string // NAME=VALUE
	SecretEnv  []string // NAME=VALUE
	LogOptions map[string]string
}

// ErrNoSecretSource is the reason a container that asks for secrets cannot be created when the
// engine has no way to fetch them.
var ErrNoSecretSource = errors.New("this agent cannot fetch secrets")

// noRepositoryAuth fails every pull of a container whose repositoryCredentials the engine cannot
// fetch: pulling anonymously would drop part of the definition.
type noRepositoryAuth struct{}

func (noRepositoryAuth) Auth(context.Context, string) (docker.AuthConfiguration, error) {
	return docker.AuthConfiguration{}, errdefs.Permanent(fmt.Errorf("repositoryCredentials: %w", ErrNoSecretSource))
}

func (noRepositoryAuth) Invalidate(string) {}

// secretsFeature puts what a container gets from AWS into its create: environment files, secrets
// and log driver secret options, fetched at every create and never saved (see hooks.go).
type secretsFeature struct{ source SecretSource }

func (secretsFeature) Name() string { return "secrets" }

// TaskHook returns the hook of a task one of whose containers asks for secrets.
func (f secretsFeature) TaskHook(t *task.Task) TaskHook {
	for _, c := range t.Containers {
		if needsSecrets(c) {
			return f
		}
	}
	return nil
}

var _ CreateHook = secretsFeature{}

// BeforeCreate fetches c's secrets and adds them to its options; without a SecretSource a container
// that asks for any cannot be created.
func (f secretsFeature) BeforeCreate(ctx context.Context, r *Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	if !needsSecrets(c) {
		return nil
	}
	if f.source == nil {
		return ErrNoSecretSource
	}
	s, err := f.source.ContainerSecrets(ctx, r.Task(), withoutRouterSecrets(c))
	if err != nil {
		return err
	}
	applySecrets(opts, s)
	return nil
}

// applySecrets adds fetched values to a container's options: the environment files' variables under
// the definition's environment, as in ECS, the secrets' over both, and the log driver secret options
// over the definition's options (whose map, the task's own, is not changed).
func applySecrets(opts *docker.CreateContainerOptions, s ContainerSecrets) {
	opts.Config.Env = mergeEnv(s.FileEnv, opts.Config.Env, s.SecretEnv)
	setLogOptions(opts.HostConfig, s.LogOptions)
}

// setLogOptions sets log driver options on a copy of the options the host config has, which may be
// the task's own map.
func setLogOptions(host *docker.HostConfig, options map[string]string) {
	if len(options) == 0 {
		return
	}
	if host.LogConfig.Config == nil {
		host.LogConfig.Config = map[string]string{}
	} else {
		host.LogConfig.Config = maps.Clone(host.LogConfig.Config)
	}
	maps.Copy(host.LogConfig.Config, options)
}

// needsSecrets reports whether c asks for anything a SecretSource fetches at create time for Docker.
func needsSecrets(c *task.Container) bool {
	return len(c.Secrets) > 0 || len(c.EnvironmentFiles) > 0 || (c.LogConfiguration != nil && len(c.LogConfiguration.SecretOptions) > 0 && !c.LogsToRouter())
}

// withoutRouterSecrets returns c, or a copy of it without its log driver's secret options when it
// logs with awsfirelens: those options belong in its task's FireLens router's configuration (the
// firelens feature fetches them), never in Docker's log options.
func withoutRouterSecrets(c *task.Container) *task.Container {
	if !c.LogsToRouter() || len(c.LogConfiguration.SecretOptions) == 0 {
		return c
	}
	cc, lc := *c, *c.LogConfiguration
	lc.SecretOptions = nil
	cc.LogConfiguration = &lc
	return &cc
}

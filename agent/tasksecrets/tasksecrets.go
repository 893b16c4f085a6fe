// Package tasksecrets is what a task's execution role fetches for its containers, as the engine, its
// features and the task endpoint ask for it: secrets, environment files and log driver secret options
// at create time, private registry credentials at pull time (engine.SecretSource), a FireLens
// router's S3 configuration file and its outputs' secret options, and the role's credentials for the
// Docker daemon's awslogs driver. Which credentials each fetch uses is taskcreds.Chain's
// decision (ForSecrets).
package tasksecrets

import (
	"context"
	"fmt"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/secrets"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// Source fetches what containers get from AWS when they are created, with the credentials
// taskcreds.Chain.ForSecrets chooses for the task. It is safe for concurrent use.
type Source struct {
	fetcher *secrets.Fetcher
	creds   *taskcreds.Chain
}

var _ engine.SecretSource = (*Source)(nil)

// New returns a Source fetching from region (a secret's own region, when its ARN names one, wins)
// with the credentials creds gives. It does no AWS work.
func New(region string, creds *taskcreds.Chain) (*Source, error) {
	f, err := secrets.New(secrets.Config{Region: region})
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return &Source{fetcher: f, creds: creds}, nil
}

func refs(in []task.Secret) []secrets.Ref {
	out := make([]secrets.Ref, len(in))
	for i, s := range in {
		out[i] = secrets.Ref{Name: s.Name, ValueFrom: s.ValueFrom, Provider: s.Provider, Region: s.Region}
	}
	return out
}

// ContainerSecrets fetches c's environment files, secrets and log driver secret options.
func (s *Source) ContainerSecrets(ctx context.Context, t *task.Task, c *task.Container) (engine.ContainerSecrets, error) {
	var out engine.ContainerSecrets
	creds, err := s.creds.ForSecrets(t)
	if err != nil {
		return out, err
	}
	if len(c.EnvironmentFiles) > 0 {
		arns := make([]string, len(c.EnvironmentFiles))
		for i, f := range c.EnvironmentFiles {
			arns[i] = f.Value
		}
		kvs, err := s.fetcher.EnvFiles(ctx, creds, arns)
		if err != nil {
			return out, err
		}
		for _, kv := range kvs {
			out.FileEnv = append(out.FileEnv, kv.Name+"="+kv.Value)
		}
	}
	if len(c.Secrets) > 0 {
		values, err := s.fetcher.Resolve(ctx, creds, refs(c.Secrets))
		if err != nil {
			return out, err
		}
		for _, sec := range c.Secrets {
			out.SecretEnv = append(out.SecretEnv, sec.Name+"="+values[sec.Name])
		}
	}
	if lc := c.LogConfiguration; lc != nil && len(lc.SecretOptions) > 0 {
		values, err := s.fetcher.Resolve(ctx, creds, refs(lc.SecretOptions))
		if err != nil {
			return out, err
		}
		out.LogOptions = values
	}
	return out, nil
}

// LogSecretOptions returns the values of c's logConfiguration.secretOptions by option name, fetched
// with t's execution role: what a FireLens router's configuration gets for an awsfirelens container.
func (s *Source) LogSecretOptions(ctx context.Context, t *task.Task, c *task.Container) (map[string]string, error) {
	if c.LogConfiguration == nil || len(c.LogConfiguration.SecretOptions) == 0 {
		return nil, nil
	}
	creds, err := s.creds.ForSecrets(t)
	if err != nil {
		return nil, err
	}
	return s.fetcher.Resolve(ctx, creds, refs(c.LogConfiguration.SecretOptions))
}

// ConfigFile returns the S3 object arn names, fetched with t's execution role: a FireLens router's
// config-file-value of config-file-type s3.
func (s *Source) ConfigFile(ctx context.Context, t *task.Task, arn string) ([]byte, error) {
	creds, err := s.creds.ForSecrets(t)
	if err != nil {
		return nil, err
	}
	return s.fetcher.File(ctx, creds, "firelens configuration file", arn)
}

// RepositoryAuth returns the pull credentials of a container with repositoryCredentials: the
// username and password in its Secrets Manager secret.
func (s *Source) RepositoryAuth(t *task.Task, c *task.Container) dockerclient.AuthSource {
	return &repositoryAuth{s: s, t: t, rc: *c.RepositoryCredentials}
}

type repositoryAuth struct {
	s  *Source
	t  *task.Task
	rc task.RepositoryCredentials
}

func (a *repositoryAuth) Auth(ctx context.Context, image string) (docker.AuthConfiguration, error) {
	creds, err := a.s.creds.ForSecrets(a.t)
	if err != nil {
		return docker.AuthConfiguration{}, errdefs.Permanent(fmt.Errorf("repository credentials %s: %w", a.rc.CredentialsParameter, err))
	}
	user, pass, err := a.s.fetcher.RegistryCredentials(ctx, creds, a.rc.CredentialsParameter, a.rc.Region)
	if err != nil {
		return docker.AuthConfiguration{}, err
	}
	return docker.AuthConfiguration{Username: user, Password: pass}, nil
}

// Invalidate has nothing to drop: the secret is fetched for every pull.
func (a *repositoryAuth) Invalidate(string) {}

// LogDriverCredentials serves the execution-role credentials of a task with an awslogs container
// that uses them (logsAuthStrategy ExecutionRole) to the Docker daemon's awslogs driver. Other IDs
// are unknown.
type LogDriverCredentials struct {
	Engine *engine.Engine
	Creds  *taskcreds.Chain
}

var _ taskendpoint.CredentialsSource = LogDriverCredentials{}

// TaskCredentials returns the execution role's credentials under id, with the role's ARN, when a
// task's awslogs driver uses them (errdefs.ErrUnavailable while they have not arrived); any other ID
// matches errdefs.ErrNotFound.
func (l LogDriverCredentials) TaskCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	role, ok := l.Engine.LogDriverRole(id)
	if !ok {
		return taskcreds.Credentials{}, errdefs.New(errdefs.ErrNotFound, "no log driver credentials with this ID")
	}
	c, err := l.Creds.ExecutionRoleCredentials(ctx, id)
	if errdefs.IsNotFound(err) {
		// The driver's task holds the ID: its credentials are due from the control plane (after a
		// restart, until ACS resends them), which the endpoint answers as the ECS agent does (503).
		return taskcreds.Credentials{}, errdefs.New(errdefs.ErrUnavailable, "the execution role's credentials have not arrived yet")
	}
	if err != nil {
		return taskcreds.Credentials{}, err
	}
	c.RoleArn = role
	return c, nil
}

package taskcreds

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
)

// ChainConfig is what NewChain needs.
type ChainConfig struct {
	// Store holds the credentials the control plane sent; it is asked first. Required.
	Store *Store
	// Roles, when set, are the roles the agent assumes itself (local mode: *rolecreds.Provider),
	// asked for the IDs the Store does not know.
	Roles Source
	// Local is local mode, where no Amazon ECS requires an execution role: a task with none at all
	// has its secrets, environment files and repository credentials fetched with the host's own AWS
	// credentials. Without it such a task is refused them, as Amazon ECS refuses it.
	Local bool
	// HostCredentials returns the host's own AWS credentials; nil: the AWS SDK's default chain,
	// loaded once, when first needed. Only Local uses it.
	HostCredentials func() (aws.CredentialsProvider, error)
}

// Chain is the agent's one source of task role credentials: the control plane's Store, then the
// roles the agent assumes itself. It is safe for concurrent use.
type Chain struct {
	sources []Source
	local   bool
	host    func() (aws.CredentialsProvider, error)
}

var _ Source = (*Chain)(nil)

// NewChain returns the chain of cfg's sources. It does no I/O.
func NewChain(cfg ChainConfig) *Chain {
	c := &Chain{sources: []Source{cfg.Store}, local: cfg.Local, host: cfg.HostCredentials}
	if cfg.Roles != nil {
		c.sources = append(c.sources, cfg.Roles)
	}
	if c.host == nil {
		c.host = sync.OnceValues(defaultHostCredentials)
	}
	return c
}

// TaskCredentials returns the answer of the first source that knows id; an ID none knows matches
// errdefs.ErrNotFound.
func (c *Chain) TaskCredentials(ctx context.Context, id string) (Credentials, error) {
	return c.first(func(s Source) (Credentials, error) { return s.TaskCredentials(ctx, id) })
}

// ExecutionRoleCredentials returns the answer of the first source that knows id; an ID none knows
// matches errdefs.ErrNotFound.
func (c *Chain) ExecutionRoleCredentials(ctx context.Context, id string) (Credentials, error) {
	return c.first(func(s Source) (Credentials, error) { return s.ExecutionRoleCredentials(ctx, id) })
}

// first asks each source in turn until one answers other than not found.
func (c *Chain) first(ask func(Source) (Credentials, error)) (Credentials, error) {
	err := ErrNoCredentials
	for _, src := range c.sources {
		creds, serr := ask(src)
		if serr == nil || !errdefs.IsNotFound(serr) {
			return creds, serr
		}
		err = serr
	}
	return Credentials{}, err
}

// ErrNoExecutionRole is ForSecrets' answer for a task that has no credentials to fetch its secrets
// with. An errdefs.ErrFailedPrecondition.
var ErrNoExecutionRole = errdefs.New(errdefs.ErrFailedPrecondition,
	"the task's execution role has no credentials (secrets, environment files and repository credentials are fetched with the task's executionRoleArn)")

// ForSecrets returns the credentials a task's secrets, environment files and repository
// credentials are fetched with, as Amazon ECS would fetch them: its execution role's, from the
// chain, read when a fetch is signed and cached until they expire. A task without an execution role
// at all gets the host's own credentials in local mode, and ErrNoExecutionRole otherwise, as does a
// task whose execution role has no credentials ID. It does no I/O but for loading the host's
// configuration the first time.
func (c *Chain) ForSecrets(t *task.Task) (aws.CredentialsProvider, error) {
	if id := t.ExecutionCredentialsID; id != "" {
		return aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
			creds, err := c.ExecutionRoleCredentials(ctx, id)
			if err != nil {
				return aws.Credentials{}, err
			}
			return creds.AWS(), nil
		})), nil
	}
	if !c.local || t.ExecutionRoleArn != "" {
		return nil, ErrNoExecutionRole
	}
	return c.host()
}

// defaultHostCredentials loads the host's AWS configuration and returns its credentials.
func defaultHostCredentials() (aws.CredentialsProvider, error) {
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return nil, fmt.Errorf("load the host's AWS configuration: %w", err)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("the host has no AWS credentials")
	}
	return cfg.Credentials, nil
}

package registryauth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// ExecutionRole names a task's execution role, the credentials the control plane (or the agent, in
// local mode) keeps for it, and what the control plane said of the ECR registry its pulls use.
type ExecutionRole struct {
	TaskArn       string
	RoleArn       string
	CredentialsID string
	// Region and RegistryID name the ECR registry (ACS's ecrAuthData); empty: read from the image's
	// host. EndpointOverride, when set, is the ECR API endpoint to ask (ecrAuthData.endpointOverride).
	Region           string
	RegistryID       string
	EndpointOverride string
}

// RoleCredentials gives the current credentials of execution roles by credentials ID;
// *taskcreds.Chain is the agent's.
type RoleCredentials interface {
	// ExecutionRoleCredentials returns the unexpired credentials of the execution role kept under
	// id. An ID the source does not know, or that names no execution role, matches
	// errdefs.ErrNotFound; credentials that cannot be had now match another class (for example
	// errdefs.ErrUnavailable while they are being fetched). Errors never contain a secret.
	ExecutionRoleCredentials(ctx context.Context, id string) (taskcreds.Credentials, error)
}

// ExecutionRoles hands out AuthSources that fetch ECR tokens with tasks' execution roles. Tokens are
// cached per task, credentials ID, role and registry, refreshed before they (or the credentials they
// were made with) expire, and dropped by TaskRemoved. It is safe for concurrent use.
type ExecutionRoles struct {
	p     *Provider
	creds RoleCredentials
}

// ExecutionRoles returns the execution-role pulls of p, whose role credentials come from creds. It
// does no AWS work.
func (p *Provider) ExecutionRoles(creds RoleCredentials) *ExecutionRoles {
	return &ExecutionRoles{p: p, creds: creds}
}

// For returns the AuthSource of the pulls of a container that asks for its task's execution role.
// An ECR image (by its host, or by the registry ID and region the control plane named) gets a token
// fetched with the role's credentials; any other image gets what Provider.Auth gives it.
func (x *ExecutionRoles) For(role ExecutionRole) AuthSource {
	return &roleAuth{x: x, role: role}
}

// TaskRemoved drops every token fetched for the task. It is idempotent.
func (x *ExecutionRoles) TaskRemoved(taskArn string) {
	x.p.tokens.dropIf(func(k tokenKey) bool { return k.task == taskArn })
}

// roleAuth is the AuthSource of one task's execution role.
type roleAuth struct {
	x    *ExecutionRoles
	role ExecutionRole
}

var _ AuthSource = (*roleAuth)(nil)

// registry returns the ECR registry the role pulls image from, and false when image is not in ECR.
func (a *roleAuth) registry(image string) (string, tokenKey, bool, error) {
	host, err := registryHost(image)
	if err != nil {
		return "", tokenKey{}, false, err
	}
	reg, isECR := parseECR(host)
	if a.role.RegistryID != "" {
		reg.account = a.role.RegistryID
	}
	if a.role.Region != "" {
		reg.region = a.role.Region
	}
	if !isECR && (a.role.RegistryID == "" || a.role.Region == "") {
		return host, tokenKey{}, false, nil
	}
	return host, tokenKey{reg: reg, task: a.role.TaskArn, creds: a.role.CredentialsID, role: a.role.RoleArn,
		endpoint: a.role.EndpointOverride}, true, nil
}

// Auth returns an ECR token fetched with the execution role's credentials for an ECR image, and
// Provider.Auth's answer for any other. Errors: *CannotPullECRContainerError (not retriable) naming
// the image and the role when the task has no execution role, its credentials are not known, or
// STS or ECR refused; *ECRUnreachableError (retriable) when the credentials or ECR cannot be had now;
// ctx's error when it ends first. No error contains a secret.
func (a *roleAuth) Auth(ctx context.Context, image string) (docker.AuthConfiguration, error) {
	host, key, ok, err := a.registry(image)
	if err != nil {
		return docker.AuthConfiguration{}, err
	}
	if !ok {
		return a.x.p.Auth(ctx, image)
	}
	role := a.role.RoleArn
	refused := func(err error) error {
		return &CannotPullECRContainerError{Image: image, Registry: host, Role: role, Err: err}
	}
	if a.role.RoleArn == "" || a.role.CredentialsID == "" {
		return docker.AuthConfiguration{}, refused(errors.New("the task has no execution role to pull with"))
	}
	if key.reg.region == "" {
		return docker.AuthConfiguration{}, refused(errors.New("no region to ask ECR in"))
	}
	var endpoint *string
	if e := a.role.EndpointOverride; e != "" {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return docker.AuthConfiguration{}, refused(fmt.Errorf("ECR endpoint override %q is not an http(s) URL", e))
		}
		endpoint = aws.String(strings.TrimSuffix(e, "/"))
	}
	creds, err := a.x.creds.ExecutionRoleCredentials(ctx, a.role.CredentialsID)
	if err != nil {
		err = fmt.Errorf("execution role credentials %s: %w", taskcreds.ShortID(a.role.CredentialsID), err)
		if errdefs.IsRetriable(err) || errdefs.IsUnavailable(err) {
			return docker.AuthConfiguration{}, &ECRUnreachableError{Image: image, Registry: host, Role: role, Err: err}
		}
		return docker.AuthConfiguration{}, refused(err)
	}
	awsCfg, _, err := a.x.p.sdkConfig(ctx)
	if err != nil {
		return docker.AuthConfiguration{}, refused(err)
	}
	return a.x.p.ecrToken(ctx, image, host, tokenRequest{
		key:      key,
		awsCfg:   awsCfg,
		creds:    aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds.AWS(), nil }),
		endpoint: endpoint,
		role:     role,
		notAfter: creds.Expiration,
	})
}

// Invalidate drops the token of image's registry fetched with this execution role.
func (a *roleAuth) Invalidate(image string) {
	_, key, ok, err := a.registry(image)
	if err != nil {
		return
	}
	if !ok {
		a.x.p.Invalidate(image)
		return
	}
	a.x.p.tokens.drop(key)
}

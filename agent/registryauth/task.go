package registryauth

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	docker "github.com/fsouza/go-dockerclient"
)

// ForTask returns the AuthSource for ECR authentication that came with a task. Its Auth asks ECR
// for a token with the task's registry id, region, endpoint and credentials (falling back to the
// image's account and region, then to Config.AWSRegion), through the Provider's cache, refresh and
// invalidation. Because the task asked explicitly, it works even when lazy detection found AWS
// unreachable, and the region list and include list do not apply; the exclude list does: an
// excluded account gets anonymous credentials and causes no AWS call.
func (p *Provider) ForTask(auth TaskECRAuth) AuthSource {
	s := &taskSource{p: p, auth: auth, identity: defaultIdentity}
	if auth.Credentials != nil {
		if _, ok := auth.Credentials.(*aws.CredentialsCache); !ok {
			s.auth.Credentials = aws.NewCredentialsCache(auth.Credentials)
		}
	}
	return s
}

// taskSource is the AuthSource ForTask returns.
type taskSource struct {
	p    *Provider
	auth TaskECRAuth

	mu       sync.Mutex
	identity string // identity of the credentials last used, for Invalidate
}

var _ AuthSource = (*taskSource)(nil)

// Auth returns an ECR token for image's registry as the task described it; errors as Provider.Auth.
func (s *taskSource) Auth(ctx context.Context, image string) (docker.AuthConfiguration, error) {
	host, err := registryHost(image)
	if err != nil {
		return docker.AuthConfiguration{}, err
	}
	key := s.key(host)
	log := s.p.log.With("image", image, "registry", host)
	if key.account != "" && s.p.cfg.ExcludeAccounts.Has(key.account) {
		log.Debug("pulling ECR image without the task's credentials: its account is excluded", "account", key.account)
		return docker.AuthConfiguration{}, nil
	}
	awsCfg, _, err := s.p.sdkConfig(ctx)
	if err != nil {
		return docker.AuthConfiguration{}, &CannotPullECRContainerError{Image: image, Registry: host, Err: err}
	}
	creds := awsCfg.Credentials
	if s.auth.Credentials != nil {
		c, err := s.auth.Credentials.Retrieve(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return docker.AuthConfiguration{}, fmt.Errorf("ECR credentials for image %q: %w", image, ctx.Err())
			}
			return docker.AuthConfiguration{}, &CannotPullECRContainerError{Image: image, Registry: host,
				Err: fmt.Errorf("retrieve the task's AWS credentials: %w", err)}
		}
		creds = s.auth.Credentials
		key.identity = credentialsIdentity(c.AccessKeyID)
		s.mu.Lock()
		s.identity = key.identity
		s.mu.Unlock()
	}
	return s.p.ecrToken(ctx, image, host, tokenRequest{key: key, awsCfg: awsCfg, creds: creds})
}

// Invalidate drops the cached token Auth would hand out for image.
func (s *taskSource) Invalidate(image string) {
	host, err := registryHost(image)
	if err != nil {
		return
	}
	key := s.key(host)
	s.mu.Lock()
	key.identity = s.identity
	s.mu.Unlock()
	s.p.tokens.drop(key)
}

// key is the cache key for host, identity left as the default.
func (s *taskSource) key(host string) tokenKey {
	reg, _ := parseECR(host)
	k := tokenKey{
		account:  s.auth.RegistryID,
		region:   s.auth.Region,
		fips:     reg.fips,
		endpoint: s.auth.EndpointOverride,
		identity: defaultIdentity,
	}
	if k.account == "" {
		k.account = reg.account
	}
	if k.region == "" {
		k.region = reg.region
	}
	if k.region == "" {
		k.region = s.p.cfg.AWSRegion
	}
	return k
}

package registryauth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	docker "github.com/fsouza/go-dockerclient"
	"golang.org/x/sync/singleflight"

	"github.com/berth-agent/berth/agent/awserr"
)

// tokenKey names a cached token: its registry and, for a token fetched with a task's execution role
// (see ExecutionRoles), the task, the credentials ID, the role and the ECR endpoint asked. The
// host's own tokens have only the registry.
type tokenKey struct {
	reg                         ecrRegistry
	task, creds, role, endpoint string
}

// String names the key of a cached token and of the singleflight fetching it.
func (k tokenKey) String() string {
	return fmt.Sprintf("%s|%s|%t|%s|%s|%s|%s", k.reg.account, k.reg.region, k.reg.fips, k.task, k.creds, k.role, k.endpoint)
}

// token is a decoded ECR authorization token.
type token struct {
	auth      docker.AuthConfiguration
	expiresAt time.Time
	refreshAt time.Time // from then on the token is replaced before it is handed out
}

// tokenRequest is everything one GetAuthorizationToken call needs.
type tokenRequest struct {
	key    tokenKey
	awsCfg aws.Config
	creds  aws.CredentialsProvider
	// endpoint, when set, is the ECR API endpoint to ask instead of the SDK's.
	endpoint *string
	// role is the execution role the credentials are of, "" for the host's own; errors name it.
	role string
	// notAfter, when set, is when the credentials expire: a token is not kept past it.
	notAfter time.Time
}

// tokenCache holds an ECR token per key and shares concurrent fetches of one token.
type tokenCache struct {
	mu     sync.Mutex
	tokens map[tokenKey]token
	flight singleflight.Group
}

func (c *tokenCache) get(k tokenKey) (token, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tokens[k]
	return t, ok
}

// put stores t and drops tokens that have expired.
func (c *tokenCache) put(k tokenKey, t token, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil {
		c.tokens = make(map[tokenKey]token)
	}
	for old, ot := range c.tokens {
		if !now.Before(ot.expiresAt) {
			delete(c.tokens, old)
		}
	}
	c.tokens[k] = t
}

func (c *tokenCache) drop(k tokenKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tokens, k)
}

// dropIf drops every token whose key matches.
func (c *tokenCache) dropIf(match func(tokenKey) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.tokens {
		if match(k) {
			delete(c.tokens, k)
		}
	}
}

// fresh reports whether t can be handed out without a refresh.
func (p *Provider) fresh(t token) bool {
	return p.cfg.Clock.Now().Before(t.refreshAt)
}

// refreshAt returns when a token valid from now until expiresAt is replaced: RefreshMargin before
// it expires, or halfway through its life when that is shorter than twice the margin (a token
// capped by short-lived credentials is still reused).
func (p *Provider) refreshAt(now, expiresAt time.Time) time.Time {
	return expiresAt.Add(-min(p.cfg.RefreshMargin, expiresAt.Sub(now)/2))
}

// ecrToken returns credentials for image from the cache, or fetches them once for all concurrent
// callers asking for the same key. A refresh that fails while the cached token is still valid
// hands out the cached token.
func (p *Provider) ecrToken(ctx context.Context, image, host string, req tokenRequest) (docker.AuthConfiguration, error) {
	if t, ok := p.tokens.get(req.key); ok && p.fresh(t) {
		return t.auth, nil
	}
	ch := p.tokens.flight.DoChan(req.key.String(), func() (any, error) {
		if t, ok := p.tokens.get(req.key); ok && p.fresh(t) {
			return t, nil // another flight refreshed it while this one was being set up
		}
		// The fetch is shared, so one caller giving up must not cancel it for the others.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CallTimeout)
		defer cancel()
		t, err := p.fetchToken(fctx, req)
		if err != nil {
			return nil, err
		}
		p.tokens.put(req.key, t, p.cfg.Clock.Now())
		return t, nil
	})
	var res singleflight.Result
	select {
	case <-ctx.Done():
		return docker.AuthConfiguration{}, fmt.Errorf("ECR credentials for image %q: %w", image, ctx.Err())
	case res = <-ch:
	}
	if res.Err == nil {
		return res.Val.(token).auth, nil
	}
	if t, ok := p.tokens.get(req.key); ok && p.cfg.Clock.Now().Before(t.expiresAt) {
		log := p.log.With("image", image, "registry", host)
		if req.role != "" {
			log = log.With("task", req.key.task, "execution_role", req.role)
		}
		log.Warn("cannot refresh ECR credentials; using the cached ones until they expire",
			"expires_at", t.expiresAt.UTC().Format(time.RFC3339), "error", res.Err)
		return t.auth, nil
	}
	var refused *refusedError
	if errors.As(res.Err, &refused) {
		return docker.AuthConfiguration{}, &CannotPullECRContainerError{Image: image, Registry: host, Role: req.role, Err: refused.err}
	}
	return docker.AuthConfiguration{}, &ECRUnreachableError{Image: image, Registry: host, Role: req.role, Err: res.Err}
}

// fetchToken calls ecr:GetAuthorizationToken and decodes the answer. A refusal (awserr.Refused:
// access denied or another 4xx answer other than throttling) is returned as a *refusedError;
// anything else (network errors, timeouts, throttling, 5xx answers) is worth retrying.
func (p *Provider) fetchToken(ctx context.Context, req tokenRequest) (token, error) {
	if req.creds == nil {
		return token{}, &refusedError{errors.New("no AWS credentials are configured")}
	}
	if _, err := req.creds.Retrieve(ctx); err != nil {
		return token{}, &refusedError{fmt.Errorf("retrieve AWS credentials: %w", err)}
	}
	reg := req.key.reg
	if reg.region == "" {
		return token{}, &refusedError{errors.New("no AWS region to ask ECR in")}
	}
	client := ecr.NewFromConfig(req.awsCfg, func(o *ecr.Options) {
		o.Region = reg.region
		o.Credentials = req.creds
		if reg.fips {
			o.EndpointOptions.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
		}
		if req.endpoint != nil {
			o.BaseEndpoint = req.endpoint
		}
	})
	in := &ecr.GetAuthorizationTokenInput{}
	if reg.account != "" {
		//lint:ignore SA1019 ECR still honours it; it keeps the token request explicit about the registry it is cached for.
		in.RegistryIds = []string{reg.account}
	}
	out, err := client.GetAuthorizationToken(ctx, in)
	if err != nil {
		if awserr.Refused(err) {
			return token{}, &refusedError{err}
		}
		return token{}, err
	}
	if len(out.AuthorizationData) == 0 || out.AuthorizationData[0].AuthorizationToken == nil {
		return token{}, &refusedError{errors.New("ECR answered without authorization data")}
	}
	data := out.AuthorizationData[0]
	user, pass, err := decodeUserPass(aws.ToString(data.AuthorizationToken))
	if err != nil {
		return token{}, &refusedError{fmt.Errorf("ECR authorization token %w", err)}
	}
	now := p.cfg.Clock.Now()
	expiresAt := now.Add(time.Hour) // ECR always says; be conservative if it does not
	if data.ExpiresAt != nil {
		expiresAt = *data.ExpiresAt
	}
	if !req.notAfter.IsZero() && req.notAfter.Before(expiresAt) {
		expiresAt = req.notAfter // the token is not trusted past the credentials it was made with
	}
	server := aws.ToString(data.ProxyEndpoint)
	return token{
		auth:      docker.AuthConfiguration{Username: user, Password: pass, ServerAddress: server},
		expiresAt: expiresAt,
		refreshAt: p.refreshAt(now, expiresAt),
	}, nil
}

// Package registryauth supplies the credentials the pull path hands to the Docker Engine: static
// credentials from ECS_ENGINE_AUTH_TYPE/ECS_ENGINE_AUTH_DATA, and Amazon ECR tokens.
//
// AWS is looked at lazily. Building a Provider does no AWS work and logs nothing about AWS; the
// first time an included ECR image needs credentials, the Provider loads the SDK configuration,
// finds this host's region (configured, or from EC2 instance metadata) and checks that credentials
// can be retrieved — once per process. If that fails it logs one warning and pulls ECR images
// anonymously from then on. CheckRequired makes the same check at start-up for operators who set
// ECS_REGISTRY_REQUIRE=ecr and would rather not start than pull without credentials.
//
// Which ECR images get credentials:
//
//	account in ExcludeAccounts                → anonymous, no AWS call
//	IncludeAccounts set, account not in it    → anonymous, no AWS call
//	ECRRegions configured empty               → anonymous, no AWS call (ECR credentials off)
//	ECRRegions configured, region not in it   → anonymous, no AWS call
//	ECRRegions not configured                 → only the host's region: AWSRegion if set (other
//	                                            regions: no AWS call), else the region IMDS reports
//	AWS unreachable                           → anonymous (one warning per process)
//	otherwise                                 → an ecr:GetAuthorizationToken token, cached per
//	                                            registry and refreshed before it expires
//
// A container whose task asks for its execution role is pulled through ExecutionRoles instead: an
// ECR image gets a token fetched with the role's credentials (from a RoleCredentials source: the
// control plane's store, or the agent's own role provider in local mode), whatever the filters above
// say and without any detection; other images get what Auth gives them.
package registryauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
)

// Defaults for the zero-valued durations of Config.
const (
	DefaultDetectTimeout = 5 * time.Second
	DefaultCallTimeout   = 10 * time.Second
	DefaultRefreshMargin = 30 * time.Minute
)

// RequireECR is the ECS_REGISTRY_REQUIRE value that makes CheckRequired check AWS.
const RequireECR = config.RegistryECR

// Config is what a Provider needs from the agent's configuration.
type Config struct {
	// AuthType and AuthData are ECS_ENGINE_AUTH_TYPE ("", "docker" or "dockercfg") and
	// ECS_ENGINE_AUTH_DATA.
	AuthType string
	AuthData config.Secret

	// AWSRegion is the configured region of this host (AWS_DEFAULT_REGION); "" means ask IMDS.
	AWSRegion string
	// ECRRegions, IncludeAccounts and ExcludeAccounts choose the ECR images that get credentials
	// (see the package doc). ExcludeAccounts is taken as given: the agent's configuration supplies
	// the EKS system accounts as its default.
	ECRRegions      config.ECRRegions
	IncludeAccounts set.Set[string]
	ExcludeAccounts set.Set[string]
	// Require is ECS_REGISTRY_REQUIRE: the registry vendors CheckRequired checks ("ecr").
	Require set.Set[string]

	// DetectTimeout bounds the lazy AWS detection (default DefaultDetectTimeout).
	DetectTimeout time.Duration
	// CallTimeout bounds each GetAuthorizationToken call (default DefaultCallTimeout).
	CallTimeout time.Duration
	// RefreshMargin is how long before its expiry a cached ECR token is replaced (default
	// DefaultRefreshMargin).
	RefreshMargin time.Duration
	// Clock tells the time ECR tokens expire by; nil is the wall clock.
	Clock clockwork.Clock
}

// AuthSource supplies registry credentials for a pull; it is the shape the pull path consumes.
type AuthSource interface {
	// Auth returns credentials for image's registry; the zero AuthConfiguration means anonymous.
	Auth(ctx context.Context, image string) (docker.AuthConfiguration, error)
	// Invalidate drops any cached credentials for image's registry after the registry refused them.
	Invalidate(image string)
}

var _ AuthSource = (*Provider)(nil)

// Provider is the agent's AuthSource. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	log    *logger.Logger
	static map[string]docker.AuthConfiguration

	sdkOnce sync.Once
	sdkCfg  aws.Config
	sdkIMDS *imds.Client
	sdkErr  error

	detect   detector
	warnOnce sync.Once
	tokens   tokenCache
}

// New parses the static auth data and returns a Provider. It does no AWS work and logs nothing.
// A parse error wraps ErrInvalidConfig, names the registry key and never contains the data.
func New(cfg Config, log *logger.Logger) (*Provider, error) {
	static, err := parseStaticAuth(cfg.AuthType, cfg.AuthData.Reveal())
	if err != nil {
		return nil, err
	}
	if cfg.DetectTimeout <= 0 {
		cfg.DetectTimeout = DefaultDetectTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.RefreshMargin <= 0 {
		cfg.RefreshMargin = DefaultRefreshMargin
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if log == nil {
		log = logger.Nop()
	}
	return &Provider{cfg: cfg, log: log, static: static}, nil
}

// Auth returns credentials for image's registry: the static credentials configured for its host
// (these win, even for an ECR host, and need no AWS), an ECR token for an included ECR image, and
// anonymous (the zero value, nil error) otherwise — including for ECR images when AWS is
// unreachable. Errors: one matching errdefs.ErrInvalidArgument (not retriable) for an unreadable
// image, *CannotPullECRContainerError when ECR refuses, *ECRUnreachableError (retriable) when ECR
// cannot be reached, and the context's error when ctx ends first. Safe for concurrent use.
func (p *Provider) Auth(ctx context.Context, image string) (docker.AuthConfiguration, error) {
	host, err := registryHost(image)
	if err != nil {
		return docker.AuthConfiguration{}, err
	}
	if auth, ok := p.static[host]; ok {
		return auth, nil
	}
	reg, ok := parseECR(host)
	if !ok {
		return docker.AuthConfiguration{}, nil
	}
	log := p.log.With("image", image, "registry", host)
	if reason := p.accountExcluded(reg.account); reason != "" {
		log.Debug("pulling ECR image without credentials: "+reason, "account", reg.account)
		return docker.AuthConfiguration{}, nil
	}
	if reason := p.regionExcludedByConfig(reg.region); reason != "" {
		log.Debug("pulling ECR image without credentials: "+reason, "region", reg.region)
		return docker.AuthConfiguration{}, nil
	}
	env, err := p.detected(ctx)
	if err != nil {
		return docker.AuthConfiguration{}, fmt.Errorf("ECR credentials for image %q: %w", image, err)
	}
	if env.err != nil {
		p.warnOnce.Do(func() {
			log.Warn("ECR credentials are unavailable because AWS is not reachable; pulling ECR images without credentials "+
				"(set ECS_REGISTRY_REQUIRE=ecr to make this fatal at start-up)", "error", env.err)
		})
		return docker.AuthConfiguration{}, nil
	}
	if !p.cfg.ECRRegions.Configured && reg.region != env.region {
		log.Debug("pulling ECR image without credentials: its region is not this host's region",
			"region", reg.region, "host_region", env.region)
		return docker.AuthConfiguration{}, nil
	}
	return p.ecrToken(ctx, image, host, tokenRequest{
		key:    tokenKey{reg: reg},
		awsCfg: env.cfg,
		creds:  env.cfg.Credentials,
	})
}

// Invalidate drops the cached ECR token of image's registry so the next Auth fetches a new one.
// It is a no-op for static credentials, anonymous registries and unreadable references.
func (p *Provider) Invalidate(image string) {
	host, err := registryHost(image)
	if err != nil {
		return
	}
	if _, ok := p.static[host]; ok {
		return
	}
	if reg, ok := parseECR(host); ok {
		p.tokens.drop(tokenKey{reg: reg})
	}
}

// accountExcluded returns why account gets no credentials, or "".
func (p *Provider) accountExcluded(account string) string {
	if p.cfg.ExcludeAccounts.Has(account) {
		return "its account is excluded"
	}
	if p.cfg.IncludeAccounts.Len() > 0 && !p.cfg.IncludeAccounts.Has(account) {
		return "its account is not included"
	}
	return ""
}

// regionExcludedByConfig returns why region gets no credentials according to configuration alone
// (no detection needed), or "".
func (p *Provider) regionExcludedByConfig(region string) string {
	switch {
	case p.cfg.ECRRegions.Configured && p.cfg.ECRRegions.Regions.Len() == 0:
		return "ECR credentials are turned off (no ECR regions configured)"
	case p.cfg.ECRRegions.Configured && !p.cfg.ECRRegions.Regions.Has(region):
		return "its region is not a configured ECR region"
	case !p.cfg.ECRRegions.Configured && p.cfg.AWSRegion != "" && region != p.cfg.AWSRegion:
		return "its region is not this host's region"
	}
	return ""
}

// CheckRequired checks, within ctx, every registry vendor in Config.Require: for "ecr", that this
// host's region is known (configured or from IMDS) and AWS credentials can be retrieved. It returns
// nil without any AWS work when nothing is required. A successful check counts as the lazy
// detection; a failed one is not remembered, so a later pull detects again.
func (p *Provider) CheckRequired(ctx context.Context) error {
	for _, vendor := range set.Sorted(p.cfg.Require) {
		if vendor != RequireECR {
			return fmt.Errorf("registry requirement %q: unknown registry vendor (only %q is known)", vendor, RequireECR)
		}
		if p.cfg.ECRRegions.Configured && p.cfg.ECRRegions.Regions.Len() == 0 {
			return fmt.Errorf("registry requirement %q: ECR credentials are turned off (no ECR regions configured)", vendor)
		}
		cctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, p.cfg.DetectTimeout)
			defer cancel()
		}
		env, err := p.detect.get(cctx, func() detection { return p.detectAWS(cctx) }, false)
		if err == nil {
			err = env.err
		}
		if err != nil {
			return fmt.Errorf("registry requirement %q: AWS is not reachable: %w", vendor, err)
		}
	}
	return nil
}

// detected returns the outcome of the once-per-process AWS detection, running it if no one has.
// The detection is bounded by DetectTimeout and is not cut short by ctx; only waiting for it is.
func (p *Provider) detected(ctx context.Context) (detection, error) {
	return p.detect.get(ctx, func() detection {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.DetectTimeout)
		defer cancel()
		return p.detectAWS(dctx)
	}, true)
}

// detection is the outcome of checking AWS: the SDK configuration and this host's region, or why
// AWS is not usable.
type detection struct {
	cfg    aws.Config
	region string // "" when the configured region list made asking IMDS unnecessary
	err    error
}

// detectAWS loads the SDK configuration, finds this host's region and retrieves credentials once.
func (p *Provider) detectAWS(ctx context.Context) detection {
	awsCfg, imdsClient, err := p.sdkConfig(ctx)
	if err != nil {
		return detection{err: err}
	}
	region := p.cfg.AWSRegion
	if region == "" && !(p.cfg.ECRRegions.Configured && p.cfg.ECRRegions.Regions.Len() > 0) {
		r, err := imdsRegion(ctx, imdsClient)
		if err != nil {
			return detection{err: fmt.Errorf("no region configured and EC2 instance metadata did not give one: %w", err)}
		}
		region = r
	}
	if awsCfg.Credentials == nil {
		return detection{err: errors.New("no AWS credentials are configured")}
	}
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		return detection{err: fmt.Errorf("retrieve AWS credentials: %w", err)}
	}
	if awsCfg.Region == "" {
		awsCfg.Region = region
	}
	p.log.Info("AWS is reachable; ECR images get credentials", "host_region", region)
	return detection{cfg: awsCfg, region: region}
}

// imdsRegion asks EC2 instance metadata (placement/region) for this host's region.
func imdsRegion(ctx context.Context, client *imds.Client) (string, error) {
	out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: "placement/region"})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 256))
	if err != nil {
		return "", fmt.Errorf("read region: %w", err)
	}
	region := strings.TrimSpace(string(b))
	if region == "" {
		return "", errors.New("empty region")
	}
	return region, nil
}

// quickIMDSRetries makes IMDS calls give up fast: IMDS is a link-local service that either answers
// at once or is not there, and the SDK's default (three attempts, up to a second apart, each
// fetching a session token with its own retries) turns "not there" into seconds of waiting.
func quickIMDSRetries(o *imds.Options) {
	o.Retryer = awsretry.NewStandard(func(so *awsretry.StandardOptions) {
		so.MaxAttempts = 3
		so.Backoff = awsretry.NewExponentialJitterBackoff(100 * time.Millisecond)
	})
	o.DisableDefaultMaxBackoff = true
}

// sdkConfig loads the AWS SDK's default configuration (environment, shared files) once, with an
// IMDS client that honours AWS_EC2_METADATA_SERVICE_ENDPOINT and AWS_EC2_METADATA_DISABLED and
// serves both the region lookup and the instance-role credentials.
func (p *Provider) sdkConfig(ctx context.Context) (aws.Config, *imds.Client, error) {
	p.sdkOnce.Do(func() {
		ctx := context.WithoutCancel(ctx)
		var opts []func(*awsconfig.LoadOptions) error
		if p.cfg.AWSRegion != "" {
			opts = append(opts, awsconfig.WithRegion(p.cfg.AWSRegion))
		}
		base, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			p.sdkErr = fmt.Errorf("load AWS SDK configuration: %w", err)
			return
		}
		p.sdkIMDS = imds.NewFromConfig(base, quickIMDSRetries)
		opts = append(opts, awsconfig.WithEC2RoleCredentialOptions(func(o *ec2rolecreds.Options) { o.Client = p.sdkIMDS }))
		p.sdkCfg, err = awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			p.sdkErr = fmt.Errorf("load AWS SDK configuration: %w", err)
		}
	})
	return p.sdkCfg, p.sdkIMDS, p.sdkErr
}

// detector runs the AWS detection at most once at a time and remembers its outcome.
type detector struct {
	mu      sync.Mutex
	done    bool
	result  detection
	running chan struct{} // closed when the running detection ends; nil when none runs
}

// get returns the remembered outcome, or runs run (one caller at a time; the others wait, or give
// up when ctx ends). A failed outcome is remembered only when keepFailure is set. The error is
// ctx's, when ctx ended while waiting.
func (d *detector) get(ctx context.Context, run func() detection, keepFailure bool) (detection, error) {
	for {
		d.mu.Lock()
		if d.done {
			r := d.result
			d.mu.Unlock()
			return r, nil
		}
		if d.running == nil {
			ch := make(chan struct{})
			d.running = ch
			d.mu.Unlock()
			r := run()
			d.mu.Lock()
			if r.err == nil || keepFailure {
				d.done, d.result = true, r
			}
			d.running = nil
			close(ch)
			d.mu.Unlock()
			return r, nil
		}
		ch := d.running
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return detection{}, ctx.Err()
		}
	}
}

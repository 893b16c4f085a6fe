// Package ecsclient is Berth's client of the agent-facing ECS API: it registers the container
// instance, discovers the ACS endpoint, drains the instance and submits task, container and
// attachment state changes (agent/controlplane decides what to send and when). ECS API errors become
// typed errors here (see APIError and the Err* classes); nothing outside this package looks at ECS
// error codes.
package ecsclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
)

// DefaultPollEndpointTTL is how long DiscoverPollEndpoint caches an endpoint when Config leaves it 0.
const DefaultPollEndpointTTL = 20 * time.Minute

// DefaultCluster is the cluster ECS uses when none is named.
const DefaultCluster = "default"

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// Region is the AWS region; empty means the SDK's default chain (AWS_REGION, shared config).
	Region string
	// Endpoint overrides the ECS endpoint (ECS_BACKEND_HOST), e.g. "https://ecs.example:443".
	// A value without a scheme gets "https://".
	Endpoint string
	// Credentials signs requests; nil means the SDK's default credential chain.
	Credentials aws.CredentialsProvider
	// Cluster is the cluster name or ARN; empty means "default".
	Cluster string
	// Logger receives the client's records; nil discards them.
	Logger *logger.Logger
	// NewBackoff returns a fresh backoff for one retry loop; nil means 250ms → 2min, ×1.5, 20 % jitter.
	NewBackoff func() retry.Backoff
	// Retrier runs the retry loops; its Clock drives backoff waits.
	Retrier retry.Retrier
	// Clock is the clock of the poll-endpoint cache; nil is the wall clock. (Retrier.Clock drives
	// backoff waits.)
	Clock clockwork.Clock
	// PollEndpointTTL is how long a discovered poll endpoint is reused; 0 means DefaultPollEndpointTTL.
	PollEndpointTTL time.Duration
	// ExcludeIPv6PortBindings leaves IPv6 host bindings out of the network bindings of state changes
	// (ECS_EXCLUDE_IPV6_PORTBINDING).
	ExcludeIPv6PortBindings bool
	// UserAgent, when set, is the User-Agent of every call (see UserAgent); empty keeps the SDK's.
	UserAgent string
}

// Client calls the agent-facing ECS API for one cluster. It is safe for concurrent use.
type Client struct {
	api        *ecs.Client
	cluster    string
	noIPv6     bool // Config.ExcludeIPv6PortBindings
	log        *logger.Logger
	newBackoff func() retry.Backoff
	retrier    retry.Retrier
	clock      clockwork.Clock
	ttl        time.Duration

	mu    sync.Mutex
	polls map[string]cachedEndpoint // by container instance ARN
}

// cachedEndpoint is one DiscoverPollEndpoint answer: the ACS and TCS endpoints.
type cachedEndpoint struct {
	endpoint  string
	telemetry string
	expires   time.Time
}

// New builds a Client. It resolves the region and the credential chain but makes no request.
// The SDK's own retries are off: every retry is this package's, driven by Config.NewBackoff.
func New(ctx context.Context, cfg Config) (*Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("ecs client: load aws config: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("ecs client: no region configured")
	}
	endpoint := cfg.Endpoint
	if endpoint != "" && !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	optFns := []func(*ecs.Options){func(o *ecs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.Retryer = aws.NopRetryer{}
	}}
	if cfg.UserAgent != "" {
		optFns = append(optFns, withUserAgent(cfg.UserAgent))
	}
	api := ecs.NewFromConfig(awsCfg, optFns...)
	c := &Client{
		api:        api,
		cluster:    cfg.Cluster,
		noIPv6:     cfg.ExcludeIPv6PortBindings,
		log:        cfg.Logger,
		newBackoff: cfg.NewBackoff,
		retrier:    cfg.Retrier,
		clock:      cfg.Clock,
		ttl:        cfg.PollEndpointTTL,
		polls:      make(map[string]cachedEndpoint),
	}
	if c.cluster == "" {
		c.cluster = DefaultCluster
	}
	if c.newBackoff == nil {
		c.newBackoff = func() retry.Backoff {
			return retry.NewExponentialBackoff(250*time.Millisecond, 2*time.Minute, 0.2, 1.5)
		}
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.ttl <= 0 {
		c.ttl = DefaultPollEndpointTTL
	}
	return c, nil
}

// Cluster returns the cluster the client works on.
func (c *Client) Cluster() string { return c.cluster }

// retry runs fn with a fresh backoff until it succeeds, fails permanently or ctx is done.
func (c *Client) retry(ctx context.Context, fn func() error) error {
	return c.retrier.Retry(ctx, c.newBackoff(), fn)
}

// DiscoverPollEndpoint returns the ACS endpoint for the instance. A result is reused for the
// client's TTL; errors are not cached. It makes one attempt; errors are *APIError.
func (c *Client) DiscoverPollEndpoint(ctx context.Context, instanceArn string) (string, error) {
	e, err := c.discover(ctx, instanceArn)
	return e.endpoint, err
}

// TelemetryEndpoint returns the TCS (telemetry) endpoint for the instance, from the same cached
// DiscoverPollEndpoint call as DiscoverPollEndpoint. A response without one is an error.
func (c *Client) TelemetryEndpoint(ctx context.Context, instanceArn string) (string, error) {
	e, err := c.discover(ctx, instanceArn)
	if err != nil {
		return "", err
	}
	if e.telemetry == "" {
		return "", fmt.Errorf("ecs DiscoverPollEndpoint %q: response has no telemetryEndpoint", instanceArn)
	}
	return e.telemetry, nil
}

// discover returns the instance's cached endpoints, asking ECS when there are none or they expired.
func (c *Client) discover(ctx context.Context, instanceArn string) (cachedEndpoint, error) {
	now := c.clock.Now()
	c.mu.Lock()
	if e, ok := c.polls[instanceArn]; ok && now.Before(e.expires) {
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()

	out, err := c.api.DiscoverPollEndpoint(ctx, &ecs.DiscoverPollEndpointInput{
		Cluster:           aws.String(c.cluster),
		ContainerInstance: aws.String(instanceArn),
	})
	if err != nil {
		return cachedEndpoint{}, translate("DiscoverPollEndpoint", err)
	}
	endpoint := aws.ToString(out.Endpoint)
	if endpoint == "" {
		return cachedEndpoint{}, fmt.Errorf("ecs DiscoverPollEndpoint %q: response has no endpoint", instanceArn)
	}
	e := cachedEndpoint{endpoint: endpoint, telemetry: aws.ToString(out.TelemetryEndpoint), expires: now.Add(c.ttl)}
	c.mu.Lock()
	c.polls[instanceArn] = e
	c.mu.Unlock()
	return e, nil
}

// ForgetPollEndpoint drops the cached endpoint of the instance so the next DiscoverPollEndpoint
// asks ECS again (for example after the ACS connection failed).
func (c *Client) ForgetPollEndpoint(instanceArn string) {
	c.mu.Lock()
	delete(c.polls, instanceArn)
	c.mu.Unlock()
}

// Drain sets the instance's status to DRAINING so ECS moves its tasks away. It retries retriable
// errors until ctx is done; a failure ECS reports for the instance is returned as an error.
func (c *Client) Drain(ctx context.Context, instanceArn string) error {
	err := c.retry(ctx, func() error {
		out, err := c.api.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{
			Cluster:            aws.String(c.cluster),
			ContainerInstances: []string{instanceArn},
			Status:             types.ContainerInstanceStatusDraining,
		})
		if err != nil {
			return translate("UpdateContainerInstancesState", err)
		}
		if len(out.Failures) > 0 {
			f := out.Failures[0]
			return errdefs.Permanent(fmt.Errorf("ecs UpdateContainerInstancesState %q: %s: %s",
				aws.ToString(f.Arn), aws.ToString(f.Reason), aws.ToString(f.Detail)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drain %q: %w", instanceArn, err)
	}
	c.log.Info("container instance draining", "container_instance", instanceArn)
	return nil
}

// AttachmentStatus is the status of an attachment as ECS names it.
type AttachmentStatus string

// Attachment statuses the agent reports.
const (
	AttachmentAttached AttachmentStatus = "ATTACHED"
	AttachmentDetached AttachmentStatus = "DETACHED"
)

// AttachmentStateChange is one attachment (an ENI) whose status changed.
type AttachmentStateChange struct {
	AttachmentArn string
	Status        AttachmentStatus
}

// SubmitAttachmentStateChanges reports attachment changes. It makes one attempt; errors are
// *APIError (errdefs.IsRetriable says whether to try again).
func (c *Client) SubmitAttachmentStateChanges(ctx context.Context, changes []AttachmentStateChange) error {
	in := &ecs.SubmitAttachmentStateChangesInput{Cluster: aws.String(c.cluster)}
	for _, a := range changes {
		in.Attachments = append(in.Attachments, types.AttachmentStateChange{
			AttachmentArn: aws.String(a.AttachmentArn),
			Status:        aws.String(string(a.Status)),
		})
	}
	_, err := c.api.SubmitAttachmentStateChanges(ctx, in)
	return translate("SubmitAttachmentStateChanges", err)
}

// Package imds is what the agent learns about its EC2 instance from the instance metadata
// service (IMDSv2), as the Amazon ECS agent does: the region, the signed instance identity document,
// the attributes registered with ECS, the instance tags, the spot interruption notice and the Auto
// Scaling target lifecycle state (warm pools).
//
// Every request goes through the AWS SDK's IMDS client, IMDSv2 only: a session token is fetched
// first (PUT /latest/api/token) and sent with every GET; there is no fallback to IMDSv1. The client
// honours AWS_EC2_METADATA_SERVICE_ENDPOINT (unless Options.Endpoint overrides it) and
// AWS_EC2_METADATA_DISABLED=true (every call then fails with ErrDisabled and nothing is sent). The
// shared AWS config file is not read. An IMDS that does not answer fails a call within a few seconds:
// each attempt is cut at 1 s (connect at 250 ms), with 3 attempts and a backoff of at most 100 ms, so
// about 3.2 s for an IMDS that accepts connections and never answers, well under 1 s for one that
// refuses them.
//
// Errors are *Error values, classified with errdefs: a 404 is errdefs.ErrNotFound, 401/403
// errdefs.ErrUnauthorized, 429 errdefs.ErrResourceExhausted, 5xx and no answer at all
// errdefs.ErrUnavailable, a body that does not parse ErrBadResponse (errdefs.ErrInvalidArgument). A
// refused session token request is classified by its status the same way, except 404 and 405 (no
// IMDSv2 there), which are errdefs.ErrFailedPrecondition; Error.Token says so.
//
// Polling (WatchSpot, WaitInService):
//
//	WatchSpot:      poll spot/instance-action ──404 / error──▶ wait interval ──▶ poll ...
//	                                          ──notice──────▶ onNotice(action), return
//	WaitInService:  poll target-lifecycle-state ──404 / other state / 429 / 5xx──▶ wait interval ──▶ poll ...
//	                                            ──"InService"──▶ return nil
//	                                            ──no answer, 401, 403, ...──▶ return the error
package imds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	sdkimds "github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
)

// Attribute names the ECS agent's registration carries for an EC2 instance.
const (
	AttrInstanceType     = "ecs.instance-type"
	AttrAvailabilityZone = "ecs.availability-zone"
	AttrAMIID            = "ecs.ami-id"
	AttrCPUArchitecture  = "ecs.cpu-architecture"
	AttrVPCID            = "ecs.vpc-id"
	AttrSubnetID         = "ecs.subnet-id"
	AttrOutpostARN       = "ecs.outpost-arn"
)

// StateInService is the Auto Scaling target lifecycle state of an instance going into service.
const StateInService = "InService"

// Polling intervals of the Amazon ECS agent, used when WatchSpot or WaitInService get a
// non-positive interval.
const (
	// DefaultSpotInterval: the ECS agent polls spot/instance-action every second
	// (ECS_ENABLE_SPOT_INSTANCE_DRAINING).
	DefaultSpotInterval = time.Second
	// DefaultInServiceInterval: the ECS agent polls the target lifecycle state every minute
	// (ECS_WARM_POOLS_CHECK).
	DefaultInServiceInterval = time.Minute
)

// Timeouts of one call.
const (
	attemptTimeout = time.Second
	maxAttempts    = 3
	maxBackoff     = 100 * time.Millisecond
	maxBody        = 64 << 10
	// DefaultEndpoint is where the SDK finds IMDS when neither Options.Endpoint nor
	// AWS_EC2_METADATA_SERVICE_ENDPOINT says otherwise.
	DefaultEndpoint = "http://169.254.169.254"

	tokenPath   = "/latest/api/token"
	envEndpoint = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
	envDisabled = "AWS_EC2_METADATA_DISABLED"
)

// Package sentinels, each within an errdefs class.
var (
	// ErrDisabled: AWS_EC2_METADATA_DISABLED=true; no request was sent. An errdefs.ErrFailedPrecondition.
	ErrDisabled = errdefs.New(errdefs.ErrFailedPrecondition, "instance metadata service is disabled ("+envDisabled+"=true)")
	// ErrTagsNotEnabled: meta-data/tags/instance/ answered 404, so instance metadata tags are off for
	// this instance. An errdefs.ErrFailedPrecondition.
	ErrTagsNotEnabled = errdefs.New(errdefs.ErrFailedPrecondition, "instance metadata tags are not enabled for this instance")
	// ErrBadResponse: IMDS answered 200 with a body that does not parse or is empty. An
	// errdefs.ErrInvalidArgument.
	ErrBadResponse = errdefs.New(errdefs.ErrInvalidArgument, "malformed instance metadata response")
)

// Error is the error of a failed IMDS request: which path, at which endpoint, the HTTP status if
// there was an answer, and its class (an errdefs class or a sentinel of this package).
type Error struct {
	Path       string // e.g. "meta-data/placement/region" or "dynamic/instance-identity/document"
	Endpoint   string
	StatusCode int   // 0 when IMDS did not answer
	Token      bool  // the status answered the IMDSv2 session token request, not the GET
	Class      error // matched by errors.Is
	Err        error // the underlying error, if any
}

// Error says which path failed and why.
func (e *Error) Error() string {
	switch {
	case errors.Is(e.Class, ErrDisabled):
		return fmt.Sprintf("get %s: %v", e.Path, e.Class)
	case errors.Is(e.Class, ErrBadResponse):
		return fmt.Sprintf("get %s: %v: %v", e.Path, e.Class, e.Err)
	case e.StatusCode != 0:
		s := fmt.Sprintf("get %s: instance metadata service at %s answered %d %s", e.Path, e.Endpoint, e.StatusCode, http.StatusText(e.StatusCode))
		if e.Token {
			s += " to the IMDSv2 session token request (PUT " + tokenPath + ")"
		}
		if errors.Is(e.Class, ErrTagsNotEnabled) {
			s += ": " + e.Class.Error()
		}
		return s
	case e.Class == nil:
		return fmt.Sprintf("get %s: %v", e.Path, e.Err)
	default:
		return fmt.Sprintf("get %s: instance metadata service at %s did not answer: %v", e.Path, e.Endpoint, e.Err)
	}
}

// Unwrap returns the class and the underlying error, so errors.Is and errors.As find both.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Class != nil {
		errs = append(errs, e.Class)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// HTTPClient sends one HTTP request; *http.Client is one.
type HTTPClient interface {
	Do(*http.Request) (*http.Response, error)
}

// Options configures New. Zero values take the defaults.
type Options struct {
	// Endpoint overrides AWS_EC2_METADATA_SERVICE_ENDPOINT and the default http://169.254.169.254.
	Endpoint string
	// HTTPClient sends the requests; nil means the SDK's client with 1 s attempts.
	HTTPClient HTTPClient
	// Clock paces WatchSpot and WaitInService; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives the pollers' records; nil discards them.
	Logger *logger.Logger
}

// Client reads this instance's metadata. It is safe for concurrent use; it caches nothing but the
// IMDSv2 session token.
type Client struct {
	sdk      *sdkimds.Client
	endpoint string
	disabled bool
	clock    clockwork.Clock
	log      *logger.Logger
}

// New returns a client; it does no I/O. It reads AWS_EC2_METADATA_SERVICE_ENDPOINT and
// AWS_EC2_METADATA_DISABLED now.
func New(opts Options) *Client {
	c := &Client{
		endpoint: opts.Endpoint,
		disabled: strings.EqualFold(os.Getenv(envDisabled), "true"),
		clock:    opts.Clock,
		log:      opts.Logger,
	}
	if c.endpoint == "" {
		c.endpoint = os.Getenv(envEndpoint)
	}
	if c.endpoint == "" {
		c.endpoint = DefaultEndpoint
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.log == nil {
		c.log = logger.Nop()
	}
	var httpClient sdkimds.HTTPClient = opts.HTTPClient
	if opts.HTTPClient == nil {
		// The SDK sets a 250 ms connect timeout on its own buildable client; this caps the whole
		// attempt.
		httpClient = awshttp.NewBuildableClient().WithTimeout(attemptTimeout)
	}
	httpClient = tokenRecorder{next: httpClient}
	c.sdk = sdkimds.New(sdkimds.Options{
		Endpoint:   opts.Endpoint, // "" lets the SDK read AWS_EC2_METADATA_SERVICE_ENDPOINT
		HTTPClient: httpClient,
		Retryer: awsretry.NewStandard(func(so *awsretry.StandardOptions) {
			so.MaxAttempts = maxAttempts
			so.Backoff = awsretry.NewExponentialJitterBackoff(maxBackoff)
		}),
		DisableDefaultMaxBackoff: true,
		EnableFallback:           aws.FalseTernary, // IMDSv2 only
	})
	return c
}

// Endpoint returns the IMDS endpoint the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

// get returns the body of path ("meta-data/..." or "dynamic/..."), or an *Error.
func (c *Client) get(ctx context.Context, path string) (string, error) {
	if c.disabled {
		return "", &Error{Path: path, Endpoint: c.endpoint, Class: ErrDisabled}
	}
	var body io.ReadCloser
	var err error
	call := &callState{}
	ctx = context.WithValue(ctx, callKey{}, call)
	if p, ok := strings.CutPrefix(path, "dynamic/"); ok {
		var out *sdkimds.GetDynamicDataOutput
		if out, err = c.sdk.GetDynamicData(ctx, &sdkimds.GetDynamicDataInput{Path: p}); err == nil {
			body = out.Content
		}
	} else {
		var out *sdkimds.GetMetadataOutput
		if out, err = c.sdk.GetMetadata(ctx, &sdkimds.GetMetadataInput{Path: strings.TrimPrefix(path, "meta-data/")}); err == nil {
			body = out.Content
		}
	}
	if err != nil {
		return "", c.classify(ctx, path, call, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxBody))
	if err != nil {
		return "", &Error{Path: path, Endpoint: c.endpoint, Class: errdefs.ErrUnavailable, Err: fmt.Errorf("read body: %w", err)}
	}
	return string(b), nil
}

// callKey keys the *callState of one get in the request context.
type callKey struct{}

// callState is what tokenRecorder saw during one get.
type callState struct {
	mu          sync.Mutex
	tokenStatus int // the last non-200 status of a token request
}

var (
	_ HTTPClient         = (*http.Client)(nil)
	_ sdkimds.HTTPClient = tokenRecorder{}
)

// tokenRecorder notes the status of a refused token request in the call's state: the SDK's error
// for a failed token fetch does not unwrap to its HTTP response error.
type tokenRecorder struct{ next sdkimds.HTTPClient }

// Do sends req and records a token request's non-200 status.
func (r tokenRecorder) Do(req *http.Request) (*http.Response, error) {
	resp, err := r.next.Do(req)
	if err == nil && req.Method == http.MethodPut && req.URL.Path == tokenPath && resp.StatusCode != http.StatusOK {
		if call, ok := req.Context().Value(callKey{}).(*callState); ok {
			call.mu.Lock()
			call.tokenStatus = resp.StatusCode
			call.mu.Unlock()
		}
	}
	return resp, err
}

// classify turns an SDK error into an *Error with its class.
func (c *Client) classify(ctx context.Context, path string, call *callState, err error) error {
	e := &Error{Path: path, Endpoint: c.endpoint, Err: err}
	call.mu.Lock()
	tokenStatus := call.tokenStatus
	call.mu.Unlock()
	var re *smithyhttp.ResponseError
	switch {
	case errors.As(err, &re) && re.HTTPStatusCode() != 0:
		e.StatusCode = re.HTTPStatusCode()
		e.Class = statusClass(e.StatusCode)
	case tokenStatus != 0:
		e.StatusCode, e.Token = tokenStatus, true
		e.Class = statusClass(e.StatusCode)
		if tokenStatus == http.StatusNotFound || tokenStatus == http.StatusMethodNotAllowed {
			// No IMDSv2 here: not "this path does not exist".
			e.Class = errdefs.ErrFailedPrecondition
		}
	case ctx.Err() != nil:
		// The caller gave up: no class, context.Canceled or DeadlineExceeded says it.
		e.Err = ctx.Err()
	default:
		e.Class = errdefs.ErrUnavailable
	}
	return e
}

// statusClass maps an HTTP status of IMDS to an errdefs class.
func statusClass(code int) error {
	switch {
	case code == http.StatusNotFound:
		return errdefs.ErrNotFound
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return errdefs.ErrUnauthorized
	case code == http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	case code == http.StatusBadRequest:
		return errdefs.ErrInvalidArgument
	default:
		return errdefs.ErrUnavailable
	}
}

// bad returns the ErrBadResponse error of path.
func (c *Client) bad(path string, err error) error {
	return &Error{Path: path, Endpoint: c.endpoint, Class: ErrBadResponse, Err: err}
}

// getValue returns the trimmed, non-empty body of path.
func (c *Client) getValue(ctx context.Context, path string) (string, error) {
	s, err := c.get(ctx, path)
	if err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", c.bad(path, errors.New("empty body"))
	}
	return s, nil
}

// Region returns this instance's region (meta-data/placement/region).
func (c *Client) Region(ctx context.Context) (string, error) {
	return c.getValue(ctx, "meta-data/placement/region")
}

// AvailabilityZoneID returns the ID of this instance's availability zone, the same zone in every
// account (meta-data/placement/availability-zone-id, e.g. euw1-az2): task metadata v4's
// AvailabilityZoneID.
func (c *Client) AvailabilityZoneID(ctx context.Context) (string, error) {
	return c.getValue(ctx, "meta-data/placement/availability-zone-id")
}

// Identity is the instance identity document, as IMDS served it and signed, with the fields the
// agent uses.
type Identity struct {
	Document  string `json:"-"` // the JSON document, verbatim: it is what ECS registration sends
	Signature string `json:"-"` // its signature (dynamic/instance-identity/signature)

	InstanceID       string `json:"instanceId"`
	Region           string `json:"region"`
	AvailabilityZone string `json:"availabilityZone"`
	InstanceType     string `json:"instanceType"`
	ImageID          string `json:"imageId"`
	AccountID        string `json:"accountId"`
	Architecture     string `json:"architecture"`
}

// Identity returns the instance identity document and its signature. A document that does not parse
// or has no instanceId is ErrBadResponse.
func (c *Client) Identity(ctx context.Context) (Identity, error) {
	const docPath, sigPath = "dynamic/instance-identity/document", "dynamic/instance-identity/signature"
	doc, err := c.get(ctx, docPath)
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := json.Unmarshal([]byte(doc), &id); err != nil {
		return Identity{}, c.bad(docPath, err)
	}
	if id.InstanceID == "" {
		return Identity{}, c.bad(docPath, errors.New("no instanceId"))
	}
	id.Document = doc
	if id.Signature, err = c.getValue(ctx, sigPath); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Attributes returns the EC2 attributes of this instance as ECS registration carries them:
// ecs.instance-type, ecs.availability-zone, ecs.ami-id and ecs.cpu-architecture from id (ECS derives
// them from the identity document the agent sends), ecs.vpc-id and ecs.subnet-id of the primary
// network interface (meta-data/mac, then network/interfaces/macs/<mac>/vpc-id and subnet-id), and
// ecs.outpost-arn on an Outpost. An attribute that is empty in id or that IMDS answers 404 for is
// left out; any other failure is returned.
func (c *Client) Attributes(ctx context.Context, id Identity) (map[string]string, error) {
	attrs := map[string]string{}
	for name, v := range map[string]string{
		AttrInstanceType:     id.InstanceType,
		AttrAvailabilityZone: id.AvailabilityZone,
		AttrAMIID:            id.ImageID,
		AttrCPUArchitecture:  id.Architecture,
	} {
		if v != "" {
			attrs[name] = v
		}
	}
	optional := func(name, path string) (bool, error) {
		v, err := c.getValue(ctx, path)
		if errdefs.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		attrs[name] = v
		return true, nil
	}
	mac, err := c.getValue(ctx, "meta-data/mac")
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		base := "meta-data/network/interfaces/macs/" + mac + "/"
		if _, err := optional(AttrVPCID, base+"vpc-id"); err != nil {
			return nil, err
		}
		if _, err := optional(AttrSubnetID, base+"subnet-id"); err != nil {
			return nil, err
		}
	}
	if _, err := optional(AttrOutpostARN, "meta-data/outpost-arn"); err != nil {
		return nil, err
	}
	return attrs, nil
}

// InstanceTags returns the instance's tags (meta-data/tags/instance/ and each key). A 404 on the list
// is ErrTagsNotEnabled; a key that disappears between the list and its read is left out.
func (c *Client) InstanceTags(ctx context.Context) (map[string]string, error) {
	const list = "meta-data/tags/instance/"
	body, err := c.get(ctx, list)
	if errdefs.IsNotFound(err) {
		var e *Error
		errors.As(err, &e)
		return nil, &Error{Path: list, Endpoint: c.endpoint, StatusCode: e.StatusCode, Class: ErrTagsNotEnabled}
	}
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for _, key := range strings.Split(body, "\n") {
		if key = strings.TrimSpace(key); key == "" {
			continue
		}
		v, err := c.get(ctx, list+key)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		tags[key] = v
	}
	return tags, nil
}

// SpotAction is a spot interruption notice (meta-data/spot/instance-action).
type SpotAction struct {
	Action string    // "terminate", "stop" or "hibernate"
	Time   time.Time // when the action happens (UTC)
}

// SpotInstanceAction returns the spot interruption notice; ok is false (and err nil) when there is
// none (404). A notice that does not parse, or whose action is not terminate, stop or hibernate, is
// ErrBadResponse.
func (c *Client) SpotInstanceAction(ctx context.Context) (action SpotAction, ok bool, err error) {
	const path = "meta-data/spot/instance-action"
	body, err := c.get(ctx, path)
	if errdefs.IsNotFound(err) {
		return SpotAction{}, false, nil
	}
	if err != nil {
		return SpotAction{}, false, err
	}
	var raw struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		return SpotAction{}, false, c.bad(path, err)
	}
	switch raw.Action {
	case "terminate", "stop", "hibernate":
	default:
		return SpotAction{}, false, c.bad(path, fmt.Errorf("unknown action %q", raw.Action))
	}
	t, err := time.Parse(time.RFC3339, raw.Time)
	if err != nil {
		return SpotAction{}, false, c.bad(path, err)
	}
	return SpotAction{Action: raw.Action, Time: t.UTC()}, true, nil
}

// TargetLifecycleState returns the Auto Scaling target lifecycle state of the instance
// (meta-data/autoscaling/target-lifecycle-state), e.g. "InService" or "Warmed:Stopped". It returns
// ("", nil) on a 404: the instance is not in an Auto Scaling group, or the state is not set yet.
func (c *Client) TargetLifecycleState(ctx context.Context) (string, error) {
	s, err := c.get(ctx, "meta-data/autoscaling/target-lifecycle-state")
	if errdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(s), nil
}

// wait waits d on the client's clock; false when ctx ended first.
func (c *Client) wait(ctx context.Context, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.Chan():
		return true
	}
}

// WatchSpot polls SpotInstanceAction every interval (DefaultSpotInterval when interval <= 0), the
// first time at once, until a notice appears, which it passes to onNotice once, or ctx ends. It
// blocks: run it in a goroutine its owner waits for. Failed polls are logged and polling goes on.
func (c *Client) WatchSpot(ctx context.Context, interval time.Duration, onNotice func(SpotAction)) {
	if interval <= 0 {
		interval = DefaultSpotInterval
	}
	for {
		action, ok, err := c.SpotInstanceAction(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrBadResponse):
			c.log.Warn("spot interruption notice not understood", "error", err)
		case err != nil:
			c.log.Debug("spot interruption notice not read", "error", err)
		case ok:
			c.log.Info("spot interruption notice", "action", action.Action, "time", action.Time)
			onNotice(action)
			return
		}
		if !c.wait(ctx, interval) {
			return
		}
	}
}

// WaitInService polls TargetLifecycleState every interval (DefaultInServiceInterval when
// interval <= 0), the first time at once, and returns nil once it is "InService". No state yet
// (404), any other state, and throttling or server errors (429, 5xx) keep it waiting; an IMDS that
// does not answer or refuses the request ends it with that error, and so does ctx, with ctx's error.
// Like the ECS agent it waits as long as needed: bound it with ctx.
func (c *Client) WaitInService(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultInServiceInterval
	}
	last := "-"
	for {
		state, err := c.TargetLifecycleState(ctx)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("wait for target lifecycle state %s: %w", StateInService, ctx.Err())
		case err != nil:
			var e *Error
			if !errors.As(err, &e) || e.StatusCode == 0 || !errdefs.IsRetriable(err) {
				return fmt.Errorf("wait for target lifecycle state %s: %w", StateInService, err)
			}
			c.log.Warn("target lifecycle state not read; still waiting", "error", err)
		case state == StateInService:
			c.log.Info("instance is going into service", "target_lifecycle_state", state)
			return nil
		case state != last:
			c.log.Info("waiting for the instance to go into service", "target_lifecycle_state", state)
			last = state
		}
		if !c.wait(ctx, interval) {
			return fmt.Errorf("wait for target lifecycle state %s (last %q): %w", StateInService, last, ctx.Err())
		}
	}
}

// Package rolecreds supplies task role credentials in local mode, where no Amazon ECS control plane
// sends them: it assumes each task's role (taskRoleArn, executionRoleArn) with sts:AssumeRole, using
// this host's own AWS credentials as the AWS SDK's default chain finds them (environment, shared
// files, SSO, EC2 instance role, …; AWS_REGION, AWS_DEFAULT_REGION and AWS_ENDPOINT_URL_STS apply),
// the way amazon-ecs-local-container-endpoints serves roles on a laptop.
//
// AWS is looked at lazily. New does no AWS work and logs nothing; the SDK configuration is loaded
// when the first role is added, so a host that never runs a task with a role never touches AWS and
// never logs about it. A role that cannot be assumed does not stop its task: the task runs, Get
// answers with the reason, and the failure is logged once per task and role.
//
// Each added role has one goroutine that keeps its credentials fresh while its task runs:
//
//	Add ──▶ assume ──ok──▶ serve; wait until 2/3 of the lifetime ──▶ assume …
//	          │
//	          └─fail─▶ log once; wait (backoff 5 s doubling to 5 min) ──▶ assume …
//	Stop ──▶ the goroutine stops; the last credentials are served until they expire
//	Remove ──▶ the goroutine stops and the IDs are forgotten
//
// With Config.TaskRolesDisabled (ECS_ENABLE_TASK_IAM_ROLE=false) no task role is assumed at all; an
// execution role still is, as the ECS agent still uses the execution role credentials ACS sends
// with the key off.
//
// A credentials ID is 128 random bits in hex, unguessable: it is the only thing a container shows
// to get its credentials. Logs carry only its first 8 characters, and never a secret.
package rolecreds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/awserr"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// Defaults for the zero-valued fields of Config, and the bounds of Duration.
const (
	DefaultSessionNamePrefix = "berth"
	DefaultDuration          = time.Hour
	DefaultRefreshMargin     = 15 * time.Minute
	DefaultCallTimeout       = 30 * time.Second
	// DefaultRegion is the region STS is asked in when neither Config.Region nor the SDK's
	// configuration names one: the region of STS's global endpoint.
	DefaultRegion = "us-east-1"
	MinDuration   = 15 * time.Minute // the shortest session STS grants
	MaxDuration   = 12 * time.Hour   // the longest session a role may allow
)

// Errors Get returns, by what went wrong. Each is also of an errdefs class.
var (
	// ErrUnknownID: no role is added under this ID (never was, or its task was removed). An
	// errdefs.ErrNotFound.
	ErrUnknownID = errdefs.New(errdefs.ErrNotFound, "unknown task role credentials ID")
	// ErrNoHostCredentials: the SDK found no credentials on this host to call STS with (or could not
	// load its configuration); the error goes on with what the SDK said. An errdefs.ErrUnauthorized.
	ErrNoHostCredentials = errdefs.New(errdefs.ErrUnauthorized, "no AWS credentials on this host to assume task roles with")
	// ErrRoleRefused: STS refused to assume the role (AccessDenied, a malformed ARN, credentials STS
	// does not accept); the error goes on with STS's error code and message. An
	// errdefs.ErrUnauthorized.
	ErrRoleRefused = errdefs.New(errdefs.ErrUnauthorized, "STS refused to assume the role")
	// ErrSTSUnavailable: STS could not be reached, throttled, or failed with a 5xx answer. An
	// errdefs.ErrUnavailable.
	ErrSTSUnavailable = errdefs.New(errdefs.ErrUnavailable, "STS is unavailable")
	// ErrTaskRolesDisabled: Provide was asked for a task role (taskcreds.RoleTypeTaskApplication)
	// while Config.TaskRolesDisabled. An errdefs.ErrFailedPrecondition.
	ErrTaskRolesDisabled = errdefs.New(errdefs.ErrFailedPrecondition, "task roles are disabled (ECS_ENABLE_TASK_IAM_ROLE=false): the task runs without its role's credentials")
	// ErrTaskStopped: the role's task has stopped (Stop) and the credentials it had have expired, or
	// it had none. An errdefs.ErrNotFound.
	ErrTaskStopped = errdefs.New(errdefs.ErrNotFound, "the task has stopped: its role credentials are no longer refreshed")
	// ErrNotReady: the first AssumeRole of the role had not finished when Get's context ended, or the
	// credentials expired and no refresh has succeeded yet without saying why. An
	// errdefs.ErrUnavailable.
	ErrNotReady = errdefs.New(errdefs.ErrUnavailable, "task role credentials are not ready")
)

// Config is what a Provider needs from the agent's configuration. Zero values take the defaults.
type Config struct {
	// Region is the region STS is asked in; "" means the SDK's (AWS_REGION, AWS_DEFAULT_REGION,
	// shared config), else DefaultRegion.
	Region string
	// SessionNamePrefix starts every RoleSessionName, which is "<prefix>-<task id>" (default
	// DefaultSessionNamePrefix); CloudTrail shows it on everything the task does.
	SessionNamePrefix string
	// Duration is the DurationSeconds asked of STS (default DefaultDuration), clamped to
	// [MinDuration, MaxDuration]. The role's maximum session duration must allow it.
	Duration time.Duration
	// RefreshMargin: credentials are replaced at 2/3 of their lifetime, or RefreshMargin before
	// they expire when that is earlier, but never before half their lifetime (default
	// DefaultRefreshMargin).
	RefreshMargin time.Duration
	// CallTimeout bounds each AssumeRole, including finding the host's credentials (default
	// DefaultCallTimeout).
	CallTimeout time.Duration
	// Backoff returns the backoff of one role's retries after a failure; nil means 5 s doubling to
	// 5 min with 20 % jitter.
	Backoff func() retry.Backoff
	// Clock tells the time refreshes and expiry go by; nil is the wall clock.
	Clock clockwork.Clock
	// TaskRolesDisabled refuses every task role (ECS_ENABLE_TASK_IAM_ROLE=false): Provide of a
	// taskcreds.RoleTypeTaskApplication role fails with ErrTaskRolesDisabled and assumes nothing.
	// Execution roles are provided as ever.
	TaskRolesDisabled bool
}

// Provider assumes the roles of the tasks added to it and keeps their credentials fresh until
// their tasks stop. It is a taskcreds.Source, and safe for concurrent use.
type Provider struct {
	cfg Config
	log *logger.Logger
	ctx context.Context // parent of every role's goroutine

	sdkMu     sync.Mutex
	sdkLoaded bool
	sdkCfg    aws.Config
	sdkSTS    *sts.Client

	mu     sync.Mutex
	closed bool
	byID   map[string]*role
	byTask map[string]map[string]*role // task ARN → role type → role
	wg     sync.WaitGroup
}

var _ taskcreds.Source = (*Provider)(nil)

// role is one task role and the state of its goroutine.
type role struct {
	id, taskArn, roleType, roleArn string

	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine has returned
	settled chan struct{} // closed once the first attempt has ended (or the goroutine has)
	settle  sync.Once

	mu      sync.Mutex
	creds   taskcreds.Credentials // zero until an attempt succeeds
	err     error                 // the last attempt's failure; nil after a success
	warned  bool                  // a failure has been logged
	stopped bool                  // its task stopped: no more refreshes
	removed bool
}

// New returns a Provider that stops every role's goroutine when ctx ends (or Close is called). It
// does no AWS work and logs nothing.
func New(ctx context.Context, cfg Config, log *logger.Logger) *Provider {
	if cfg.SessionNamePrefix == "" {
		cfg.SessionNamePrefix = DefaultSessionNamePrefix
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultDuration
	}
	cfg.Duration = min(max(cfg.Duration, MinDuration), MaxDuration)
	if cfg.RefreshMargin <= 0 {
		cfg.RefreshMargin = DefaultRefreshMargin
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func() retry.Backoff { return retry.NewExponentialBackoff(5*time.Second, 5*time.Minute, 0.2, 2) }
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if log == nil {
		log = logger.Nop()
	}
	return &Provider{cfg: cfg, log: log, ctx: ctx, byID: map[string]*role{}, byTask: map[string]map[string]*role{}}
}

// Provide makes the task's role of roleType (taskcreds.RoleTypeTaskApplication or
// taskcreds.RoleTypeTaskExecution) the role roleArn, served under id, and returns at once; the role
// is assumed in the background and kept fresh until Stop or Remove. The caller chooses the ID and keeps it
// with the task, so that after an agent restart the containers already running, which carry it,
// keep getting credentials. Providing the same role again changes nothing; another role or ID for
// the same task and role type replaces the old one. It fails, adding nothing, for an ID that is not
// 32 hex digits (errdefs.ErrInvalidArgument), an ID in use by another task or role
// (errdefs.ErrConflict), a task role while Config.TaskRolesDisabled (ErrTaskRolesDisabled), or a
// closed Provider (errdefs.ErrFailedPrecondition).
func (p *Provider) Provide(taskArn, roleType, roleArn, id string) error {
	if roleArn == "" {
		return fmt.Errorf("provide credentials of task %s (%s): %w: no role ARN", taskArn, roleType, errdefs.ErrInvalidArgument)
	}
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return fmt.Errorf("provide credentials of task %s (%s): %w: the ID is not 32 hex digits", taskArn, roleType, errdefs.ErrInvalidArgument)
	}
	_, err := p.add(taskArn, roleType, roleArn, strings.ToLower(id))
	return err
}

// add registers the role under id (a new random one when "") and starts its goroutine.
func (p *Provider) add(taskArn, roleType, roleArn, id string) (string, error) {
	if p.cfg.TaskRolesDisabled && roleType == taskcreds.RoleTypeTaskApplication {
		return "", fmt.Errorf("credentials of task %s (%s, %s): %w", taskArn, roleType, roleArn, ErrTaskRolesDisabled)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ctx.Err() != nil {
		return "", fmt.Errorf("credentials of task %s (%s): %w: the provider is closed", taskArn, roleType, errdefs.ErrFailedPrecondition)
	}
	old := p.byTask[taskArn][roleType]
	if old != nil && old.roleArn == roleArn && (id == "" || id == old.id) {
		return old.id, nil
	}
	if id == "" {
		id = newID()
	} else if other := p.byID[id]; other != nil && other != old {
		return "", fmt.Errorf("restore credentials %s of task %s (%s): %w: the ID is in use", taskcreds.ShortID(id), taskArn, roleType, errdefs.ErrConflict)
	}
	if old != nil {
		p.dropLocked(old)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	r := &role{id: id, taskArn: taskArn, roleType: roleType, roleArn: roleArn,
		cancel: cancel, done: make(chan struct{}), settled: make(chan struct{})}
	p.byID[id] = r
	if p.byTask[taskArn] == nil {
		p.byTask[taskArn] = map[string]*role{}
	}
	p.byTask[taskArn][roleType] = r
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(r.done)
		defer r.settle.Do(func() { close(r.settled) })
		p.keepFresh(ctx, r)
	}()
	return id, nil
}

// Remove stops refreshing every role of the task, forgets their IDs and returns once their
// goroutines have returned. Removing a task without roles is a no-op.
func (p *Provider) Remove(taskArn string) {
	p.mu.Lock()
	var roles []*role
	for _, r := range p.byTask[taskArn] {
		roles = append(roles, r)
		p.dropLocked(r)
	}
	p.mu.Unlock()
	for _, r := range roles {
		<-r.done
	}
}

// Stop stops refreshing every role of the task, as its task has stopped, and returns once their
// goroutines have returned. Their IDs are kept until Remove, and Get serves the last credentials
// until they expire (the log driver's last writes), then ErrTaskStopped. Stopping a task without
// roles, or again, is a no-op.
func (p *Provider) Stop(taskArn string) {
	p.mu.Lock()
	var roles []*role
	for _, r := range p.byTask[taskArn] {
		roles = append(roles, r)
		r.cancel()
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
	}
	p.mu.Unlock()
	for _, r := range roles {
		<-r.done
	}
}

// dropLocked forgets r and stops its goroutine without waiting; the caller holds p.mu.
func (p *Provider) dropLocked(r *role) {
	r.cancel()
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	delete(p.byID, r.id)
	if roles := p.byTask[r.taskArn]; roles[r.roleType] == r {
		delete(roles, r.roleType)
		if len(roles) == 0 {
			delete(p.byTask, r.taskArn)
		}
	}
}

// Close removes every role and returns once every goroutine has returned; Add does nothing after
// it. It is idempotent.
func (p *Provider) Close() {
	p.mu.Lock()
	p.closed = true
	for _, r := range p.byID {
		p.dropLocked(r)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Len returns how many roles the Provider holds.
func (p *Provider) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byID)
}

// Get returns the current credentials of the role with this ID. While the role's first AssumeRole
// is running it waits for it, or until ctx ends (then ErrNotReady). Otherwise it does not wait:
// credentials that have not expired are returned even while a refresh is failing, and without
// them the error says why: ErrUnknownID, ErrNoHostCredentials or ErrRoleRefused (with STS's code
// and message), ErrSTSUnavailable, ErrNotReady, ErrTaskStopped (once Stop was called, without
// credentials that have not expired). Errors name the task, the role and the first 8 characters of
// the ID, never a secret.
func (p *Provider) Get(ctx context.Context, id string) (taskcreds.Credentials, error) {
	p.mu.Lock()
	r := p.byID[id]
	p.mu.Unlock()
	if r == nil {
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s: %w", taskcreds.ShortID(id), ErrUnknownID)
	}
	select {
	case <-r.settled:
	case <-ctx.Done():
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s of task %s (%s): %w: still assuming %s: %w",
			taskcreds.ShortID(id), r.taskArn, r.roleType, ErrNotReady, r.roleArn, context.Cause(ctx))
	}
	r.mu.Lock()
	creds, err, stopped, removed := r.creds, r.err, r.stopped, r.removed
	r.mu.Unlock()
	switch {
	case removed:
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s: %w", taskcreds.ShortID(id), ErrUnknownID)
	case !creds.Expiration.IsZero() && p.cfg.Clock.Now().Before(creds.Expiration):
		return creds, nil
	case stopped:
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s of task %s (%s): %w", taskcreds.ShortID(id), r.taskArn, r.roleType, ErrTaskStopped)
	case err != nil:
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s of task %s (%s): %w", taskcreds.ShortID(id), r.taskArn, r.roleType, err)
	default:
		return taskcreds.Credentials{}, fmt.Errorf("task role credentials %s of task %s (%s): %w: they expired at %s and are being refreshed",
			taskcreds.ShortID(id), r.taskArn, r.roleType, ErrNotReady, creds.Expiration.UTC().Format(time.RFC3339))
	}
}

// TaskCredentials serves the task endpoint: the credentials of the task role with this ID, as Get
// returns them. Execution roles are the agent's own and are never served to containers: their IDs
// are unknown here.
func (p *Provider) TaskCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	return p.getOf(ctx, taskcreds.RoleTypeTaskApplication, id)
}

// ExecutionRoleCredentials serves the agent's own calls for a task with its execution role (pulls,
// secrets, the awslogs driver): the credentials of the execution role with this ID, as Get returns
// them. Task roles' IDs are unknown here (ErrUnknownID).
func (p *Provider) ExecutionRoleCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	return p.getOf(ctx, taskcreds.RoleTypeTaskExecution, id)
}

// getOf is Get for a role of roleType; another role type's ID is unknown (ErrUnknownID).
func (p *Provider) getOf(ctx context.Context, roleType, id string) (taskcreds.Credentials, error) {
	p.mu.Lock()
	r := p.byID[id]
	p.mu.Unlock()
	if r == nil || r.roleType != roleType {
		what := "task role"
		if roleType == taskcreds.RoleTypeTaskExecution {
			what = "execution role"
		}
		return taskcreds.Credentials{}, fmt.Errorf("%s credentials %s: %w", what, taskcreds.ShortID(id), ErrUnknownID)
	}
	return p.Get(ctx, id)
}

// keepFresh assumes r's role, then again before each set of credentials expires, and after a
// failure with backoff, until ctx ends.
func (p *Provider) keepFresh(ctx context.Context, r *role) {
	log := p.log.With("task_arn", r.taskArn, "role_type", r.roleType, "role_arn", r.roleArn, "credentials_id", taskcreds.ShortID(r.id))
	backoff := p.cfg.Backoff()
	for {
		creds, err := p.assume(ctx, r)
		if ctx.Err() != nil {
			return
		}
		now := p.cfg.Clock.Now()
		var wait time.Duration
		r.mu.Lock()
		if err == nil {
			recovered := r.warned && r.err != nil
			r.creds, r.err = creds, nil
			r.mu.Unlock()
			backoff.Reset()
			wait = p.refreshIn(now, creds.Expiration)
			if recovered {
				log.Info("task role credentials are available again", "expiration", creds.Expiration.UTC().Format(time.RFC3339))
			} else {
				log.Debug("task role credentials fetched", "expiration", creds.Expiration.UTC().Format(time.RFC3339),
					"refresh_in", wait.String())
			}
		} else {
			first := !r.warned
			r.err, r.warned = err, true
			valid := !r.creds.Expiration.IsZero() && now.Before(r.creds.Expiration)
			r.mu.Unlock()
			wait = backoff.Duration()
			if first {
				msg := "cannot get task role credentials; the task runs without them until a retry succeeds"
				if valid {
					msg = "cannot refresh task role credentials; the current ones are served until they expire"
				}
				log.Warn(msg+" (logged once per task and role)", "retry_in", wait.String(), "error", err)
			} else {
				log.Debug("task role credentials: retry failed", "retry_in", wait.String(), "error", err)
			}
		}
		r.settle.Do(func() { close(r.settled) })
		if retry.Sleep(ctx, p.cfg.Clock, wait) != nil {
			return
		}
	}
}

// refreshIn returns how long after now credentials expiring at exp are replaced: at 2/3 of their
// lifetime, or RefreshMargin before exp when that is earlier, but not before half their lifetime.
func (p *Provider) refreshIn(now, exp time.Time) time.Duration {
	life := exp.Sub(now)
	if life <= 0 {
		return 0
	}
	return max(min(life*2/3, life-p.cfg.RefreshMargin), life/2)
}

// assume calls sts:AssumeRole for r with the host's credentials, within CallTimeout.
func (p *Provider) assume(ctx context.Context, r *role) (taskcreds.Credentials, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	client, awsCfg, err := p.stsClient(ctx)
	if err != nil {
		return taskcreds.Credentials{}, fmt.Errorf("assume role %s: %w: %w", r.roleArn, ErrNoHostCredentials, err)
	}
	if awsCfg.Credentials == nil {
		return taskcreds.Credentials{}, fmt.Errorf("assume role %s: %w: the SDK configuration has no credentials provider", r.roleArn, ErrNoHostCredentials)
	}
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		return taskcreds.Credentials{}, fmt.Errorf("assume role %s: %w: %w", r.roleArn, ErrNoHostCredentials, err)
	}
	out, err := client.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String(r.roleArn),
		RoleSessionName: aws.String(sessionName(p.cfg.SessionNamePrefix, r.taskArn)),
		DurationSeconds: aws.Int32(int32(p.cfg.Duration / time.Second)),
	})
	if err != nil {
		return taskcreds.Credentials{}, fmt.Errorf("assume role %s: %w", r.roleArn, classify(err))
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil || c.Expiration == nil {
		return taskcreds.Credentials{}, fmt.Errorf("assume role %s: %w: the answer has no credentials", r.roleArn, ErrSTSUnavailable)
	}
	return taskcreds.Credentials{
		RoleArn:         r.roleArn,
		AccessKeyID:     aws.ToString(c.AccessKeyId),
		SecretAccessKey: aws.ToString(c.SecretAccessKey),
		SessionToken:    aws.ToString(c.SessionToken),
		Expiration:      c.Expiration.UTC(),
	}, nil
}

// stsClient loads the SDK's default configuration and builds the STS client the first time it is
// needed. A failure is not remembered: the next attempt loads again (the files may be fixed).
func (p *Provider) stsClient(ctx context.Context) (*sts.Client, aws.Config, error) {
	p.sdkMu.Lock()
	defer p.sdkMu.Unlock()
	if p.sdkLoaded {
		return p.sdkSTS, p.sdkCfg, nil
	}
	var opts []func(*awsconfig.LoadOptions) error
	if p.cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(p.cfg.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, aws.Config{}, fmt.Errorf("load AWS SDK configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultRegion
	}
	p.sdkCfg, p.sdkSTS, p.sdkLoaded = awsCfg, sts.NewFromConfig(awsCfg), true
	p.log.Info("loaded the AWS SDK configuration: task roles are assumed with this host's AWS credentials", "region", awsCfg.Region)
	return p.sdkSTS, p.sdkCfg, nil
}

// classify turns an AssumeRole error into ErrRoleRefused (STS said no: an answer awserr calls a
// refusal, shown as STS's code and message) or ErrSTSUnavailable (anything else), keeping the SDK's
// error in the chain.
func classify(err error) error {
	e := &stsError{class: ErrSTSUnavailable, err: err}
	if awserr.Refused(err) {
		e.class = ErrRoleRefused
	}
	e.code, e.message = awserr.Code(err)
	return e
}

// stsError is a failed AssumeRole: its class and, when STS answered, STS's error code and message.
type stsError struct {
	class         error
	code, message string
	err           error // the SDK's error
}

// Error gives the class and STS's code and message, or the SDK's error when STS did not answer.
func (e *stsError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("%v: %s: %s", e.class, e.code, e.message)
	}
	return fmt.Sprintf("%v: %v", e.class, e.err)
}

// Unwrap returns the class and the SDK's error.
func (e *stsError) Unwrap() []error { return []error{e.class, e.err} }

// notSessionChar matches the characters STS does not allow in a RoleSessionName.
var notSessionChar = regexp.MustCompile(`[^\w+=,.@-]`)

// sessionName returns "<prefix>-<task id>" (the task ID is what follows the ARN's last "/"), with
// characters STS does not allow replaced by "-" and cut to STS's 64.
func sessionName(prefix, taskArn string) string {
	id := taskArn[strings.LastIndex(taskArn, "/")+1:]
	name := notSessionChar.ReplaceAllString(prefix+"-"+id, "-")
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// newID returns 128 random bits in hex.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

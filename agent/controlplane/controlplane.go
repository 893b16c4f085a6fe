// Package controlplane is where the engine meets its control plane (Amazon ECS, or the embedded one
// in local mode): it registers the host, keeps the ACS session open, accepts or rejects what ACS
// sends, keeps task role credentials, and reports every state change the control plane must hear.
//
//	ACS ──payload──▶ HandlePayload ──accepted──▶ Engine.AddTask (saved) ──▶ ack
//	                      └─rejected, or refused by the engine──▶ Reporter.ReportRejected (saved) ──▶ ack
//	ACS ──credentials──▶ taskcreds.Store (per task, with expiry)
//	Engine ──TaskChanged──▶ Reporter ──▶ SubmitTaskStateChange ──▶ sent record saved
//	       └─────────────▶ AttachmentReporter ──▶ SubmitAttachmentStateChanges
//	Engine ──TaskRemoved──▶ Reporter, AttachmentReporter, taskcreds.Store forget the task
//
// The Reporter owns what was sent (its own records in the state store); the engine never hears of
// it. Every map here is bounded by the tasks the engine holds.
package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jonboulle/clockwork"
	"golang.org/x/sync/errgroup"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/tcs"
)

// Engine is the part of the task engine the control plane drives.
type Engine interface {
	// AddTask returns once the task (or, for a known task, its stop) is saved. A new task the
	// engine refuses (ECS_DISABLE_PRIVILEGED, ECS_TASK_SECURITY_POLICY) fails with a
	// *task.RefusedError and is not saved.
	AddTask(ctx context.Context, t *task.Task) error
	// Tasks returns a copy of every task the engine holds.
	Tasks() []*task.Task
	// Task returns a copy of the task the engine holds with this ARN, or nil.
	Task(arn string) *task.Task
	// StopTask stops a task the engine holds, with reason.
	StopTask(ctx context.Context, arn, reason string) error
}

var _ Engine = (*engine.Engine)(nil)

// Store is the part of the state store the control plane uses; state.Store satisfies it.
type Store interface {
	SentStore
	SentRecords(ctx context.Context) ([]state.SentRecord, error)
	SaveRegistration(ctx context.Context, r state.Registration) error
	Registration(ctx context.Context) (state.Registration, bool, error)
	SaveSeqNum(ctx context.Context, seq int64) error
	SeqNum(ctx context.Context) (int64, error)
}

// Client is the part of the ECS API client the control plane calls; *ecsclient.Client satisfies it.
type Client interface {
	TaskStateSubmitter
	AttachmentSubmitter
	RegisterContainerInstance(ctx context.Context, reg ecsclient.Registration) (string, error)
	DiscoverPollEndpoint(ctx context.Context, instanceArn string) (string, error)
	TelemetryEndpoint(ctx context.Context, instanceArn string) (string, error)
	ForgetPollEndpoint(instanceArn string)
	Drain(ctx context.Context, instanceArn string) error
}

var _ Client = (*ecsclient.Client)(nil)

// Config is what the control plane takes from the agent's configuration.
type Config struct {
	Cluster string
	// Registration is what this host registers (resources, versions, attributes); the saved
	// container instance ARN is added when the cluster is the same.
	Registration ecsclient.Registration
	// Region and Credentials sign the ACS websocket upgrade.
	Region      string
	Credentials aws.CredentialsProvider
	// Reporter tunes state-change delivery; zero values take the defaults.
	Reporter ReporterConfig
	// Clock is the time source; nil means the real clock.
	Clock clockwork.Clock
	// Probe, if set, is called at ProbeRejectedSaved with the saved report; the crash-recovery tests
	// kill the agent there.
	Probe engine.Probe
	// CredentialsStore keeps the task role credentials the control plane sends; nil: a new one. The
	// agent makes it first, so that the engine's pulls with execution roles can read it.
	CredentialsStore *taskcreds.Store
	// Telemetry configures the TCS session that runs beside ACS once registered.
	Telemetry TelemetryConfig
}

// TelemetryConfig configures the TCS (telemetry) session. The agent's configuration keys for it
// are ECS_DISABLE_METRICS (DisableMetrics), ECS_DISABLE_DOCKER_HEALTH_CHECK (DisableHealth) and, for
// the sampling, ECS_POLL_METRICS and ECS_POLLING_METRICS_WAIT_DURATION (see agent/taskmetrics).
type TelemetryConfig struct {
	// Source is what is published; nil runs no TCS session.
	Source tcs.Source
	// DisableMetrics leaves container metrics out; health and instance status are still published.
	DisableMetrics bool
	// DisableHealth leaves container health out. With DisableMetrics too there is no TCS session at
	// all, as with the ECS agent.
	DisableHealth bool
	// PublishInterval spaces publishing rounds; zero is tcs.DefaultPublishInterval (20 s).
	PublishInterval time.Duration
}

// ProbeRejectedSaved is the point where a rejected task's STOPPED report is saved and the payload is
// not acknowledged yet.
const ProbeRejectedSaved = "rejected-saved"

// ControlPlane is the agent's side of one control plane. It implements engine.Listener (subscribe it
// before the engine starts) and acs.Handler.
type ControlPlane struct {
	cfg      Config
	client   Client
	eng      Engine
	store    Store
	log      *logger.Logger
	reporter *Reporter
	attach   *AttachmentReporter
	creds    *taskcreds.Store
	seq      atomic.Int64
	arn      atomic.Pointer[string] // the container instance ARN once registered
}

var (
	_ engine.Listener = (*ControlPlane)(nil)
	_ acs.Handler     = (*ControlPlane)(nil)
)

// New returns the control plane's side for client; nothing runs until Report and Connect.
func New(cfg Config, client Client, eng Engine, store Store, log *logger.Logger) *ControlPlane {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Reporter.Retrier.Clock == nil {
		cfg.Reporter.Retrier.Clock = cfg.Clock
	}
	creds := cfg.CredentialsStore
	if creds == nil {
		creds = taskcreds.NewStore()
	}
	return &ControlPlane{cfg: cfg, client: client, eng: eng, store: store, log: log,
		reporter: NewReporter(client, store, cfg.Reporter, log),
		attach:   NewAttachmentReporter(client, cfg.Clock, log),
		creds:    creds}
}

// Credentials returns the store of task role credentials.
func (c *ControlPlane) Credentials() *taskcreds.Store { return c.creds }

// InstanceArn returns the registered container instance ARN, or nil before registration.
func (c *ControlPlane) InstanceArn() *string { return c.arn.Load() }

// ContainerInstanceARN returns the registered container instance ARN, or "" before registration. It
// is safe for concurrent use.
func (c *ControlPlane) ContainerInstanceARN() string {
	if arn := c.arn.Load(); arn != nil {
		return *arn
	}
	return ""
}

// Tracked returns how many tasks (and undelivered attachment changes) each part remembers: the
// state-change reporter, the attachment reporter, and the credentials store.
func (c *ControlPlane) Tracked() (reporter, attachments, pendingAttachments, credentials int) {
	attachments, pendingAttachments = c.attach.Tracked()
	return c.reporter.Tracked(), attachments, pendingAttachments, c.creds.Len()
}

// TaskChanged passes a saved task change to the reporters; static tasks are the host's own and no
// control plane knows them.
func (c *ControlPlane) TaskChanged(t *task.Task) {
	if t.Static {
		return
	}
	c.reporter.Report(t)
	c.attach.Report(t)
}

// TaskRemoved makes every part forget a task the engine has cleaned up.
func (c *ControlPlane) TaskRemoved(arn string) {
	c.reporter.TaskRemoved(arn)
	c.attach.TaskRemoved(arn)
	c.creds.TaskRemoved(arn)
}

// Report loads the sent records, re-reports what tasks holds that was not sent before a restart,
// and delivers state changes until ctx ends. tasks are the engine's tasks after recovery; call
// Report once, after the engine restored them.
func (c *ControlPlane) Report(ctx context.Context, tasks []*task.Task) {
	records, err := c.store.SentRecords(ctx)
	if err != nil {
		c.log.Error("some sent records cannot be read; their tasks' changes may be sent again", "error", err)
	}
	var live set.Set[string]
	for _, t := range tasks {
		live.Add(t.Arn)
	}
	c.reporter.Load(records, live.Has)
	for _, t := range tasks {
		c.TaskChanged(t)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.attach.Run(ctx)
	}()
	c.reporter.Run(ctx)
	<-done
}

// Connect registers the host (re-using the saved container instance ARN) and keeps the ACS session
// open until ctx ends. It returns an error only when registration cannot succeed.
func (c *ControlPlane) Connect(ctx context.Context) error {
	arn, err := c.register(ctx)
	if err != nil {
		return err
	}
	if seq, err := c.store.SeqNum(ctx); err != nil {
		c.log.Warn("the saved ACS sequence number cannot be read; starting from 0", "error", err)
	} else {
		c.seq.Store(seq)
	}
	switch tel := c.cfg.Telemetry; {
	case tel.Source == nil:
	case tel.DisableMetrics && tel.DisableHealth:
		c.log.Info("no TCS session: ECS_DISABLE_METRICS and ECS_DISABLE_DOCKER_HEALTH_CHECK are both set")
	default:
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { c.runTelemetry(ctx, arn) })
	}
	backoff := newDiscoveryBackoff()
	for ctx.Err() == nil {
		endpoint, err := c.client.DiscoverPollEndpoint(ctx, arn)
		if err != nil {
			delay := backoff.Duration()
			c.log.Warn("cannot discover the ACS endpoint; retrying", "error", err, "retry_in", delay)
			_ = retry.Sleep(ctx, c.cfg.Clock, delay) // a done ctx ends the loop
			continue
		}
		reg := c.cfg.Registration
		client, err := acs.New(acs.Config{Endpoint: endpoint, Cluster: c.cfg.Cluster, ContainerInstanceArn: arn,
			AgentVersion: reg.AgentVersion, AgentHash: reg.AgentHash, DockerVersion: reg.DockerVersion,
			Region: c.cfg.Region, Credentials: c.cfg.Credentials, Logger: c.log, Clock: c.cfg.Clock,
			Rediscover: func(ctx context.Context) (string, error) {
				c.client.ForgetPollEndpoint(arn)
				return c.client.DiscoverPollEndpoint(ctx, arn)
			}}, c)
		if err != nil {
			return fmt.Errorf("ACS client: %w", err)
		}
		_ = client.Run(ctx) // returns only when ctx ends
	}
	return nil
}

// runTelemetry keeps the TCS session of instance arn open until ctx ends: it discovers the
// telemetry endpoint (retrying with backoff) and publishes there, reconnecting as tcs.Client does.
func (c *ControlPlane) runTelemetry(ctx context.Context, arn string) {
	backoff := newDiscoveryBackoff()
	var endpoint string
	for {
		var err error
		if endpoint, err = c.client.TelemetryEndpoint(ctx, arn); err == nil {
			break
		}
		delay := backoff.Duration()
		c.log.Warn("cannot discover the TCS endpoint; retrying", "error", err, "retry_in", delay)
		if retry.Sleep(ctx, c.cfg.Clock, delay) != nil {
			return
		}
	}
	reg, tel := c.cfg.Registration, c.cfg.Telemetry
	client, err := tcs.New(tcs.Config{Endpoint: endpoint, Cluster: c.cfg.Cluster, ContainerInstanceArn: arn,
		Region: c.cfg.Region, Credentials: c.cfg.Credentials, AgentVersion: reg.AgentVersion, AgentHash: reg.AgentHash,
		DockerVersion: reg.DockerVersion, Source: tel.Source, PublishInterval: tel.PublishInterval,
		DisableMetrics: tel.DisableMetrics, DisableHealth: tel.DisableHealth, Clock: c.cfg.Clock, Logger: c.log,
		Discover: func(ctx context.Context) (string, error) { return c.client.TelemetryEndpoint(ctx, arn) }})
	if err != nil {
		c.log.Error("no TCS session: metrics and health will not be published", "endpoint", endpoint, "error", err)
		return
	}
	_ = client.Run(ctx) // returns only when ctx ends
}

// newDiscoveryBackoff returns the delays between attempts to discover the ACS or TCS endpoint: 1 s,
// doubling up to a minute, without jitter. Every failure is retried: the endpoint is needed to go on.
func newDiscoveryBackoff() retry.Backoff {
	return retry.NewExponentialBackoff(time.Second, time.Minute, 0, 2)
}

// register registers this host and saves the registration before anything uses it; it retries until
// it succeeds or ctx ends.
func (c *ControlPlane) register(ctx context.Context) (string, error) {
	reg := c.cfg.Registration
	saved, ok, err := c.store.Registration(ctx)
	if err != nil {
		c.log.Warn("the saved registration cannot be read; registering anew", "error", err)
	}
	if ok && saved.Cluster == c.cfg.Cluster {
		reg.ContainerInstanceArn = saved.ContainerInstanceArn
	}
	arn, err := c.client.RegisterContainerInstance(ctx, reg)
	if err != nil {
		return "", fmt.Errorf("register the container instance in cluster %s: %w", c.cfg.Cluster, err)
	}
	if err := c.store.SaveRegistration(ctx, state.Registration{Cluster: c.cfg.Cluster, ContainerInstanceArn: arn}); err != nil {
		return "", fmt.Errorf("save the registration: %w", err)
	}
	c.arn.Store(&arn)
	return arn, nil
}

// HandlePayload gives every accepted task to the engine, which returns once it is saved (and, for a
// stop, once the stop is saved), and saves a STOPPED report for every rejected one and every one the
// engine refuses; the sequence number is saved last. Only then does the ACS client acknowledge the
// payload.
func (c *ControlPlane) HandlePayload(ctx context.Context, p acs.Payload) error {
	// Tasks are accepted concurrently so that their saves share transactions; deliveries of one ARN
	// keep their order.
	byArn := map[string][]acstranslate.Accepted{}
	var order []string
	for _, a := range p.Tasks {
		if _, ok := byArn[a.Task.Arn]; !ok {
			order = append(order, a.Task.Arn)
		}
		byArn[a.Task.Arn] = append(byArn[a.Task.Arn], a)
	}
	refused := make([][]acstranslate.Rejected, len(order)) // by ARN, in the payload's order
	var g errgroup.Group
	g.SetLimit(acceptConcurrency)
	for i, arn := range order {
		g.Go(func() error {
			for _, a := range byArn[arn] {
				err := c.accept(ctx, a)
				var re *task.RefusedError
				if errors.As(err, &re) {
					refused[i] = append(refused[i], acstranslate.Rejected{Arn: arn, Err: re})
					continue
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	rejected := slices.Clone(p.Rejected)
	for _, r := range refused {
		rejected = append(rejected, r...)
	}
	for _, r := range rejected {
		if r.Arn == "" {
			c.log.Warn("a task without an ARN was rejected; it cannot be reported", "error", r.Err)
			continue
		}
		c.log.Warn("task rejected", "task", r.Arn, "error", r.Err)
		report, err := c.reporter.ReportRejected(ctx, r.Arn, "TaskDefinitionError: "+r.Err.Error(), c.cfg.Clock.Now())
		if err != nil {
			return err
		}
		if c.cfg.Probe != nil {
			c.cfg.Probe(ProbeRejectedSaved, report)
		}
	}
	if err := c.store.SaveSeqNum(ctx, p.SeqNum); err != nil {
		return fmt.Errorf("save the ACS sequence number: %w", err)
	}
	c.seq.Store(p.SeqNum)
	return nil
}

// acceptConcurrency bounds the tasks of one payload accepted at once.
const acceptConcurrency = 64

// accept hands one task of a payload to the engine, with its credentials stored first; they are
// dropped again when the engine refuses the task.
func (c *ControlPlane) accept(ctx context.Context, a acstranslate.Accepted) error {
	t := a.Task
	if rc := a.RoleCredentials; rc != nil {
		t.RoleArn, t.CredentialsID = cmp.Or(rc.RoleArn, t.RoleArn), rc.CredentialsID
	}
	if rc := a.ExecutionRoleCredentials; rc != nil {
		t.ExecutionRoleArn, t.ExecutionCredentialsID = cmp.Or(rc.RoleArn, t.ExecutionRoleArn), rc.CredentialsID
	}
	c.putCredentials(t.Arn, acswire.RoleTypeTaskApplication, a.RoleCredentials)
	c.putCredentials(t.Arn, acswire.RoleTypeTaskExecution, a.ExecutionRoleCredentials)
	if err := c.eng.AddTask(ctx, t); err != nil {
		if c.eng.Task(t.Arn) == nil { // refused, or not saved: no TaskRemoved will drop them
			c.creds.TaskRemoved(t.Arn)
		}
		return fmt.Errorf("accept task %s: %w", t.Arn, err)
	}
	return nil
}

// putCredentials stores credentials that came with a task, if any. A role without keys (the embedded
// control plane sends only the role) is left to the engine's role credentials provider.
func (c *ControlPlane) putCredentials(taskArn, roleType string, creds *acswire.IAMRoleCredentials) {
	if creds == nil || creds.CredentialsID == "" && creds.AccessKeyID == "" {
		return
	}
	if err := c.storeCredentials(taskArn, roleType, *creds); err != nil {
		c.log.Warn("task credentials not stored", "task", taskArn, "role_type", roleType, "error", err)
	}
}

// HandleCredentials stores refreshed task role credentials. Malformed ones are logged and
// acknowledged: resending them cannot make them valid. Credentials of a task the engine does not
// hold (forgotten already, or never here) are not kept, and fail with engine.ErrUnknownTask, as the
// ECS agent refuses them: nothing would ever drop them.
func (c *ControlPlane) HandleCredentials(_ context.Context, m acs.Credentials) error {
	if err := c.storeCredentials(m.TaskArn, m.RoleType, m.Credentials); err != nil {
		c.log.Warn("task credentials not stored", "task", m.TaskArn, "role_type", m.RoleType, "error", err)
		return nil
	}
	// Asked after the put: a task the engine forgets from now on has them dropped by TaskRemoved.
	if c.eng.Task(m.TaskArn) == nil {
		c.creds.TaskRemoved(m.TaskArn)
		return fmt.Errorf("credentials of task %s (%s): %w", m.TaskArn, m.RoleType, engine.ErrUnknownTask)
	}
	c.log.Info("task credentials received", "task", m.TaskArn, "role_type", m.RoleType)
	return nil
}

// HandleENIAttachment logs the announcement; the task's payload carries the ENI the engine waits for.
func (c *ControlPlane) HandleENIAttachment(_ context.Context, a acs.ENIAttachment) error {
	for _, eni := range a.ENIs {
		c.log.Info("ENI attachment announced", "task", a.TaskArn, "mac", eni.MacAddress)
	}
	return nil
}

// DrainInstance sets this container instance DRAINING (UpdateContainerInstancesState), so the
// control plane moves its tasks elsewhere. It waits for the registration when there is none yet.
func (c *ControlPlane) DrainInstance(ctx context.Context) error {
	for {
		if arn := c.ContainerInstanceARN(); arn != "" {
			return c.client.Drain(ctx, arn)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.cfg.Clock.After(time.Second):
		}
	}
}

// ReasonNotInManifest is the stop reason of a task ACS confirmed it no longer places here.
const ReasonNotInManifest = "Task stopped by Amazon ECS: not in the instance's task manifest"

// HandleTaskManifest returns the tasks the agent runs for the control plane that the manifest does
// not list, or lists as STOPPED: the candidates to stop, which ACS is asked to confirm. Static tasks
// are the host's own and never candidates.
func (c *ControlPlane) HandleTaskManifest(_ context.Context, tasks []acswire.TaskIdentifier) ([]acswire.TaskIdentifier, error) {
	listed := make(map[string]string, len(tasks))
	for _, ti := range tasks {
		listed[ti.TaskArn] = ti.DesiredStatus
	}
	var out []acswire.TaskIdentifier
	for _, t := range c.eng.Tasks() {
		if t.Static || t.DesiredStatus == task.TaskStopped || t.KnownStatus == task.TaskStopped {
			continue
		}
		if desired, ok := listed[t.Arn]; ok && desired != "STOPPED" {
			continue
		}
		out = append(out, acswire.TaskIdentifier{TaskArn: t.Arn, DesiredStatus: "STOPPED"})
	}
	return out, nil
}

// HandleStopVerification stops the tasks ACS confirmed may be stopped; tasks the agent does not
// hold (or holds as static tasks) are skipped.
func (c *ControlPlane) HandleStopVerification(ctx context.Context, tasks []acswire.TaskIdentifier) error {
	static := map[string]bool{}
	for _, t := range c.eng.Tasks() {
		static[t.Arn] = t.Static
	}
	var errs []error
	for _, ti := range tasks {
		isStatic, held := static[ti.TaskArn]
		if !held || isStatic {
			continue
		}
		c.log.Info("stopping a task ACS confirmed is not in the manifest", "task", ti.TaskArn)
		if err := c.eng.StopTask(ctx, ti.TaskArn, ReasonNotInManifest); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SeqNum is the sequence number of the last payload handled.
func (c *ControlPlane) SeqNum() int64 { return c.seq.Load() }

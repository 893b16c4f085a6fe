package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/tcs/tcstest"
	"github.com/berth-agent/berth/agent/tcswire"
)

// fakeControl is the ECS API as the control plane calls it.
type fakeControl struct {
	*fakeECS
	forgotten      int
	drained        []string // instance ARNs set DRAINING
	telemetry      string   // the TCS endpoint; empty: an unreachable one
	undiscoverable bool     // DiscoverPollEndpoint and TelemetryEndpoint fail
	// polls and telemetryAsks count DiscoverPollEndpoint and TelemetryEndpoint calls.
	polls, telemetryAsks atomic.Int32
}

func (f *fakeControl) Drain(_ context.Context, instanceArn string) error {
	f.drained = append(f.drained, instanceArn)
	return nil
}

func (f *fakeControl) RegisterContainerInstance(context.Context, ecsclient.Registration) (string, error) {
	return "arn:instance", nil
}

func (f *fakeControl) DiscoverPollEndpoint(context.Context, string) (string, error) {
	f.polls.Add(1)
	if f.undiscoverable {
		return "", errors.New("no endpoint")
	}
	return "http://127.0.0.1:1/", nil
}

func (f *fakeControl) TelemetryEndpoint(context.Context, string) (string, error) {
	f.telemetryAsks.Add(1)
	if f.undiscoverable {
		return "", errors.New("no endpoint")
	}
	if f.telemetry != "" {
		return f.telemetry, nil
	}
	return "http://127.0.0.1:1/", nil
}

func (f *fakeControl) ForgetPollEndpoint(string) { f.forgotten++ }

// fakeEngine accepts tasks; refuse makes AddTask fail for one ARN, and policy refuses tasks as the
// engine's Admit does (ECS_DISABLE_PRIVILEGED, ECS_TASK_SECURITY_POLICY).
type fakeEngine struct {
	mu      sync.Mutex
	added   []*task.Task
	refuse  string
	policy  task.Policy
	held    []*task.Task      // what Tasks returns
	stopped map[string]string // task ARN → the reason StopTask was given
}

func (e *fakeEngine) Tasks() []*task.Task {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held
}

// Task returns the task added or held with this ARN, the latest, or nil.
func (e *fakeEngine) Task(arn string) *task.Task {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, list := range [][]*task.Task{e.held, e.added} {
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].Arn == arn {
				return list[i]
			}
		}
	}
	return nil
}

func (e *fakeEngine) StopTask(_ context.Context, arn, reason string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped == nil {
		e.stopped = map[string]string{}
	}
	e.stopped[arn] = reason
	return nil
}

func (e *fakeEngine) AddTask(_ context.Context, t *task.Task) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.Arn == e.refuse {
		return errors.New("disk full")
	}
	if err := t.Refuse(e.policy); err != nil {
		return fmt.Errorf("task %s: %w", t.Arn, err)
	}
	e.added = append(e.added, t)
	return nil
}

func creds(id string, exp time.Time) *acswire.IAMRoleCredentials {
	return &acswire.IAMRoleCredentials{CredentialsID: id, AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: "tok",
		Expiration: exp.UTC().Format(time.RFC3339)}
}

func TestHandlePayload(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	clock := clockwork.NewFakeClock()
	eng := &fakeEngine{}
	cp := New(Config{Clock: clock}, &fakeControl{fakeECS: newFakeECS()}, eng, store, logger.Nop())
	good := &task.Task{Arn: "arn:good", DesiredStatus: task.TaskRunning}
	err := cp.HandlePayload(ctx, acs.Payload{MessageID: "m1", SeqNum: 9,
		Tasks:    []acstranslate.Accepted{{Task: good, RoleCredentials: creds("c-task", clock.Now().Add(time.Hour)), ExecutionRoleCredentials: creds("c-exec", clock.Now().Add(time.Hour))}},
		Rejected: []acstranslate.Rejected{{Arn: "arn:bad", Err: errors.New("containers[0].image: required")}, {Err: errors.New("null task")}}})
	require.NoError(t, err)

	assert.Len(t, eng.added, 1)
	seq, err := store.SeqNum(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(9), seq, "saved before HandlePayload returns, so before the ack")
	assert.Equal(t, int64(9), cp.SeqNum())
	got, ok := cp.Credentials().Get("c-task")
	require.True(t, ok)
	assert.Equal(t, acswire.RoleTypeTaskApplication, got.RoleType)
	got, ok = cp.Credentials().Get("c-exec")
	require.True(t, ok)
	assert.Equal(t, acswire.RoleTypeTaskExecution, got.RoleType)

	records, err := store.SentRecords(ctx)
	require.NoError(t, err)
	require.Len(t, records, 1, "the rejected task's report is saved before the ack; one without an ARN cannot be")
	assert.Equal(t, "arn:bad", records[0].TaskArn)
	require.NotNil(t, records[0].Report)
	assert.Equal(t, "TaskDefinitionError: containers[0].image: required", records[0].Report.StoppedReason)
	assert.Equal(t, task.TaskStopped, records[0].Report.KnownStatus)

	eng.refuse = "arn:refused"
	err = cp.HandlePayload(ctx, acs.Payload{SeqNum: 10, Tasks: []acstranslate.Accepted{{Task: &task.Task{Arn: "arn:refused"}}}})
	require.ErrorContains(t, err, "accept task arn:refused: disk full")
	seq, err = store.SeqNum(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(9), seq, "a payload that was not accepted does not advance the sequence number")
}

// A rejected task's report is saved in berth.db before the ack: a process that dies right after
// HandlePayload returned (the kill point between the saved report and its delivery) loses nothing,
// and the next process delivers the report, then deletes it.
func TestRejectedReportDeliveredAfterRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "berth.db")
	f := newFakeECS()
	f.setDown(true)
	dying, err := state.OpenBolt(path, time.Second)
	require.NoError(t, err)
	first := New(Config{}, &fakeControl{fakeECS: f}, &fakeEngine{}, dying, logger.Nop())
	require.NoError(t, first.HandlePayload(ctx, acs.Payload{SeqNum: 1, Rejected: []acstranslate.Rejected{{Arn: "arn:bad", Err: errors.New("bad")}}}))
	require.NoError(t, dying.Close()) // the process dies: its reporter never ran, nothing else is written

	f.setDown(false)
	store, err := state.OpenBolt(path, time.Second)
	require.NoError(t, err)
	defer store.Close()
	second := New(Config{Reporter: ReporterConfig{NewBackoff: zeroBackoff}}, &fakeControl{fakeECS: f}, &fakeEngine{}, store, logger.Nop())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		second.Report(rctx, nil)
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool {
		records, err := store.SentRecords(ctx)
		return err == nil && len(records) == 0
	}, 10*time.Second, 5*time.Millisecond, "the record is deleted once delivered")
	subs := submissions(f)
	require.Len(t, subs, 1)
	assert.Equal(t, "arn:bad", subs[0].Task)
	assert.Equal(t, "STOPPED", subs[0].Status)
	assert.Equal(t, "TaskDefinitionError: bad", subs[0].Reason)
	assert.Eventually(t, func() bool { return second.reporter.Tracked() == 0 }, 10*time.Second, 5*time.Millisecond,
		"the reporter forgets the delivered report")
}

// ACS's credentials are stored as taskcreds', with their RFC 3339 expiration; malformed ones are
// not stored, and the error says so without a secret.
func TestCredentialsFromACS(t *testing.T) {
	clock := clockwork.NewFakeClock()
	cp := New(Config{Clock: clock}, &fakeControl{fakeECS: newFakeECS()}, &fakeEngine{}, state.NewMemory(), logger.Nop())
	require.NoError(t, cp.storeCredentials("arn:t1", acswire.RoleTypeTaskExecution, *creds("e1", clock.Now().Add(time.Hour))))
	exec, err := cp.Credentials().ExecutionRoleCredentials(context.Background(), "e1")
	require.NoError(t, err)
	want := creds("e1", time.Time{})
	assert.Equal(t, want.AccessKeyID, exec.AccessKeyID)
	assert.Equal(t, want.SecretAccessKey, exec.SecretAccessKey)
	assert.Equal(t, want.SessionToken, exec.SessionToken)
	assert.True(t, clock.Now().Add(time.Hour).Truncate(time.Second).Equal(exec.Expiration), "expires with the credentials: %s", exec.Expiration)

	err = cp.storeCredentials("arn:t3", acswire.RoleTypeTaskApplication, acswire.IAMRoleCredentials{CredentialsID: "x", SecretAccessKey: "hush", Expiration: "tomorrow"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hush", "errors never carry a secret")
	assert.Error(t, cp.storeCredentials("arn:t3", acswire.RoleTypeTaskApplication, acswire.IAMRoleCredentials{}), "no ID")
	assert.Equal(t, 1, cp.Credentials().Len())
}

// Refreshed credentials are kept for a task the engine holds, until it is removed; those of a task
// it does not hold (forgotten already, or never here) are refused and not kept: nothing would ever
// drop them.
func TestCredentialsOfTasksTheEngineDoesNotHold(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	held := newTask("arn:aws:ecs:us-west-2:123456789012:task/c/held")
	eng := &fakeEngine{held: []*task.Task{held}}
	cp := New(Config{Clock: clock}, &fakeControl{fakeECS: newFakeECS()}, eng, state.NewMemory(), logger.Nop())
	refresh := func(arn, id string) error {
		return cp.HandleCredentials(ctx, acs.Credentials{MessageID: "m-" + id, TaskArn: arn, RoleType: acswire.RoleTypeTaskApplication,
			Credentials: *creds(id, clock.Now().Add(time.Hour))})
	}

	require.NoError(t, refresh(held.Arn, "c1"))
	assert.Equal(t, 1, cp.Credentials().Len())
	for i := range 100 {
		err := refresh(fmt.Sprintf("arn:aws:ecs:us-west-2:123456789012:task/c/gone-%d", i), fmt.Sprintf("g%d", i))
		require.ErrorIs(t, err, engine.ErrUnknownTask)
		assert.Contains(t, err.Error(), fmt.Sprintf("gone-%d", i), "the error names the task")
	}
	assert.Equal(t, 1, cp.Credentials().Len(), "only the held task's credentials are kept")

	require.NoError(t, refresh(held.Arn, "c2"))
	_, ok := cp.Credentials().Get("c1")
	assert.False(t, ok, "a refresh replaces the task's earlier set")
	cp.TaskRemoved(held.Arn)
	eng.mu.Lock()
	eng.held = nil
	eng.mu.Unlock()
	assert.ErrorIs(t, refresh(held.Arn, "c3"), engine.ErrUnknownTask, "a refresh arriving after the task was forgotten")
	assert.Zero(t, cp.Credentials().Len())
}

// A payload's task the engine does not take (its save fails) leaves no credentials behind; a task
// the engine holds already keeps its credentials when a later delivery of it fails.
func TestCredentialsOfATaskNotAcceptedAreDropped(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	const arn = "arn:aws:ecs:us-west-2:123456789012:task/c/full"
	eng := &fakeEngine{refuse: arn}
	cp := New(Config{Clock: clock}, &fakeControl{fakeECS: newFakeECS()}, eng, state.NewMemory(), logger.Nop())
	payload := acs.Payload{SeqNum: 1, Tasks: []acstranslate.Accepted{{Task: newTask(arn), RoleCredentials: creds("c1", clock.Now().Add(time.Hour)),
		ExecutionRoleCredentials: creds("e1", clock.Now().Add(time.Hour))}}}
	require.Error(t, cp.HandlePayload(ctx, payload), "left unacknowledged for ACS to resend")
	assert.Zero(t, cp.Credentials().Len(), "the task the engine did not save keeps no credentials")

	eng.mu.Lock()
	eng.held = []*task.Task{newTask(arn)}
	eng.mu.Unlock()
	require.Error(t, cp.HandlePayload(ctx, payload))
	assert.Equal(t, 2, cp.Credentials().Len(), "a held task keeps the credentials its delivery brought")
}

// 1,000 tasks run, reported and cleaned up leave nothing behind in the reporter, the attachment
// reporter or the credentials store, and no sent record in the state store.
func TestThousandTasksLeaveNothingBehind(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	f := newFakeECS()
	clock := clockwork.NewFakeClock()
	cp := New(Config{Clock: clock, Reporter: ReporterConfig{NewBackoff: zeroBackoff}}, &fakeControl{fakeECS: f}, &fakeEngine{}, store, logger.Nop())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cp.Report(rctx, nil)
	}()
	defer func() { cancel(); <-done }()

	const n = 1000
	for i := range n {
		arn := fmt.Sprintf("arn:aws:ecs:us-west-2:123456789012:task/c/%04d", i)
		tk := newTask(arn)
		tk.ENI = &task.ENI{AttachmentArn: "arn:att/" + arn, MAC: "0a:00:00:00:00:01"}
		require.NoError(t, cp.HandlePayload(ctx, acs.Payload{SeqNum: int64(i), Tasks: []acstranslate.Accepted{{Task: tk,
			RoleCredentials: creds("cred-"+arn, clock.Now().Add(time.Hour))}}}))
		run := running(tk)
		run.AWSVPC = &task.AWSVPC{}
		cp.TaskChanged(run)
		stop := stopped(run)
		stop.AWSVPC = &task.AWSVPC{TornDown: true}
		cp.TaskChanged(stop)
		cp.TaskRemoved(arn)
	}
	require.Eventually(t, func() bool {
		reporter, attachments, pending, credentials := cp.Tracked()
		return reporter == 0 && attachments == 0 && pending == 0 && credentials == 0
	}, 30*time.Second, 10*time.Millisecond, "every map is empty once everything is delivered")
	records, err := store.SentRecords(ctx)
	require.NoError(t, err)
	assert.Empty(t, records)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Len(t, f.attachments, 2*n, "ATTACHED and DETACHED of every task were delivered")
	stoppedSent := 0
	for _, ch := range f.accepted {
		if ch.Status == ecsclient.StatusStopped {
			stoppedSent++
		}
	}
	assert.Equal(t, n, stoppedSent, "every task's STOPPED was delivered")
}

// With ECS_DISABLE_PRIVILEGED a payload's privileged task, which the engine refuses, is rejected: its
// STOPPED report, naming the container and the field, is saved before the ack, the engine holds only
// the others, and the refused task's credentials are not kept. Registration advertises the
// privileged-container capability only when privileged containers run.
func TestPrivilegedRejectedWhenDisabled(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	clock := clockwork.NewFakeClock()
	eng := &fakeEngine{policy: task.Policy{NoPrivileged: true}}
	cp := New(Config{Clock: clock}, &fakeControl{fakeECS: newFakeECS()}, eng, store, logger.Nop())
	priv := &task.Task{Arn: "arn:priv", Containers: []*task.Container{{Name: "root", Privileged: true}}}
	plain := &task.Task{Arn: "arn:plain", Containers: []*task.Container{{Name: "app"}}}
	require.NoError(t, cp.HandlePayload(ctx, acs.Payload{SeqNum: 1, Tasks: []acstranslate.Accepted{
		{Task: priv, RoleCredentials: creds("c-priv", clock.Now().Add(time.Hour))}, {Task: plain}}}))
	require.Len(t, eng.added, 1)
	assert.Equal(t, "arn:plain", eng.added[0].Arn)
	records, err := store.SentRecords(ctx)
	require.NoError(t, err)
	require.Len(t, records, 1)
	assert.Equal(t, "arn:priv", records[0].TaskArn)
	assert.Equal(t, "TaskDefinitionError: containerDefinitions[0].privileged: true is refused by ECS_DISABLE_PRIVILEGED=true", records[0].Report.StoppedReason)
	_, ok := cp.Credentials().Get("c-priv")
	assert.False(t, ok, "a refused task's credentials are dropped")
	seq, err := store.SeqNum(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), seq)

	for _, disabled := range []bool{false, true} {
		cfg := &config.Config{PrivilegedDisabled: disabled}
		reg := NewRegistration(cfg, engine.Resources{}, "27.0", "1.47", nil)
		assert.Equal(t, !disabled, reg.Privileged, "ECS_DISABLE_PRIVILEGED=%v", disabled)
	}
}

// With ECS_TASK_SECURITY_POLICY=baseline a payload's task the engine's policy refuses is rejected as
// a privileged one is: reported STOPPED with the field named, the others accepted. Registration then
// leaves out the privileged-container capability, so Amazon ECS places no privileged task here.
func TestBaselinePolicyRejected(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	eng := &fakeEngine{policy: task.Policy{Baseline: true}}
	cp := New(Config{Clock: clockwork.NewFakeClock()}, &fakeControl{fakeECS: newFakeECS()}, eng, store, logger.Nop())
	admin := &task.Task{Arn: "arn:admin", Containers: []*task.Container{{Name: "app"},
		{Name: "tool", Linux: &task.LinuxParameters{CapAdd: []string{"CHOWN", "SYS_ADMIN"}}}}}
	hostNet := &task.Task{Arn: "arn:host", NetworkMode: task.NetworkHost, Containers: []*task.Container{{Name: "app"}}}
	plain := &task.Task{Arn: "arn:plain", NetworkMode: task.NetworkBridge, Containers: []*task.Container{{Name: "app"}}}
	require.NoError(t, cp.HandlePayload(ctx, acs.Payload{SeqNum: 1, Tasks: []acstranslate.Accepted{{Task: admin}, {Task: hostNet}, {Task: plain}}}))
	require.Len(t, eng.added, 1)
	assert.Equal(t, "arn:plain", eng.added[0].Arn)
	records, err := store.SentRecords(ctx)
	require.NoError(t, err)
	reasons := map[string]string{}
	for _, r := range records {
		reasons[r.TaskArn] = r.Report.StoppedReason
	}
	assert.Equal(t, map[string]string{
		"arn:admin": "TaskDefinitionError: containerDefinitions[1].linuxParameters.capabilities.add[1]: SYS_ADMIN is refused by ECS_TASK_SECURITY_POLICY=baseline",
		"arn:host":  "TaskDefinitionError: networkMode: host is refused by ECS_TASK_SECURITY_POLICY=baseline",
	}, reasons)

	for policy, privileged := range map[string]bool{config.TaskSecurityPolicyNone: true, config.TaskSecurityPolicyBaseline: false} {
		reg := NewRegistration(&config.Config{TaskSecurityPolicy: policy}, engine.Resources{}, "27.0", "1.47", nil)
		assert.Equal(t, privileged, reg.Privileged, "ECS_TASK_SECURITY_POLICY=%s", policy)
	}
}

// TestTaskManifest: the candidates to stop are the control plane's running tasks the manifest does
// not list or lists as STOPPED, never static or stopped ones; the tasks ACS confirms are stopped
// with the manifest's reason, unknown and static ones skipped.
func TestTaskManifest(t *testing.T) {
	ctx := context.Background()
	eng := &fakeEngine{held: []*task.Task{
		{Arn: "arn:listed", DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning},
		{Arn: "arn:unlisted", DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning},
		{Arn: "arn:listed-stopped", DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning},
		{Arn: "arn:static", DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning, Static: true},
		{Arn: "arn:stopping", DesiredStatus: task.TaskStopped, KnownStatus: task.TaskRunning},
		{Arn: "arn:stopped", DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped},
	}}
	cp := New(Config{Clock: clockwork.NewFakeClock()}, &fakeControl{fakeECS: newFakeECS()}, eng, state.NewMemory(), logger.Nop())
	candidates, err := cp.HandleTaskManifest(ctx, []acswire.TaskIdentifier{
		{TaskArn: "arn:listed", DesiredStatus: "RUNNING"}, {TaskArn: "arn:listed-stopped", DesiredStatus: "STOPPED"},
		{TaskArn: "arn:not-here", DesiredStatus: "RUNNING"}})
	require.NoError(t, err)
	assert.Equal(t, []acswire.TaskIdentifier{{TaskArn: "arn:unlisted", DesiredStatus: "STOPPED"}, {TaskArn: "arn:listed-stopped", DesiredStatus: "STOPPED"}}, candidates)

	require.NoError(t, cp.HandleStopVerification(ctx, []acswire.TaskIdentifier{{TaskArn: "arn:unlisted"}, {TaskArn: "arn:static"}, {TaskArn: "arn:unknown"}}))
	assert.Equal(t, map[string]string{"arn:unlisted": ReasonNotInManifest}, eng.stopped)
}

// TestDrainInstanceWaitsForTheRegistration: DrainInstance drains this instance once it is known.
func TestDrainInstanceWaitsForTheRegistration(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	control := &fakeControl{fakeECS: newFakeECS()}
	cp := New(Config{Clock: clock}, control, &fakeEngine{}, state.NewMemory(), logger.Nop())
	done := make(chan error, 1)
	go func() { done <- cp.DrainInstance(ctx) }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "it waits for the registration")
	arn := "arn:aws:ecs:us-east-1:000000000000:container-instance/c/1"
	cp.arn.Store(&arn)
	clock.Advance(time.Second)
	require.NoError(t, <-done)
	assert.Equal(t, []string{arn}, control.drained)
}

// fakeTelemetry publishes one task's memory.
type fakeTelemetry struct{}

func (fakeTelemetry) Metrics(time.Time) []tcswire.TaskMetric {
	return []tcswire.TaskMetric{{TaskArn: "arn:task", ContainerMetrics: []tcswire.ContainerMetric{{ContainerName: "web", MemoryStatsSet: tcswire.FloatStats(20)}}}}
}

func (fakeTelemetry) Health(time.Time) []tcswire.TaskHealth { return nil }

// TestConnectRunsTCS: once registered, the control plane publishes to the discovered telemetry
// endpoint, signed with its credentials, beside ACS; metrics stay out when disabled.
func TestConnectRunsTCS(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableMetrics=%v", disabled), func(t *testing.T) {
			srv := tcstest.NewServer(t)
			control := &fakeControl{fakeECS: newFakeECS(), telemetry: srv.URL}
			creds := credentials.NewStaticCredentialsProvider("AKIDAGENT", "secret", "")
			cp := New(Config{Cluster: "c", Region: "us-east-1", Credentials: creds, Telemetry: TelemetryConfig{
				Source: fakeTelemetry{}, PublishInterval: 20 * time.Millisecond, DisableMetrics: disabled}},
				control, &fakeEngine{}, state.NewMemory(), logger.Nop())
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- cp.Connect(ctx) }()
			srv.WaitFor(t, "an instance status", func(s *tcstest.Server) bool { return len(s.InstanceStatuses()) > 0 })
			cancel()
			require.NoError(t, <-done)
			assert.Empty(t, srv.Problems())
			assert.Equal(t, "AKIDAGENT", srv.Upgrades()[0].AccessKeyID)
			assert.Equal(t, "arn:instance", srv.Upgrades()[0].Query.Get("containerInstance"))
			for _, key := range srv.AccessKeyIDs() {
				assert.Equal(t, "AKIDAGENT", key)
			}
			if disabled {
				assert.Empty(t, srv.MetricsBatches())
			} else {
				require.NotEmpty(t, srv.MetricsBatches())
				assert.Equal(t, "arn:task", srv.MetricsBatches()[0].Tasks[0].TaskArn)
			}
		})
	}
}

// TestNoTCSWithoutMetricsOrHealth: with ECS_DISABLE_METRICS and ECS_DISABLE_DOCKER_HEALTH_CHECK both
// set, as with the ECS agent, there is no TCS session at all; ACS goes on.
func TestNoTCSWithoutMetricsOrHealth(t *testing.T) {
	srv := tcstest.NewServer(t)
	control := &fakeControl{fakeECS: newFakeECS(), telemetry: srv.URL}
	cp := New(Config{Cluster: "c", Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDAGENT", "secret", ""),
		Telemetry: TelemetryConfig{Source: fakeTelemetry{}, PublishInterval: 20 * time.Millisecond, DisableMetrics: true, DisableHealth: true}},
		control, &fakeEngine{}, state.NewMemory(), logger.Nop())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cp.Connect(ctx) }()
	require.Eventually(t, func() bool { return control.polls.Load() > 0 }, 5*time.Second, time.Millisecond, "ACS is being connected")
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, control.telemetryAsks.Load(), "the TCS endpoint is not even discovered")
	assert.Empty(t, srv.Upgrades())
}

// TestDiscoveryRetries: a failed discovery of the ACS or the TCS endpoint is tried again after 1 s,
// then 2 s, then 4 s, and a done ctx ends the retries.
func TestDiscoveryRetries(t *testing.T) {
	tests := []struct {
		name  string
		run   func(ctx context.Context, cp *ControlPlane)
		calls func(*fakeControl) int32
	}{
		{"ACS", func(ctx context.Context, cp *ControlPlane) { _ = cp.Connect(ctx) }, func(f *fakeControl) int32 { return f.polls.Load() }},
		{"TCS", func(ctx context.Context, cp *ControlPlane) { cp.runTelemetry(ctx, "arn:instance") }, func(f *fakeControl) int32 { return f.telemetryAsks.Load() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			control := &fakeControl{fakeECS: newFakeECS(), undiscoverable: true}
			cp := New(Config{Clock: clock}, control, &fakeEngine{}, state.NewMemory(), logger.Nop())
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				tt.run(ctx, cp)
			}()
			for want, wait := int32(1), time.Second; want <= 3; want, wait = want+1, 2*wait {
				require.NoError(t, clock.BlockUntilContext(ctx, 1), "it waits after attempt %d", want)
				assert.Equal(t, want, tt.calls(control))
				clock.Advance(wait - time.Millisecond)
				assert.Equal(t, want, tt.calls(control), "not retried before %v", wait)
				clock.Advance(time.Millisecond)
				require.Eventually(t, func() bool { return tt.calls(control) == want+1 }, 5*time.Second, time.Millisecond,
					"retried after %v", wait)
			}
			cancel()
			<-done
			assert.Equal(t, int32(4), tt.calls(control), "no attempt once ctx is done")
		})
	}
}

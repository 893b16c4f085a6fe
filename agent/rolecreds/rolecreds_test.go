package rolecreds

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/taskcreds"
)

const (
	taskArn  = "arn:aws:ecs:us-west-2:012345678901:task/default/4f1c2b3a9d8e4f7a8b6c5d4e3f2a1b0c"
	taskRole = "arn:aws:iam::012345678901:role/app"
	execRole = "arn:aws:iam::012345678901:role/exec"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// oneMinute is a backoff without jitter: every retry comes a minute after the failure.
func oneMinute() retry.Backoff { return retry.NewExponentialBackoff(time.Minute, time.Minute, 0, 1) }

// newProvider returns a Provider on a fake clock at t0 with host credentials from the environment
// and a fake STS, closed when the test ends.
func newProvider(t *testing.T, cfg Config) (*Provider, *fakeSTS, *clockwork.FakeClock, *logger.Buffer) {
	t.Helper()
	isolateAWS(t)
	setHostCredentials(t)
	clock := clockwork.NewFakeClockAt(t0)
	f := newFakeSTS(t, clock)
	cfg.Clock = clock
	if cfg.Backoff == nil {
		cfg.Backoff = oneMinute
	}
	log, buf := newLogger(t)
	p := New(context.Background(), cfg, log)
	t.Cleanup(p.Close)
	return p, f, clock, buf
}

// get is Get with a deadline, so a test that goes wrong fails instead of hanging.
func get(t *testing.T, p *Provider, id string) (taskcreds.Credentials, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Get(ctx, id)
}

// waitForTimers waits until n role goroutines wait on the fake clock.
func waitForTimers(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, n), "the role goroutines never started waiting")
}

func TestAssumesTheTaskRolesWithTheHostCredentials(t *testing.T) {
	p, f, _, buf := newProvider(t, Config{})
	t.Setenv("AWS_REGION", "us-west-2")

	appID := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	execID := p.Add(taskArn, taskcreds.RoleTypeTaskExecution, execRole)
	assert.Regexp(t, idPattern, appID)
	assert.Regexp(t, idPattern, execID)
	assert.NotEqual(t, appID, execID)
	assert.Equal(t, appID, p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole), "adding the same role again keeps its ID")
	assert.Empty(t, p.Add(taskArn, taskcreds.RoleTypeTaskApplication, ""), "no role ARN, no ID")

	app, err := get(t, p, appID)
	require.NoError(t, err)
	exec, err := get(t, p, execID)
	require.NoError(t, err)
	assert.Equal(t, taskRole, app.RoleArn)
	assert.Equal(t, execRole, exec.RoleArn)
	assert.NotEqual(t, app.AccessKeyID, exec.AccessKeyID)
	for _, c := range []taskcreds.Credentials{app, exec} {
		assert.Regexp(t, `^ASIAROLE[12]$`, c.AccessKeyID)
		assert.Regexp(t, "^"+roleSecretPre+"[12]$", c.SecretAccessKey)
		assert.Regexp(t, "^"+roleTokenPre+"[12]$", c.SessionToken)
		assert.Equal(t, t0.Add(time.Hour), c.Expiration)
		assert.NotContains(t, c.String(), roleSecretPre)
		assert.NotContains(t, c.String(), roleTokenPre)
	}

	// Pulls with the execution role get its credentials; the task role's are not theirs.
	pull, err := p.ExecutionRoleCredentials(context.Background(), execID)
	require.NoError(t, err)
	assert.Equal(t, exec.AccessKeyID, pull.AccessKeyID)
	assert.Equal(t, exec.SecretAccessKey, pull.SecretAccessKey)
	assert.Equal(t, exec.SessionToken, pull.SessionToken)
	assert.True(t, pull.AWS().CanExpire)
	assert.Equal(t, exec.Expiration, pull.Expiration)
	_, err = p.ExecutionRoleCredentials(context.Background(), appID)
	assert.ErrorIs(t, err, ErrUnknownID)

	calls := f.requests()
	require.Len(t, calls, 2)
	var arns []string
	for _, c := range calls {
		arns = append(arns, c.roleArn)
		assert.Equal(t, hostKeyID, c.keyID, "signed with the host's access key")
		assert.True(t, c.signatureOK, "the SigV4 signature is made with the host's secret key")
		assert.Equal(t, "us-west-2", c.region, "the region comes from AWS_REGION")
		assert.Equal(t, "berth-4f1c2b3a9d8e4f7a8b6c5d4e3f2a1b0c", c.sessionName)
		assert.Equal(t, "3600", c.duration)
	}
	assert.ElementsMatch(t, []string{taskRole, execRole}, arns)
	assert.Equal(t, 2, p.Len())
	assertNoSecrets(t, "log", buf.String(), appID, execID)
	assert.Len(t, logLines(buf, "level=warn"), 0)
}

func TestNewIsLazy(t *testing.T) {
	isolateAWS(t)
	// A configuration file that does not parse: loading it would fail, so nothing may load it.
	bad := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(bad, []byte("[profile x\nregion = \n"), 0o600))
	t.Setenv("AWS_CONFIG_FILE", bad)
	f := newFakeSTS(t, clockwork.NewFakeClockAt(t0))
	log, buf := newLogger(t)

	p := New(context.Background(), Config{Clock: clockwork.NewFakeClockAt(t0)}, log)
	t.Cleanup(p.Close)
	assert.Empty(t, p.Add(taskArn, taskcreds.RoleTypeTaskApplication, ""))
	p.Remove(taskArn)
	_, err := get(t, p, "0123456789abcdef0123456789abcdef")
	assert.ErrorIs(t, err, ErrUnknownID)

	assert.False(t, p.sdkLoaded, "the SDK configuration is loaded only for a role")
	assert.Zero(t, f.count())
	assert.Empty(t, buf.String(), "nothing is logged until a task has a role")
}

func TestRefreshesBeforeExpiry(t *testing.T) {
	p, f, clock, _ := newProvider(t, Config{})
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	first, err := get(t, p, id)
	require.NoError(t, err)
	assert.Equal(t, "ASIAROLE1", first.AccessKeyID)
	waitForTimers(t, clock, 1)

	clock.Advance(39 * time.Minute) // before 2/3 of the hour: no refresh yet
	waitForTimers(t, clock, 1)
	assert.Equal(t, 1, f.count())
	c, err := get(t, p, id)
	require.NoError(t, err)
	assert.Equal(t, first, c)

	clock.Advance(time.Minute) // 2/3 of the hour, 20 minutes before expiry: refreshed
	waitForTimers(t, clock, 1)
	assert.Equal(t, 2, f.count())
	c, err = get(t, p, id)
	require.NoError(t, err)
	assert.Equal(t, "ASIAROLE2", c.AccessKeyID)
	assert.Equal(t, t0.Add(40*time.Minute+time.Hour), c.Expiration)

	clock.Advance(40 * time.Minute) // and again, 2/3 into the new set's lifetime
	waitForTimers(t, clock, 1)
	assert.Equal(t, 3, f.count())
}

func TestRefreshIn(t *testing.T) {
	p := New(context.Background(), Config{}, nil) // RefreshMargin 15 min
	for _, tt := range []struct {
		life, want time.Duration
	}{
		{time.Hour, 40 * time.Minute},            // 2/3
		{12 * time.Hour, 8 * time.Hour},          // 2/3
		{30 * time.Minute, 15 * time.Minute},     // 15 min before, not before half
		{40 * time.Minute, 25 * time.Minute},     // 15 min before expiry is earlier than 2/3
		{15 * time.Minute, 7*time.Minute + 30e9}, // half: the margin would be at once
		{0, 0}, {-time.Minute, 0},                // already expired: at once
	} {
		t.Run(tt.life.String(), func(t *testing.T) {
			assert.Equal(t, tt.want, p.refreshIn(t0, t0.Add(tt.life)))
		})
	}
}

func TestAccessDeniedIsTheGetErrorAndLoggedOnce(t *testing.T) {
	p, f, clock, buf := newProvider(t, Config{})
	const msg = "User: arn:aws:iam::012345678901:user/host is not authorized to perform: sts:AssumeRole on resource: " + taskRole
	f.fail(http.StatusForbidden, "AccessDenied", msg)
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)

	for i := 1; i <= 4; i++ {
		_, err := get(t, p, id)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrRoleRefused)
		assert.True(t, errdefs.IsUnauthorized(err))
		assert.Contains(t, err.Error(), "AccessDenied: "+msg)
		assert.Contains(t, err.Error(), taskArn)
		assert.Contains(t, err.Error(), id[:8])
		assert.NotContains(t, err.Error(), id)
		waitForTimers(t, clock, 1)
		assert.Equal(t, i, f.count(), "the role is retried after the backoff")
		clock.Advance(time.Minute)
	}
	warns := logLines(buf, "level=warn")
	require.Len(t, warns, 1, "the failure is logged once per task and role:\n%s", buf.String())
	assert.Contains(t, warns[0], "AccessDenied")
	assert.Contains(t, warns[0], "credentials_id="+id[:8])
	assert.Contains(t, warns[0], "role_arn="+taskRole)

	f.succeed() // the trust policy was fixed
	waitForTimers(t, clock, 1)
	require.Equal(t, 5, f.count())
	c, err := get(t, p, id)
	require.NoError(t, err)
	assert.Equal(t, "ASIAROLE1", c.AccessKeyID)
	assert.Len(t, logLines(buf, "available again"), 1)
	assert.Len(t, logLines(buf, "level=warn"), 1)
	assertNoSecrets(t, "log", buf.String(), id)
}

func TestNoHostCredentials(t *testing.T) {
	isolateAWS(t) // no credentials anywhere; instance metadata disabled
	clock := clockwork.NewFakeClockAt(t0)
	f := newFakeSTS(t, clock)
	log, buf := newLogger(t)
	p := New(context.Background(), Config{Clock: clock, Backoff: oneMinute}, log)
	t.Cleanup(p.Close)

	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	_, err := get(t, p, id)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoHostCredentials)
	assert.True(t, errdefs.IsUnauthorized(err))
	assert.Contains(t, err.Error(), "no AWS credentials on this host")
	assert.Contains(t, err.Error(), "AWS_EC2_METADATA_DISABLED", "the error says what the SDK said")
	assert.Zero(t, f.count(), "STS is not asked without credentials")

	waitForTimers(t, clock, 1)
	clock.Advance(time.Minute)
	waitForTimers(t, clock, 1)
	assert.Len(t, logLines(buf, "level=warn"), 1)
	assert.Contains(t, logLines(buf, "level=warn")[0], "AWS_EC2_METADATA_DISABLED")
}

func TestRefreshFailureServesValidCredentialsUntilExpiry(t *testing.T) {
	p, f, clock, buf := newProvider(t, Config{})
	t.Setenv("AWS_MAX_ATTEMPTS", "1") // the SDK's own retries would wait on the wall clock
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	first, err := get(t, p, id)
	require.NoError(t, err)
	waitForTimers(t, clock, 1)

	f.fail(http.StatusInternalServerError, "InternalFailure", "try later")
	clock.Advance(40 * time.Minute) // refresh fails
	waitForTimers(t, clock, 1)
	require.Equal(t, 2, f.count())
	c, err := get(t, p, id)
	require.NoError(t, err, "the current credentials are served while they are valid")
	assert.Equal(t, first, c)
	warns := logLines(buf, "level=warn")
	require.Len(t, warns, 1)
	assert.Contains(t, warns[0], "served until they expire")

	for range 20 { // retries every minute; the credentials expire at 60 min
		clock.Advance(time.Minute)
		waitForTimers(t, clock, 1)
	}
	_, err = get(t, p, id)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSTSUnavailable)
	assert.True(t, errdefs.IsRetriable(err))
	assert.Contains(t, err.Error(), "InternalFailure: try later")
	assert.Len(t, logLines(buf, "level=warn"), 1)
}

func TestRemoveStopsRefreshesAndForgetsTheIDs(t *testing.T) {
	p, f, clock, _ := newProvider(t, Config{})
	const other = "arn:aws:ecs:us-west-2:012345678901:task/default/other"
	appID := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	execID := p.Add(taskArn, taskcreds.RoleTypeTaskExecution, execRole)
	otherID := p.Add(other, taskcreds.RoleTypeTaskApplication, taskRole)
	for _, id := range []string{appID, execID, otherID} {
		_, err := get(t, p, id)
		require.NoError(t, err)
	}
	waitForTimers(t, clock, 3)

	p.Remove(taskArn)
	p.Remove(taskArn) // idempotent
	assert.Equal(t, 1, p.Len())
	for _, id := range []string{appID, execID} {
		_, err := get(t, p, id)
		assert.ErrorIs(t, err, ErrUnknownID)
		assert.True(t, errdefs.IsNotFound(err))
	}
	waitForTimers(t, clock, 1) // only the other task's role still waits
	clock.Advance(2 * time.Hour)
	waitForTimers(t, clock, 1)
	assert.Equal(t, 4, f.count(), "only the other task's role was refreshed")
	_, err := get(t, p, otherID)
	require.NoError(t, err)
}

// TestStopEndsRefreshesAndServesTheLastCredentialsUntilRemove: once the task stopped, its roles are
// not assumed again (the 3 h until cleanup would be 4 more AssumeRoles each); the last credentials
// are served until they expire, then ErrTaskStopped, and Remove still forgets the IDs.
func TestStopEndsRefreshesAndServesTheLastCredentialsUntilRemove(t *testing.T) {
	p, f, clock, _ := newProvider(t, Config{})
	const other = "arn:aws:ecs:us-west-2:012345678901:task/default/other"
	appID := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	execID := p.Add(taskArn, taskcreds.RoleTypeTaskExecution, execRole)
	otherID := p.Add(other, taskcreds.RoleTypeTaskApplication, taskRole)
	last := map[string]taskcreds.Credentials{}
	for _, id := range []string{appID, execID, otherID} {
		c, err := get(t, p, id)
		require.NoError(t, err)
		last[id] = c
	}
	waitForTimers(t, clock, 3)

	p.Stop(taskArn)
	p.Stop(taskArn)            // idempotent
	waitForTimers(t, clock, 1) // only the other task's role still waits
	assert.Equal(t, 3, p.Len(), "the IDs are kept until Remove")
	for _, id := range []string{appID, execID} {
		c, err := get(t, p, id)
		require.NoError(t, err, "the last credentials are served until they expire")
		assert.Equal(t, last[id], c)
	}

	for range 4 { // the other task's role is refreshed every 40 min
		clock.Advance(40 * time.Minute)
		waitForTimers(t, clock, 1)
	}
	clock.Advance(20 * time.Minute) // 3 h: the task cleanup wait
	assert.Equal(t, 3+4, f.count(), "only the other task's role was refreshed")
	for _, id := range []string{appID, execID} {
		_, err := get(t, p, id)
		assert.ErrorIs(t, err, ErrTaskStopped)
		assert.True(t, errdefs.IsNotFound(err), "the task endpoint's not found")
		assert.Contains(t, err.Error(), taskArn)
	}
	_, err := get(t, p, otherID)
	require.NoError(t, err)

	require.NoError(t, p.Provide(taskArn, taskcreds.RoleTypeTaskApplication, taskRole, appID))
	assert.Equal(t, 3+4, f.count(), "providing a stopped task's role again does not assume it again")
	p.Remove(taskArn)
	assert.Equal(t, 1, p.Len())
	_, err = get(t, p, appID)
	assert.ErrorIs(t, err, ErrUnknownID)
}

// TestStopDuringTheFirstAttempt: a task that stops while its role is first being assumed gets no
// retry, and Get says the task stopped instead of waiting.
func TestStopDuringTheFirstAttempt(t *testing.T) {
	p, f, clock, _ := newProvider(t, Config{})
	f.gate = make(chan struct{})
	defer close(f.gate) // the cancelled request's handler returns
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	p.Stop(taskArn)
	_, err := get(t, p, id)
	assert.ErrorIs(t, err, ErrTaskStopped)
	clock.Advance(time.Hour)
	waitForTimers(t, clock, 0)
}

// TestTaskRolesDisabled: with ECS_ENABLE_TASK_IAM_ROLE=false no task role is assumed, and its ID is
// unknown; the execution role still is, as the ECS agent still uses it.
func TestTaskRolesDisabled(t *testing.T) {
	p, f, _, _ := newProvider(t, Config{TaskRolesDisabled: true})
	const appID, execID = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	err := p.Provide(taskArn, taskcreds.RoleTypeTaskApplication, taskRole, appID)
	require.ErrorIs(t, err, ErrTaskRolesDisabled)
	assert.True(t, errdefs.IsFailedPrecondition(err))
	assert.Contains(t, err.Error(), "ECS_ENABLE_TASK_IAM_ROLE=false")
	assert.Contains(t, err.Error(), taskArn)
	_, err = p.TaskCredentials(context.Background(), appID)
	assert.ErrorIs(t, err, ErrUnknownID, "the task endpoint serves no task role")

	require.NoError(t, p.Provide(taskArn, taskcreds.RoleTypeTaskExecution, execRole, execID))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.ExecutionRoleCredentials(ctx, execID)
	require.NoError(t, err)
	assert.Equal(t, execRole, c.RoleArn)
	require.Len(t, f.requests(), 1)
	assert.Equal(t, execRole, f.requests()[0].roleArn, "only the execution role was assumed")
}

func TestAddingAnotherRoleReplacesTheOld(t *testing.T) {
	p, f, _, _ := newProvider(t, Config{})
	oldID := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	_, err := get(t, p, oldID)
	require.NoError(t, err)

	const newRole = "arn:aws:iam::012345678901:role/other"
	newID := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, newRole)
	assert.NotEqual(t, oldID, newID)
	_, err = get(t, p, oldID)
	assert.ErrorIs(t, err, ErrUnknownID)
	c, err := get(t, p, newID)
	require.NoError(t, err)
	assert.Equal(t, newRole, c.RoleArn)
	assert.Equal(t, 1, p.Len())
	assert.Equal(t, 2, f.count())
}

func TestRestoreKeepsTheID(t *testing.T) {
	p, _, _, _ := newProvider(t, Config{})
	const id = "0123456789abcdef0123456789abcdef"
	require.NoError(t, p.Provide(taskArn, taskcreds.RoleTypeTaskApplication, taskRole, id))
	c, err := get(t, p, id)
	require.NoError(t, err)
	assert.Equal(t, taskRole, c.RoleArn)
	assert.Equal(t, id, p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole), "Add finds the restored role")

	for _, tt := range []struct {
		name, task, roleType, roleArn, id string
		class                             error
	}{
		{"short ID", taskArn, taskcreds.RoleTypeTaskExecution, execRole, "0123", errdefs.ErrInvalidArgument},
		{"not hex", taskArn, taskcreds.RoleTypeTaskExecution, execRole, "0123456789abcdef0123456789abcdeg", errdefs.ErrInvalidArgument},
		{"no role", taskArn, taskcreds.RoleTypeTaskExecution, "", "fedcba9876543210fedcba9876543210", errdefs.ErrInvalidArgument},
		{"ID of another role", taskArn, taskcreds.RoleTypeTaskExecution, execRole, id, errdefs.ErrConflict},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Provide(tt.task, tt.roleType, tt.roleArn, tt.id)
			assert.ErrorIs(t, err, tt.class)
			assert.Equal(t, 1, p.Len())
		})
	}
}

func TestGetWaitsForTheFirstAttempt(t *testing.T) {
	p, f, _, _ := newProvider(t, Config{})
	f.gate = make(chan struct{})
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Get(ctx, id)
	assert.ErrorIs(t, err, ErrNotReady)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, errdefs.IsUnavailable(err))

	got := make(chan error, 1)
	go func() {
		_, err := get(t, p, id)
		got <- err
	}()
	f.gate <- struct{}{}
	require.NoError(t, <-got)
}

func TestManyAddRemoveCyclesLeaveNothingBehind(t *testing.T) {
	p, f, _, _ := newProvider(t, Config{})
	// The fake STS closes every connection after its answer, so no connection goroutine of the
	// client or the server outlives its request: everything beyond this baseline is a leak.
	baseline := runtime.NumGoroutine()

	for i := range 100 {
		task := fmt.Sprintf("%s-%d", taskArn, i)
		app := p.Add(task, taskcreds.RoleTypeTaskApplication, taskRole)
		exec := p.Add(task, taskcreds.RoleTypeTaskExecution, execRole)
		if i%2 == 0 { // half the tasks are removed while their first AssumeRole may still run
			_, err := get(t, p, app)
			require.NoError(t, err)
			_, err = get(t, p, exec)
			require.NoError(t, err)
		}
		p.Remove(task)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			task := fmt.Sprintf("%s-batch-%d", taskArn, i)
			_, err := get(t, p, p.Add(task, taskcreds.RoleTypeTaskApplication, taskRole))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 50, p.Len())
	for i := range 50 {
		p.Remove(fmt.Sprintf("%s-batch-%d", taskArn, i))
	}

	assert.Zero(t, p.Len())
	p.mu.Lock()
	assert.Empty(t, p.byID)
	assert.Empty(t, p.byTask)
	p.mu.Unlock()
	assert.Greater(t, f.count(), 100)
	waitForGoroutines(t, baseline)
}

// waitForGoroutines waits until at most n goroutines run (connection goroutines end shortly after
// their last read), and fails with every goroutine's stack when they do not within 10 s.
func waitForGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("%d goroutines run, more than the baseline of %d:\n%s", runtime.NumGoroutine(), n, stacks.String())
		}
		<-tick.C
	}
}

func TestCloseStopsEverything(t *testing.T) {
	isolateAWS(t)
	setHostCredentials(t)
	clock := clockwork.NewFakeClockAt(t0)
	newFakeSTS(t, clock)
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, Config{Clock: clock}, nil)
	id := p.Add(taskArn, taskcreds.RoleTypeTaskApplication, taskRole)
	_, err := get(t, p, id)
	require.NoError(t, err)

	cancel() // the owner's context ends: the goroutines stop
	waitForTimers(t, clock, 0)
	assert.Empty(t, p.Add("another", taskcreds.RoleTypeTaskApplication, taskRole), "nothing is added once the context ended")
	p.Close()
	p.Close()
	assert.Zero(t, p.Len())
	assert.True(t, errdefs.IsFailedPrecondition(p.Provide(taskArn, taskcreds.RoleTypeTaskApplication, taskRole, id)))
}

func TestSessionName(t *testing.T) {
	for _, tt := range []struct{ prefix, arn, want string }{
		{"berth", taskArn, "berth-4f1c2b3a9d8e4f7a8b6c5d4e3f2a1b0c"},
		{"berth", "arn:aws:ecs:us-east-1:0:task/static-web-1a2b3c", "berth-static-web-1a2b3c"},
		{"my host", "task:with:colons", "my-host-task-with-colons"},
		{"berth", "arn:aws:ecs:us-east-1:0:task/" + strings.Repeat("x", 80), "berth-" + strings.Repeat("x", 58)},
	} {
		t.Run(tt.want, func(t *testing.T) {
			got := sessionName(tt.prefix, tt.arn)
			assert.Equal(t, tt.want, got)
			assert.Regexp(t, `^[\w+=,.@-]{2,64}$`, got)
		})
	}
}

func TestErrorsAreClassified(t *testing.T) {
	for _, tt := range []struct {
		err   error
		class error
		retry bool
	}{
		{ErrUnknownID, errdefs.ErrNotFound, false},
		{ErrNoHostCredentials, errdefs.ErrUnauthorized, false},
		{ErrRoleRefused, errdefs.ErrUnauthorized, false},
		{ErrSTSUnavailable, errdefs.ErrUnavailable, true},
		{ErrNotReady, errdefs.ErrUnavailable, true},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			assert.True(t, errors.Is(tt.err, tt.class))
			assert.Equal(t, tt.retry, errdefs.IsRetriable(tt.err))
		})
	}
}

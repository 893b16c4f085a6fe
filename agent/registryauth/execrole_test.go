package registryauth

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/taskcreds"
)

const (
	execRoleArn   = "arn:aws:iam::012345678901:role/exec"
	execKeyID     = "ASIAEXECUTIONROLE01"
	execSecretKey = "exec-secret-access-key-a87ff679a2"
	execSession   = "exec-session-token-e4da3b7fbbce"
	execCredsID   = "c0ffee00c0ffee00c0ffee00c0ffee00"
)

// fakeRoleCreds is a RoleCredentials with credentials (or an error) per ID, counting lookups.
type fakeRoleCreds struct {
	mu      sync.Mutex
	creds   map[string]taskcreds.Credentials
	err     error
	lookups int
}

var _ RoleCredentials = (*fakeRoleCreds)(nil)

func (f *fakeRoleCreds) ExecutionRoleCredentials(_ context.Context, id string) (taskcreds.Credentials, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.err != nil {
		return taskcreds.Credentials{}, f.err
	}
	c, ok := f.creds[id]
	if !ok {
		return taskcreds.Credentials{}, errdefs.New(errdefs.ErrNotFound, "no such credentials")
	}
	return c, nil
}

func (f *fakeRoleCreds) set(id string, c taskcreds.Credentials) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.creds == nil {
		f.creds = map[string]taskcreds.Credentials{}
	}
	f.creds[id] = c
}

func execCreds(keyID, secret, session string, expires time.Time) taskcreds.Credentials {
	return taskcreds.Credentials{AccessKeyID: keyID, SecretAccessKey: secret, SessionToken: session, Expiration: expires}
}

func execRole(task string) ExecutionRole {
	return ExecutionRole{TaskArn: task, RoleArn: execRoleArn, CredentialsID: execCredsID}
}

// newVerifyingECR is the ECR stand-in checking every signature against the host's key and the
// execution role's.
func newVerifyingECR(t *testing.T, expiresAt time.Time) *fakeECR {
	ecr := newFakeECR(t, expiresAt)
	ecr.secrets = map[string]sigv4Key{"AKIDENV": {secret: envSecretKey}, execKeyID: {secret: execSecretKey, sessionToken: execSession}}
	return ecr
}

func TestExecutionRoleTokenIsSignedWithTheRolesKey(t *testing.T) {
	isolateAWS(t)
	setEnvCredentials(t) // the host's own key, which must not be used
	imds := newFakeIMDS(t, "us-east-1")
	ecr := newVerifyingECR(t, t0.Add(12*time.Hour)).useAsDefault(t)
	clock := clockwork.NewFakeClockAt(t0)
	p, buf := newProvider(t, Config{AWSRegion: "us-east-1", Clock: clock})
	creds := &fakeRoleCreds{}
	creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, t0.Add(6*time.Hour)))
	roles := p.ExecutionRoles(creds)
	ctx := context.Background()

	auth := roles.For(execRole("task-1"))
	got, err := auth.Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, []string{execKeyID}, ecr.verified(), "signed with the execution role's key and session token")

	_, err = auth.Auth(ctx, ecrHost+"/other:1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), ecr.requests.Load(), "cached per task, credentials and registry")

	// The host's own pulls keep their own token, fetched with the host's key.
	got, err = p.Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, []string{execKeyID, "AKIDENV"}, ecr.verified())

	// Another task with the same role has its own credentials, and its own token.
	creds.set("11111111111111111111111111111111", execCreds(execKeyID, execSecretKey, execSession, t0.Add(6*time.Hour)))
	other := execRole("task-2")
	other.CredentialsID = "11111111111111111111111111111111"
	_, err = roles.For(other).Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(3), ecr.requests.Load())

	// Removing the task drops its token; the other task keeps its own.
	roles.TaskRemoved("task-1")
	_, err = roles.For(other).Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(3), ecr.requests.Load())
	_, err = auth.Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(4), ecr.requests.Load(), "task-1's token was dropped")

	// Invalidate drops the token of the role's pulls only.
	auth.Invalidate(ecrImage)
	_, err = p.Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(4), ecr.requests.Load(), "the host's token stays")
	_, err = auth.Auth(ctx, ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(5), ecr.requests.Load())

	// An image outside ECR is pulled as the host pulls it: no role lookup, no ECR call.
	lookups := creds.lookups
	got, err = auth.Auth(ctx, "127.0.0.1:5000/app:1")
	require.NoError(t, err)
	assert.Zero(t, got)
	assert.Equal(t, lookups, creds.lookups)
	assert.Equal(t, int64(5), ecr.requests.Load())

	assert.Zero(t, imds.total.Load(), "region and credentials are configured: nobody asks IMDS")
	assert.Empty(t, logLines(buf, "level=warn"))
	assertNoSecrets(t, "log", buf.String())
	assert.NotContains(t, buf.String(), execSecretKey)
	assert.NotContains(t, buf.String(), execSession)
}

// The execution role is used for ECR images whatever ECS_REGISTRY_ECR_* and ECS_ENGINE_AUTH_DATA say
// of the host's own credentials: the task's definition asked for it.
func TestExecutionRoleIgnoresHostFilters(t *testing.T) {
	isolateAWS(t)
	ecr := newVerifyingECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
	p, _ := newProvider(t, Config{AWSRegion: "eu-west-1", ECRRegions: config.ECRRegions{Configured: true}, ExcludeAccounts: set.Of(account),
		AuthType: AuthTypeDocker, AuthData: config.Secret(`{"` + ecrHost + `:5000": {"username": "static", "password": "` + staticSecretKey + `"}}`)})
	creds := &fakeRoleCreds{}
	creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, time.Time{}))

	got, err := p.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, "static", got.Username, "the host's pulls of this image use the static credentials")

	got, err = p.ExecutionRoles(creds).For(execRole("task")).Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, []string{execKeyID}, ecr.verified())
}

// The registry, region and endpoint ACS names win over the image's host.
func TestExecutionRoleECRAuthData(t *testing.T) {
	isolateAWS(t)
	ecr := newVerifyingECR(t, time.Now().Add(12*time.Hour)) // reached only through the override
	p, _ := newProvider(t, Config{})
	creds := &fakeRoleCreds{}
	creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, time.Time{}))
	role := execRole("task")
	role.RegistryID, role.Region, role.EndpointOverride = "210987654321", "eu-central-1", ecr.srv.URL+"/"

	got, err := p.ExecutionRoles(creds).For(role).Auth(context.Background(), "mirror.example.com:5000/team/app:1")
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth("210987654321"), got)
	assert.Equal(t, [][]string{{"210987654321"}}, ecr.registry)
	assert.Equal(t, []string{"eu-central-1"}, ecr.regions)
	assert.Equal(t, []string{execKeyID}, ecr.verified())

	role.EndpointOverride = "ftp://ecr.example.com"
	_, err = p.ExecutionRoles(creds).For(role).Auth(context.Background(), ecrImage)
	var cannot *CannotPullECRContainerError
	require.ErrorAs(t, err, &cannot)
	assert.Contains(t, err.Error(), "endpoint override")
}

// A token is not kept past the credentials it was made with, and a refresh uses the role's current
// credentials.
func TestExecutionRoleTokenRefreshesWithTheCredentials(t *testing.T) {
	isolateAWS(t)
	ecr := newVerifyingECR(t, t0.Add(12*time.Hour)).useAsDefault(t)
	ecr.secrets["ASIAEXECUTIONROLE02"] = sigv4Key{secret: "second-exec-secret", sessionToken: "second-exec-session"}
	clock := clockwork.NewFakeClockAt(t0)
	p, _ := newProvider(t, Config{Clock: clock})
	creds := &fakeRoleCreds{}
	creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, t0.Add(40*time.Minute)))
	auth := p.ExecutionRoles(creds).For(execRole("task"))

	_, err := auth.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	clock.Advance(19 * time.Minute) // the token, capped at 40 min, is refreshed after half its life
	_, err = auth.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, int64(1), ecr.requests.Load())

	creds.set(execCredsID, execCreds("ASIAEXECUTIONROLE02", "second-exec-secret", "second-exec-session", t0.Add(2*time.Hour)))
	clock.Advance(2 * time.Minute)
	_, err = auth.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, []string{execKeyID, "ASIAEXECUTIONROLE02"}, ecr.verified())
}

func TestExecutionRoleErrors(t *testing.T) {
	tests := []struct {
		name      string
		role      func(r *ExecutionRole)
		setup     func(creds *fakeRoleCreds, ecr *fakeECR)
		wantRetry bool
		wantCause string
		wantCalls int64
	}{
		{name: "credentials unknown", setup: func(creds *fakeRoleCreds, _ *fakeECR) {},
			wantCause: "no such credentials"},
		{name: "no execution role", role: func(r *ExecutionRole) { r.RoleArn, r.CredentialsID = "", "" },
			setup: func(*fakeRoleCreds, *fakeECR) {}, wantCause: "the task has no execution role"},
		{name: "STS refused the role", setup: func(creds *fakeRoleCreds, _ *fakeECR) {
			creds.err = fmt.Errorf("assume role: %w", errdefs.New(errdefs.ErrUnauthorized, "AccessDenied: not allowed"))
		}, wantCause: "AccessDenied"},
		{name: "credentials not ready", setup: func(creds *fakeRoleCreds, _ *fakeECR) {
			creds.err = errdefs.New(errdefs.ErrUnavailable, "still assuming")
		}, wantRetry: true, wantCause: "still assuming"},
		{name: "ECR refused the role", setup: func(creds *fakeRoleCreds, ecr *fakeECR) {
			creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, time.Time{}))
			ecr.fail(400, "AccessDeniedException")
		}, wantCause: "AccessDeniedException", wantCalls: 1},
		{name: "ECR unreachable", setup: func(creds *fakeRoleCreds, ecr *fakeECR) {
			creds.set(execCredsID, execCreds(execKeyID, execSecretKey, execSession, time.Time{}))
			ecr.fail(500, "ServerException")
		}, wantRetry: true, wantCause: "ServerException", wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			t.Setenv("AWS_MAX_ATTEMPTS", "1")
			ecr := newVerifyingECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
			p, buf := newProvider(t, Config{CallTimeout: 2 * time.Second})
			creds := &fakeRoleCreds{}
			tt.setup(creds, ecr)
			role := execRole("task")
			if tt.role != nil {
				tt.role(&role)
			}

			got, err := p.ExecutionRoles(creds).For(role).Auth(context.Background(), ecrImage)
			require.Error(t, err)
			assert.Zero(t, got)
			assert.Equal(t, tt.wantRetry, errdefs.IsRetriable(err), "%v", err)
			if tt.wantRetry {
				var unreachable *ECRUnreachableError
				require.ErrorAs(t, err, &unreachable)
				assert.Equal(t, role.RoleArn, unreachable.Role)
			} else {
				var cannot *CannotPullECRContainerError
				require.ErrorAs(t, err, &cannot)
				assert.True(t, errdefs.IsUnauthorized(err))
				assert.Equal(t, role.RoleArn, cannot.Role)
			}
			assert.Contains(t, err.Error(), ecrImage, "the error names the image")
			assert.Contains(t, err.Error(), role.RoleArn, "and the execution role")
			assert.Contains(t, err.Error(), tt.wantCause)
			assert.Equal(t, tt.wantCalls, ecr.requests.Load())
			for _, secret := range []string{execSecretKey, execSession} {
				assert.NotContains(t, err.Error(), secret)
				assert.NotContains(t, buf.String(), secret)
			}
		})
	}
}

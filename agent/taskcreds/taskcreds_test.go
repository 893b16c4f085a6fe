package taskcreds_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

const (
	execKeyID     = "ASIAEXECUTIONROLE01"
	execSecretKey = "exec-secret-access-key-a87ff679a2"
	execSession   = "exec-session-token-e4da3b7fbbce"
	execCredsID   = "c0ffee00c0ffee00c0ffee00c0ffee00"
)

// fakeRoles is a Source with credentials (or an error) per ID, for both role types.
type fakeRoles struct {
	creds map[string]taskcreds.Credentials
	err   error
}

var _ taskcreds.Source = (*fakeRoles)(nil)

func (f *fakeRoles) TaskCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	return f.ExecutionRoleCredentials(ctx, id)
}

func (f *fakeRoles) ExecutionRoleCredentials(_ context.Context, id string) (taskcreds.Credentials, error) {
	if f.err != nil {
		return taskcreds.Credentials{}, f.err
	}
	c, ok := f.creds[id]
	if !ok {
		return taskcreds.Credentials{}, errdefs.New(errdefs.ErrNotFound, "no such credentials")
	}
	return c, nil
}

func execCreds() taskcreds.Credentials {
	return taskcreds.Credentials{RoleArn: "arn:aws:iam::012345678901:role/exec", AccessKeyID: execKeyID,
		SecretAccessKey: execSecretKey, SessionToken: execSession, Expiration: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestCredentialsPrintWithoutSecrets(t *testing.T) {
	c := execCreds()
	for _, text := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprint([]taskcreds.Credentials{c})} {
		assert.NotContains(t, text, execSecretKey)
		assert.NotContains(t, text, execSession)
		assert.Contains(t, text, execKeyID)
		assert.Contains(t, text, "2030-01-02T03:04:05Z")
	}
	assert.Contains(t, taskcreds.Credentials{}.String(), "Expiration:none")
}

func TestCredentialsAWS(t *testing.T) {
	c := execCreds().AWS()
	assert.Equal(t, execKeyID, c.AccessKeyID)
	assert.Equal(t, execSecretKey, c.SecretAccessKey)
	assert.Equal(t, execSession, c.SessionToken)
	assert.True(t, c.CanExpire)
	assert.Equal(t, execCreds().Expiration, c.Expires)
	assert.False(t, taskcreds.Credentials{AccessKeyID: "a"}.AWS().CanExpire, "no expiration: they do not expire")
}

func TestShortID(t *testing.T) {
	for id, want := range map[string]string{execCredsID: "c0ffee00", "0123456789": "01234567", "01234567": "01234567", "abc": "abc", "": ""} {
		assert.Equal(t, want, taskcreds.ShortID(id), id)
	}
}

func TestChain(t *testing.T) {
	store := taskcreds.NewStore()
	roles := &fakeRoles{creds: map[string]taskcreds.Credentials{execCredsID: execCreds()}}
	chain := taskcreds.NewChain(taskcreds.ChainConfig{Store: store, Roles: roles})

	got, err := chain.ExecutionRoleCredentials(context.Background(), execCredsID)
	require.NoError(t, err)
	assert.Equal(t, execKeyID, got.AccessKeyID, "the roles answer for an ID the store does not know")
	got, err = chain.TaskCredentials(context.Background(), execCredsID)
	require.NoError(t, err)
	assert.Equal(t, execKeyID, got.AccessKeyID)

	_, err = chain.ExecutionRoleCredentials(context.Background(), "unknown")
	assert.True(t, errdefs.IsNotFound(err))
	_, err = chain.TaskCredentials(context.Background(), "unknown")
	assert.True(t, errdefs.IsNotFound(err))

	roles.err = errdefs.New(errdefs.ErrUnavailable, "down")
	_, err = chain.ExecutionRoleCredentials(context.Background(), execCredsID)
	assert.True(t, errdefs.IsUnavailable(err), "a source that knows the ID answers for it")

	require.NoError(t, store.Put("arn:t1", taskcreds.RoleTypeTaskExecution, execCredsID, taskcreds.Credentials{AccessKeyID: "FROMACS"}))
	got, err = chain.ExecutionRoleCredentials(context.Background(), execCredsID)
	require.NoError(t, err)
	assert.Equal(t, "FROMACS", got.AccessKeyID, "the control plane's store is asked first")
	_, err = chain.TaskCredentials(context.Background(), execCredsID)
	assert.True(t, errdefs.IsUnavailable(err), "an execution role's ID is not a task role's: the next source is asked")

	_, err = taskcreds.NewChain(taskcreds.ChainConfig{Store: taskcreds.NewStore()}).ExecutionRoleCredentials(context.Background(), execCredsID)
	assert.True(t, errdefs.IsNotFound(err), "without roles only the store is asked")
}

// TestForSecrets covers which credentials a task's secrets are fetched with.
func TestForSecrets(t *testing.T) {
	host := credentials.NewStaticCredentialsProvider("AKIDHOST", "host-secret", "")
	hostCreds := func() (aws.CredentialsProvider, error) { return host, nil }
	clock := clockwork.NewFakeClock()
	store := taskcreds.NewStore()
	require.NoError(t, store.Put("arn:t1", taskcreds.RoleTypeTaskExecution, execCredsID, taskcreds.Credentials{
		AccessKeyID: execKeyID, SecretAccessKey: execSecretKey, SessionToken: execSession, Expiration: clock.Now().Add(time.Hour)}))
	withRole := &task.Task{Arn: "arn:t1", ExecutionRoleArn: "arn:aws:iam::012345678901:role/exec", ExecutionCredentialsID: execCredsID}
	unknownID := &task.Task{Arn: "arn:t2", ExecutionRoleArn: "arn:aws:iam::012345678901:role/exec", ExecutionCredentialsID: "0000000000000000"}
	roleWithoutID := &task.Task{Arn: "arn:t3", ExecutionRoleArn: "arn:aws:iam::012345678901:role/exec"}
	noRole := &task.Task{Arn: "arn:t4"}

	for _, tt := range []struct {
		name    string
		local   bool
		task    *task.Task
		wantKey string // the access key the fetches are signed with; "" with wantErr
		wantErr error  // from ForSecrets, or else from Retrieve
	}{
		{"ecs mode: the execution role's", false, withRole, execKeyID, nil},
		{"local mode: the execution role's", true, withRole, execKeyID, nil},
		{"ecs mode: no execution role is refused", false, noRole, "", taskcreds.ErrNoExecutionRole},
		{"local mode: no execution role, the host's", true, noRole, "AKIDHOST", nil},
		{"local mode: a role without credentials is refused, never the host's", true, roleWithoutID, "", taskcreds.ErrNoExecutionRole},
		{"ecs mode: a role without credentials is refused", false, roleWithoutID, "", taskcreds.ErrNoExecutionRole},
		{"credentials the chain does not know fail when signing", false, unknownID, "", errdefs.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			chain := taskcreds.NewChain(taskcreds.ChainConfig{Store: store, Local: tt.local, HostCredentials: hostCreds})
			p, err := chain.ForSecrets(tt.task)
			if err == nil {
				var c aws.Credentials
				c, err = p.Retrieve(context.Background())
				if tt.wantKey != "" {
					require.NoError(t, err)
					assert.Equal(t, tt.wantKey, c.AccessKeyID)
				}
			}
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErr)
				if id := tt.task.ExecutionCredentialsID; id != "" {
					assert.NotContains(t, err.Error(), id, "a credentials ID is shown only by its short form")
				}
			}
		})
	}
	assert.True(t, errdefs.IsFailedPrecondition(taskcreds.ErrNoExecutionRole))
}

// TestForSecretsHostCredentialsFail passes on why the host's credentials cannot be had.
func TestForSecretsHostCredentialsFail(t *testing.T) {
	noHost := errors.New("the host has no AWS credentials")
	chain := taskcreds.NewChain(taskcreds.ChainConfig{Store: taskcreds.NewStore(), Local: true,
		HostCredentials: func() (aws.CredentialsProvider, error) { return nil, noHost }})
	_, err := chain.ForSecrets(&task.Task{Arn: "arn:t1"})
	assert.ErrorIs(t, err, noHost)
}

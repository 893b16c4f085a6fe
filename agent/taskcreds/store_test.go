package taskcreds_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// creds returns credentials expiring at exp, to the second, as the control plane sends them.
func creds(exp time.Time) taskcreds.Credentials {
	return taskcreds.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: "tok", Expiration: exp.UTC().Truncate(time.Second)}
}

func TestStore(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s := taskcreds.NewStore(clock)
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a1", creds(clock.Now().Add(time.Hour))))
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskExecution, "e1", creds(clock.Now().Add(2*time.Hour))))
	require.NoError(t, s.Put("arn:t2", taskcreds.RoleTypeTaskApplication, "b1", creds(clock.Now().Add(time.Hour))))

	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a2", creds(clock.Now().Add(3*time.Hour))))
	_, ok := s.Get("a1")
	assert.False(t, ok, "a refresh replaces the task's earlier set of the same role")
	_, ok = s.Get("a2")
	assert.True(t, ok)

	clock.Advance(time.Hour)
	_, ok = s.Get("b1")
	assert.False(t, ok, "expired at its expiration")
	_, ok = s.Get("e1")
	assert.True(t, ok)

	// Pulls with the execution role read its credentials; a task role's are not served to them.
	exec, err := s.ExecutionRoleCredentials(context.Background(), "e1")
	require.NoError(t, err)
	want := creds(time.Time{})
	assert.Equal(t, want.AccessKeyID, exec.AccessKeyID)
	assert.Equal(t, want.SecretAccessKey, exec.SecretAccessKey)
	assert.Equal(t, want.SessionToken, exec.SessionToken)
	assert.True(t, exec.AWS().CanExpire)
	assert.True(t, clock.Now().Add(time.Hour).Truncate(time.Second).Equal(exec.Expiration), "expires with the credentials: %s", exec.Expiration)
	_, err = s.ExecutionRoleCredentials(context.Background(), "a2")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials, "a task role's credentials are not an execution role's")
	assert.True(t, errdefs.IsNotFound(err))

	// Containers get the task role's; an execution role's are never served to them.
	app, err := s.TaskCredentials(context.Background(), "a2")
	require.NoError(t, err)
	assert.Equal(t, want.AccessKeyID, app.AccessKeyID)
	_, err = s.TaskCredentials(context.Background(), "e1")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials)

	s.TaskRemoved("arn:t1")
	assert.Zero(t, s.Len(), "removing the task drops its sets; the expired one went on Get")
	_, err = s.ExecutionRoleCredentials(context.Background(), "e1")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials, "gone with the task")

	err = s.Put("arn:t3", taskcreds.RoleTypeTaskApplication, "", taskcreds.Credentials{SecretAccessKey: "hush"})
	require.Error(t, err, "no ID")
	assert.NotContains(t, err.Error(), "hush", "errors never carry a secret")
	assert.Zero(t, s.Len())
}

func TestStoreDropsExpiredSetsOnPut(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s := taskcreds.NewStore(clock)
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a1", creds(clock.Now().Add(time.Minute))))
	require.NoError(t, s.Put("arn:t2", taskcreds.RoleTypeTaskApplication, "b1", taskcreds.Credentials{AccessKeyID: "AKID"}))
	clock.Advance(time.Hour)
	require.NoError(t, s.Put("arn:t3", taskcreds.RoleTypeTaskApplication, "c1", creds(clock.Now().Add(time.Hour))))
	assert.Equal(t, 2, s.Len(), "the expired set is dropped; one without an expiration is kept")
}

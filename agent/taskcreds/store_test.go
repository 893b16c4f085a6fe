package taskcreds_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// creds returns credentials with this access key, expiring at exp, as the control plane sends them.
func creds(keyID string, exp time.Time) taskcreds.Credentials {
	return taskcreds.Credentials{AccessKeyID: keyID, SecretAccessKey: "secret", SessionToken: "tok", Expiration: exp}
}

var (
	past   = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC) // long expired
	future = time.Date(2101, 2, 3, 4, 5, 6, 0, time.UTC)
)

func TestStore(t *testing.T) {
	s := taskcreds.NewStore()
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a1", creds("AKIDA1", future)))
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskExecution, "e1", creds("AKIDE1", future)))
	require.NoError(t, s.Put("arn:t2", taskcreds.RoleTypeTaskApplication, "b1", creds("AKIDB1", future)))

	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a2", creds("AKIDA2", future)))
	_, ok := s.Get("a1")
	assert.False(t, ok, "a refresh replaces the task's earlier set of the same role")
	got, ok := s.Get("a2")
	require.True(t, ok)
	assert.Equal(t, taskcreds.Stored{TaskArn: "arn:t1", RoleType: taskcreds.RoleTypeTaskApplication, Credentials: creds("AKIDA2", future)}, got)

	// Pulls with the execution role read its credentials; a task role's are not served to them.
	exec, err := s.ExecutionRoleCredentials(context.Background(), "e1")
	require.NoError(t, err)
	assert.Equal(t, creds("AKIDE1", future), exec)
	assert.True(t, exec.AWS().CanExpire)
	_, err = s.ExecutionRoleCredentials(context.Background(), "a2")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials, "a task role's credentials are not an execution role's")
	assert.True(t, errdefs.IsNotFound(err))

	// Containers get the task role's; an execution role's are never served to them.
	app, err := s.TaskCredentials(context.Background(), "a2")
	require.NoError(t, err)
	assert.Equal(t, "AKIDA2", app.AccessKeyID)
	_, err = s.TaskCredentials(context.Background(), "e1")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials)

	s.TaskRemoved("arn:t1")
	s.TaskRemoved("arn:t1")
	assert.Equal(t, 1, s.Len(), "removing the task, twice, drops its sets and only its")
	_, err = s.ExecutionRoleCredentials(context.Background(), "e1")
	assert.ErrorIs(t, err, taskcreds.ErrNoCredentials, "gone with the task")
	_, err = s.TaskCredentials(context.Background(), "b1")
	assert.NoError(t, err)

	err = s.Put("arn:t3", taskcreds.RoleTypeTaskApplication, "", taskcreds.Credentials{SecretAccessKey: "hush"})
	require.Error(t, err, "no ID")
	assert.NotContains(t, err.Error(), "hush", "errors never carry a secret")
	assert.Equal(t, 1, s.Len())
}

// TestStoreServesUntilReplaced: as the ECS agent does, credentials are served past their expiration
// until the control plane sends the task's next set or the task is removed.
func TestStoreServesUntilReplaced(t *testing.T) {
	s := taskcreds.NewStore()
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a1", creds("AKIDOLD", past)))
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskExecution, "e1", creds("AKIDEXEC", past)))
	require.NoError(t, s.Put("arn:t2", taskcreds.RoleTypeTaskApplication, "b1", creds("AKIDB", future)))
	assert.Equal(t, 3, s.Len(), "an expired set is not dropped when another is put")

	got, err := s.TaskCredentials(context.Background(), "a1")
	require.NoError(t, err, "expired, still served")
	assert.Equal(t, creds("AKIDOLD", past), got)
	exec, err := s.ExecutionRoleCredentials(context.Background(), "e1")
	require.NoError(t, err)
	assert.Equal(t, "AKIDEXEC", exec.AccessKeyID)

	// ACS refreshes a task's credentials under the same ID (the one in the container's environment).
	require.NoError(t, s.Put("arn:t1", taskcreds.RoleTypeTaskApplication, "a1", creds("AKIDNEW", future)))
	got, err = s.TaskCredentials(context.Background(), "a1")
	require.NoError(t, err)
	assert.Equal(t, "AKIDNEW", got.AccessKeyID, "replaced by the next set")
	assert.Equal(t, 3, s.Len())
}

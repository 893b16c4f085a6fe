package tasksecrets_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/secrets/secretstest"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/tasksecrets"
)

const execID = "exec-credentials-id"

// setup starts the SSM, Secrets Manager and S3 stand-in, points the SDK at it and returns a Source whose chain holds the execution role's keys.
func setup(t *testing.T) (*secretstest.Server, *tasksecrets.Source) {
	t.Helper()
	srv := secretstest.New(t)
	srv.PointSDK(t)
	store := taskcreds.NewStore()
	require.NoError(t, store.Put("arn:task", taskcreds.RoleTypeTaskExecution, execID,
		taskcreds.Credentials{AccessKeyID: "AKIAEXECROLE", SecretAccessKey: "s", SessionToken: "t"}))
	src, err := tasksecrets.New("us-east-1", taskcreds.NewChain(taskcreds.ChainConfig{Store: store}))
	require.NoError(t, err)
	return srv, src
}

// TestContainerSecrets: a container's environment file, secret and log driver secret option are
// fetched with its task's execution role and handed back as the engine layers them.
func TestContainerSecrets(t *testing.T) {
	srv, src := setup(t)
	srv.PutParameter("/app/db-pass", "s3cr3t")
	srv.PutParameter("/app/log-token", "tok")
	srv.PutObject("envs", "app.env", []byte("MODE=prod\n"))
	tk := &task.Task{Arn: "arn:task", ExecutionRoleArn: "arn:aws:iam::1:role/exec", ExecutionCredentialsID: execID}
	c := &task.Container{Name: "app",
		EnvironmentFiles: []task.EnvironmentFile{{Value: "arn:aws:s3:::envs/app.env", Type: "s3"}},
		Secrets:          []task.Secret{{Name: "DB_PASS", ValueFrom: "/app/db-pass"}},
		LogConfiguration: &task.LogConfiguration{LogDriver: "awslogs",
			SecretOptions: []task.Secret{{Name: "token", ValueFrom: "/app/log-token"}}}}

	got, err := src.ContainerSecrets(context.Background(), tk, c)
	require.NoError(t, err)
	assert.Equal(t, []string{"MODE=prod"}, got.FileEnv)
	assert.Equal(t, []string{"DB_PASS=s3cr3t"}, got.SecretEnv)
	assert.Equal(t, map[string]string{"token": "tok"}, got.LogOptions)
	keys := srv.AccessKeys()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.Equal(t, "AKIAEXECROLE", k, "every call is signed with the execution role's key")
	}
}

// TestContainerSecretsWithoutTheRole: in ecs mode a task whose execution role's credentials have not
// arrived fetches nothing, and the error says why without asking AWS.
func TestContainerSecretsWithoutTheRole(t *testing.T) {
	srv, src := setup(t)
	tk := &task.Task{Arn: "arn:other", ExecutionRoleArn: "arn:aws:iam::1:role/exec", ExecutionCredentialsID: "unknown-id"}
	_, err := src.ContainerSecrets(context.Background(), tk, &task.Container{Name: "app",
		Secrets: []task.Secret{{Name: "DB_PASS", ValueFrom: "/app/db-pass"}}})
	require.Error(t, err)
	assert.Empty(t, srv.AccessKeys(), "nothing is asked of AWS")
}

// TestFirelensFetches: an awsfirelens container's secret options and a router's S3 configuration
// file are fetched with the task's execution role.
func TestFirelensFetches(t *testing.T) {
	srv, src := setup(t)
	srv.PutParameter("/logs/api-key", "k3y")
	srv.PutObject("conf", "fluent.conf", []byte("[FILTER]\n"))
	tk := &task.Task{Arn: "arn:task", ExecutionRoleArn: "arn:aws:iam::1:role/exec", ExecutionCredentialsID: execID}
	c := &task.Container{Name: "app", LogConfiguration: &task.LogConfiguration{LogDriver: task.LogDriverFirelens,
		SecretOptions: []task.Secret{{Name: "apikey", ValueFrom: "/logs/api-key"}}}}

	opts, err := src.LogSecretOptions(context.Background(), tk, c)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"apikey": "k3y"}, opts)
	file, err := src.ConfigFile(context.Background(), tk, "arn:aws:s3:::conf/fluent.conf")
	require.NoError(t, err)
	assert.Equal(t, "[FILTER]\n", string(file))
	for _, k := range srv.AccessKeys() {
		assert.Equal(t, "AKIAEXECROLE", k, "every call is signed with the execution role's key")
	}
	none, err := src.LogSecretOptions(context.Background(), tk, &task.Container{Name: "plain"})
	require.NoError(t, err)
	assert.Empty(t, none)
}

//go:build integration

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/secrets/secretstest"
)

// TestIntegrationSecrets runs, in ecs mode, a task whose container gets an SSM parameter, a key of a
// Secrets Manager JSON secret, an S3 environment file and a log driver secret option, and whose
// image is pulled from a registry with basic auth through repositoryCredentials; and a task whose
// secret is missing. Every AWS call is signed with the task's execution-role key; the first task
// runs with every value in place, the second stops with a reason naming the secret and the AWS
// error; no value reaches the log, the console or berth.db. Then, in local mode, a static task
// without an execution role gets its secret with the host's own credentials, and one with an
// executionRoleArn with that role's, assumed with the host's through an STS stand-in.
func TestIntegrationSecrets(t *testing.T) {
	bin := buildBerth(t)
	dc := dockerFromEnv(t)
	aws := secretstest.New(t)
	ssmValue, jsonValue, fileValue, logValue := "ssm-"+randomHex(t, 8), "json-"+randomHex(t, 8), "file-"+randomHex(t, 8), "3"
	aws.PutParameter("/berth/db-pass", ssmValue)
	aws.PutParameter("/berth/max-file", logValue)
	apiArn := "arn:aws:secretsmanager:us-east-1:" + secretstest.Account + ":secret:api-AbCdEf"
	aws.PutSecret(apiArn, `{"key":"`+jsonValue+`","other":"x"}`)
	aws.PutObject("config", "app.env", []byte("# settings\nFROM_FILE="+fileValue+"\nA=from-file\n"))

	regUser, regPassword := "puller", "registry-"+randomHex(t, 8)
	regArn := "arn:aws:secretsmanager:us-east-1:" + secretstest.Account + ":secret:registry-AbCdEf"
	aws.PutSecret(regArn, `{"username":"`+regUser+`","password":"`+regPassword+`"}`)
	regAddr := testregistry.StartHtpasswd(t, regUser, regPassword)
	image := regAddr + "/berth/private:" + randomHex(t, 4)
	copyToRegistry(t, dc, testappImage, image, docker.AuthConfiguration{Username: regUser, Password: regPassword, ServerAddress: regAddr})

	exec := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::" + secretstest.Account + ":role/exec",
		AccessKeyID: "ASIAEXEC" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "exec-secret-" + randomHex(t, 8),
		SessionToken: "exec-session-" + randomHex(t, 8), Expiration: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	secretsTask := func(family, dbPassFrom string) *acswire.Task {
		c := exec
		return &acswire.Task{Arn: "arn:aws:ecs:us-east-1:000000000000:task/secrets/" + randomHex(t, 16), Family: family, Version: "1",
			DesiredStatus: "RUNNING", ExecutionRoleCredentials: &c,
			Containers: []*acswire.Container{{Name: "app", Image: image, Memory: 16, Command: []string{"sleep"},
				Environment:            map[string]string{"A": "from-env"},
				RegistryAuthentication: &acswire.RegistryAuthentication{Type: "asm", ASMAuthData: &acswire.ASMAuthData{CredentialsParameter: regArn}},
				Secrets: []acswire.Secret{
					{Name: "DB_PASS", ValueFrom: dbPassFrom, Provider: "ssm", Type: "ENVIRONMENT_VARIABLE", Target: "CONTAINER"},
					{Name: "API_KEY", ValueFrom: apiArn + ":key::", Provider: "asm", Type: "ENVIRONMENT_VARIABLE", Target: "CONTAINER"},
					{Name: "max-file", ValueFrom: "/berth/max-file", Provider: "ssm", Type: "ENVIRONMENT_VARIABLE", Target: "LOG_DRIVER"}},
				EnvironmentFiles: []acswire.EnvironmentFile{{Value: "arn:aws:s3:::config/app.env", Type: "s3"}},
				DockerConfig:     &acswire.DockerConfig{HostConfig: `{"LogConfig":{"Type":"json-file","Config":{"max-size":"1m"}}}`}}}}
	}
	standIn, addr := startScriptedACS(t)
	standIn.out <- &acswire.PayloadMessage{MessageID: "secrets-1", SeqNum: 1, Tasks: []*acswire.Task{
		secretsTask("secrets-ok", "/berth/db-pass"), secretsTask("secrets-missing", "/berth/nope")}}

	remote := newRecoveryEnv(t, bin)
	logFile := filepath.Join(t.TempDir(), "berth.log")
	environ := ecsModeEnv(addr, "ECS_IMAGE_PULL_BEHAVIOR=always", "ECS_LOGFILE="+logFile, "ECS_LOGLEVEL=debug")
	for k, v := range aws.Env() {
		environ = append(environ, k+"="+v)
	}
	agent := remote.start(environ...)
	ts := agent.waitTasks(2*time.Minute, "one task runs and the other has stopped", func(ts []introspection.TaskResponse) bool {
		return familyRunning("secrets-ok", 1)(ts) && familyStopped("secrets-missing")(ts)
	})
	for _, tk := range ts {
		switch tk.Family {
		case "secrets-ok":
			ci, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: tk.Containers[0].DockerID})
			require.NoError(t, err)
			for _, want := range []string{"DB_PASS=" + ssmValue, "API_KEY=" + jsonValue, "FROM_FILE=" + fileValue, "A=from-env"} {
				assert.Contains(t, ci.Config.Env, want, "the container's environment")
			}
			assert.NotContains(t, ci.Config.Env, "A=from-file", "environment wins over the environment file")
			assert.Equal(t, map[string]string{"max-size": "1m", "max-file": logValue}, ci.HostConfig.LogConfig.Config)
			assert.Equal(t, image, ci.Config.Image, "the private image was pulled with the registry credentials")
		case "secrets-missing":
			for _, want := range []string{"CannotCreateContainerError", "DB_PASS", "/berth/nope", "ParameterNotFound"} {
				assert.Contains(t, tk.StoppedReason, want, "the reason names the secret and the AWS error")
			}
			t.Logf("stopped reason: %s", tk.StoppedReason)
		}
	}
	keys := aws.AccessKeys()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.Equal(t, exec.AccessKeyID, k, "every AWS call is signed with the execution role's key")
	}
	agent.stop()

	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	state, err := os.ReadFile(filepath.Join(remote.dataDir, "berth.db"))
	require.NoError(t, err)
	for _, secret := range []string{ssmValue, jsonValue, fileValue, regPassword, exec.SecretAccessKey, exec.SessionToken} {
		assert.NotContains(t, string(logged), secret, "the log holds a secret")
		assert.NotContains(t, agent.out.String(), secret, "the console holds a secret")
		assert.False(t, bytes.Contains(state, []byte(secret)), "berth.db holds a secret")
	}

	// Local mode: a static task without an execution role fetches with the host's own credentials; one
	// with an executionRoleArn with that role, which the agent assumes with them (an STS stand-in).
	local := newRecoveryEnv(t, bin)
	const hostKey = "AKIAHOSTHOSTHOST0000" // the key the STS stand-in lets assume roles
	roleArn := "arn:aws:iam::" + secretstest.Account + ":role/exec-secrets"
	roleValue := "role-" + randomHex(t, 8)
	aws.PutParameter("/berth/role-pass", roleValue)
	sts := &stsStandIn{issued: map[string]string{}}
	for family, spec := range map[string]string{
		"secrets-local": `"secrets": [{"name": "DB_PASS", "valueFrom": "/berth/db-pass"}]`,
		"secrets-role":  `"secrets": [{"name": "DB_PASS", "valueFrom": "/berth/role-pass"}]`,
	} {
		role := ""
		if family == "secrets-role" {
			role = fmt.Sprintf(`"executionRoleArn": %q, `, roleArn)
		}
		def := fmt.Sprintf(`{"family": %q, %s"containerDefinitions": [{"name": "app", "image": %q, "memory": 16,
			"command": ["sleep"], %s}]}`, family, role, testappImage, spec)
		require.NoError(t, os.WriteFile(filepath.Join(local.tasksDir, family+".json"), []byte(def), 0o600))
	}
	environ = []string{"AWS_ACCESS_KEY_ID=" + hostKey, "AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"ECS_LOCAL_CONTROL_PLANE_ADDR=" + freeAddr(t), "AWS_ENDPOINT_URL_STS=http://" + serveLoopback(t, sts)}
	for k, v := range aws.Env() {
		environ = append(environ, k+"="+v)
	}
	fetchedBefore := len(aws.AccessKeys())
	agent = local.start(environ...)
	ts = agent.waitTasks(time.Minute, "the static tasks run", func(ts []introspection.TaskResponse) bool {
		return familyRunning("secrets-local", 1)(ts) && familyRunning("secrets-role", 1)(ts)
	})
	want := map[string]string{"secrets-local": ssmValue, "secrets-role": roleValue}
	for _, tk := range ts {
		if v, ok := want[tk.Family]; ok {
			ci, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: tk.Containers[0].DockerID})
			require.NoError(t, err)
			assert.Contains(t, ci.Config.Env, "DB_PASS="+v, tk.Family)
		}
	}
	var byHost, byRole bool
	for _, k := range aws.AccessKeys()[fetchedBefore:] {
		switch {
		case k == hostKey:
			byHost = true
		case sts.roleOf(k) == roleArn:
			byRole = true
		default:
			t.Errorf("a secret was fetched with %s, neither the host's key nor one STS issued for %s", k, roleArn)
		}
	}
	assert.True(t, byHost, "the host's own key fetched the task without an execution role")
	assert.True(t, byRole, "a key STS issued for the execution role fetched the other task's secret")
	agent.stop()
}

//go:build integration

package main

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
)

// TestIntegrationTaskProtectionLocalMode: in local mode, a container of a task the embedded control
// plane runs with a task role (assumed through an STS stand-in) turns its task's scale-in protection
// on through $ECS_AGENT_URI and reads it back; the control plane holds it for that task. A task
// without a role gets the ECS agent's 403, and its protection is untouched.
func TestIntegrationTaskProtectionLocalMode(t *testing.T) {
	const role = "arn:aws:iam::000000000000:role/guarded"
	sts := &stsStandIn{issued: map[string]string{}}
	stsServer := &http.Server{Handler: sts}
	stsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stsServer.Serve(stsLn) }()
	t.Cleanup(func() { _ = stsServer.Close() })

	env := newRecoveryEnv(t, buildBerth(t))
	cpAddr := freeAddr(t)
	agent := env.start("AWS_ENDPOINT_URL_STS=http://"+stsLn.Addr().String(), "AWS_ACCESS_KEY_ID=AKIAHOSTHOSTHOST0000",
		"AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "ECS_LOCAL_CONTROL_PLANE_ADDR="+cpAddr)
	var keys localauth.Keys
	require.Eventually(t, func() bool {
		keys, err = localauth.Load(localauth.Path(env.dataDir))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent wrote its keys")
	ctx := context.Background()
	call := func(op string, in, out any) error {
		return localcp.Call(ctx, http.DefaultClient, "http://"+cpAddr, keys, op, in, out)
	}
	container := func(name string, essential bool, command ...string) map[string]any {
		return map[string]any{"name": name, "image": testappImage, "memory": 16, "essential": essential, "command": command}
	}
	put := container("put", false, "protection", "-put", `{"ProtectionEnabled":true,"ExpiresInMinutes":30}`, "-timeout", "30s")
	get := container("get", false, "protection", "-timeout", "30s")
	get["dependsOn"] = []map[string]string{{"containerName": "put", "condition": "SUCCESS"}}
	defs := map[string]map[string]any{
		"guarded":   {"family": "guarded", "taskRoleArn": role, "containerDefinitions": []any{container("app", true, "sleep"), put, get}},
		"unguarded": {"family": "unguarded", "containerDefinitions": []any{container("app", true, "sleep"), put}},
	}
	arns := map[string]string{}
	for family, def := range defs {
		require.Eventually(t, func() bool { return call("RegisterTaskDefinition", def, nil) == nil },
			30*time.Second, 200*time.Millisecond, "the embedded control plane registers %s", family)
		require.Eventually(t, func() bool {
			var out struct {
				Tasks []struct {
					TaskArn string `json:"taskArn"`
				} `json:"tasks"`
			}
			if call("RunTask", map[string]any{"cluster": env.cluster, "taskDefinition": family}, &out) != nil || len(out.Tasks) != 1 {
				return false
			}
			arns[family] = out.Tasks[0].TaskArn
			return true
		}, 90*time.Second, 500*time.Millisecond, "the embedded control plane runs %s once the agent has registered", family)
	}

	exited := func(ts []introspection.TaskResponse, family, name string) (introspection.ContainerResponse, bool) {
		for _, tk := range ts {
			for _, c := range tk.Containers {
				if tk.Family == family && c.Name == name && c.KnownStatus == "STOPPED" && c.ExitCode != nil {
					return c, true
				}
			}
		}
		return introspection.ContainerResponse{}, false
	}
	ts := agent.waitTasks(3*time.Minute, "the protection calls have run", func(ts []introspection.TaskResponse) bool {
		_, a := exited(ts, "guarded", "get")
		_, b := exited(ts, "unguarded", "put")
		return a && b
	})
	logs := func(c introspection.ContainerResponse) string {
		out, err := exec.Command("docker", "logs", c.DockerID).CombinedOutput()
		require.NoError(t, err)
		return string(out)
	}
	for _, name := range []string{"put", "get"} {
		c, _ := exited(ts, "guarded", name)
		out := logs(c)
		require.Equal(t, 0, *c.ExitCode, "%s: %s", name, out)
		assert.Contains(t, out, "status=200", name)
		assert.Contains(t, out, `"ProtectionEnabled":true`, name)
		assert.Contains(t, out, `"TaskArn":"`+arns["guarded"]+`"`, "%s: the task is the one the container's token names", name)
	}
	c, _ := exited(ts, "unguarded", "put")
	out := logs(c)
	assert.Equal(t, 1, *c.ExitCode, out)
	assert.Contains(t, out, "status=403")
	assert.Contains(t, out, `{"error":{"Arn":"`+arns["unguarded"]+`","Code":"AccessDeniedException","Message":"Invalid Request: no task IAM role credentials available for task"}}`)

	var got struct {
		ProtectedTasks []struct {
			TaskArn           string  `json:"taskArn"`
			ProtectionEnabled bool    `json:"protectionEnabled"`
			ExpirationDate    float64 `json:"expirationDate"`
		} `json:"protectedTasks"`
	}
	require.NoError(t, call("GetTaskProtection", map[string]any{"cluster": env.cluster, "tasks": []string{arns["guarded"], arns["unguarded"]}}, &got))
	require.Len(t, got.ProtectedTasks, 2)
	assert.True(t, got.ProtectedTasks[0].ProtectionEnabled, "the control plane holds the guarded task's protection")
	until := time.Unix(int64(got.ProtectedTasks[0].ExpirationDate), 0)
	assert.WithinDuration(t, time.Now().Add(30*time.Minute), until, 5*time.Minute)
	assert.False(t, got.ProtectedTasks[1].ProtectionEnabled, "the refused task is not protected")

	for _, arn := range arns {
		_ = call("StopTask", map[string]any{"cluster": env.cluster, "task": arn}, nil)
	}
	agent.waitTasks(2*time.Minute, "the tasks stop", func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if (tk.Family == "guarded" || tk.Family == "unguarded") && tk.KnownStatus != "STOPPED" {
				return false
			}
		}
		return true
	})
	for _, secret := range []string{"host-secret", "local-secret-", "local-token-"} {
		assert.NotContains(t, agent.out.String(), secret, "no secret in the agent's log")
	}
}

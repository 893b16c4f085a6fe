//go:build integration

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/localauth"
)

// TestIntegrationExecuteCommandLocalMode: in local mode, RunTask --enable-execute-command starts a
// task whose container gets ECS Exec's managed agent: the stand-in SSM agent (make exec-deps,
// BERTH_EXEC_DEPS) runs in it, /v1/tasks and `berth ps` show it RUNNING, DescribeTasks shows
// enableExecuteCommand, the instance registered ecs.capability.execute-command, and the agent is
// STOPPED with its task.
func TestIntegrationExecuteCommandLocalMode(t *testing.T) {
	deps := os.Getenv("BERTH_EXEC_DEPS")
	require.NotEmpty(t, deps, "BERTH_EXEC_DEPS must name the stand-in SSM agent's directory: make exec-deps, then BERTH_EXEC_DEPS=$PWD/.run/exec-deps")
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	cpAddr := freeAddr(t)
	logs := t.TempDir()
	agent := env.start("ECS_LOCAL_CONTROL_PLANE_ADDR="+cpAddr, "ECS_EXEC_DEPS_DIR="+deps, "ECS_EXEC_LOG_DIR="+logs)
	defer agent.stop()
	endpoint := cpEndpoint{url: "http://" + cpAddr, keys: localauth.Path(env.dataDir)}
	cluster := env.cluster
	require.Eventually(t, func() bool {
		out, err := awsCLI(t, endpoint, "list-container-instances", "--cluster", cluster)
		return err == nil && strings.Contains(out, "container-instance")
	}, 30*time.Second, 200*time.Millisecond, "the agent registered with its embedded control plane")
	out, err := awsCLI(t, endpoint, "describe-container-instances", "--cluster", cluster, "--container-instances",
		strings.TrimSpace(agentInstanceArn(t, agent)))
	require.NoError(t, err, out)
	assert.Contains(t, out, `"name": "ecs.capability.execute-command"`)

	def := `{"family":"exec-it","containerDefinitions":[{"name":"app","image":"` + testappImage + `","memory":16,"command":["sleep"]}]}`
	out, err = awsCLI(t, endpoint, "register-task-definition", "--cli-input-json", def)
	require.NoError(t, err, out)
	out, err = awsCLI(t, endpoint, "run-task", "--cluster", cluster, "--task-definition", "exec-it", "--enable-execute-command")
	require.NoError(t, err, out)
	var ran struct {
		Tasks []struct {
			TaskArn              string `json:"taskArn"`
			EnableExecuteCommand bool   `json:"enableExecuteCommand"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ran), out)
	require.Len(t, ran.Tasks, 1, out)
	assert.True(t, ran.Tasks[0].EnableExecuteCommand)
	arn := ran.Tasks[0].TaskArn

	agentRunning := func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Arn == arn && len(tk.Containers) == 1 && len(tk.Containers[0].ManagedAgents) == 1 {
				return tk.Containers[0].ManagedAgents[0].LastStatus == "RUNNING"
			}
		}
		return false
	}
	agent.waitTasks(2*time.Minute, "the managed agent RUNNING", agentRunning)
	id := arn[strings.LastIndexByte(arn, '/')+1:]
	// RUNNING means Docker started the exec; the stand-in writes its record once it runs.
	var record []byte
	require.Eventually(t, func() bool {
		record, err = os.ReadFile(filepath.Join(logs, id, "app", "ssmstandin.jsonl"))
		return err == nil && len(record) > 0
	}, 30*time.Second, 100*time.Millisecond, "the stand-in SSM agent ran in the container")
	assert.Contains(t, string(record), `"uid":0`)

	ps := exec.Command(bin, "ps")
	ps.Env = agent.environ
	psOut, err := ps.CombinedOutput()
	require.NoError(t, err, string(psOut))
	assert.Contains(t, string(psOut), "RUNNING (exec RUNNING)")

	out, err = awsCLI(t, endpoint, "stop-task", "--cluster", cluster, "--task", arn)
	require.NoError(t, err, out)
	waitTaskStatus(t, endpoint, cluster, arn, "STOPPED")
	agent.waitTasks(time.Minute, "the managed agent STOPPED with its task", func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Arn == arn && len(tk.Containers) == 1 && len(tk.Containers[0].ManagedAgents) == 1 {
				return tk.Containers[0].ManagedAgents[0].LastStatus == "STOPPED"
			}
		}
		return false
	})
}

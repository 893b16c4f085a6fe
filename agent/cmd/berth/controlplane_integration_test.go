//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
)

// cpEndpoint is a control plane as the AWS CLI reaches it: its URL and the keys file that signs.
type cpEndpoint struct {
	url  string
	keys string // a shared-credentials file with the berth profile
}

// awsCLI runs the real AWS CLI against a control plane, signing with the berth profile of its keys
// file as the README shows, with no other AWS configuration and no instance metadata.
func awsCLI(t *testing.T, endpoint cpEndpoint, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("aws", append([]string{"ecs", "--endpoint-url", endpoint.url, "--region", "us-east-1", "--output", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE="+filepath.Join(t.TempDir(), "config"),
		"AWS_SHARED_CREDENTIALS_FILE="+endpoint.keys, "AWS_PROFILE="+localauth.Profile, "AWS_PAGER=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type cliTask struct {
	TaskArn       string `json:"taskArn"`
	LastStatus    string `json:"lastStatus"`
	DesiredStatus string `json:"desiredStatus"`
	StoppedReason string `json:"stoppedReason"`
	StartedAt     any    `json:"startedAt"`
	StoppedAt     any    `json:"stoppedAt"`
	Containers    []struct {
		Name       string `json:"name"`
		LastStatus string `json:"lastStatus"`
		ExitCode   *int   `json:"exitCode"`
	} `json:"containers"`
}

func describeTask(t *testing.T, endpoint cpEndpoint, cluster, arn string) cliTask {
	t.Helper()
	out, err := awsCLI(t, endpoint, "describe-tasks", "--cluster", cluster, "--tasks", arn)
	require.NoError(t, err, out)
	var d struct {
		Tasks []cliTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	require.Len(t, d.Tasks, 1, out)
	return d.Tasks[0]
}

func waitTaskStatus(t *testing.T, endpoint cpEndpoint, cluster, arn, status string) cliTask {
	t.Helper()
	var last cliTask
	require.Eventually(t, func() bool {
		last = describeTask(t, endpoint, cluster, arn)
		return last.LastStatus == status
	}, 90*time.Second, 250*time.Millisecond, "task never reached %s", status)
	return last
}

// TestIntegrationAWSCLIAgainstTheAgent drives a running berth agent with the real AWS CLI, the way
// people use it on a laptop.
func TestIntegrationAWSCLIAgainstTheAgent(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	cpAddr := freeAddr(t)
	agent := env.start("ECS_LOCAL_CONTROL_PLANE_ADDR=" + cpAddr)
	endpoint := cpEndpoint{url: "http://" + cpAddr, keys: localauth.Path(env.dataDir)}
	cluster := env.cluster
	require.Eventually(t, func() bool {
		out, err := awsCLI(t, endpoint, "list-container-instances", "--cluster", cluster)
		return err == nil && strings.Contains(out, "container-instance")
	}, 30*time.Second, 200*time.Millisecond, "the agent registered with its embedded control plane")

	out, err := awsCLI(t, endpoint, "register-task-definition", "--cli-input-json", "file://../../../misc/examples/web.json")
	require.NoError(t, err, out)
	assert.Contains(t, out, `"revision": 1`)

	out, err = awsCLI(t, endpoint, "run-task", "--cluster", cluster, "--task-definition", "web-cli")
	require.NoError(t, err, out)
	var ran struct {
		Tasks []cliTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ran), out)
	require.Len(t, ran.Tasks, 1, out)
	arn := ran.Tasks[0].TaskArn
	returned := time.Now()
	running := waitTaskStatus(t, endpoint, cluster, arn, "RUNNING")
	t.Logf("run-task returned → describe-tasks RUNNING: %s", time.Since(returned).Round(time.Millisecond))
	assert.NotNil(t, running.StartedAt)
	assert.Equal(t, "RUNNING", running.Containers[0].LastStatus)

	out, err = awsCLI(t, endpoint, "stop-task", "--cluster", cluster, "--task", arn, "--reason", "done with it")
	require.NoError(t, err, out)
	stopped := waitTaskStatus(t, endpoint, cluster, arn, "STOPPED")
	assert.Equal(t, "done with it", stopped.StoppedReason)
	assert.NotNil(t, stopped.StoppedAt)
	require.NotNil(t, stopped.Containers[0].ExitCode, "the container's exit code is reported")

	out, err = awsCLI(t, endpoint, "list-task-definitions")
	require.NoError(t, err, out)
	assert.Contains(t, out, "task-definition/web-cli:1")

	out, err = awsCLI(t, endpoint, "describe-container-instances", "--cluster", cluster, "--container-instances",
		strings.TrimSpace(agentInstanceArn(t, agent)))
	require.NoError(t, err, out)
	assert.Contains(t, out, `"status": "ACTIVE"`)
	assert.Contains(t, out, `"agentConnected": true`)
	assert.Contains(t, out, `"name": "CPU"`)

	out, err = awsCLI(t, endpoint, "describe-task-definition", "--task-definition", "no-such-family")
	require.Error(t, err)
	assert.Contains(t, out, "An error occurred (ClientException) when calling the DescribeTaskDefinition operation")

	drain := exec.Command(bin, "drain")
	drain.Env = agent.environ
	drained, err := drain.CombinedOutput()
	require.NoError(t, err, string(drained))
	assert.Contains(t, string(drained), "is DRAINING")
	out, err = awsCLI(t, endpoint, "run-task", "--cluster", cluster, "--task-definition", "web-cli")
	require.NoError(t, err, out)
	assert.Contains(t, out, "DRAINING", "a draining instance gets no new task")
	agent.stop()
}

// agentInstanceArn reads the registered container instance ARN from /v1/metadata.
func agentInstanceArn(t *testing.T, r *agentRun) string {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/v1/metadata")
	require.NoError(t, err)
	defer resp.Body.Close()
	var m struct {
		ContainerInstanceArn *string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	require.NotNil(t, m.ContainerInstanceArn, "/v1/metadata shows the ARN once registered")
	return *m.ContainerInstanceArn
}

// TestIntegrationECSModeAgainstAStandIn runs the agent in ecs mode (ECS_CLUSTER, a region, the
// control plane's keys file as its AWS credentials, ECS_BACKEND_HOST) against the embedded control
// plane served on its own on loopback, standing in for Amazon ECS: the agent registers, receives a
// payload over ACS, runs the task and reports it.
func TestIntegrationECSModeAgainstAStandIn(t *testing.T) {
	keysFile := localauth.Path(t.TempDir())
	keys, err := localauth.Ensure(keysFile)
	require.NoError(t, err)
	srv, err := localcp.New(localcp.Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Region: "us-east-1", Keys: keys}, logger.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	addr := serveLoopback(t, srv.Handler())
	endpoint := cpEndpoint{url: "http://" + addr, keys: keysFile}

	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	agent := env.start("AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST="+endpoint.url,
		"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE="+keysFile, "AWS_PROFILE="+localauth.Profile)
	require.Eventually(t, func() bool { return strings.Contains(agent.out.String(), "mode=ecs") }, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		out, err := awsCLI(t, endpoint, "list-container-instances", "--cluster", env.cluster)
		return err == nil && strings.Contains(out, "container-instance")
	}, 30*time.Second, 200*time.Millisecond, "the agent registered; log:\n%s", agent.out.String())

	def := fmt.Sprintf(`{"family": "ecsmode", "containerDefinitions": [{"name": "c", "image": %q, "memory": 16, "command": ["sleep"]}]}`, testappImage)
	defFile := filepath.Join(t.TempDir(), "def.json")
	require.NoError(t, os.WriteFile(defFile, []byte(def), 0o600))
	out, err := awsCLI(t, endpoint, "register-task-definition", "--cli-input-json", "file://"+defFile)
	require.NoError(t, err, out)
	out, err = awsCLI(t, endpoint, "run-task", "--cluster", env.cluster, "--task-definition", "ecsmode")
	require.NoError(t, err, out)
	var ran struct {
		Tasks []cliTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ran), out)
	require.Len(t, ran.Tasks, 1, out)
	waitTaskStatus(t, endpoint, env.cluster, ran.Tasks[0].TaskArn, "RUNNING")
	agent.waitTasks(10*time.Second, "the agent runs it", familyRunning("ecsmode", 1))
	agent.stop()
}

// TestIntegrationStateChangeSurvivesAKill kills the agent after it saved RUNNING and before it reported
// it; after the restart the control plane learns that the task runs.
func TestIntegrationStateChangeSurvivesAKill(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	cpAddr := freeAddr(t)
	endpoint := cpEndpoint{url: "http://" + cpAddr, keys: localauth.Path(env.dataDir)}
	first := env.start("ECS_LOCAL_CONTROL_PLANE_ADDR="+cpAddr, "BERTH_TEST_CRASH_AT=saved:RUNNING@reported")
	require.Eventually(t, func() bool {
		out, err := awsCLI(t, endpoint, "list-container-instances", "--cluster", env.cluster)
		return err == nil && strings.Contains(out, "container-instance")
	}, 30*time.Second, 200*time.Millisecond, "the agent registers with its embedded control plane; log:\n%s", first.out.String())
	def := fmt.Sprintf(`{"family": "reported", "containerDefinitions": [{"name": "c", "image": %q, "memory": 16, "command": ["sleep"]}]}`, testappImage)
	defFile := filepath.Join(t.TempDir(), "def.json")
	require.NoError(t, os.WriteFile(defFile, []byte(def), 0o600))
	out, err := awsCLI(t, endpoint, "register-task-definition", "--cli-input-json", "file://"+defFile)
	require.NoError(t, err, out)
	out, err = awsCLI(t, endpoint, "run-task", "--cluster", env.cluster, "--task-definition", "reported")
	require.NoError(t, err, out)
	var ran struct {
		Tasks []cliTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ran), out)
	require.Len(t, ran.Tasks, 1)
	first.waitKilled(60 * time.Second)

	env.start("ECS_LOCAL_CONTROL_PLANE_ADDR=" + cpAddr)
	running := waitTaskStatus(t, endpoint, env.cluster, ran.Tasks[0].TaskArn, "RUNNING")
	assert.Equal(t, "RUNNING", running.Containers[0].LastStatus)
	assert.Len(t, clusterContainers(t, env.cluster), 1, "the task's container was adopted, not duplicated")
}

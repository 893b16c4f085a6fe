//go:build integration

package execagent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// standinRecord is one run of misc/ssmstandin as it records it.
type standinRecord struct {
	Args  []string          `json:"args"`
	UID   int               `json:"uid"`
	PID   int               `json:"pid"`
	Files map[string]string `json:"files"`
}

// itDeps returns the stand-in dependencies directory `make exec-deps` builds (BERTH_EXEC_DEPS).
func itDeps(t *testing.T) string {
	deps := os.Getenv("BERTH_EXEC_DEPS")
	require.NotEmpty(t, deps, "BERTH_EXEC_DEPS must name the stand-in SSM agent's directory: make exec-deps, then BERTH_EXEC_DEPS=$PWD/.run/exec-deps")
	_, err := Discover(deps)
	require.NoError(t, err, "make exec-deps builds it")
	return deps
}

// incompleteDeps copies deps without ssm-session-worker.
func incompleteDeps(t *testing.T, deps string) string {
	out := t.TempDir()
	for _, rel := range []string{"bin/3.0.0.0/amazon-ssm-agent", "bin/3.0.0.0/ssm-agent-worker", "certs/tls-ca-bundle.pem"} {
		data, err := os.ReadFile(filepath.Join(deps, rel))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(out, rel)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(out, rel), data, 0o700))
	}
	return out
}

func sha(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func readRecords(path string) []standinRecord {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []standinRecord
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r standinRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// itEngine runs a real engine with the feature on deps against the real Docker Engine; every
// container it makes carries a cluster label unique to the test and is removed at the end.
func itEngine(t *testing.T, deps, logs string) (*engine.Engine, *dockerclient.Client, string) {
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	require.NoError(t, err)
	_, err = client.PullImage(t.Context(), itImage, nil)
	require.NoError(t, err, "the test image must be in the local registry (make images pushes it)")
	cluster := fmt.Sprintf("exec-it-%d", time.Now().UnixNano())
	feature := New(Config{DepsDir: deps, LogDir: logs, CheckInterval: 200 * time.Millisecond,
		NewBackoff: func() retry.Backoff { return retry.NewExponentialBackoff(100*time.Millisecond, time.Second, 0.2, 1.5) }},
		client, logger.Nop())
	eng := engine.New(engine.Config{Cluster: cluster, StopTimeout: 2 * time.Second, StartTimeout: 30 * time.Second, CleanupWait: time.Hour,
		ReconcileInterval: time.Second, Resources: engine.Resources{CPU: 64 * 1024, MemoryMiB: 64 * 1024}, Features: []engine.Feature{feature}},
		client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, eng.Start(ctx))
	t.Cleanup(func() {
		cancel()
		eng.Wait()
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		list, _ := client.ListContainersByLabel(cctx, map[string]string{engine.LabelCluster: cluster})
		for _, c := range list {
			_ = client.RemoveContainer(cctx, docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
		}
		client.Close()
	})
	return eng, client, cluster
}

// itTask makes a task of one container with the managed agent; its files under deps are removed at
// the end.
func itTask(t *testing.T, deps, cluster, name string) *task.Task {
	def, err := taskdef.Parse([]byte(fmt.Sprintf(`{"family":"exec","containerDefinitions":[{"name":"app","image":%q,"memory":32,"command":["sleep"]}]}`, itImage)))
	require.NoError(t, err)
	tk := def.NewTask(fmt.Sprintf("arn:aws:ecs:local:000000000000:task/%s/%s", cluster, name))
	tk.Revision = 1
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(deps, "config", engine.CNITaskID(tk.Arn))) })
	tk.Containers[0].ManagedAgents = []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Properties: map[string]string{"sessionLimit": "3"}, Status: task.ManagedAgentPending}}
	return tk
}

func waitAgent(t *testing.T, eng *engine.Engine, arn, what string, cond func(*task.Task, *task.ManagedAgent) bool) (*task.Task, task.ManagedAgent) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		tk := eng.Task(arn)
		if tk != nil {
			if ma := tk.Containers[0].ManagedAgent(task.ExecuteCommandAgent); ma != nil && cond(tk, ma) {
				return tk, *ma
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; task %+v", what, tk)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

// TestIntegrationManagedAgent: on the real Docker Engine, the stand-in SSM agent runs in the
// container as root with the ECS agent's command, sees the generated configuration, the CA bundle and
// the binaries where the ECS agent mounts them; killed, it is started again (RUNNING with a new
// lastStartedAt); with a binary missing, the agent is STOPPED with a reason naming the file and the
// task runs.
func TestIntegrationManagedAgent(t *testing.T) {
	deps := itDeps(t)
	logs := t.TempDir()
	eng, client, cluster := itEngine(t, deps, logs)
	tk := itTask(t, deps, cluster, "complete")
	require.NoError(t, eng.AddTask(context.Background(), tk))
	_, first := waitAgent(t, eng, tk.Arn, "the agent RUNNING", func(tk *task.Task, ma *task.ManagedAgent) bool {
		return ma.Status == task.ManagedAgentRunning
	})
	assert.Equal(t, "ExecuteCommandAgent started", first.Reason)
	taskID := engine.CNITaskID(tk.Arn)
	recordFile := filepath.Join(logs, taskID, "app", "ssmstandin.jsonl")
	var recs []standinRecord
	require.Eventually(t, func() bool { recs = readRecords(recordFile); return len(recs) == 1 }, 10*time.Second, 50*time.Millisecond, "the stand-in's record")
	rec := recs[0]
	assert.Equal(t, 0, rec.UID, "run as root")
	assert.Equal(t, []string{"/ecs-execute-command-" + first.ID + "/amazon-ssm-agent"}, rec.Args)
	cfgDir := filepath.Join(deps, "config", taskID, "app")
	bin := filepath.Join(deps, "bin", "3.0.0.0")
	assert.Equal(t, map[string]string{
		"amazon-ssm-agent":                    sha(t, filepath.Join(bin, "amazon-ssm-agent")),
		"ssm-agent-worker":                    sha(t, filepath.Join(bin, "ssm-agent-worker")),
		"ssm-session-worker":                  sha(t, filepath.Join(bin, "ssm-session-worker")),
		"configuration/amazon-ssm-agent.json": sha(t, filepath.Join(cfgDir, "amazon-ssm-agent.json")),
		"configuration/seelog.xml":            sha(t, filepath.Join(cfgDir, "seelog.xml")),
		"certs/amazon-ssm-agent.crt":          sha(t, filepath.Join(deps, "certs", "tls-ca-bundle.pem")),
	}, rec.Files)
	data, err := os.ReadFile(filepath.Join(cfgDir, "amazon-ssm-agent.json"))
	require.NoError(t, err)
	assert.Contains(t, string(data), `"SessionWorkersLimit": 3`)

	st, err := client.ExecStatus(t.Context(), first.ExecID)
	require.NoError(t, err)
	require.True(t, st.Running)
	require.NoError(t, syscall.Kill(st.Pid, syscall.SIGKILL))
	tkAgain, again := waitAgent(t, eng, tk.Arn, "the agent restarted", func(tk *task.Task, ma *task.ManagedAgent) bool {
		return ma.Status == task.ManagedAgentRunning && ma.ExecID != first.ExecID
	})
	assert.Equal(t, "ExecuteCommandAgent restarted", again.Reason)
	assert.True(t, again.LastStartedAt.After(first.LastStartedAt), "a new lastStartedAt")
	assert.Equal(t, 1, again.Restarts)
	assert.Equal(t, task.TaskRunning, tkAgain.KnownStatus)
	require.Eventually(t, func() bool { return len(readRecords(recordFile)) == 2 }, 10*time.Second, 50*time.Millisecond, "the stand-in ran again")

	broken := incompleteDeps(t, deps)
	eng2, _, cluster2 := itEngine(t, broken, t.TempDir())
	tk2 := itTask(t, broken, cluster2, "incomplete")
	require.NoError(t, eng2.AddTask(context.Background(), tk2))
	tkStopped, stopped := waitAgent(t, eng2, tk2.Arn, "the agent STOPPED", func(tk *task.Task, ma *task.ManagedAgent) bool {
		return ma.Status == task.ManagedAgentStopped && tk.KnownStatus == task.TaskRunning
	})
	assert.Equal(t, "ExecuteCommandAgent Initialization failed - no complete SSM agent: "+filepath.Join(broken, "bin", "3.0.0.0", "ssm-session-worker")+": missing", stopped.Reason)
	assert.Equal(t, task.ContainerRunning, tkStopped.Containers[0].KnownStatus, "the container runs without it")

	require.NoError(t, eng.StopTask(context.Background(), tk.Arn, "test done"))
	waitAgent(t, eng, tk.Arn, "the agent STOPPED with its task", func(tk *task.Task, ma *task.ManagedAgent) bool {
		return tk.KnownStatus == task.TaskStopped && ma.Status == task.ManagedAgentStopped
	})
}

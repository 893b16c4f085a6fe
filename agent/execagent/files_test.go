package execagent

import (
	"os"
	"path/filepath"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// The SSM agent's configuration as the ECS agent writes it (execcmd/manager_init_task.go,
// execAgentConfigTemplate) for a session limit of 4 and no dual-stack endpoints.
const wantConfig = "{\n\t\"Mgs\": {\n\t\t\"StopTimeoutMillis\": 20000,\n\t\t\"SessionWorkersLimit\": 4\n\t},\n" +
	"\t\"Agent\": {\n\t\t\"ContainerMode\": true,\n\t\t\"UseDualStackEndpoint\": false\n\t}\n}"

func TestSessionLimit(t *testing.T) {
	for props, want := range map[string]int{"": 2, "4": 4, "0": 2, "-3": 2, "many": 2} {
		p := map[string]string{}
		if props != "" {
			p["sessionLimit"] = props
		}
		assert.Equal(t, want, sessionLimit(p), props)
	}
	assert.Equal(t, 2, sessionLimit(nil))
}

// TestInitializeContainer: the container's files and bind mounts, laid out as the ECS agent's
// (addRequiredBindMounts): the three binaries, the configuration, the log configuration and the CA
// bundle read-only under /ecs-execute-command-<id>, the log directory at /var/log/amazon/ssm.
func TestInitializeContainer(t *testing.T) {
	deps := makeDeps(t, false, map[string][]string{"3.3.0.0": nil})
	logs := t.TempDir()
	f := New(Config{DepsDir: deps, LogDir: logs}, nil, logger.Nop())
	c := &task.Container{Name: "--web", ManagedAgents: []task.ManagedAgent{{Name: task.ExecuteCommandAgent,
		Properties: map[string]string{"sessionLimit": "4"}, Status: task.ManagedAgentPending}}}
	hc := &docker.HostConfig{Binds: []string{"/srv:/srv"}}
	f.initialize("0123abcd", c, hc, logger.Nop())

	ma := c.ManagedAgents[0]
	require.Equal(t, task.ManagedAgentPending, ma.Status, ma.Reason)
	require.NotEmpty(t, ma.ID)
	id, bin := ma.ID, filepath.Join(deps, "bin", "3.3.0.0")
	cfgDir := filepath.Join(deps, "config", "0123abcd", "web")
	assert.Equal(t, []string{
		"/srv:/srv",
		bin + "/amazon-ssm-agent:/ecs-execute-command-" + id + "/amazon-ssm-agent:ro",
		bin + "/ssm-agent-worker:/ecs-execute-command-" + id + "/ssm-agent-worker:ro",
		bin + "/ssm-session-worker:/ecs-execute-command-" + id + "/ssm-session-worker:ro",
		cfgDir + "/amazon-ssm-agent.json:/ecs-execute-command-" + id + "/configuration/amazon-ssm-agent.json:ro",
		cfgDir + "/seelog.xml:/ecs-execute-command-" + id + "/configuration/seelog.xml:ro",
		deps + "/certs/tls-ca-bundle.pem:/ecs-execute-command-" + id + "/certs/amazon-ssm-agent.crt:ro",
		logs + "/0123abcd/web:/var/log/amazon/ssm",
	}, hc.Binds)

	data, err := os.ReadFile(filepath.Join(cfgDir, "amazon-ssm-agent.json"))
	require.NoError(t, err)
	assert.Equal(t, wantConfig, string(data))
	seelog, err := os.ReadFile(filepath.Join(cfgDir, "seelog.xml"))
	require.NoError(t, err)
	assert.Contains(t, string(seelog), `filename="/var/log/amazon/ssm/amazon-ssm-agent.log"`)
	assert.Contains(t, string(seelog), `filename="/var/log/amazon/ssm/errors.log"`)
	for path, mode := range map[string]os.FileMode{
		filepath.Join(cfgDir, "amazon-ssm-agent.json"): 0o600, filepath.Join(cfgDir, "seelog.xml"): 0o600,
		cfgDir: 0o700 | os.ModeDir, filepath.Join(logs, "0123abcd", "web"): 0o700 | os.ModeDir,
	} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, mode, fi.Mode(), path)
	}
	assert.Equal(t, []string{"/ecs-execute-command-" + id + "/amazon-ssm-agent"}, agentCommand(id))
}

// TestInitializeIncomplete: a missing binary leaves the container without the mounts and its
// managed agent STOPPED with a reason naming the file.
func TestInitializeIncomplete(t *testing.T) {
	deps := makeDeps(t, false, map[string][]string{"3.3.0.0": {"amazon-ssm-agent", "ssm-agent-worker"}})
	f := New(Config{DepsDir: deps, LogDir: t.TempDir()}, nil, logger.Nop())
	c := &task.Container{Name: "web", ManagedAgents: []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Status: task.ManagedAgentPending}}}
	hc := &docker.HostConfig{}
	f.initialize("t1", c, hc, logger.Nop())
	assert.Empty(t, hc.Binds)
	assert.Equal(t, task.ManagedAgentStopped, c.ManagedAgents[0].Status)
	assert.Equal(t, "ExecuteCommandAgent Initialization failed - no complete SSM agent: "+
		filepath.Join(deps, "bin", "3.3.0.0", "ssm-session-worker")+": missing", c.ManagedAgents[0].Reason)
	_, err := os.Stat(filepath.Join(deps, "config", "t1"))
	assert.True(t, os.IsNotExist(err), "nothing written")
}

// TestRemoveLeftovers: the directories of tasks the engine does not hold go; the held task's stay,
// and files that are not task directories (the ECS agent's own configuration files) are left.
func TestRemoveLeftovers(t *testing.T) {
	deps, logs := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(deps, "config", "held"), filepath.Join(deps, "config", "gone"),
		filepath.Join(logs, "held", "web"), filepath.Join(logs, "gone", "web")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	ecsFile := filepath.Join(deps, "config", "amazon-ssm-agent-abc.json")
	require.NoError(t, os.WriteFile(ecsFile, []byte("{}"), 0o600))
	f := New(Config{DepsDir: deps, LogDir: logs}, nil, logger.Nop())
	f.RemoveLeftovers(t.Context(), []string{"arn:aws:ecs:us-east-1:012345678901:task/c/held"})
	for path, exists := range map[string]bool{
		filepath.Join(deps, "config", "held"): true, filepath.Join(logs, "held", "web"): true, ecsFile: true,
		filepath.Join(deps, "config", "gone"): false, filepath.Join(logs, "gone"): false,
	} {
		_, err := os.Stat(path)
		assert.Equal(t, exists, err == nil, path)
	}
}

//go:build integration

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"

	"github.com/berth-agent/berth/agent/introspection"
)

// cniPlugins returns the plugins make test builds.
func cniPlugins(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BERTH_CNI_PLUGINS")
	require.NotEmpty(t, dir, "BERTH_CNI_PLUGINS must name the CNI plugins directory (make test sets it)")
	return dir
}

// TestIntegrationMissingCNIPluginExits: with ECS_ENABLE_TASK_ENI=true the agent checks every CNI plugin
// at start and exits 1 naming the one that is missing.
func TestIntegrationMissingCNIPluginExits(t *testing.T) {
	bin := buildBerth(t)
	partial := t.TempDir()
	for _, p := range []string{"bridge", "host-local", "static"} { // host-device is missing
		data, err := os.ReadFile(filepath.Join(cniPlugins(t), p))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(partial, p), data, 0o755))
	}
	cmd := exec.Command(bin, "agent")
	cmd.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+freeAddr(t), "ECS_DATADIR="+t.TempDir(), "ECS_ENABLE_TASK_ENI=true",
		"ECS_CNI_PLUGINS_PATH="+partial)
	var stderr logger.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, stderr.String())
	assert.Equal(t, 1, exitErr.ExitCode())
	assert.Contains(t, stderr.String(), "host-device")
	assert.Contains(t, stderr.String(), "ECS_CNI_PLUGINS_PATH")
}

// TestIntegrationAWSVPCKilledMidSetup kills the agent after the pause container started and before its
// network was set up; after a restart the task runs, and once it has stopped no CNI cache entry or
// address allocation of it is left.
func TestIntegrationAWSVPCKilledMidSetup(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	def := `{"family": "vpcmid", "networkMode": "awsvpc", "containerDefinitions": [{"name": "c", "image": "` + testappImage + `", "memory": 16, "command": ["sleep"]}]}`
	require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, "vpcmid.json"), []byte(def), 0o600))
	vpc := []string{"ECS_ENABLE_TASK_ENI=true", "ECS_CNI_PLUGINS_PATH=" + cniPlugins(t),
		"ECS_PAUSE_IMAGE_TARBALL=" + os.Getenv("BERTH_PAUSE_TARBALL")}

	first := env.start(append(vpc, "BERTH_TEST_CRASH_AT=after-start@vpcmid")...)
	first.waitKilled(60 * time.Second)

	second := env.start(vpc...)
	second.waitTasks(60*time.Second, "the task runs", func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Family == "vpcmid" && tk.KnownStatus == "RUNNING" && len(tk.Containers) > 0 && len(tk.Containers[0].Networks) > 0 {
				return strings.HasPrefix(tk.Containers[0].Networks[0].IPv4Addresses[0], "172.31.250.")
			}
		}
		return false
	})
	require.NoError(t, os.Remove(filepath.Join(env.tasksDir, "vpcmid.json")))
	second.waitTasks(60*time.Second, "the task stops", familyStopped("vpcmid"))
	second.stop()

	cache, err := filepath.Glob(filepath.Join(env.dataDir, "cni", "cache", "results", "*"))
	require.NoError(t, err)
	assert.Empty(t, cache, "no CNI cache entry is left")
	allocs, err := filepath.Glob(filepath.Join(env.dataDir, "cni", "ipam", "*", "*.*.*.*"))
	require.NoError(t, err)
	assert.Empty(t, allocs, "no IPAM allocation is left")
}

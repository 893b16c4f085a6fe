//go:build integration

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/introspection"
)

// TestIntegrationFaultInjection: a local-mode awsvpc task with enableFaultInjection calls its own
// fault routes from its containers, one after the other: an egress black hole of port 80 starts,
// its status (a request to 169.254.170.2:80, through the black hole) says running, a latency fault
// answers as the host allows (500 "internal error" without netem, as on this machine's kernel),
// the black hole stops, and v4 metadata shows FaultInjectionEnabled. A task without
// enableFaultInjection is refused with the ECS agent's 400.
func TestIntegrationFaultInjection(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	agent := env.start("AWS_EC2_METADATA_DISABLED=true", "ECS_ENABLE_TASK_ENI=true", "ECS_CNI_PLUGINS_PATH="+cniPlugins(t),
		"ECS_PAUSE_IMAGE_TARBALL="+os.Getenv("BERTH_PAUSE_TARBALL"), "ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))
	require.Eventually(t, func() bool {
		return hostnat.Check(context.Background(), hostnat.Config{HostNetwork: true}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent installs the NAT redirect; log:\n%s", agent.out.String())

	const egress80 = `{"Port":80,"Protocol":"tcp","TrafficType":"egress"}`
	// step is a container that runs once the one before it succeeded (the first: once app started).
	step := func(name, after string, args ...string) map[string]any {
		condition := "SUCCESS"
		if after == "app" {
			condition = "START"
		}
		return map[string]any{"name": name, "image": testappImage, "memory": 16, "essential": false, "command": args,
			"dependsOn": []map[string]string{{"containerName": after, "condition": condition}}}
	}
	chaos := []map[string]any{
		{"name": "app", "image": testappImage, "memory": 16, "command": []string{"sleep"}},
		step("start", "app", "fault", "-fault", "network-blackhole-port", "-op", "start", "-body", egress80),
		step("status", "start", "fault", "-fault", "network-blackhole-port", "-op", "status", "-body", egress80),
		step("latency", "status", "fault", "-fault", "network-latency", "-op", "start", "-want", "0",
			"-body", `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":["0.0.0.0/0"]}`),
		step("stop", "latency", "fault", "-fault", "network-blackhole-port", "-op", "stop", "-body", egress80),
		step("md", "stop", "metadata", "-path", "task"),
	}
	plain := []map[string]any{
		{"name": "app", "image": testappImage, "memory": 16, "command": []string{"sleep"}},
		step("probe", "app", "fault", "-fault", "network-blackhole-port", "-op", "start", "-want", "400", "-body", egress80),
	}
	for family, def := range map[string]map[string]any{
		"flt-chaos": {"family": "flt-chaos", "networkMode": "awsvpc", "enableFaultInjection": true, "containerDefinitions": chaos},
		"flt-plain": {"family": "flt-plain", "networkMode": "awsvpc", "containerDefinitions": plain},
	} {
		data, err := json.Marshal(def)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, family+".json"), data, 0o600))
	}
	stopFamiliesAtEnd(t, agent, env.tasksDir, "flt-chaos", "flt-plain")
	ts := agent.waitTasks(3*time.Minute, "the fault steps have run", func(ts []introspection.TaskResponse) bool {
		_, a := probeDoneNamed(ts, "flt-chaos", "md")
		_, b := probeDone(ts, "flt-plain")
		return a && b
	})
	logs := func(family, name string) string {
		c, ok := probeDoneNamed(ts, family, name)
		require.True(t, ok, "%s/%s ran", family, name)
		out, err := exec.Command("docker", "logs", c.DockerID).CombinedOutput()
		require.NoError(t, err)
		assert.Equal(t, 0, *c.ExitCode, "%s/%s: %s", family, name, out)
		return strings.TrimSpace(string(out))
	}
	assert.Equal(t, `200 {"Status":"running"}`, logs("flt-chaos", "start"))
	assert.Equal(t, `200 {"Status":"running"}`, logs("flt-chaos", "status"), "the task endpoint is reachable through the black hole")
	if strings.Contains(agent.out.String(), "ecs.capability.fault-injection is not advertised") {
		assert.Equal(t, `500 {"Error":"internal error"}`, logs("flt-chaos", "latency"), "without netem latency fails as the ECS agent's")
	} else {
		assert.Equal(t, `200 {"Status":"running"}`, logs("flt-chaos", "latency"))
	}
	assert.Equal(t, `200 {"Status":"stopped"}`, logs("flt-chaos", "stop"))
	var md map[string]any
	require.NoError(t, json.Unmarshal([]byte(logs("flt-chaos", "md")), &md))
	assert.Equal(t, true, md["FaultInjectionEnabled"])

	var plainARN string
	for _, tk := range ts {
		if tk.Family == "flt-plain" {
			plainARN = tk.Arn
		}
	}
	assert.Equal(t, `400 {"Error":"enableFaultInjection is not enabled for task: `+plainARN+`"}`, logs("flt-plain", "probe"))
}

//go:build integration

package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/introspection"
)

// TestIntegrationContainerMetadataFile runs the real agent with ECS_ENABLE_CONTAINER_METADATA=true and
// a bridge task whose reader container, as a non-root user, waits until its own metadata file (the path
// in $ECS_CONTAINER_METADATA_FILE) is READY and prints it: the fields are checked against Docker and
// the agent, the host's files against the mounts, and the task's directory is gone after cleanup.
func TestIntegrationContainerMetadataFile(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	agent := env.start("AWS_EC2_METADATA_DISABLED=true", "ECS_ENABLE_CONTAINER_METADATA=true",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1m", "ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))

	const family = "mdfile"
	def := map[string]any{"family": family, "containerDefinitions": []map[string]any{
		{"name": "app", "image": testappImage, "memory": 16, "command": []string{"sleep"},
			"portMappings": []map[string]any{{"containerPort": 8080, "hostPort": 0}}},
		{"name": "reader", "image": testappImage, "memory": 16, "essential": false, "user": "1000:1000",
			"command":   []string{"read", "-path-env", engine.MetadataFileEnv, "-until", `"READY"`, "-wait", "60s"},
			"dependsOn": []map[string]string{{"containerName": "app", "condition": "START"}}},
	}}
	data, err := json.Marshal(def)
	require.NoError(t, err)
	taskFile := filepath.Join(env.tasksDir, family+".json")
	require.NoError(t, os.WriteFile(taskFile, data, 0o600))

	ts := agent.waitTasks(2*time.Minute, "the reader has read its READY file", func(ts []introspection.TaskResponse) bool {
		_, ok := probeDoneNamed(ts, family, "reader")
		return ok
	})
	var tk introspection.TaskResponse
	for _, x := range ts {
		if x.Family == family {
			tk = x
		}
	}
	reader, _ := probeDoneNamed(ts, family, "reader")
	logs, err := exec.Command("docker", "logs", reader.DockerID).CombinedOutput()
	require.NoError(t, err)
	require.Equal(t, 0, *reader.ExitCode, "the reader, a non-root user, read its file: %s", logs)

	// From inside: the reader's own file, READY, field by field.
	var md map[string]any
	require.NoError(t, json.Unmarshal(logs, &md), "%s", logs)
	inspect := dockerInspect(t, reader.DockerID)
	assert.Equal(t, env.cluster, md["Cluster"])
	assert.Equal(t, agentInstanceArn(t, agent), md["ContainerInstanceARN"])
	assert.Equal(t, tk.Arn, md["TaskARN"])
	assert.Equal(t, family, md["TaskDefinitionFamily"])
	assert.Equal(t, tk.Version, md["TaskDefinitionRevision"])
	assert.Equal(t, reader.DockerID, md["ContainerID"])
	assert.Equal(t, "reader", md["ContainerName"])
	assert.Equal(t, inspect.Name, md["DockerContainerName"])
	assert.Equal(t, inspect.Image, md["ImageID"])
	assert.Equal(t, testappImage, md["ImageName"])
	// The reader has exited, so Docker no longer shows its address: it was one of the bridge's.
	networks, _ := md["Networks"].([]any)
	require.Len(t, networks, 1, "%s", logs)
	network, _ := networks[0].(map[string]any)
	assert.Equal(t, "bridge", network["NetworkMode"])
	addrs, _ := network["IPv4Addresses"].([]any)
	require.Len(t, addrs, 1, "%s", logs)
	subnet, err := exec.Command("docker", "network", "inspect", "bridge", "-f", "{{(index .IPAM.Config 0).Subnet}}").Output()
	require.NoError(t, err)
	prefix, err := netip.ParsePrefix(strings.TrimSpace(string(subnet)))
	require.NoError(t, err)
	addr, err := netip.ParseAddr(addrs[0].(string))
	require.NoError(t, err, "%s", logs)
	assert.True(t, prefix.Contains(addr), "%s in %s", addr, prefix)
	assert.Equal(t, "READY", md["MetadataFileStatus"])

	// From the host: the app's file, where the ECS agent puts it, mounted read-only and alone.
	taskDir := filepath.Join(env.dataDir, "metadata", env.cluster, tk.Arn[strings.LastIndexByte(tk.Arn, '/')+1:])
	var app introspection.ContainerResponse
	for _, c := range tk.Containers {
		if c.Name == "app" {
			app = c
		}
	}
	appInspect := dockerInspect(t, app.DockerID)
	var mount string
	for _, m := range appInspect.Mounts {
		if strings.HasPrefix(m.Destination, engine.MetadataMountRoot+"/") {
			assert.Equal(t, filepath.Join(taskDir, "app"), m.Source, "only the container's own directory is mounted")
			assert.False(t, m.RW)
			mount = m.Destination
		}
	}
	require.NotEmpty(t, mount, "the metadata directory is mounted: %+v", appInspect.Mounts)
	assert.Contains(t, appInspect.Config.Env, engine.MetadataFileEnv+"="+mount+"/"+engine.MetadataFileName)
	hostFile := filepath.Join(taskDir, "app", engine.MetadataFileName)
	info, err := os.Stat(hostFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
	raw, err := os.ReadFile(hostFile)
	require.NoError(t, err)
	var appMD map[string]any
	require.NoError(t, json.Unmarshal(raw, &appMD))
	assert.Equal(t, "READY", appMD["MetadataFileStatus"])
	assert.Equal(t, app.DockerID, appMD["ContainerID"])
	binding := appInspect.NetworkSettings.Ports["8080/tcp"]
	require.NotEmpty(t, binding)
	ports, _ := appMD["PortMappings"].([]any)
	require.NotEmpty(t, ports, "%s", raw)
	assert.Equal(t, float64(8080), ports[0].(map[string]any)["ContainerPort"])
	hostPort, _ := ports[0].(map[string]any)["HostPort"].(float64)
	assert.Equal(t, binding[0].HostPort, strconv.Itoa(int(hostPort)))

	// Gone once the stopped task is cleaned up (ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, at least 1m).
	require.NoError(t, os.Remove(taskFile))
	agent.waitTasks(30*time.Second, "the task stops", familyStopped(family))
	require.Eventually(t, func() bool {
		_, err := os.Stat(taskDir)
		return os.IsNotExist(err)
	}, 2*time.Minute, 500*time.Millisecond, "the task's metadata directory is removed at cleanup; log:\n%s", agent.out.String())
	agent.stop()
}

// probeDoneNamed returns the container name of family once it has exited.
func probeDoneNamed(ts []introspection.TaskResponse, family, name string) (introspection.ContainerResponse, bool) {
	for _, tk := range ts {
		if tk.Family != family {
			continue
		}
		for _, c := range tk.Containers {
			if c.Name == name && c.KnownStatus == "STOPPED" && c.ExitCode != nil {
				return c, true
			}
		}
	}
	return introspection.ContainerResponse{}, false
}

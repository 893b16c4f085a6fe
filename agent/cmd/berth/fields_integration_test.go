//go:build integration

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
)

// kitchenSink is a task definition that sets every honoured field Docker shows, in bridge mode
// with PID and IPC namespaces shared through the pause container.
func kitchenSink(family string) string {
	return fmt.Sprintf(`{"family": %q, "networkMode": "bridge", "cpu": "512", "memory": "256", "pidMode": "task", "ipcMode": "task",
	"volumes": [{"name": "scratch"}],
	"containerDefinitions": [
	 {"name": "app", "image": %q, "memory": 64, "cpu": 128, "command": ["sleep"],
	  "environment": [{"name": "A", "value": "1"}],
	  "portMappings": [{"containerPort": 8080, "protocol": "tcp"}, {"containerPortRange": "9000-9002", "protocol": "udp"}],
	  "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/scratch"}],
	  "healthCheck": {"command": ["CMD", "/testapp", "exit"], "interval": 10, "timeout": 3, "retries": 2, "startPeriod": 5},
	  "stopTimeout": 5, "user": "65534:65534", "workingDirectory": "/work",
	  "ulimits": [{"name": "nofile", "softLimit": 1024, "hardLimit": 2048}],
	  "dockerLabels": {"team": "core"},
	  "logConfiguration": {"logDriver": "json-file", "options": {"max-size": "1m"}},
	  "readonlyRootFilesystem": true,
	  "linuxParameters": {"initProcessEnabled": true, "capabilities": {"add": ["NET_ADMIN"], "drop": ["MKNOD"]},
	    "devices": [{"hostPath": "/dev/null", "containerPath": "/dev/nothing", "permissions": ["read", "write"]}],
	    "sharedMemorySize": 32, "tmpfs": [{"containerPath": "/run", "size": 16, "mountOptions": ["noexec"]}],
	    "maxSwap": 32, "swappiness": 10},
	  "hostname": "app", "dnsServers": ["10.255.0.2"], "dnsSearchDomains": ["corp.internal"],
	  "extraHosts": [{"hostname": "api", "ipAddress": "10.255.0.9"}],
	  "systemControls": [{"namespace": "net.core.somaxconn", "value": "1024"}],
	  "dockerSecurityOptions": ["no-new-privileges"], "pseudoTerminal": true, "interactive": true,
	  "restartPolicy": {"enabled": true, "ignoredExitCodes": [0], "restartAttemptPeriod": 60}},
	 {"name": "client", "image": %q, "memoryReservation": 16, "essential": false, "command": ["sleep"],
	  "links": ["app:backend"], "dependsOn": [{"containerName": "app", "condition": "START"}]},
	 {"name": "offline", "image": %q, "memoryReservation": 16, "essential": false, "command": ["sleep"], "disableNetworking": true}]}`,
		family, testappImage, testappImage, testappImage)
}

// kitchenSinkPayload is kitchenSink as Amazon ECS sends it over ACS: first-class fields, and Docker's
// own JSON for the rest, written here by hand from ECS's wire shapes rather than by Berth's encoder.
func kitchenSinkPayload(arn, family string) *acswire.Task {
	app := &acswire.Container{Name: "app", Image: testappImage, Memory: 64, CPU: 128, Command: []string{"sleep"},
		Environment:  map[string]string{"A": "1"},
		PortMappings: []acswire.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}, {ContainerPortRange: "9000-9002", Protocol: "udp"}},
		MountPoints:  []acswire.MountPoint{{SourceVolume: "scratch", ContainerPath: "/scratch"}},
		StopTimeout:  5, HealthCheckType: "docker",
		LinuxParameters: &acswire.LinuxParameters{InitProcessEnabled: new(true),
			Capabilities:     &acswire.KernelCapabilities{Add: []string{"NET_ADMIN"}, Drop: []string{"MKNOD"}},
			Devices:          []acswire.Device{{HostPath: "/dev/null", ContainerPath: "/dev/nothing", Permissions: []string{"read", "write"}}},
			SharedMemorySize: new(int64(32))},
		RestartPolicy: &acswire.RestartPolicy{Enabled: true, IgnoredExitCodes: []int64{0}, RestartAttemptPeriod: new(int64(60))},
		DockerConfig: &acswire.DockerConfig{
			Config: `{"Hostname":"app","User":"65534:65534","WorkingDir":"/work","Tty":true,"OpenStdin":true,
				"Labels":{"team":"core"},"Healthcheck":{"Test":["CMD","/testapp","exit"],"Interval":10000000000,
				"Timeout":3000000000,"StartPeriod":5000000000,"Retries":2}}`,
			HostConfig: `{"ReadonlyRootfs":true,"Tmpfs":{"/run":"noexec,size=16m"},"MemorySwap":100663296,"MemorySwappiness":10,
				"ExtraHosts":["api:10.255.0.9"],"Dns":["10.255.0.2"],"DnsSearch":["corp.internal"],
				"Sysctls":{"net.core.somaxconn":"1024"},"SecurityOpt":["no-new-privileges"],
				"Ulimits":[{"Name":"nofile","Soft":1024,"Hard":2048}],
				"LogConfig":{"Type":"json-file","Config":{"max-size":"1m"}}}`,
		}}
	client := &acswire.Container{Name: "client", Image: testappImage, Essential: new(false), Command: []string{"sleep"},
		Links: []string{"app:backend"}, DependsOn: []acswire.ContainerDependency{{ContainerName: "app", Condition: "START"}},
		DockerConfig: &acswire.DockerConfig{HostConfig: `{"MemoryReservation":16777216}`}}
	offline := &acswire.Container{Name: "offline", Image: testappImage, Essential: new(false), Command: []string{"sleep"},
		DockerConfig: &acswire.DockerConfig{Config: `{"NetworkDisabled":true}`, HostConfig: `{"MemoryReservation":16777216}`}}
	return &acswire.Task{Arn: arn, Family: family, Version: "1", DesiredStatus: "RUNNING", NetworkMode: "bridge", CPU: 0.5, Memory: 256,
		PidMode: "task", IpcMode: "task", Containers: []*acswire.Container{app, client, offline},
		Volumes: []*acswire.Volume{{Name: "scratch", Type: "host", Host: &acswire.HostVolume{}}}}
}

// startScriptedACS serves the ECS API from an embedded control plane and ACS from the test's
// channel, on loopback.
func startScriptedACS(t *testing.T) (*scriptedACS, string) {
	t.Helper()
	srv := standInECS(t, "us-east-1")
	standIn := &scriptedACS{cp: srv.Handler(), out: make(chan acswire.Message, 8)}
	t.Cleanup(func() { close(standIn.out) })
	return standIn, serveLoopback(t, standIn)
}

// ecsModeEnv is the environment of an agent in ecs mode against startScriptedACS's stand-in.
func ecsModeEnv(addr string, extra ...string) []string {
	return append([]string{"AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://" + addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}, extra...)
}

// familySettled reports whether the family has a task whose containers (but the pause container)
// all run.
func familySettled(family string) func([]introspection.TaskResponse) bool {
	return func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Family != family || tk.KnownStatus != "RUNNING" {
				continue
			}
			all := len(tk.Containers) > 0
			for _, c := range tk.Containers {
				all = all && (c.KnownStatus == "RUNNING" || c.Name == engine.PauseContainerName)
			}
			if all {
				return true
			}
		}
		return false
	}
}

// inspectFamily returns docker inspect of each container of the family's task, by container name,
// the pause container's included: /v1/tasks hides it, as the ECS agent does, so the containers are
// found by their task ARN label.
func inspectFamily(t *testing.T, dc *docker.Client, ts []introspection.TaskResponse, family string) map[string]*docker.Container {
	t.Helper()
	out := map[string]*docker.Container{}
	for _, tk := range ts {
		if tk.Family != family {
			continue
		}
		list, err := dc.ListContainers(docker.ListContainersOptions{All: true,
			Filters: map[string][]string{"label": {engine.LabelTaskARN + "=" + tk.Arn}}})
		require.NoError(t, err, "list the containers of %s", tk.Arn)
		for _, c := range list {
			name := c.Labels[engine.LabelContainerName]
			ci, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: c.ID})
			require.NoError(t, err, "inspect %s/%s", family, name)
			out[name] = ci
		}
	}
	return out
}

var (
	dockerIDs   = regexp.MustCompile(`[0-9a-f]{64}`)
	randomNames = regexp.MustCompile(`-[0-9a-f]{12}\b`)
	endpointEnv = regexp.MustCompile(`^(ECS_CONTAINER_METADATA_URI(_V4)?|ECS_AGENT_URI|AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)=`)
)

// comparable reduces docker inspect to what the task definition decides: Config and HostConfig,
// with the names, IDs and ports that differ from run to run (the task's family and ID among them)
// replaced.
func comparable(t *testing.T, ci *docker.Container, family string) map[string]any {
	t.Helper()
	conf := *ci.Config
	conf.Hostname = strings.TrimPrefix(conf.Hostname, ci.ID[:12]) // Docker's default host name is the ID
	conf.Env = slices.DeleteFunc(slices.Clone(conf.Env), endpointEnv.MatchString)
	slices.Sort(conf.Env)
	labels := map[string]string{}
	for k, v := range conf.Labels {
		if k != engine.LabelTaskARN && k != engine.LabelCluster && k != engine.LabelTaskFamily {
			labels[k] = v
		}
	}
	conf.Labels = labels
	host := *ci.HostConfig
	for port, bindings := range host.PortBindings {
		host.PortBindings[port] = []docker.PortBinding{{HostIP: bindings[0].HostIP, HostPort: "(host port)"}}
	}
	b, err := json.Marshal(map[string]any{"Config": conf, "HostConfig": host, "Mounts": ci.Mounts})
	require.NoError(t, err)
	arn := ci.Config.Labels[engine.LabelTaskARN]
	s := strings.ReplaceAll(string(b), arn, "(task arn)")
	s = strings.ReplaceAll(s, engine.CNITaskID(arn), "(task id)")
	s = strings.ReplaceAll(s, family, "(family)")
	s = dockerIDs.ReplaceAllString(s, "(id)")
	s = randomNames.ReplaceAllString(s, "-(random)")
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &out))
	return out
}

// TestIntegrationKitchenSinkOnEveryPath runs one task definition that sets every honoured field
// through a static file and the embedded control plane (local mode), and the same task as Amazon ECS
// sends it over ACS (ecs mode): docker inspect must show the same containers, with each field
// applied.
func TestIntegrationKitchenSinkOnEveryPath(t *testing.T) {
	bin := buildBerth(t)
	dc := dockerFromEnv(t)
	pause := "ECS_PAUSE_IMAGE_TARBALL=" + os.Getenv("BERTH_PAUSE_TARBALL")

	local := newRecoveryEnv(t, bin)
	require.NoError(t, os.WriteFile(filepath.Join(local.tasksDir, "kitchen.json"), []byte(kitchenSink("kitchen-static")), 0o600))
	cpAddr := freeAddr(t)
	agent := local.start("ECS_LOCAL_CONTROL_PLANE_ADDR="+cpAddr, pause)
	var keys localauth.Keys
	require.Eventually(t, func() bool {
		var err error
		keys, err = localauth.Load(localauth.Path(local.dataDir))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent wrote its keys")
	ctx := context.Background()
	var def json.RawMessage = []byte(kitchenSink("kitchen-cp"))
	require.Eventually(t, func() bool {
		return localcp.Call(ctx, http.DefaultClient, "http://"+cpAddr, keys, "RegisterTaskDefinition", def, nil) == nil
	}, 30*time.Second, 200*time.Millisecond, "the embedded control plane registers the definition")
	require.Eventually(t, func() bool {
		var out struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		err := localcp.Call(ctx, http.DefaultClient, "http://"+cpAddr, keys, "RunTask",
			map[string]any{"cluster": local.cluster, "taskDefinition": "kitchen-cp"}, &out)
		return err == nil && len(out.Tasks) == 1
	}, 90*time.Second, 500*time.Millisecond, "the embedded control plane runs the task once the agent has registered")
	ts := agent.waitTasks(2*time.Minute, "both local tasks run", func(ts []introspection.TaskResponse) bool {
		return familySettled("kitchen-static")(ts) && familySettled("kitchen-cp")(ts)
	})
	static, viaCP := inspectFamily(t, dc, ts, "kitchen-static"), inspectFamily(t, dc, ts, "kitchen-cp")
	agent.stop()

	remote := newRecoveryEnv(t, bin)
	standIn, addr := startScriptedACS(t)
	standIn.out <- &acswire.PayloadMessage{MessageID: "kitchen-1", SeqNum: 1, Tasks: []*acswire.Task{
		kitchenSinkPayload("arn:aws:ecs:us-east-1:000000000000:task/kitchen/"+randomHex(t, 16), "kitchen-acs")}}
	agent = remote.start(ecsModeEnv(addr, pause)...)
	ts = agent.waitTasks(2*time.Minute, "the ACS task runs", familySettled("kitchen-acs"))
	viaACS := inspectFamily(t, dc, ts, "kitchen-acs")
	agent.stop()

	for _, name := range []string{"app", "client", "offline", engine.PauseContainerName} {
		require.Contains(t, static, name)
		require.Contains(t, viaCP, name)
		require.Contains(t, viaACS, name)
		want := comparable(t, static[name], "kitchen-static")
		assert.Equal(t, want, comparable(t, viaCP[name], "kitchen-cp"), "%s: the embedded control plane's container differs from the static file's", name)
		assert.Equal(t, want, comparable(t, viaACS[name], "kitchen-acs"), "%s: the ACS payload's container differs from the static file's", name)
	}

	// Every honoured field is applied, not merely the same on each path.
	app, pauseC := static["app"], static[engine.PauseContainerName]
	c, h := app.Config, app.HostConfig
	assert.Equal(t, "app", c.Hostname)
	assert.Equal(t, "65534:65534", c.User)
	assert.Equal(t, "/work", c.WorkingDir)
	assert.True(t, c.Tty)
	assert.True(t, c.OpenStdin)
	assert.Equal(t, "core", c.Labels["team"])
	assert.Contains(t, c.Env, "A=1")
	assert.Equal(t, []string{"CMD", "/testapp", "exit"}, c.Healthcheck.Test)
	assert.Equal(t, []string{"NET_ADMIN"}, h.CapAdd)
	assert.Equal(t, []string{"MKNOD"}, h.CapDrop)
	assert.Equal(t, []docker.Device{{PathOnHost: "/dev/null", PathInContainer: "/dev/nothing", CgroupPermissions: "rw"}}, h.Devices)
	assert.True(t, h.Init)
	assert.EqualValues(t, 32<<20, h.ShmSize)
	assert.Equal(t, map[string]string{"/run": "noexec,size=16m"}, h.Tmpfs)
	assert.EqualValues(t, 64<<20, h.Memory)
	assert.EqualValues(t, (64+32)<<20, h.MemorySwap)
	require.NotNil(t, h.MemorySwappiness)
	assert.EqualValues(t, 10, *h.MemorySwappiness)
	assert.Equal(t, []string{"api:10.255.0.9"}, h.ExtraHosts)
	assert.Equal(t, []string{"10.255.0.2"}, h.DNS)
	assert.Equal(t, []string{"corp.internal"}, h.DNSSearch)
	assert.Equal(t, map[string]string{"net.core.somaxconn": "1024"}, h.Sysctls)
	assert.Equal(t, []string{"no-new-privileges"}, h.SecurityOpt)
	assert.True(t, h.ReadonlyRootfs)
	assert.Equal(t, []docker.ULimit{{Name: "nofile", Soft: 1024, Hard: 2048}}, h.Ulimits)
	assert.Equal(t, docker.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m"}}, h.LogConfig)
	assert.EqualValues(t, 128, h.CPUShares)
	assert.Equal(t, "container:"+pauseC.ID, h.PidMode)
	assert.Equal(t, "container:"+pauseC.ID, h.IpcMode)
	assert.Equal(t, "shareable", pauseC.HostConfig.IpcMode)
	assert.Equal(t, "/ecs/"+engine.CNITaskID(c.Labels[engine.LabelTaskARN]), h.CgroupParent, "the task cgroup is the containers' parent")
	ranged := 0
	for port, b := range h.PortBindings {
		if strings.HasSuffix(string(port), "/udp") {
			ranged++
			assert.NotEmpty(t, b[0].HostPort, port)
		}
	}
	assert.Equal(t, 3, ranged, "containerPortRange 9000-9002 maps three ports")
	assert.Len(t, static["client"].HostConfig.Links, 1)
	assert.True(t, strings.HasSuffix(static["client"].HostConfig.Links[0], ":/"+strings.TrimPrefix(static["client"].Name, "/")+"/backend"),
		"the client links to app as backend: %v", static["client"].HostConfig.Links)
	assert.True(t, static["offline"].Config.NetworkDisabled)
}

// TestIntegrationUnsupportedFieldRefusedOnEveryPath sets a GPU requirement, which Berth cannot
// honour, on each path a task definition takes (see refusedOnEveryPath).
func TestIntegrationUnsupportedFieldRefusedOnEveryPath(t *testing.T) {
	refusedOnEveryPath(t, func(family string) string {
		return fmt.Sprintf(`{"family": %q, "containerDefinitions": [{"name": "app", "image": %q, "memory": 16,
			"command": ["sleep"], "resourceRequirements": [{"type": "GPU", "value": "1"}]}]}`, family, testappImage)
	}, []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16, ResourceRequirements: json.RawMessage(`[{"type":"GPU","value":"1"}]`)}},
		"containerDefinitions[0].resourceRequirements", "not supported by Berth")
}

// TestIntegrationFirelensRefusedOnEveryPath gives FireLens definitions ECS refuses on each path a
// task definition takes (see refusedOnEveryPath): an awsfirelens container without a log router,
// and a router of an unknown type.
func TestIntegrationFirelensRefusedOnEveryPath(t *testing.T) {
	t.Run("awsfirelens without a router", func(t *testing.T) {
		refusedOnEveryPath(t, func(family string) string {
			return fmt.Sprintf(`{"family": %q, "containerDefinitions": [{"name": "app", "image": %q, "memory": 16, "command": ["sleep"],
				"logConfiguration": {"logDriver": "awsfirelens", "options": {"Name": "stdout"}}}]}`, family, testappImage)
		}, []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16,
			DockerConfig: &acswire.DockerConfig{HostConfig: `{"LogConfig":{"Type":"awsfirelens","Config":{"Name":"stdout"}}}`}}},
			"containerDefinitions[0].logConfiguration.logDriver", "awsfirelens needs a log router")
	})
	t.Run("unknown router type", func(t *testing.T) {
		refusedOnEveryPath(t, func(family string) string {
			return fmt.Sprintf(`{"family": %q, "containerDefinitions": [{"name": "app", "image": %q, "memory": 16, "command": ["sleep"],
				"firelensConfiguration": {"type": "logstash"}}]}`, family, testappImage)
		}, []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16, FirelensConfiguration: &acswire.FirelensConfiguration{Type: "logstash"}}},
			"containerDefinitions[0].firelensConfiguration.type", `unknown type "logstash"`)
	})
}

// refusedOnEveryPath gives a definition Berth refuses at field (with a message containing why) on
// each path a task definition takes: the embedded control plane answers ClientException naming the
// field; a static file is logged once with the field's path and never run; an ACS task (of
// acsContainers) is reported STOPPED with a reason naming the field.
func refusedOnEveryPath(t *testing.T, definition func(family string) string, acsContainers []*acswire.Container, field, why string) {
	t.Helper()
	bin := buildBerth(t)

	local := newRecoveryEnv(t, bin)
	require.NoError(t, os.WriteFile(filepath.Join(local.tasksDir, "refused.json"), []byte(definition("refused-static")), 0o600))
	cpAddr := freeAddr(t)
	agent := local.start("ECS_LOCAL_CONTROL_PLANE_ADDR=" + cpAddr)
	var keys localauth.Keys
	require.Eventually(t, func() bool {
		var err error
		keys, err = localauth.Load(localauth.Path(local.dataDir))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent wrote its keys")
	var err error
	require.Eventually(t, func() bool {
		err = localcp.Call(context.Background(), http.DefaultClient, "http://"+cpAddr, keys, "RegisterTaskDefinition",
			json.RawMessage(definition("refused-cp")), nil)
		var apiErr *localcp.APIError
		return errors.As(err, &apiErr)
	}, 30*time.Second, 200*time.Millisecond, "the embedded control plane answers")
	var apiErr *localcp.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "ClientException", apiErr.Type)
	assert.Contains(t, apiErr.Message, field+": "+why)

	// The file must be logged once, not at every scan of the directory. Each new file makes the agent
	// scan the whole directory again; two tasks started from two new files show two such scans.
	require.Eventually(t, func() bool { return strings.Contains(agent.out.String(), field) }, 30*time.Second, 100*time.Millisecond,
		"the static file's refusal is logged")
	for _, family := range []string{"rescan-1", "rescan-2"} {
		writeStaticTask(t, local.tasksDir, family)
		agent.waitTasks(time.Minute, "a new file's task runs, after a scan of the whole directory", familyRunning(family, 2))
	}
	assert.Equal(t, 1, strings.Count(agent.out.String(), field), "logged once:\n%s", agent.out.String())
	ts, err := agent.tasks()
	require.NoError(t, err)
	for _, tk := range ts {
		assert.NotEqual(t, "refused-static", tk.Family, "the refused file never runs")
	}
	agent.stop()

	srv := standInECS(t, "us-east-1")
	arn := "arn:aws:ecs:us-east-1:000000000000:task/refused/" + randomHex(t, 16)
	standIn := &rejectingACS{cp: srv.Handler(), stopped: map[string]string{}, payload: &acswire.PayloadMessage{
		MessageID: "refused-1", SeqNum: 1, Tasks: []*acswire.Task{{Arn: arn, Family: "refused-acs", Version: "1", DesiredStatus: "RUNNING",
			Containers: acsContainers}}}}
	addr := serveLoopback(t, standIn)
	remote := newRecoveryEnv(t, bin)
	agent = remote.start(ecsModeEnv(addr)...)
	require.Eventually(t, func() bool {
		_, stopped := standIn.state()
		return stopped[arn] != ""
	}, time.Minute, 100*time.Millisecond, "the ACS task is reported STOPPED; log:\n%s", agent.out.String())
	_, stopped := standIn.state()
	assert.Contains(t, stopped[arn], field, "the reason names the field")
	agent.stop()
}

// TestIntegrationTaskCgroup runs a task with task-level cpu and memory and reads its limits back
// from the cgroup filesystem; runs a task whose container allocates past the task's memory, which
// the kernel kills, stopping the task; and checks that a task cgroup left by an agent that died is
// removed at the next start.
func TestIntegrationTaskCgroup(t *testing.T) {
	bin := buildBerth(t)
	const cgfs = "/sys/fs/cgroup"
	leftover := "berth-it-" + randomHex(t, 8)
	for _, ctrl := range []string{"memory", "cpu"} {
		require.NoError(t, os.MkdirAll(filepath.Join(cgfs, ctrl, "ecs", leftover), 0o755))
	}
	env := newRecoveryEnv(t, bin)
	writeDef := func(family, cpu, memory, command string) {
		def := fmt.Sprintf(`{"family": %q, "cpu": %q, "memory": %q, "containerDefinitions": [{"name": "app", "image": %q,
			"memoryReservation": 16, "command": %s}]}`, family, cpu, memory, testappImage, command)
		require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, family+".json"), []byte(def), 0o600))
	}
	writeDef("cg-limits", "512", "128", `["sleep"]`)
	writeDef("cg-oom", "256", "64", `["alloc", "-mib", "256"]`)
	plain := fmt.Sprintf(`{"family": "cg-pids", "containerDefinitions": [{"name": "app", "image": %q, "memory": 16, "command": ["sleep"]}]}`, testappImage)
	require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, "cg-pids.json"), []byte(plain), 0o600))
	agent := env.start("ECS_TASK_PIDS_LIMIT=100")
	ts := agent.waitTasks(time.Minute, "the limited tasks run and the hog has stopped", func(ts []introspection.TaskResponse) bool {
		return familyRunning("cg-limits", 1)(ts) && familyRunning("cg-pids", 1)(ts) && familyStopped("cg-oom")(ts)
	})
	for _, ctrl := range []string{"memory", "cpu"} {
		_, err := os.Stat(filepath.Join(cgfs, ctrl, "ecs", leftover))
		assert.ErrorIs(t, err, os.ErrNotExist, "the %s cgroup of a task no longer known is removed at start", ctrl)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	for _, tk := range ts {
		switch tk.Family {
		case "cg-limits":
			dir := engine.CNITaskID(tk.Arn)
			assert.Equal(t, fmt.Sprint(128<<20), read(filepath.Join(cgfs, "memory", "ecs", dir, "memory.limit_in_bytes")))
			assert.Equal(t, "100000", read(filepath.Join(cgfs, "cpu", "ecs", dir, "cpu.cfs_period_us")))
			assert.Equal(t, "50000", read(filepath.Join(cgfs, "cpu", "ecs", dir, "cpu.cfs_quota_us")), "512 units: half a CPU")
			procs := read(filepath.Join(cgfs, "memory", "ecs", dir, tk.Containers[0].DockerID, "cgroup.procs"))
			assert.NotEmpty(t, procs, "the container runs inside the task cgroup")
			assert.Equal(t, "100", read(filepath.Join(cgfs, "pids", "ecs", dir, "pids.max")), "ECS_TASK_PIDS_LIMIT")
		case "cg-pids":
			// No task-level cpu or memory: the pids limit alone gives the task its cgroup.
			dir := engine.CNITaskID(tk.Arn)
			assert.Equal(t, "100", read(filepath.Join(cgfs, "pids", "ecs", dir, "pids.max")))
			procs := read(filepath.Join(cgfs, "pids", "ecs", dir, tk.Containers[0].DockerID, "cgroup.procs"))
			assert.NotEmpty(t, procs, "the container runs inside the task cgroup")
		case "cg-oom":
			c := tk.Containers[0]
			require.NotNil(t, c.ExitCode)
			assert.Equal(t, 137, *c.ExitCode, "killed by the kernel")
			assert.Equal(t, "OutOfMemoryError: Container killed due to memory usage", c.Reason)
			assert.Equal(t, "Essential container in task exited", tk.StoppedReason)
		}
	}
	agent.stop()
}

// TestIntegrationHostNamespacesAndPortRange: a static task with pidMode and ipcMode host runs in the
// host's PID and IPC namespaces, and its containerPortRange gets host ports from
// ECS_DYNAMIC_HOST_PORT_RANGE (below the kernel's ephemeral range, so nothing else takes them).
func TestIntegrationHostNamespacesAndPortRange(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	def := fmt.Sprintf(`{"family": "ns-host", "pidMode": "host", "ipcMode": "host", "containerDefinitions": [{"name": "app",
		"image": %q, "memory": 16, "command": ["sleep"],
		"portMappings": [{"containerPortRange": "7000-7002", "protocol": "tcp"}]}]}`, testappImage)
	require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, "ns-host.json"), []byte(def), 0o600))
	agent := env.start("ECS_DYNAMIC_HOST_PORT_RANGE=20700-20799")
	ts := agent.waitTasks(time.Minute, "the task runs", familyRunning("ns-host", 1))
	ci := inspectFamily(t, dockerFromEnv(t), ts, "ns-host")["app"]
	require.NotNil(t, ci)
	assert.Equal(t, "host", ci.HostConfig.PidMode)
	assert.Equal(t, "host", ci.HostConfig.IpcMode)
	var ports []string
	for port, binds := range ci.NetworkSettings.Ports {
		for _, b := range binds {
			hp, err := strconv.Atoi(b.HostPort)
			require.NoError(t, err)
			assert.True(t, hp >= 20700 && hp <= 20799, "%s bound to host port %d, outside ECS_DYNAMIC_HOST_PORT_RANGE", port, hp)
		}
		if len(binds) > 0 {
			ports = append(ports, string(port))
		}
	}
	assert.ElementsMatch(t, []string{"7000/tcp", "7001/tcp", "7002/tcp"}, ports)
	agent.stop()
}

package taskendpoint_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

const (
	fromWeb    = "172.17.0.2:41234"
	fromAWSVPC = "169.254.172.3:50000"
	fromNobody = "172.17.0.99:41234"
)

// The v4 shapes of the fixtures' containers; v3 and v2 are derived from them by dropping fields.
var (
	webV4 = `{
		"DockerId": "` + webID + `", "Name": "web", "DockerName": "ecs-web-3-web-0a1b2c3d4e5f",
		"Image": "nginx:1.27", "ImageID": "sha256:1111",
		"Ports": [{"ContainerPort": 80, "Protocol": "tcp", "HostPort": 32768, "HostIp": "0.0.0.0"}],
		"Labels": {
			"team": "infra",
			"com.berth-agent.managed": "true",
			"com.amazonaws.ecs.cluster": "prod",
			"com.amazonaws.ecs.container-name": "web",
			"com.amazonaws.ecs.task-arn": "` + bridgeARN + `",
			"com.amazonaws.ecs.task-definition-family": "web",
			"com.amazonaws.ecs.task-definition-version": "3"
		},
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Limits": {"CPU": 256, "Memory": 512},
		"StartedAt": "2026-11-30T14:00:01.123456789Z",
		"Type": "NORMAL",
		"LogDriver": "json-file", "LogOptions": {"max-size": "10m"},
		"ContainerARN": "` + webContainerARN + `",
		"Networks": [{"NetworkMode": "bridge", "IPv4Addresses": ["172.17.0.2"]}],
		"Health": {"status": "HEALTHY", "statusSince": "2026-11-30T14:00:05.123456789Z", "output": "200 OK"},
		"Volumes": [
			{"DockerName": "cache", "Source": "/var/lib/docker/volumes/cache/_data", "Destination": "/cache"},
			{"Source": "/srv/conf", "Destination": "/etc/nginx"}
		]
	}`
	jobV4 = `{
		"DockerId": "` + jobID + `", "Name": "job", "DockerName": "ecs-web-3-job-5f4e3d2c1b0a",
		"Image": "busybox:1.36", "ImageID": "sha256:2222",
		"Labels": {
			"com.berth-agent.managed": "true",
			"com.amazonaws.ecs.cluster": "prod",
			"com.amazonaws.ecs.container-name": "job",
			"com.amazonaws.ecs.task-arn": "` + bridgeARN + `",
			"com.amazonaws.ecs.task-definition-family": "web",
			"com.amazonaws.ecs.task-definition-version": "3"
		},
		"DesiredStatus": "RUNNING", "KnownStatus": "STOPPED", "ExitCode": 0,
		"Limits": {"CPU": 2, "Memory": 0},
		"StartedAt": "2026-11-30T14:00:01.123456789Z", "FinishedAt": "2026-11-30T14:00:09.123456789Z",
		"Type": "NORMAL",
		"Networks": [{"NetworkMode": "bridge", "IPv4Addresses": ["172.17.0.3"]}]
	}`
	eniNetworkV4 = `[{
		"NetworkMode": "awsvpc", "IPv4Addresses": ["10.0.2.61"],
		"AttachmentIndex": 0, "MACAddress": "0e:10:e2:01:bd:91",
		"IPv4SubnetCIDRBlock": "10.0.2.0/24", "PrivateDNSName": "ip-10-0-2-61.us-west-2.compute.internal",
		"SubnetGatewayIpv4Address": "10.0.2.1/24",
		"DomainNameServers": ["10.0.0.2"], "DomainNameSearchList": ["us-west-2.compute.internal"]
	}]`
	pauseV4 = `{
		"DockerId": "` + pauseID + `", "Name": "~internal~ecs~pause", "DockerName": "ecs-api-7-internalecspause-9f8e7d6c5b4a",
		"Image": "berth/pause:latest", "ImageID": "sha256:3333",
		"Labels": {
			"com.berth-agent.managed": "true",
			"com.amazonaws.ecs.cluster": "prod",
			"com.amazonaws.ecs.container-name": "~internal~ecs~pause",
			"com.amazonaws.ecs.task-arn": "` + awsvpcARN + `",
			"com.amazonaws.ecs.task-definition-family": "api",
			"com.amazonaws.ecs.task-definition-version": "7"
		},
		"DesiredStatus": "RESOURCES_PROVISIONED", "KnownStatus": "RESOURCES_PROVISIONED",
		"Limits": {"CPU": 2, "Memory": 0},
		"StartedAt": "2026-11-30T14:00:03.123456789Z",
		"Type": "CNI_PAUSE",
		"Networks": ` + eniNetworkV4 + `
	}`
	apiV4 = `{
		"DockerId": "` + apiID + `", "Name": "api", "DockerName": "ecs-api-7-api-1a2b3c4d5e6f",
		"Image": "012345678901.dkr.ecr.us-west-2.amazonaws.com/api:v2", "ImageID": "sha256:4444",
		"Ports": [{"ContainerPort": 8080, "Protocol": "tcp", "HostPort": 8080}],
		"Labels": {
			"com.berth-agent.managed": "true",
			"com.amazonaws.ecs.cluster": "prod",
			"com.amazonaws.ecs.container-name": "api",
			"com.amazonaws.ecs.task-arn": "` + awsvpcARN + `",
			"com.amazonaws.ecs.task-definition-family": "api",
			"com.amazonaws.ecs.task-definition-version": "7"
		},
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Limits": {"CPU": 2, "Memory": 256},
		"StartedAt": "2026-11-30T14:00:04.123456789Z",
		"Type": "NORMAL",
		"Networks": ` + eniNetworkV4 + `
	}`
	bridgeTaskV4 = `{
		"Cluster": "prod", "TaskARN": "` + bridgeARN + `", "Family": "web", "Revision": "3",
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Containers": [` + webV4 + `,` + jobV4 + `],
		"Limits": {"CPU": 0.5, "Memory": 1024},
		"AvailabilityZone": "us-west-2a",
		"LaunchType": "EC2", "ServiceName": "web-svc", "FaultInjectionEnabled": false,
		"VPCID": "vpc-0a1b2c3d4e5f60718", "AvailabilityZoneID": "usw2-az1"
	}`
	// The tags /taskWithTags adds to the bridge task: the task's and the container instance's.
	bridgeTags   = `{"TaskTags": {"team": "infra", "cost-center": "42"}, "ContainerInstanceTags": {"rack": "r12"}}`
	awsvpcTaskV4 = `{
		"Cluster": "prod", "TaskARN": "` + awsvpcARN + `", "Family": "api", "Revision": "7",
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Containers": [` + pauseV4 + `,` + apiV4 + `],
		"AvailabilityZone": "us-west-2a",
		"FaultInjectionEnabled": false,
		"VPCID": "vpc-0a1b2c3d4e5f60718", "AvailabilityZoneID": "usw2-az1"
	}`
)

// Fields v4 has and v3 has not.
var v4Only = []string{"LogDriver", "LogOptions", "ContainerARN", "HostIp", "LaunchType", "ServiceName", "VPCID",
	"AvailabilityZoneID", "FaultInjectionEnabled", "AttachmentIndex", "MACAddress", "IPv4SubnetCIDRBlock", "PrivateDNSName",
	"SubnetGatewayIpv4Address", "DomainNameServers", "DomainNameSearchList"}

// merge returns the JSON object doc with the members of extra added.
func merge(t *testing.T, doc, extra string) string {
	t.Helper()
	var a, b map[string]any
	require.NoError(t, json.Unmarshal([]byte(doc), &a))
	require.NoError(t, json.Unmarshal([]byte(extra), &b))
	for k, v := range b {
		a[k] = v
	}
	out, err := json.Marshal(a)
	require.NoError(t, err)
	return string(out)
}

// drop returns doc with every object member named in keys removed, at any depth.
func drop(t *testing.T, doc string, keys ...string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v))
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range keys {
				delete(v, k)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// dropBridgeNetworks removes the Networks of the bridge task's containers (v2 shows none for them).
func dropBridgeNetworks(t *testing.T, doc string) string { return drop(t, doc, "Networks") }

func TestMetadataShapes(t *testing.T) {
	v3 := func(doc string) string { return drop(t, doc, v4Only...) }
	tests := []struct {
		name, path, from, want string
	}{
		{"v4 bridge container", "/v4/tok-web", fromWeb, webV4},
		{"v4 bridge stopped container", "/v4/tok-job", fromWeb, jobV4},
		{"v4 bridge task", "/v4/tok-web/task", fromWeb, bridgeTaskV4},
		{"v4 bridge task with tags", "/v4/tok-web/taskWithTags", fromWeb, merge(t, bridgeTaskV4, bridgeTags)},
		{"v4 awsvpc container", "/v4/tok-api", fromAWSVPC, apiV4},
		{"v4 awsvpc task", "/v4/tok-api/task", fromAWSVPC, awsvpcTaskV4},
		{"v3 bridge container", "/v3/tok-web", fromWeb, v3(webV4)},
		{"v3 bridge task", "/v3/tok-web/task", fromWeb, v3(bridgeTaskV4)},
		{"v3 bridge task with tags", "/v3/tok-web/taskWithTags", fromWeb, merge(t, v3(bridgeTaskV4), bridgeTags)},
		{"v3 awsvpc container", "/v3/tok-api", fromAWSVPC, v3(apiV4)},
		{"v3 awsvpc task", "/v3/tok-api/task", fromAWSVPC, v3(awsvpcTaskV4)},
		{"v2 bridge task", "/v2/metadata", fromWeb, dropBridgeNetworks(t, v3(bridgeTaskV4))},
		{"v2 bridge task, trailing slash", "/v2/metadata/", fromWeb, dropBridgeNetworks(t, v3(bridgeTaskV4))},
		{"v2 bridge task with tags", "/v2/metadataWithTags", fromWeb, merge(t, dropBridgeNetworks(t, v3(bridgeTaskV4)), bridgeTags)},
		{"v2 bridge task with tags, trailing slash", "/v2/metadataWithTags/", fromWeb, merge(t, dropBridgeNetworks(t, v3(bridgeTaskV4)), bridgeTags)},
		{"v2 bridge container", "/v2/metadata/" + jobID, fromWeb, dropBridgeNetworks(t, v3(jobV4))},
		{"v2 awsvpc task", "/v2/metadata", fromAWSVPC, v3(awsvpcTaskV4)},
		{"v2 awsvpc container", "/v2/metadata/" + apiID, fromAWSVPC, v3(apiV4)},
		{"v2 from an IPv4-mapped IPv6 address", "/v2/metadata", "[::ffff:172.17.0.2]:41234", dropBridgeNetworks(t, v3(bridgeTaskV4))},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := e.get(tt.path, tt.from)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.JSONEq(t, tt.want, rec.Body.String())
		})
	}
}

// TestTaskFieldsWhenTheyApply covers the fields the fixtures leave out: a stopped task's
// ExecutionStoppedAt, a task without limits, an awsvpc task in local mode (no ENI), a container
// whose health check has not reported yet, a container with a restart policy (RestartCount, v4
// only), a task of ECS Anywhere (launch type EXTERNAL, no zone, VPC or service), a container no
// control plane gave an ARN, an unhealthy container's check exit code, and containers Docker does
// not have yet.
func TestTaskFieldsWhenTheyApply(t *testing.T) {
	tk := awsvpcTask()
	tk.ENI = nil
	tk.LaunchType = "EXTERNAL"
	tk.KnownStatus, tk.DesiredStatus, tk.StoppedAt = task.TaskStopped, task.TaskStopped, at(30)
	tk.Containers[1].HealthCheck = &task.HealthCheck{Command: []string{"CMD", "true"}}
	tk.Containers[1].RestartPolicy = &task.RestartPolicy{Enabled: true, AttemptPeriod: 300 * time.Second}
	tk.Containers[1].RestartCount = 2
	tk.Containers[1].ManagedAgents = []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Status: task.ManagedAgentRunning,
		Reason: "ExecuteCommandAgent started", LastStartedAt: at(5), ID: "not-shown", ExecID: "not-shown"}}
	tk.Containers = append(tk.Containers,
		&task.Container{Name: "pulled", Image: "busybox", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerPulled,
			HealthCheck: &task.HealthCheck{Command: []string{"CMD", "false"}}, Health: task.HealthUnhealthy, HealthSince: at(20),
			HealthOutput: "connection refused", HealthExitCode: 7},
		&task.Container{Name: "waiting", Image: "busybox", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerNone})
	e := newEnv(t, func(c *taskendpoint.Config) {
		c.Instance = taskendpoint.Instance{Cluster: "edge"}
		c.Tasks.(*fakeTasks).tokens["tok-local"] = held{tk, "api"}
	})
	rec := e.get("/v4/tok-local/task", fromAWSVPC)
	require.Equal(t, http.StatusOK, rec.Code)
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Equal(t, "2026-11-30T14:00:30.123456789Z", got["ExecutionStoppedAt"])
	assert.Equal(t, "EXTERNAL", got["LaunchType"])
	assert.Equal(t, "edge", got["Cluster"])
	for _, absent := range []string{"Limits", "AvailabilityZone", "AvailabilityZoneID", "VPCID", "ServiceName", "TaskTags", "Errors"} {
		assert.NotContains(t, got, absent)
	}
	containers := got["Containers"].([]any)
	require.Len(t, containers, 3, "v4: the containers Docker has and the one pulled, not the one waiting")
	api := containers[1].(map[string]any)
	assert.Equal(t, []any{map[string]any{"NetworkMode": "awsvpc", "IPv4Addresses": []any{"10.0.2.61"}}}, api["Networks"])
	assert.Equal(t, map[string]any{}, api["Health"], "no status while UNKNOWN")
	assert.Equal(t, 2.0, api["RestartCount"])
	assert.NotContains(t, api, "ContainerARN")
	assert.NotContains(t, containers[0], "RestartCount", "only a container with a restart policy has one")
	assert.Equal(t, []any{map[string]any{"Name": "ExecuteCommandAgent", "LastStatus": "RUNNING", "Reason": "ExecuteCommandAgent started",
		"LastStartedAt": "2026-11-30T14:00:05.123456789Z"}}, api["ManagedAgents"], "Berth extension")
	assert.NotContains(t, containers[0], "ManagedAgents", "only a container with a managed agent")
	pulled := containers[2].(map[string]any)
	assert.Equal(t, "", pulled["DockerId"])
	assert.Equal(t, "PULLED", pulled["KnownStatus"])
	assert.Equal(t, map[string]any{"status": "UNHEALTHY", "statusSince": "2026-11-30T14:00:20.123456789Z", "exitCode": 7.0,
		"output": "connection refused"}, pulled["Health"])

	rec = e.get("/v3/tok-local/task", fromAWSVPC)
	require.Equal(t, http.StatusOK, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.Len(t, got["Containers"], 2, "v3: the containers Docker has")
	rec = e.get("/v3/tok-local", fromAWSVPC)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.NotContains(t, rec.Body.String(), "RestartCount", "v3 has no RestartCount")
	assert.NotContains(t, rec.Body.String(), "ManagedAgents", "v3 has no ManagedAgents")

	tk.AWSVPC = nil // not set up yet: no network at all
	rec = e.get("/v4/tok-local", fromAWSVPC)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.NotContains(t, rec.Body.String(), "Networks")
}

// TestHostNetworkAddresses: a container on a network Docker gives no address (network mode host)
// shows it with an empty address in v3 and v4, as the ECS agent does.
func TestHostNetworkAddresses(t *testing.T) {
	tk := bridgeTask()
	tk.NetworkMode = task.NetworkHost
	tk.Containers[0].Networks = []task.Network{{Mode: "host"}}
	e := newEnv(t, func(c *taskendpoint.Config) { c.Tasks.(*fakeTasks).tokens["tok-host"] = held{tk, "web"} })
	for _, p := range []string{"/v4/tok-host", "/v3/tok-host"} {
		rec := e.get(p, fromWeb)
		require.Equal(t, http.StatusOK, rec.Code)
		var got map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		assert.Equal(t, []any{map[string]any{"NetworkMode": "host", "IPv4Addresses": []any{""}}}, got["Networks"], p)
	}
}

func TestUnknownToken(t *testing.T) {
	const noContainer = "unable to get container ID from request: unable to get docker ID from v3 endpoint ID: "
	const noTask = "unable to get task arn from request: unable to get task Arn from v3 endpoint ID: "
	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/v4/bad", http.StatusNotFound, "V4 container metadata handler: " + noContainer + "bad"},
		{"/v4/", http.StatusNotFound, "V4 container metadata handler: " + noContainer},
		{"/v4/bad/task", http.StatusNotFound, "V4 task metadata handler: " + noTask + "bad"},
		{"/v4/bad/taskWithTags", http.StatusNotFound, "V4 task metadata handler: " + noTask + "bad"},
		{"/v4/bad/stats", http.StatusNotFound, "V4 container stats handler: " + noTask + "bad"},
		{"/v4/bad/task/stats", http.StatusNotFound, "V4 task stats handler: " + noTask + "bad"},
		{"/v3/bad", http.StatusInternalServerError, "V3 container metadata handler: " + noContainer + "bad"},
		{"/v3/bad/task", http.StatusInternalServerError, "V3 task metadata handler: " + noTask + "bad"},
		{"/v3/bad/stats", http.StatusBadRequest, "V3 container stats handler: " + noTask + "bad"},
		{"/v3/bad/task/stats", http.StatusBadRequest, "V3 task stats handler: " + noTask + "bad"},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := e.get(tt.path, fromWeb)
			assert.Equal(t, tt.wantStatus, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var body string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "the body is a JSON string")
			assert.Equal(t, tt.wantBody, body)
		})
	}
}

func TestV2Errors(t *testing.T) {
	tests := []struct {
		name, path, from, wantBody string
	}{
		{"no task has the address", "/v2/metadata", fromNobody, "Unable to get task arn from request: unable to associate '172.17.0.99' with task"},
		{"no task has the address (stats)", "/v2/stats", fromNobody, "Unable to get task arn from request: unable to associate '172.17.0.99' with task"},
		{"unknown container", "/v2/metadata/nope", fromWeb, "Unable to generate metadata for container 'nope'"},
		{"another task's container", "/v2/metadata/" + apiID, fromWeb, "Unable to generate metadata for container '" + apiID + "'"},
		{"a container path with more", "/v2/metadata/" + webID + "/more", fromWeb, "Unable to generate metadata for container '" + webID + "/more'"},
		{"another task's container stats", "/v2/stats/" + apiID, fromWeb, "Unable to get container stats for: " + apiID},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := e.get(tt.path, tt.from)
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			var body string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, tt.wantBody, body)
		})
	}
}

func TestStats(t *testing.T) {
	apiStatsV3 := `{"id":"` + apiID + `","networks":{"eth0":{"rx_bytes":100}}}`
	pauseStats := `{"id":"` + pauseID + `"}`
	tests := []struct {
		name, path, from string
		wantStatus       int
		wantBody         string
	}{
		{"v4 container", "/v4/tok-web/stats", fromWeb, http.StatusOK, webStatsJSON},
		{"v4 awsvpc container", "/v4/tok-api/stats", fromAWSVPC, http.StatusOK, apiStatsJSON},
		{"v4 task: a container without stats is {}", "/v4/tok-web/task/stats", fromWeb, http.StatusOK,
			`{"` + webID + `":` + webStatsJSON + `,"` + jobID + `":{}}`},
		{"v4 awsvpc task, with its pause container", "/v4/tok-api/task/stats", fromAWSVPC, http.StatusOK,
			`{"` + pauseID + `":` + pauseStats + `,"` + apiID + `":` + apiStatsJSON + `}`},
		{"v3 container", "/v3/tok-web/stats", fromWeb, http.StatusOK, webStatsJSON},
		{"v3 awsvpc container: no network_rate_stats", "/v3/tok-api/stats", fromAWSVPC, http.StatusOK, apiStatsV3},
		{"v3 task: a container without stats is null", "/v3/tok-web/task/stats", fromWeb, http.StatusOK,
			`{"` + webID + `":` + webStatsJSON + `,"` + jobID + `":null}`},
		{"v3 awsvpc task", "/v3/tok-api/task/stats", fromAWSVPC, http.StatusOK,
			`{"` + pauseID + `":` + pauseStats + `,"` + apiID + `":` + apiStatsV3 + `}`},
		{"v2 task", "/v2/stats", fromAWSVPC, http.StatusOK, `{"` + pauseID + `":` + pauseStats + `,"` + apiID + `":` + apiStatsV3 + `}`},
		{"v2 task, trailing slash", "/v2/stats/", fromWeb, http.StatusOK, `{"` + webID + `":` + webStatsJSON + `,"` + jobID + `":null}`},
		{"v2 container", "/v2/stats/" + webID, fromWeb, http.StatusOK, webStatsJSON},
		{"v4 container without stats", "/v4/tok-job/stats", fromWeb, http.StatusInternalServerError, `"Unable to get container stats for: ` + jobID + `"`},
		{"v3 container without stats", "/v3/tok-job/stats", fromWeb, http.StatusBadRequest, `"Unable to get container stats for: ` + jobID + `"`},
		{"v2 container without stats", "/v2/stats/" + jobID, fromWeb, http.StatusBadRequest, `"Unable to get container stats for: ` + jobID + `"`},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := e.get(tt.path, tt.from)
			require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.JSONEq(t, tt.wantBody, rec.Body.String())
		})
	}

	t.Run("an awsvpc task's containers are read in its network namespace", func(t *testing.T) {
		e := newEnv(t)
		require.Equal(t, http.StatusOK, e.get("/v4/tok-api/stats", fromAWSVPC).Code)
		ns, ok := e.stats.askedNetNS(apiID)
		require.True(t, ok)
		assert.Equal(t, "/proc/4242/ns/net", ns)
		require.Equal(t, http.StatusOK, e.get("/v4/tok-web/stats", fromWeb).Code)
		ns, ok = e.stats.askedNetNS(webID)
		require.True(t, ok)
		assert.Empty(t, ns, "a bridge container's networks are Docker's")
	})

	t.Run("no stats source", func(t *testing.T) {
		e := newEnv(t, func(c *taskendpoint.Config) { c.Stats = nil })
		rec := e.get("/v4/tok-web/stats", fromWeb)
		assert.Equal(t, http.StatusInternalServerError, rec.Code)
		rec = e.get("/v4/tok-web/task/stats", fromWeb)
		assert.Equal(t, http.StatusInternalServerError, rec.Code)
		assert.JSONEq(t, `"Unable to get task stats for: `+bridgeARN+`"`, rec.Body.String())
		for _, p := range []string{"/v3/tok-web/task/stats", "/v2/stats"} {
			rec = e.get(p, fromWeb)
			assert.Equal(t, http.StatusBadRequest, rec.Code, p)
			assert.JSONEq(t, `"Unable to get task stats for: `+bridgeARN+`"`, rec.Body.String(), p)
		}
	})
}

// TestTaskWithTagsErrors: a tags call that fails leaves its field out and, in v4 only, is in
// Errors with the ECS API's code, message, status and request ID; a static task's tags are not
// asked for; an unregistered instance's are an error.
func TestTaskWithTagsErrors(t *testing.T) {
	denied := &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 400}},
			Err: &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "User is not authorized to perform: ecs:ListTagsForResource"}},
		RequestID: "8c2f6a1e-1b2c-4d3e-9f8a-7b6c5d4e3f2a",
	}
	e := newEnv(t, func(c *taskendpoint.Config) {
		c.Tags.(*fakeTags).errs = map[string]error{
			bridgeARN:   fmt.Errorf("tags of %q: ecs ListTagsForResource: %w", bridgeARN, &smithy.OperationError{ServiceID: "ECS", OperationName: "ListTagsForResource", Err: denied}),
			instanceARN: fmt.Errorf("tags of %q: ecs ListTagsForResource: dial tcp 10.0.0.1:443: connection refused", instanceARN),
		}
	})
	rec := e.get("/v4/tok-web/taskWithTags", fromWeb)
	require.Equal(t, http.StatusOK, rec.Code)
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.NotContains(t, got, "TaskTags")
	assert.NotContains(t, got, "ContainerInstanceTags")
	wantErrors := `[
		{"ErrorField": "ContainerInstanceTags", "ResourceARN": "` + instanceARN + `",
		 "ErrorMessage": "tags of \"` + instanceARN + `\": ecs ListTagsForResource: dial tcp 10.0.0.1:443: connection refused"},
		{"ErrorField": "TaskTags", "ResourceARN": "` + bridgeARN + `", "ErrorCode": "AccessDeniedException",
		 "ErrorMessage": "User is not authorized to perform: ecs:ListTagsForResource", "StatusCode": 400,
		 "RequestId": "8c2f6a1e-1b2c-4d3e-9f8a-7b6c5d4e3f2a"}
	]`
	b, err := json.Marshal(got["Errors"])
	require.NoError(t, err)
	assert.JSONEq(t, wantErrors, string(b))

	for _, p := range []string{"/v3/tok-web/taskWithTags", "/v2/metadataWithTags"} {
		rec = e.get(p, fromWeb)
		require.Equal(t, http.StatusOK, rec.Code, p)
		assert.NotContains(t, rec.Body.String(), "Errors", "%s: only v4 reports them", p)
		assert.NotContains(t, rec.Body.String(), "Tags", p)
	}
	assert.Contains(t, e.log.String(), "tags unavailable")

	t.Run("static task, unregistered instance", func(t *testing.T) {
		static := bridgeTask()
		static.Static = true
		e := newEnv(t, func(c *taskendpoint.Config) {
			c.Tasks.(*fakeTasks).tokens["tok-static"] = held{static, "web"}
			c.InstanceARN = func() string { return "" }
		})
		rec := e.get("/v4/tok-static/taskWithTags", fromWeb)
		require.Equal(t, http.StatusOK, rec.Code)
		var got map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		assert.Equal(t, []any{map[string]any{"ErrorField": "ContainerInstanceTags", "ErrorMessage": "the container instance is not registered yet"}}, got["Errors"])
		assert.Empty(t, e.tags.asked, "neither is asked")
	})
	t.Run("no tag source: no tags, no errors", func(t *testing.T) {
		e := newEnv(t, func(c *taskendpoint.Config) { c.Tags = nil })
		rec := e.get("/v4/tok-web/taskWithTags", fromWeb)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.JSONEq(t, bridgeTaskV4, rec.Body.String())
	})
}

// TestPathsAreCleaned: a path with dot segments or doubled slashes is redirected to its clean form,
// the query kept, as the ECS agent's router does.
func TestPathsAreCleaned(t *testing.T) {
	e := newEnv(t)
	for in, want := range map[string]string{
		"//v4/tok-web":                   "/v4/tok-web",
		"/v4/tok-web/./task":             "/v4/tok-web/task",
		"/v4/x/../tok-web/task/":         "/v4/tok-web/task/",
		"/v1//credentials?id=" + credsID: "/v1/credentials?id=" + credsID,
	} {
		rec := e.get(in, fromWeb)
		assert.Equal(t, http.StatusMovedPermanently, rec.Code, in)
		assert.Equal(t, want, rec.Header().Get("Location"), in)
	}
}

// TestNoSecretInLogs makes every kind of request, successful or not, and checks that the log names
// no key, session token, full credentials ID or full metadata token, though it does log requests.
func TestNoSecretInLogs(t *testing.T) {
	e := newEnv(t)
	paths := []string{
		"/v2/credentials/" + credsID, "/v1/credentials?id=" + credsID, "/v2/credentials/refused-id",
		"/v2/credentials/" + credsID + "-unknown", "/v4/tok-web-unknown-token", "/v4/tok-web", "/v4/tok-web/task",
		"/v4/tok-job/stats", "/v2/metadata",
	}
	for _, p := range paths {
		e.get(p, fromWeb)
	}
	logged := e.log.String()
	require.Contains(t, logged, "credentials_id="+credsID[:8], "credentials requests are logged by ID prefix")
	require.Contains(t, logged, "task credentials unavailable")
	for _, secret := range []string{secretKey, sessionToken, accessKeyID, credsID, "tok-web-unknown-token", "hunter2"} {
		assert.NotContains(t, logged, secret)
	}
	for _, part := range []string{secretKey[:12], sessionToken[:12]} {
		assert.NotContains(t, logged, part)
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, func(c *taskendpoint.Config) { c.RateLimit = taskendpoint.RateLimit{Steady: 2, Burst: 3} })
	for i := range 3 {
		rec := e.get("/v4/tok-web", fromWeb)
		require.Equal(t, http.StatusOK, rec.Code, "request %d", i)
		assert.Equal(t, "2.00", rec.Header().Get("X-Rate-Limit-Limit"))
		assert.Equal(t, "1", rec.Header().Get("X-Rate-Limit-Duration"))
	}
	rec := e.get("/v4/tok-web", fromWeb)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "2.00", rec.Header().Get("X-Rate-Limit-Limit"))
	assert.Equal(t, "1", rec.Header().Get("X-Rate-Limit-Duration"))
	assert.Equal(t, "You have reached maximum request limit.", rec.Body.String())

	// Another token of the same address, and the same address without a token, have their own limits.
	assert.Equal(t, http.StatusOK, e.get("/v4/tok-job", fromWeb).Code)
	assert.Equal(t, http.StatusOK, e.get("/v2/metadata", fromWeb).Code)

	// Half a second refills one request at 2 a second.
	e.clock.Advance(500 * time.Millisecond)
	assert.Equal(t, http.StatusOK, e.get("/v4/tok-web", fromWeb).Code)
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v4/tok-web", fromWeb).Code)

	// Credentials IDs no task holds (this handler knows no holders) and unknown tokens count against
	// their source address.
	for range 3 {
		require.Equal(t, http.StatusOK, e.get("/v2/credentials/"+credsID, fromAWSVPC).Code)
	}
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v2/credentials/"+credsID, fromAWSVPC).Code)
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v4/unknown-1", fromAWSVPC).Code)
	assert.Equal(t, http.StatusOK, e.get("/v2/credentials/"+credsID, fromNobody).Code)
}

func TestMethodsAndPaths(t *testing.T) {
	e := newEnv(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions} {
		t.Run(m, func(t *testing.T) {
			rec := e.do(m, "/v4/tok-web", fromWeb)
			assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
			assert.Equal(t, "GET", rec.Header().Get("Allow"))
			assert.Equal(t, "40.00", rec.Header().Get("X-Rate-Limit-Limit"))
		})
	}
	for _, p := range []string{"/", "/v1/metadata", "/v4", "/v4/tok-web/", "/v4/tok-web/tasks", "/v4/tok-web/task/", "/v5/tok-web",
		"/v4/tok-web/task/stats/more", "/v1/credentials/x", "/api/tok-web", "/v4/tok-web/tasks/stats", "/v2/metadataWithTags/" + webID,
		"/v3/tok-web/associations/elastic-inference", "/v4/tok-web/associations/gpu/0", "/api/tok-web/task-protection/v1/state",
		"/api/tok-web/fault/v1/network-latency/pause", "/api/tok-web/fault/v1/network-jitter/start"} {
		t.Run(p, func(t *testing.T) {
			rec := e.get(p, fromWeb)
			assert.Equal(t, http.StatusNotFound, rec.Code)
			rec = e.do(http.MethodPost, p, fromWeb)
			assert.Equal(t, http.StatusNotFound, rec.Code, "a path without a route is 404 whatever the method, as the ECS agent's router answers")
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := taskendpoint.New(taskendpoint.Config{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = taskendpoint.New(taskendpoint.Config{Tasks: &fakeTasks{}, RateLimit: taskendpoint.RateLimit{Steady: 0, Burst: 5}})
	assert.ErrorIs(t, err, taskendpoint.ErrInvalidRateLimit)
	_, err = taskendpoint.New(taskendpoint.Config{Tasks: &fakeTasks{}, BindCredentials: true})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "binding needs to know which task holds an ID")
}

func TestParseRateLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    taskendpoint.RateLimit
		wantErr bool
	}{
		{"40,60", taskendpoint.RateLimit{Steady: 40, Burst: 60}, false},
		{" 100 , 150 ", taskendpoint.RateLimit{Steady: 100, Burst: 150}, false},
		{"5,1", taskendpoint.RateLimit{Steady: 5, Burst: 1}, false},
		{"40", taskendpoint.RateLimit{}, true},
		{"", taskendpoint.RateLimit{}, true},
		{"0,60", taskendpoint.RateLimit{}, true},
		{"40,-1", taskendpoint.RateLimit{}, true},
		{"4.5,6", taskendpoint.RateLimit{}, true},
		{"40,60,80", taskendpoint.RateLimit{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := taskendpoint.ParseRateLimit(tt.in)
			if tt.wantErr {
				assert.ErrorIs(t, err, taskendpoint.ErrInvalidRateLimit)
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	assert.Equal(t, taskendpoint.RateLimit{Steady: 40, Burst: 60}, taskendpoint.DefaultRateLimit())
}

// FuzzServeHTTP sends arbitrary paths and methods: the handler must never panic, and must answer with
// one of the statuses it documents.
func FuzzServeHTTP(f *testing.F) {
	for _, s := range []string{"/v4/tok-web", "/v4/tok-web/task/stats", "/v3//task", "/v2/metadata/" + webID, "/v2/credentials/a/b",
		"/v1/credentials?id=" + credsID, "/v4/tok-web/taskWithTags", "//v4/tok-web", "/v2/stats/", "/v4/%2F/task", ""} {
		f.Add("GET", s)
	}
	f.Add("POST", "/v4/tok-web")
	allowed := map[int]bool{200: true, 301: true, 400: true, 404: true, 405: true, 429: true, 500: true}
	f.Fuzz(func(t *testing.T, method, target string) {
		e := newEnv(t)
		req, err := http.NewRequest(http.MethodGet, "http://169.254.170.2/", nil)
		require.NoError(t, err)
		req.Method = method
		path, query, _ := strings.Cut(target, "?")
		req.URL.Path, req.URL.RawQuery = path, query
		req.RemoteAddr = fromWeb
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("%s %q: status %d", method, target, rec.Code)
		}
	})
}

// TestOverLoopback serves the handler on a real loopback listener, as the agent will, and checks that
// the source address of a real connection finds its task.
func TestOverLoopback(t *testing.T) {
	e := newEnv(t, func(c *taskendpoint.Config) {
		tk := bridgeTask()
		tk.Containers[0].Networks = []task.Network{{Mode: "bridge", IPv4Addresses: []string{"127.0.0.1"}}}
		c.Tasks.(*fakeTasks).tasks = []*task.Task{tk}
	})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	for _, p := range []string{"/v2/metadata", "/v4/tok-web/task", "/v2/credentials/" + credsID} {
		resp, err := srv.Client().Get(srv.URL + p)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, p)
		assert.Equal(t, "40.00", resp.Header.Get("X-Rate-Limit-Limit"))
	}
}

// TestV2FindsTheTaskByCurrentAddress: v2 answers for the task whose running container has the
// source address now. A stopped container keeps its last address in the model, and Docker gives
// it to the next container it starts: that container's task is the one answered, every time.
// An address two tasks have now is not guessed between: it is the ECS agent's 400 for an address
// it cannot associate with a task, and the operator is told.
func TestV2FindsTheTaskByCurrentAddress(t *testing.T) {
	const heir = "arn:aws:ecs:us-west-2:012345678901:task/prod/heir"
	inheritor := &task.Task{Arn: heir, Family: "heir", Revision: 1, NetworkMode: task.NetworkBridge,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{{Name: "app", DockerID: "eeee", KnownStatus: task.ContainerRunning, DesiredStatus: task.ContainerRunning,
			Networks: []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.3"}}}}}} // the job's old address
	twin := func(arn string) *task.Task {
		return &task.Task{Arn: arn, NetworkMode: task.NetworkBridge, KnownStatus: task.TaskRunning,
			Containers: []*task.Container{{Name: "app", KnownStatus: task.ContainerRunning,
				Networks: []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.9"}}}}}}
	}
	tornDown := awsvpcTask()
	tornDown.Arn, tornDown.AWSVPC.BridgeIPv4, tornDown.AWSVPC.IPv4, tornDown.AWSVPC.TornDown = "arn:aws:ecs:us-west-2:012345678901:task/prod/torn", "169.254.172.8", "10.0.2.62", true
	stopped := bridgeTask()
	stopped.Arn, stopped.KnownStatus = "arn:aws:ecs:us-west-2:012345678901:task/prod/stopped", task.TaskStopped
	stopped.Containers[0].Networks = []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.7"}}}
	e := newEnv(t, func(c *taskendpoint.Config) {
		src := c.Tasks.(*fakeTasks)
		src.tasks = append(src.tasks, inheritor, twin("arn:aws:ecs:us-west-2:012345678901:task/prod/a"),
			twin("arn:aws:ecs:us-west-2:012345678901:task/prod/b"), tornDown, stopped)
	})

	for i := range 200 {
		e.clock.Advance(time.Second) // within the rate limit
		rec := e.get("/v2/metadata", "172.17.0.3:40000")
		require.Equal(t, http.StatusOK, rec.Code, "request %d", i)
		var got struct{ TaskARN string }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		require.Equal(t, heir, got.TaskARN, "request %d: the address's current holder, not the stopped container's task", i)
	}
	assert.Equal(t, http.StatusBadRequest, e.get("/v2/metadata/"+jobID, "172.17.0.3:40000").Code,
		"the stopped container's task is not the asker's")

	for _, tt := range []struct{ name, from, ip string }{
		{"two tasks have the address", "172.17.0.9:40000", "172.17.0.9"},
		{"a torn-down awsvpc task's task-bridge address", "169.254.172.8:40000", "169.254.172.8"},
		{"a torn-down awsvpc task's ENI address", "10.0.2.62:40000", "10.0.2.62"},
		{"a stopped task's address", "172.17.0.7:40000", "172.17.0.7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range []string{"/v2/metadata", "/v2/stats", "/v2/metadataWithTags"} {
				rec := e.get(p, tt.from)
				assert.Equal(t, http.StatusBadRequest, rec.Code, p)
				var body string
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
				assert.Equal(t, "Unable to get task arn from request: unable to associate '"+tt.ip+"' with task", body, p)
			}
		})
	}
	assert.Contains(t, e.log.String(), "reason=address_of_several_tasks source=172.17.0.9 tasks=2")
}

// TestRefusedRequestsAreLoggedOnceAMinute: a flood of refused requests writes one WARN line a minute,
// the first, and the next line counts the ones left out.
func TestRefusedRequestsAreLoggedOnceAMinute(t *testing.T) {
	e := newEnv(t, func(c *taskendpoint.Config) { c.RateLimit = taskendpoint.RateLimit{Steady: 1, Burst: 1} })
	const line = "task endpoint request refused"
	warnings := func() []string {
		var out []string
		for _, l := range strings.Split(e.log.String(), "\n") {
			if strings.Contains(l, line) {
				out = append(out, l)
			}
		}
		return out
	}
	for range 1000 {
		e.get("/v4/tok-web", fromWeb)
	}
	got := warnings()
	require.Len(t, got, 1, "one line for 999 refusals within the minute")
	assert.Contains(t, got[0], "level=warn")
	assert.Contains(t, got[0], "reason=throttled path_kind=container source=172.17.0.2")
	assert.NotContains(t, got[0], "suppressed")

	e.clock.Advance(59 * time.Second)
	e.get("/v4/tok-web", fromWeb) // refills one: answered
	e.get("/v4/tok-web", fromWeb)
	require.Len(t, warnings(), 1, "still within the minute")

	e.clock.Advance(time.Second)
	e.get("/v4/tok-web", fromWeb)
	e.get("/v2/metadata", fromWeb) // the address's own budget: answered
	e.get("/v2/metadata", fromWeb)
	got = warnings()
	require.Len(t, got, 2)
	assert.Contains(t, got[1], "reason=throttled path_kind=task source=172.17.0.2 suppressed_throttled=999")
}

package localcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/localauth"
)

// testKeys sign the tests' requests.
var testKeys = localauth.Keys{AccessKeyID: "BKIATESTKEYTESTKEY00", SecretAccessKey: "dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0"}

type harness struct {
	t      *testing.T
	srv    *Server
	clock  *clockwork.FakeClock
	path   string
	keys   localauth.Keys
	static *fakeStatic // the agent's static tasks: none until a test sets some
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWithKeys(t, testKeys)
}

func newHarnessWithKeys(t *testing.T, keys localauth.Keys) *harness {
	t.Helper()
	h := &harness{t: t, clock: clockwork.NewFakeClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)),
		path: filepath.Join(t.TempDir(), "localcp.db"), keys: keys, static: &fakeStatic{}}
	h.open()
	t.Cleanup(func() { _ = h.srv.Close() })
	return h
}

func (h *harness) open() {
	h.t.Helper()
	srv, err := New(Config{DBPath: h.path, Region: "local", Clock: h.clock, Keys: h.keys,
		StaticTasks: h.static.tasks, StaticTasksDir: testStaticDir}, nil)
	require.NoError(h.t, err)
	h.srv = srv
}

// heartbeatDue waits until an ACS connection waits for its heartbeat, then advances the clock by the
// heartbeat interval so that every open connection sends one.
func (h *harness) heartbeatDue() {
	h.t.Helper()
	require.NoError(h.t, h.clock.BlockUntilContext(h.t.Context(), 1), "no ACS connection waits for its heartbeat")
	h.clock.Advance(DefaultHeartbeatInterval)
}

func (h *harness) restart() {
	h.t.Helper()
	require.NoError(h.t, h.srv.Close())
	h.open()
}

// send sends one ECS API request the way the AWS CLI does: signed with the harness's keys.
func (h *harness) send(op string, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", targetPrefix+op)
	require.NoError(h.t, localauth.Sign(h.t.Context(), req, []byte(body), h.keys, "us-east-1", time.Now()))
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// do sends one ECS API request and returns the status and decoded body.
func (h *harness) do(op string, body string) (int, map[string]any) {
	h.t.Helper()
	rec := h.send(op, body)
	out := map[string]any{}
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out), "body: %s", rec.Body.String())
	return rec.Code, out
}

// ok sends a request that must succeed.
func (h *harness) ok(op, body string) map[string]any {
	h.t.Helper()
	code, out := h.do(op, body)
	require.Equal(h.t, http.StatusOK, code, "%s: %v", op, out)
	return out
}

// fails sends a request that must fail with the given exception and returns its message.
func (h *harness) fails(op, body, exception string) string {
	h.t.Helper()
	code, out := h.do(op, body)
	require.Equal(h.t, http.StatusBadRequest, code, "%s: %v", op, out)
	require.Equal(h.t, exception, out["__type"], "%s: %v", op, out)
	return out["message"].(string)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// webRequest is misc/examples/tasks.d/web.json as the CLI sends it with --cli-input-json, plus the
// fields the CLI adds from flags.
func webRequest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../misc/examples/tasks.d/web.json")
	require.NoError(t, err)
	m := map[string]any{}
	require.NoError(t, json.Unmarshal(b, &m))
	m["networkMode"] = "bridge"
	m["volumes"] = []any{}
	m["cpu"] = "256"
	m["memory"] = "512"
	m["requiresCompatibilities"] = []any{"EC2"}
	return mustJSON(m)
}

const sleepDef = `{"family":"sleep","containerDefinitions":[{"name":"app","image":"busybox","memory":32,"command":["sleep","3600"],
"environment":[{"name":"A","value":"1"}],"portMappings":[{"containerPort":80}]}]}`

// at walks a decoded JSON value: keys for objects, ints for arrays.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "want an object at %v, got %#v", p, v)
			v = m[k]
		case int:
			a, ok := v.([]any)
			require.True(t, ok && k < len(a), "want an array with index %d, got %#v", k, v)
			v = a[k]
		}
	}
	return v
}

func TestRegisterDescribeListDeregister(t *testing.T) {
	h := newHarness(t)
	out := h.ok("RegisterTaskDefinition", webRequest(t))
	td := out["taskDefinition"]
	assert.Equal(t, "arn:aws:ecs:local:000000000000:task-definition/web:1", at(t, td, "taskDefinitionArn"))
	assert.EqualValues(t, 1, at(t, td, "revision"))
	assert.Equal(t, "ACTIVE", at(t, td, "status"))
	assert.Equal(t, "web", at(t, td, "family"))
	assert.Equal(t, "256", at(t, td, "cpu"))
	assert.Equal(t, "sidecar", at(t, td, "containerDefinitions", 1, "name"))
	assert.Equal(t, "HEALTHY", at(t, td, "containerDefinitions", 1, "dependsOn", 0, "condition"))
	assert.InDelta(t, float64(h.clock.Now().Unix()), at(t, td, "registeredAt"), 0.001)

	h.clock.Advance(time.Second)
	out = h.ok("RegisterTaskDefinition", webRequest(t))
	assert.EqualValues(t, 2, at(t, out, "taskDefinition", "revision"))
	h.ok("RegisterTaskDefinition", sleepDef)

	for _, ref := range []string{"web", "web:2", "arn:aws:ecs:local:000000000000:task-definition/web:2"} {
		out = h.ok("DescribeTaskDefinition", mustJSON(map[string]any{"taskDefinition": ref}))
		assert.EqualValues(t, 2, at(t, out, "taskDefinition", "revision"), ref)
	}
	out = h.ok("DescribeTaskDefinition", `{"taskDefinition":"web:1"}`)
	assert.EqualValues(t, 1, at(t, out, "taskDefinition", "revision"))

	out = h.ok("ListTaskDefinitions", `{}`)
	assert.Equal(t, []any{
		"arn:aws:ecs:local:000000000000:task-definition/sleep:1",
		"arn:aws:ecs:local:000000000000:task-definition/web:1",
		"arn:aws:ecs:local:000000000000:task-definition/web:2",
	}, out["taskDefinitionArns"])
	out = h.ok("ListTaskDefinitions", `{"familyPrefix":"we","sort":"DESC"}`)
	assert.Equal(t, []any{
		"arn:aws:ecs:local:000000000000:task-definition/web:2",
		"arn:aws:ecs:local:000000000000:task-definition/web:1",
	}, out["taskDefinitionArns"])

	out = h.ok("DeregisterTaskDefinition", `{"taskDefinition":"web:2"}`)
	assert.Equal(t, "INACTIVE", at(t, out, "taskDefinition", "status"))
	assert.NotNil(t, at(t, out, "taskDefinition", "deregisteredAt"))

	out = h.ok("DescribeTaskDefinition", `{"taskDefinition":"web"}`)
	assert.EqualValues(t, 1, at(t, out, "taskDefinition", "revision"), "latest ACTIVE")
	out = h.ok("DescribeTaskDefinition", `{"taskDefinition":"web:2"}`)
	assert.Equal(t, "INACTIVE", at(t, out, "taskDefinition", "status"))
	out = h.ok("ListTaskDefinitions", `{"status":"INACTIVE"}`)
	assert.Equal(t, []any{"arn:aws:ecs:local:000000000000:task-definition/web:2"}, out["taskDefinitionArns"])

	out = h.ok("ListTaskDefinitionFamilies", `{}`)
	assert.Equal(t, []any{"sleep", "web"}, out["families"])
	h.ok("DeregisterTaskDefinition", `{"taskDefinition":"sleep:1"}`)
	out = h.ok("ListTaskDefinitionFamilies", `{"status":"INACTIVE"}`)
	assert.Equal(t, []any{"sleep"}, out["families"])
	out = h.ok("ListTaskDefinitionFamilies", `{"familyPrefix":"w"}`)
	assert.Equal(t, []any{"web"}, out["families"])
}

func TestErrors(t *testing.T) {
	h := newHarness(t)
	h.ok("RegisterTaskDefinition", sleepDef)
	tests := []struct {
		name, op, body, exception, message string
	}{
		{"unknown task definition", "DescribeTaskDefinition", `{"taskDefinition":"nope"}`, "ClientException", "Unable to describe task definition."},
		{"unknown revision", "DescribeTaskDefinition", `{"taskDefinition":"sleep:9"}`, "ClientException", "Unable to describe task definition."},
		{"run unknown task definition", "RunTask", `{"taskDefinition":"nope"}`, "ClientException", "TaskDefinition not found."},
		{"missing image", "RegisterTaskDefinition", `{"family":"x","containerDefinitions":[{"name":"a","memory":32}]}`, "ClientException", "containerDefinitions[0].image"},
		{"bad dependency", "RegisterTaskDefinition", `{"family":"x","containerDefinitions":[{"name":"a","image":"i","memory":32,"dependsOn":[{"containerName":"b","condition":"START"}]}]}`, "ClientException", "containerDefinitions[0].dependsOn[0].containerName"},
		{"wrong type", "RegisterTaskDefinition", `{"family":"x","containerDefinitions":[{"name":"a","image":"i","memory":"lots"}]}`, "ClientException", "containerDefinitions[0].memory"},
		{"unknown cluster", "ListTasks", `{"cluster":"nope"}`, "ClusterNotFoundException", "Cluster not found."},
		{"stop unknown task", "StopTask", `{"task":"0123456789abcdef0123456789abcdef"}`, "InvalidParameterException", "The referenced task was not found."},
		{"fargate", "RunTask", `{"taskDefinition":"sleep","launchType":"FARGATE"}`, "UnsupportedFeatureException", "FARGATE"},
		{"bad override", "RunTask", `{"taskDefinition":"sleep","overrides":{"containerOverrides":[{"name":"nope"}]}}`, "InvalidParameterException", "nope"},
		{"unknown operation", "CreateService", `{}`, "UnknownOperationException", "CreateService"},
		{"bad json", "ListTasks", `{`, "SerializationException", ""},
		{"desired status ECS does not name", "ListTasks", `{"desiredStatus":"NONE"}`, "InvalidParameterException", "desiredStatus must be one of RUNNING, PENDING, STOPPED."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := h.fails(tc.op, tc.body, tc.exception)
			assert.Contains(t, msg, tc.message)
		})
	}
}

func TestClusters(t *testing.T) {
	h := newHarness(t)
	out := h.ok("ListClusters", `{}`)
	assert.Equal(t, []any{"arn:aws:ecs:local:000000000000:cluster/default"}, out["clusterArns"])
	out = h.ok("CreateCluster", `{"clusterName":"dev"}`)
	assert.Equal(t, "ACTIVE", at(t, out, "cluster", "status"))
	h.ok("CreateCluster", `{"clusterName":"dev"}`) // idempotent
	out = h.ok("DescribeClusters", `{"clusters":["dev","arn:aws:ecs:local:000000000000:cluster/default","gone"]}`)
	assert.Len(t, out["clusters"], 2)
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"))
	assert.Equal(t, "arn:aws:ecs:local:000000000000:cluster/gone", at(t, out, "failures", 0, "arn"))
}

var taskArnRE = regexp.MustCompile(`^arn:aws:ecs:local:000000000000:task/default/[0-9a-f]{32}$`)

func TestRunTaskPendingWithoutInstance(t *testing.T) {
	h := newHarness(t)
	h.ok("RegisterTaskDefinition", sleepDef)
	out := h.ok("RunTask", `{"cluster":"default","taskDefinition":"sleep","count":2,"startedBy":"me",
		"overrides":{"containerOverrides":[{"name":"app","command":["sleep","1"]}]}}`)
	require.Len(t, out["tasks"], 2)
	task := at(t, out, "tasks", 0)
	arn := at(t, task, "taskArn").(string)
	assert.Regexp(t, taskArnRE, arn)
	assert.Equal(t, "PENDING", at(t, task, "lastStatus"))
	assert.Equal(t, "RUNNING", at(t, task, "desiredStatus"))
	assert.Equal(t, "app", at(t, task, "containers", 0, "name"))
	assert.Equal(t, "PENDING", at(t, task, "containers", 0, "lastStatus"))
	assert.Contains(t, at(t, task, "containers", 0, "containerArn"), ":container/default/")
	assert.Equal(t, []any{"sleep", "1"}, at(t, task, "overrides", "containerOverrides", 0, "command"))
	assert.NotNil(t, at(t, task, "createdAt"))

	id := arn[strings.LastIndexByte(arn, '/')+1:]
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{id, "arn:aws:ecs:local:000000000000:task/default/ffff"}}))
	assert.Equal(t, "PENDING", at(t, out, "tasks", 0, "lastStatus"))
	assert.Equal(t, "family:sleep", at(t, out, "tasks", 0, "group"))
	assert.Equal(t, "EC2", at(t, out, "tasks", 0, "launchType"))
	assert.Equal(t, "arn:aws:ecs:local:000000000000:task-definition/sleep:1", at(t, out, "tasks", 0, "taskDefinitionArn"))
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"))

	out = h.ok("ListTasks", `{"family":"sleep"}`)
	assert.Len(t, out["taskArns"], 2)

	// Never placed: a stop ends it at once.
	out = h.ok("StopTask", mustJSON(map[string]any{"task": arn, "reason": "no longer needed"}))
	assert.Equal(t, "STOPPED", at(t, out, "task", "desiredStatus"))
	assert.Equal(t, "STOPPED", at(t, out, "task", "lastStatus"))
	assert.Equal(t, "no longer needed", at(t, out, "task", "stoppedReason"))
	out = h.ok("ListTasks", `{"desiredStatus":"STOPPED"}`)
	assert.Equal(t, []any{arn}, out["taskArns"])
	out = h.ok("ListTasks", `{}`)
	assert.Len(t, out["taskArns"], 1)
	out = h.ok("ListTasks", `{"desiredStatus":"pending"}`)
	require.Len(t, out["taskArns"], 1)
	assert.NotEqual(t, arn, at(t, out, "taskArns", 0))

	// The other one is placed when the agent registers.
	ci := registerInstance(t, h)
	out = h.ok("ListTasks", mustJSON(map[string]any{"containerInstance": ci}))
	assert.Len(t, out["taskArns"], 1)
}

var agentAttributes = []map[string]any{
	{"name": "ecs.os-type", "value": "linux"},
	{"name": "ecs.os-family", "value": "LINUX"},
	{"name": "ecs.cpu-architecture", "value": "x86_64"},
	{"name": "com.amazonaws.ecs.capability.docker-remote-api.1.44"},
}

func registerInstance(t *testing.T, h *harness) string {
	t.Helper()
	out := h.ok("RegisterContainerInstance", mustJSON(map[string]any{
		"cluster": "default",
		"totalResources": []map[string]any{
			{"name": "CPU", "type": "INTEGER", "integerValue": 2048},
			{"name": "MEMORY", "type": "INTEGER", "integerValue": 3900},
			{"name": "PORTS", "type": "STRINGSET", "stringSetValue": []string{"22", "2375"}},
		},
		"versionInfo": map[string]any{"agentVersion": "0.1.0", "agentHash": "abc", "dockerVersion": "DockerVersion: 27.0"},
		"attributes":  agentAttributes,
	}))
	return at(t, out, "containerInstance", "containerInstanceArn").(string)
}

func TestRegisterContainerInstance(t *testing.T) {
	h := newHarness(t)
	out := h.ok("RegisterContainerInstance", mustJSON(map[string]any{
		"cluster":        "default",
		"totalResources": []map[string]any{{"name": "CPU", "type": "INTEGER", "integerValue": 2048}, {"name": "MEMORY", "type": "INTEGER", "integerValue": 1024}},
		"attributes":     agentAttributes,
	}))
	ci := out["containerInstance"]
	arn := at(t, ci, "containerInstanceArn").(string)
	assert.Regexp(t, `^arn:aws:ecs:local:000000000000:container-instance/default/[0-9a-f]{32}$`, arn)
	assert.Equal(t, "ACTIVE", at(t, ci, "status"))
	var attrs []map[string]any
	for _, a := range at(t, ci, "attributes").([]any) {
		attrs = append(attrs, a.(map[string]any))
	}
	assert.Equal(t, agentAttributes, attrs)
	assert.EqualValues(t, 2048, at(t, ci, "registeredResources", 0, "integerValue"))

	// Re-registration keeps the ARN.
	out = h.ok("RegisterContainerInstance", mustJSON(map[string]any{"cluster": "default", "containerInstanceArn": arn, "attributes": agentAttributes[:1]}))
	assert.Equal(t, arn, at(t, out, "containerInstance", "containerInstanceArn"))
	assert.Len(t, at(t, out, "containerInstance", "attributes"), 1)
	out = h.ok("ListContainerInstances", `{}`)
	assert.Equal(t, []any{arn}, out["containerInstanceArns"])

	// A new cluster is created for the agent.
	out = h.ok("RegisterContainerInstance", `{"cluster":"laptop"}`)
	assert.Contains(t, at(t, out, "containerInstance", "containerInstanceArn"), "container-instance/laptop/")
	h.ok("DescribeClusters", `{"clusters":["laptop"]}`)

	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(`{"cluster":"default"}`))
	req.Header.Set("X-Amz-Target", targetPrefix+"DiscoverPollEndpoint")
	require.NoError(t, localauth.Sign(t.Context(), req, []byte(`{"cluster":"default"}`), testKeys, "us-east-1", time.Now()))
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	assert.JSONEq(t, `{"endpoint":"http://127.0.0.1:51677/","telemetryEndpoint":"http://127.0.0.1:51677/tcs/"}`, rec.Body.String())
	assert.Equal(t, "application/x-amz-json-1.1", rec.Header().Get("Content-Type"))
}

func TestStateChanges(t *testing.T) {
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	out := h.ok("RunTask", `{"taskDefinition":"sleep:1"}`)
	arn := at(t, out, "tasks", 0, "taskArn").(string)
	assert.Equal(t, ci, at(t, out, "tasks", 0, "containerInstanceArn"))

	out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.EqualValues(t, 1, at(t, out, "containerInstances", 0, "pendingTasksCount"))
	assert.EqualValues(t, 2048, at(t, out, "containerInstances", 0, "remainingResources", 0, "integerValue"))
	assert.EqualValues(t, 3900-32, at(t, out, "containerInstances", 0, "remainingResources", 1, "integerValue"))
	assert.Equal(t, false, at(t, out, "containerInstances", 0, "agentConnected"))

	// A status that ECS does not name leaves the status as it is; the rest of the report counts.
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{
		"cluster": "default", "task": arn, "status": "PULLED",
		"containers": []map[string]any{{"containerName": "app", "imageDigest": "sha256:feed", "status": "CREATED"}},
	}))
	h.ok("SubmitContainerStateChange", mustJSON(map[string]any{"task": arn, "containerName": "app", "status": "BOGUS"}))
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}}))
	assert.Equal(t, "PENDING", at(t, out, "tasks", 0, "lastStatus"))
	assert.Equal(t, "PENDING", at(t, out, "tasks", 0, "containers", 0, "lastStatus"))
	assert.Equal(t, "sha256:feed", at(t, out, "tasks", 0, "containers", 0, "imageDigest"))
	out = h.ok("ListTasks", `{"desiredStatus":"PENDING"}`)
	assert.Equal(t, []any{arn}, out["taskArns"])

	h.clock.Advance(5 * time.Second)
	out = h.ok("SubmitContainerStateChange", mustJSON(map[string]any{
		"cluster": "default", "task": arn, "containerName": "app", "runtimeId": "c0ffee", "status": "RUNNING",
		"networkBindings": []map[string]any{{"bindIP": "0.0.0.0", "containerPort": 80, "hostPort": 32768, "protocol": "tcp"}},
	}))
	assert.Equal(t, "true", out["acknowledgment"])
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{
		"cluster": "default", "task": arn, "status": "RUNNING",
		"pullStartedAt": 1740830401.5, "pullStoppedAt": 1740830402.25,
	}))
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}}))
	task := at(t, out, "tasks", 0)
	assert.Equal(t, "RUNNING", at(t, task, "lastStatus"))
	assert.InDelta(t, float64(h.clock.Now().Unix()), at(t, task, "startedAt"), 0.001)
	assert.InDelta(t, 1740830401.5, at(t, task, "pullStartedAt"), 0.001)
	assert.Nil(t, at(t, task, "stoppedAt"))
	assert.Equal(t, "RUNNING", at(t, task, "containers", 0, "lastStatus"))
	assert.Equal(t, "c0ffee", at(t, task, "containers", 0, "runtimeId"))
	assert.EqualValues(t, 32768, at(t, task, "containers", 0, "networkBindings", 0, "hostPort"))
	out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.EqualValues(t, 1, at(t, out, "containerInstances", 0, "runningTasksCount"))
	assert.EqualValues(t, 0, at(t, out, "containerInstances", 0, "pendingTasksCount"))
	out = h.ok("DescribeClusters", `{"clusters":["default"]}`)
	assert.EqualValues(t, 1, at(t, out, "clusters", 0, "runningTasksCount"))
	assert.EqualValues(t, 0, at(t, out, "clusters", 0, "pendingTasksCount"))
	out = h.ok("ListTasks", `{"desiredStatus":"PENDING"}`)
	assert.Empty(t, out["taskArns"], "running, so no longer pending")

	// A late RUNNING report does not move it back.
	h.clock.Advance(5 * time.Second)
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{
		"cluster": "default", "task": arn, "status": "STOPPED", "reason": "",
		"containers": []map[string]any{{"containerName": "app", "runtimeId": "c0ffee", "status": "STOPPED", "exitCode": 137, "reason": "OutOfMemoryError: Container killed due to memory usage"}},
	}))
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"cluster": "default", "task": arn, "status": "RUNNING"}))
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}}))
	task = at(t, out, "tasks", 0)
	assert.Equal(t, "STOPPED", at(t, task, "lastStatus"))
	assert.Equal(t, "STOPPED", at(t, task, "desiredStatus"))
	assert.Equal(t, "Essential container in task exited", at(t, task, "stoppedReason"))
	assert.Equal(t, "EssentialContainerExited", at(t, task, "stopCode"))
	assert.InDelta(t, float64(h.clock.Now().Unix()), at(t, task, "stoppedAt"), 0.001)
	assert.EqualValues(t, 137, at(t, task, "containers", 0, "exitCode"))
	assert.Equal(t, "OutOfMemoryError: Container killed due to memory usage", at(t, task, "containers", 0, "reason"))
	assert.Equal(t, "STOPPED", at(t, task, "containers", 0, "lastStatus"))
	out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.EqualValues(t, 0, at(t, out, "containerInstances", 0, "runningTasksCount"))
	assert.EqualValues(t, 0, at(t, out, "containerInstances", 0, "pendingTasksCount"))
	assert.EqualValues(t, 3900, at(t, out, "containerInstances", 0, "remainingResources", 1, "integerValue"))

	h.fails("SubmitTaskStateChange", `{"task":"arn:aws:ecs:local:000000000000:task/default/00","status":"RUNNING"}`, "InvalidParameterException")
	out = h.ok("SubmitAttachmentStateChanges", `{"cluster":"default","attachments":[{"attachmentArn":"a","status":"ATTACHED"}]}`)
	assert.Equal(t, "true", out["acknowledgment"])
}

func TestStopTaskAndDraining(t *testing.T) {
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)

	out := h.ok("StopTask", mustJSON(map[string]any{"task": arn, "reason": "maintenance"}))
	assert.Equal(t, "STOPPED", at(t, out, "task", "desiredStatus"))
	assert.Equal(t, "PENDING", at(t, out, "task", "lastStatus"), "the agent has not stopped it yet")
	assert.Equal(t, "maintenance", at(t, out, "task", "stoppedReason"))
	assert.NotNil(t, at(t, out, "task", "stoppingAt"))
	out = h.ok("StopTask", mustJSON(map[string]any{"task": arn, "reason": "again"}))
	assert.Equal(t, "maintenance", at(t, out, "task", "stoppedReason"), "idempotent")

	out = h.ok("UpdateContainerInstancesState", mustJSON(map[string]any{"containerInstances": []string{ci}, "status": "DRAINING"}))
	assert.Equal(t, "DRAINING", at(t, out, "containerInstances", 0, "status"))
	out = h.ok("RunTask", `{"taskDefinition":"sleep"}`)
	assert.Empty(t, out["tasks"])
	assert.Equal(t, "DRAINING", at(t, out, "failures", 0, "reason"))
	assert.Equal(t, ci, at(t, out, "failures", 0, "arn"))
	out = h.ok("StartTask", mustJSON(map[string]any{"taskDefinition": "sleep", "containerInstances": []string{ci}}))
	assert.Equal(t, "DRAINING", at(t, out, "failures", 0, "reason"))

	h.ok("UpdateContainerInstancesState", mustJSON(map[string]any{"containerInstances": []string{ci}, "status": "ACTIVE"}))
	out = h.ok("StartTask", mustJSON(map[string]any{"taskDefinition": "sleep", "containerInstances": []string{ci, "nope"}}))
	assert.Len(t, out["tasks"], 1)
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"))
}

func TestPersistence(t *testing.T) {
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("CreateCluster", `{"clusterName":"dev"}`)
	h.ok("RegisterTaskDefinition", webRequest(t))
	h.ok("DeregisterTaskDefinition", `{"taskDefinition":"web:1"}`)
	h.ok("RegisterTaskDefinition", webRequest(t))
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"web"}`), "tasks", 0, "taskArn").(string)
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": arn, "status": "RUNNING"}))
	h.ok("UpdateContainerInstancesState", mustJSON(map[string]any{"containerInstances": []string{ci}, "status": "DRAINING"}))

	h.restart()

	out := h.ok("ListClusters", `{}`)
	assert.Len(t, out["clusterArns"], 2)
	out = h.ok("DescribeTaskDefinition", `{"taskDefinition":"web:1"}`)
	assert.Equal(t, "INACTIVE", at(t, out, "taskDefinition", "status"))
	out = h.ok("DescribeTaskDefinition", `{"taskDefinition":"web"}`)
	assert.EqualValues(t, 2, at(t, out, "taskDefinition", "revision"))
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}}))
	assert.Equal(t, "RUNNING", at(t, out, "tasks", 0, "lastStatus"))
	out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.Equal(t, "DRAINING", at(t, out, "containerInstances", 0, "status"))
	out = h.ok("RegisterTaskDefinition", webRequest(t))
	assert.EqualValues(t, 3, at(t, out, "taskDefinition", "revision"))
}

func TestNewRefusesNewerSchema(t *testing.T) {
	h := newHarness(t)
	require.NoError(t, h.srv.Close())
	db, err := openDB(h.path, func(string, error) {})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("99")) }))
	require.NoError(t, db.Close())
	_, err = New(Config{DBPath: h.path, Keys: testKeys}, nil)
	require.ErrorContains(t, err, "schema version 99")
}

// TestUnsupportedFieldsAreRefusedByName: a task definition or a RunTask asking for what Berth cannot
// do gets a ClientException naming the field, and nothing is registered or started.
func TestUnsupportedFieldsAreRefusedByName(t *testing.T) {
	h := newHarness(t)
	msg := h.fails("RegisterTaskDefinition", `{"family":"fl","containerDefinitions":[{"name":"c","image":"i","memory":8,
		"resourceRequirements":[{"type":"GPU","value":"1"}]}]}`, "ClientException")
	assert.Contains(t, msg, "containerDefinitions[0].resourceRequirements: not supported by Berth: GPUs and inference accelerators are not supported by Berth yet")
	families := h.ok("ListTaskDefinitionFamilies", `{}`)
	assert.Empty(t, families["families"])

	h.ok("RegisterTaskDefinition", sleepDef)
	for body, want := range map[string]string{
		`{"taskDefinition":"sleep","overrides":{"ephemeralStorage":{"sizeInGiB":30}}}`:                                                       "overrides.ephemeralStorage: not supported by Berth",
		`{"taskDefinition":"sleep","overrides":{"containerOverrides":[{"name":"app","resourceRequirements":[{"type":"GPU","value":"1"}]}]}}`: "overrides.containerOverrides[0].resourceRequirements",
	} {
		assert.Contains(t, h.fails("RunTask", body, "ClientException"), want)
	}
	tasks := h.ok("ListTasks", `{}`)
	assert.Empty(t, tasks["taskArns"])
}

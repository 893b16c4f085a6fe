package localcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/task"
)

// testStaticDir is the ECS_STATIC_TASKS_DIR the harness's control plane names.
const testStaticDir = "/etc/ecs/tasks.d"

// fakeStatic stands in for the agent's engine as Config.StaticTasks: the static tasks a test sets,
// and how often they were asked for.
type fakeStatic struct {
	mu    sync.Mutex
	list  []StaticTask
	calls int
}

func (f *fakeStatic) set(tasks ...StaticTask) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = tasks
}

func (f *fakeStatic) tasks(context.Context) []StaticTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return slices.Clone(f.list)
}

func (f *fakeStatic) called() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// The static tasks of the tests, with ARNs as agent/statictasks names them.
const (
	webID       = "static-web-1a2b3c4d-0123456789ab"
	webArn      = "arn:aws:ecs:local:000000000000:task/default/" + webID
	batchID     = "static-batch-5e6f7a8b-abcdef012345"
	batchArn    = "arn:aws:ecs:local:000000000000:task/default/" + batchID
	oldArn      = "arn:aws:ecs:local:000000000000:task/default/static-old-9c0d1e2f-0123456789ab-r2"
	otherArn    = "arn:aws:ecs:local:000000000000:task/other/static-web-1a2b3c4d-0123456789ab"
	otherCIID   = "ffffffffffffffffffffffffffffffff"
	staticImage = "127.0.0.1:5000/berth/testapp"
)

// staticBase is 2025-03-01T11:00:00Z, epoch 1740826800: the static tasks' times follow it.
var staticBase = time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC)

// staticWeb runs, with a HEALTHY essential container publishing a port and a sidecar without a
// health check; 256 CPU units and 512 MiB.
func staticWeb(ci string) StaticTask {
	return StaticTask{File: "web.json", ContainerInstanceArn: ci, Task: &task.Task{
		Arn: webArn, Family: "web", Revision: 1, NetworkMode: task.NetworkBridge, CPU: 256, Memory: 512, Static: true,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		CreatedAt: staticBase.Add(time.Minute), PullStartedAt: staticBase.Add(61 * time.Second),
		PullStoppedAt: staticBase.Add(62500 * time.Millisecond), StartedAt: staticBase.Add(63 * time.Second),
		Containers: []*task.Container{
			{Name: "web", Image: staticImage, CPU: 128, Memory: 64, Essential: true,
				HealthCheck: &task.HealthCheck{Command: []string{"CMD", "/testapp", "health"}}, Health: task.HealthHealthy,
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning, DockerID: "d0c1", ImageDigest: "sha256:abc",
				NetworkBindings: []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}}},
			{Name: "sidecar", Image: staticImage, MemoryReservation: 32,
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning, DockerID: "d0c2"},
		}}}
}

// staticBatch is an awsvpc task still pulling (its pause container is Berth's, not shown), created
// after the harness's RunTask tasks; 512 CPU units and 128 MiB.
func staticBatch(ci string) StaticTask {
	return StaticTask{File: "batch.json", ContainerInstanceArn: ci, Task: &task.Task{
		Arn: batchArn, Family: "batch", Revision: 1, NetworkMode: task.NetworkAWSVPC, Static: true,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskNone, CreatedAt: staticBase.Add(90 * time.Minute),
		Containers: []*task.Container{
			{Name: "~internal~ecs~pause", Pause: true, Essential: true, DesiredStatus: task.ContainerResourcesProvisioned},
			{Name: "job", Image: staticImage, CPU: 512, Memory: 128, Essential: true,
				HealthCheck: &task.HealthCheck{Command: []string{"CMD", "true"}}, DesiredStatus: task.ContainerRunning},
		}}}
}

// staticOld stopped when its file was removed.
func staticOld(ci string) StaticTask {
	return StaticTask{ContainerInstanceArn: ci, Task: &task.Task{
		Arn: oldArn, Family: "old", Revision: 1, NetworkMode: task.NetworkBridge, Static: true,
		DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped, StoppedReason: "static task file removed",
		CreatedAt: staticBase, StartedAt: staticBase.Add(time.Second), StoppedAt: staticBase.Add(time.Minute),
		Containers: []*task.Container{
			{Name: "app", Image: staticImage, Memory: 16, Essential: true, DesiredStatus: task.ContainerStopped,
				KnownStatus: task.ContainerStopped, ExitCode: new(0), Reason: "static task file removed"},
		}}}
}

// staticOther runs in the cluster "other".
func staticOther() StaticTask {
	t := staticWeb("").Task.Clone()
	t.Arn = otherArn
	return StaticTask{File: "web.json", Task: t}
}

// staticHarness is a harness with an instance, a RunTask task on it (12:00, tagged) and the four
// static tasks; it returns the instance's and the RunTask task's ARNs.
func staticHarness(t *testing.T) (*harness, string, string) {
	t.Helper()
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("CreateCluster", `{"clusterName":"other"}`)
	h.ok("RegisterTaskDefinition", sleepDef)
	regular := at(t, h.ok("RunTask", `{"taskDefinition":"sleep","tags":[{"key":"team","value":"infra"}]}`), "tasks", 0, "taskArn").(string)
	h.static.set(staticWeb(ci), staticBatch(ci), staticOld(ci), staticOther())
	return h, ci, regular
}

// TestStaticTasksListed: ListTasks lists the static tasks with the others, oldest first, with every
// filter it has.
func TestStaticTasksListed(t *testing.T) {
	h, ci, regular := staticHarness(t)
	for _, c := range []struct {
		name, req string
		want      []string
	}{
		{"desired RUNNING by default", `{}`, []string{webArn, regular, batchArn}},
		{"desired RUNNING", `{"desiredStatus":"RUNNING"}`, []string{webArn, regular, batchArn}},
		{"desired RUNNING, not running yet", `{"desiredStatus":"PENDING"}`, []string{regular, batchArn}},
		{"desired STOPPED", `{"desiredStatus":"STOPPED"}`, []string{oldArn}},
		{"family", `{"family":"web"}`, []string{webArn}},
		{"family of no task", `{"family":"nope"}`, []string{}},
		{"startedBy", `{"startedBy":"berth-static"}`, []string{webArn, batchArn}},
		{"startedBy and STOPPED", `{"startedBy":"berth-static","desiredStatus":"STOPPED"}`, []string{oldArn}},
		{"container instance by ID", mustJSON(map[string]any{"containerInstance": lastSegment(ci)}), []string{webArn, regular, batchArn}},
		{"container instance by ARN", mustJSON(map[string]any{"containerInstance": ci}), []string{webArn, regular, batchArn}},
		{"another container instance", `{"containerInstance":"` + otherCIID + `"}`, []string{}},
		{"cluster by name", `{"cluster":"default"}`, []string{webArn, regular, batchArn}},
		{"another cluster", `{"cluster":"other"}`, []string{otherArn}},
		{"another cluster by ARN", `{"cluster":"arn:aws:ecs:local:000000000000:cluster/other"}`, []string{otherArn}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := at(t, h.ok("ListTasks", c.req), "taskArns").([]any)
			want := make([]any, 0, len(c.want))
			for _, a := range c.want {
				want = append(want, a)
			}
			assert.Equal(t, want, got)
		})
	}
	h.fails("ListTasks", `{"cluster":"nope"}`, "ClusterNotFoundException")
}

// wantStaticWeb is staticWeb as DescribeTasks shows it with include TAGS, on the harness's instance.
func wantStaticWeb(t *testing.T, ci string) map[string]any {
	t.Helper()
	var want map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{
		"taskArn": "`+webArn+`",
		"clusterArn": "arn:aws:ecs:local:000000000000:cluster/default",
		"taskDefinitionArn": "arn:aws:ecs:local:000000000000:task-definition/web:1",
		"containerInstanceArn": "`+ci+`",
		"overrides": {},
		"lastStatus": "RUNNING", "desiredStatus": "RUNNING", "healthStatus": "HEALTHY",
		"cpu": "256", "memory": "512",
		"containers": [
			{"containerArn": "arn:aws:ecs:local:000000000000:container/default/`+webID+`/web", "taskArn": "`+webArn+`",
			 "name": "web", "image": "`+staticImage+`", "imageDigest": "sha256:abc", "runtimeId": "d0c1", "lastStatus": "RUNNING",
			 "networkBindings": [{"bindIP": "0.0.0.0", "containerPort": 8080, "hostPort": 8080, "protocol": "tcp"}],
			 "cpu": "128", "memory": "64", "healthStatus": "HEALTHY"},
			{"containerArn": "arn:aws:ecs:local:000000000000:container/default/`+webID+`/sidecar", "taskArn": "`+webArn+`",
			 "name": "sidecar", "image": "`+staticImage+`", "runtimeId": "d0c2", "lastStatus": "RUNNING",
			 "networkBindings": [], "cpu": "0", "memory": "32", "healthStatus": "UNKNOWN"}
		],
		"startedBy": "berth-static", "version": 1,
		"connectivity": "CONNECTED", "connectivityAt": 1740826863,
		"createdAt": 1740826860, "pullStartedAt": 1740826861, "pullStoppedAt": 1740826862.5, "startedAt": 1740826863,
		"group": "family:web", "launchType": "EC2", "attachments": [],
		"attributes": [{"name": "berth.static-task-file", "value": "web.json"}],
		"tags": [{"key": "berth:static-task-file", "value": "web.json"}],
		"enableExecuteCommand": false
	}`), &want))
	return want
}

// TestStaticTasksDescribed: DescribeTasks describes static tasks by ARN or ID as the agent knows
// them, marked by startedBy, an attribute and (with include TAGS) a tag naming the file; tags of
// every task are shown only with include TAGS, as in ECS.
func TestStaticTasksDescribed(t *testing.T) {
	h, ci, regular := staticHarness(t)
	out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{webArn, batchID, "default/" + batchID, oldArn, regular, "static-nope"},
		"include": []string{"TAGS"}}))
	assert.Equal(t, wantStaticWeb(t, ci), at(t, out, "tasks", 0))

	for _, i := range []int{1, 2} {
		batch := at(t, out, "tasks", i).(map[string]any)
		assert.Equal(t, batchArn, batch["taskArn"])
		assert.Equal(t, "PENDING", batch["lastStatus"])
		assert.Equal(t, "RUNNING", batch["desiredStatus"])
		assert.Equal(t, "UNKNOWN", batch["healthStatus"], "its one health check has no verdict yet")
		assert.Nil(t, batch["startedAt"])
		assert.Nil(t, batch["cpu"], "the task sets no size")
		require.Len(t, batch["containers"], 1, "the pause container is not shown")
		assert.Equal(t, "job", at(t, batch, "containers", 0, "name"))
		assert.Equal(t, "PENDING", at(t, batch, "containers", 0, "lastStatus"))
		assert.Equal(t, "UNKNOWN", at(t, batch, "containers", 0, "healthStatus"))
		assert.Equal(t, []any{map[string]any{"key": StaticFileTag, "value": "batch.json"}}, batch["tags"])
	}

	old := at(t, out, "tasks", 3).(map[string]any)
	assert.Equal(t, "STOPPED", old["lastStatus"])
	assert.Equal(t, "static task file removed", old["stoppedReason"])
	assert.EqualValues(t, 1740826860, old["stoppedAt"])
	assert.EqualValues(t, 1740826860, old["executionStoppedAt"])
	assert.Equal(t, []any{map[string]any{"name": StaticFileAttribute}}, old["attributes"], "its file is gone")
	assert.Nil(t, old["tags"], "its file is gone")
	assert.EqualValues(t, 0, at(t, old, "containers", 0, "exitCode"))
	assert.Equal(t, "STOPPED", at(t, old, "containers", 0, "lastStatus"))

	assert.Equal(t, regular, at(t, out, "tasks", 4, "taskArn"))
	assert.Nil(t, at(t, out, "tasks", 4, "startedBy"), "not a static task")
	assert.Nil(t, at(t, out, "tasks", 4, "attributes"), "not a static task")
	assert.Equal(t, []any{map[string]any{"key": "team", "value": "infra"}}, at(t, out, "tasks", 4, "tags"))
	assert.Equal(t, []any{map[string]any{"arn": "arn:aws:ecs:local:000000000000:task/default/static-nope", "reason": "MISSING"}}, out["failures"])

	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{webArn, regular}}))
	require.Len(t, out["tasks"], 2)
	for i := range 2 {
		task := at(t, out, "tasks", i).(map[string]any)
		assert.NotContains(t, task, "tags", "without include TAGS")
	}
	assert.Equal(t, "berth-static", at(t, out, "tasks", 0, "startedBy"))

	out = h.ok("DescribeTasks", mustJSON(map[string]any{"cluster": "other", "tasks": []string{otherArn, webArn}}))
	assert.Equal(t, otherArn, at(t, out, "tasks", 0, "taskArn"))
	assert.Equal(t, "arn:aws:ecs:local:000000000000:cluster/other", at(t, out, "tasks", 0, "clusterArn"))
	assert.Equal(t, []any{map[string]any{"arn": webArn, "reason": "MISSING"}}, out["failures"], "a task of another cluster")

	msg := h.fails("DescribeTasks", mustJSON(map[string]any{"tasks": []string{webArn}, "include": []string{"TAGS", "tags"}}), "InvalidParameterException")
	assert.Contains(t, msg, `"tags"`)

	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": webArn}))
	assert.Equal(t, map[string]any{"tags": []any{map[string]any{"key": "berth:static-task-file", "value": "web.json"}}}, out)
	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": oldArn}))
	assert.Equal(t, map[string]any{"tags": []any{}}, out)
	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": otherArn}))
	assert.Equal(t, map[string]any{"tags": []any{map[string]any{"key": "berth:static-task-file", "value": "web.json"}}}, out)
}

// webStopRefused is StopTask's message for staticWeb.
const webStopRefused = "Task " + webID + " is a static task: it runs from the file /etc/ecs/tasks.d/web.json of ECS_STATIC_TASKS_DIR, " +
	"and its host keeps it running whatever a control plane asks. To stop it, remove or edit the file."

// TestStaticTasksRefuseChanges: StopTask is refused with the file to remove or edit while the task
// runs, answered as it is once it is stopping; protection gives TASK_NOT_VALID; ExecuteCommand points
// at berth exec as for any task; nothing changes.
func TestStaticTasksRefuseChanges(t *testing.T) {
	h, _, regular := staticHarness(t)
	for _, ref := range []string{webArn, webID} {
		assert.Equal(t, webStopRefused, h.fails("StopTask", mustJSON(map[string]any{"task": ref}), "ClientException"), ref)
	}
	assert.Contains(t, h.fails("StopTask", `{"task":"`+batchArn+`","reason":"enough"}`, "ClientException"),
		"it runs from the file /etc/ecs/tasks.d/batch.json of ECS_STATIC_TASKS_DIR", "pending, desired RUNNING")
	h.fails("StopTask", `{"cluster":"other","task":"`+webArn+`"}`, "InvalidParameterException") // not in that cluster

	out := h.ok("StopTask", `{"task":"`+oldArn+`"}`)
	assert.Equal(t, "STOPPED", at(t, out, "task", "desiredStatus"))
	assert.Equal(t, "static task file removed", at(t, out, "task", "stoppedReason"), "answered as it is")

	detail := "static task from the file /etc/ecs/tasks.d/web.json of ECS_STATIC_TASKS_DIR: it has no scale-in protection; " +
		"its host keeps it running until the file is removed or edited"
	out = h.ok("UpdateTaskProtection", mustJSON(map[string]any{"tasks": []string{webID, regular}, "protectionEnabled": true}))
	assert.Equal(t, []any{map[string]any{"arn": webArn, "reason": "TASK_NOT_VALID", "detail": detail}}, out["failures"])
	require.Len(t, out["protectedTasks"], 1)
	assert.Equal(t, regular, at(t, out, "protectedTasks", 0, "taskArn"))
	out = h.ok("GetTaskProtection", mustJSON(map[string]any{"tasks": []string{webArn}}))
	assert.Equal(t, []any{map[string]any{"arn": webArn, "reason": "TASK_NOT_VALID", "detail": detail}}, out["failures"])
	out = h.ok("GetTaskProtection", mustJSON(map[string]any{"tasks": []string{oldArn}}))
	assert.Contains(t, at(t, out, "failures", 0, "detail"), "a file of ECS_STATIC_TASKS_DIR (/etc/ecs/tasks.d) that is no longer there")

	msg := h.fails("ExecuteCommand", mustJSON(map[string]any{"task": webArn, "container": "web", "command": "/bin/sh", "interactive": true}),
		"TargetNotConnectedException")
	assert.Contains(t, msg, "berth exec "+webID+" web -- /bin/sh")

	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{webArn, regular}}))
	assert.Equal(t, "RUNNING", at(t, out, "tasks", 0, "desiredStatus"))
	assert.Equal(t, "RUNNING", at(t, out, "tasks", 1, "desiredStatus"), "the regular task was left alone too")
}

// TestStaticTaskVanishes: a static task the agent no longer holds is gone from every answer, and
// nothing of it was stored.
func TestStaticTaskVanishes(t *testing.T) {
	h, ci, regular := staticHarness(t)
	h.static.set(staticWeb(ci))
	assert.Equal(t, []any{webArn, regular}, at(t, h.ok("ListTasks", `{}`), "taskArns"))

	h.static.set()
	for _, restart := range []bool{false, true} {
		if restart {
			h.restart()
		}
		assert.Equal(t, []any{regular}, at(t, h.ok("ListTasks", `{}`), "taskArns"), "restart %v", restart)
		out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{webArn}}))
		assert.Equal(t, []any{map[string]any{"arn": webArn, "reason": "MISSING"}}, out["failures"], "restart %v", restart)
		assert.Equal(t, "The referenced task was not found.", h.fails("StopTask", `{"task":"`+webArn+`"}`, "InvalidParameterException"))
		h.fails("ListTagsForResource", mustJSON(map[string]any{"resourceArn": webArn}), "InvalidParameterException")
		out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
		assert.EqualValues(t, 0, at(t, out, "containerInstances", 0, "runningTasksCount"), "restart %v", restart)
	}
}

// TestStaticTasksCounted: static tasks use their instance's resources: DescribeContainerInstances
// counts those on it that have not stopped and takes their CPU and memory off what remains;
// DescribeClusters counts those of the cluster.
func TestStaticTasksCounted(t *testing.T) {
	h, ci, _ := staticHarness(t)
	// web runs (256 units, 512 MiB); batch (512, 128) and the RunTask task (0, 32) are pending; old
	// stopped and other is another cluster's.
	inst := at(t, h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}})), "containerInstances", 0)
	assert.EqualValues(t, 1, at(t, inst, "runningTasksCount"))
	assert.EqualValues(t, 2, at(t, inst, "pendingTasksCount"))
	remaining := map[string]any{}
	for _, r := range at(t, inst, "remainingResources").([]any) {
		remaining[at(t, r, "name").(string)] = at(t, r, "integerValue")
	}
	assert.EqualValues(t, 2048-256-512, remaining["CPU"])
	assert.EqualValues(t, 3900-512-128-32, remaining["MEMORY"])

	out := h.ok("DescribeClusters", `{"clusters":["default","other"]}`)
	assert.EqualValues(t, 1, at(t, out, "clusters", 0, "runningTasksCount"))
	assert.EqualValues(t, 2, at(t, out, "clusters", 0, "pendingTasksCount"))
	assert.EqualValues(t, 1, at(t, out, "clusters", 1, "runningTasksCount"), "other's static task")
	assert.EqualValues(t, 0, at(t, out, "clusters", 1, "pendingTasksCount"))

	h.static.set(staticWeb(otherCIID), staticBatch(ci))
	inst = at(t, h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}})), "containerInstances", 0)
	assert.EqualValues(t, 0, at(t, inst, "runningTasksCount"), "web is on another instance")
}

// TestStaticTasksRefusedToStrangers: a request the keys did not sign is refused before the static
// tasks are even asked for, and shows none of them.
func TestStaticTasksRefusedToStrangers(t *testing.T) {
	h, ci, _ := staticHarness(t)
	h.static.set(staticWeb(ci))
	before := h.static.called()
	stranger := &harness{t: t, srv: h.srv, keys: localauth.Keys{AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}}
	for _, c := range []struct{ op, body string }{
		{"ListTasks", `{}`},
		{"DescribeTasks", `{"tasks":["` + webArn + `"],"include":["TAGS"]}`},
		{"StopTask", `{"task":"` + webArn + `"}`},
		{"ListTagsForResource", `{"resourceArn":"` + webArn + `"}`},
		{"DescribeContainerInstances", `{"containerInstances":["` + ci + `"]}`},
	} {
		rec := stranger.send(c.op, c.body)
		assert.Equal(t, http.StatusBadRequest, rec.Code, c.op)
		assert.Equal(t, "UnrecognizedClientException", rec.Header().Get("x-amzn-ErrorType"), c.op)
		assert.NotContains(t, rec.Body.String(), webID, c.op)
	}
	assert.Equal(t, before, h.static.called(), "no refused request asked for the static tasks")
	assert.Equal(t, []any{webArn}, at(t, h.ok("ListTasks", `{"startedBy":"berth-static"}`), "taskArns"))
	assert.Equal(t, before+1, h.static.called(), "a signed one did, once")
}

// TestStaticTasksAskedOnlyForAMiss: DescribeTasks and StopTask ask the agent for its static tasks
// only when a reference is not one of this control plane's tasks, and then once per call.
func TestStaticTasksAskedOnlyForAMiss(t *testing.T) {
	h, ci, regular := staticHarness(t)
	h.static.set(staticWeb(ci))
	before := h.static.called()
	h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{regular, regular}}))
	assert.Equal(t, before, h.static.called(), "DescribeTasks of the control plane's own tasks")
	h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{regular, webArn, "static-nope", webID}}))
	assert.Equal(t, before+1, h.static.called(), "DescribeTasks with static and unknown tasks asks once")
	h.ok("StopTask", mustJSON(map[string]any{"task": regular}))
	assert.Equal(t, before+1, h.static.called(), "StopTask of the control plane's own task")
}

// TestStaticTasksThroughTheSDK: aws-sdk-go-v2's ECS client decodes a static task as ECS's Task
// shape, and StopTask's refusal as a ClientException.
func TestStaticTasksThroughTheSDK(t *testing.T) {
	h, ci, _ := staticHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), Credentials: testKeys.Provider()})
	ctx := t.Context()

	list, err := client.ListTasks(ctx, &ecs.ListTasksInput{StartedBy: aws.String(StaticStartedBy), ContainerInstance: aws.String(ci)})
	require.NoError(t, err)
	assert.Equal(t, []string{webArn, batchArn}, list.TaskArns)

	desc, err := client.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{webArn}, Include: []types.TaskField{types.TaskFieldTags}})
	require.NoError(t, err)
	require.Len(t, desc.Tasks, 1)
	web := desc.Tasks[0]
	assert.Equal(t, StaticStartedBy, aws.ToString(web.StartedBy))
	assert.Equal(t, types.HealthStatusHealthy, web.HealthStatus)
	assert.Equal(t, ci, aws.ToString(web.ContainerInstanceArn))
	assert.True(t, staticBase.Add(63*time.Second).Equal(aws.ToTime(web.StartedAt)))
	require.Len(t, web.Attributes, 1)
	assert.Equal(t, StaticFileAttribute, aws.ToString(web.Attributes[0].Name))
	assert.Equal(t, "web.json", aws.ToString(web.Attributes[0].Value))
	assert.Equal(t, []types.Tag{{Key: aws.String(StaticFileTag), Value: aws.String("web.json")}}, web.Tags)
	require.Len(t, web.Containers, 2)
	assert.Equal(t, types.HealthStatusHealthy, web.Containers[0].HealthStatus)
	assert.Equal(t, int32(8080), aws.ToInt32(web.Containers[0].NetworkBindings[0].HostPort))
	assert.Equal(t, types.HealthStatusUnknown, web.Containers[1].HealthStatus)

	_, err = client.StopTask(ctx, &ecs.StopTaskInput{Task: aws.String(webArn)})
	var ce *types.ClientException
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, webStopRefused, ce.ErrorMessage())
}

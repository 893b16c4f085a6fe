package introspection

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

type fixedTasks []*task.Task

func (f fixedTasks) Tasks() []*task.Task {
	out := make([]*task.Task, len(f))
	for i, t := range f {
		out[i] = t.Clone()
	}
	return out
}

func (fixedTasks) UnknownContainers() []task.UnknownContainer { return nil }

// withUnknown is a task source that also has running containers of no known task.
type withUnknown struct {
	fixedTasks
	unknown []task.UnknownContainer
}

func (w withUnknown) UnknownContainers() []task.UnknownContainer {
	return append([]task.UnknownContainer(nil), w.unknown...)
}

// get asks the handler over src for path.
func get(src TaskSource, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	NewIntrospection(fixedMetadata{}, src, nil).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

// The ECS agent's body of every /v1/tasks error (ecs-agent/introspection/v1/handlers/handlers.go).
const emptyTaskBody = `{"Arn":"","KnownStatus":"","Family":"","Version":"","Containers":null}`

func TestTasks(t *testing.T) {
	code := 137
	web := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/web1", Family: "web", Revision: 3,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{{Name: "web", Image: "testapp:latest", ImageID: "sha256:abc", DockerID: "0123456789abcdef0123",
			DockerName: "ecs-web-3-web-aa", KnownStatus: task.ContainerRunning,
			CreatedAt: time.Date(2026, 11, 30, 15, 0, 1, 5, time.FixedZone("CET", 3600)), StartedAt: time.Date(2026, 11, 30, 14, 0, 2, 0, time.UTC),
			PortMappings:    []task.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}},
			NetworkBindings: []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 8080, HostPort: 32768, Protocol: "tcp"}},
			Networks:        []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.2"}}},
			Mounts: []task.Mount{{Name: "data", Source: "/var/lib/docker/volumes/data/_data", Destination: "/data"},
				{Source: "/etc/hosts.web", Destination: "/etc/hosts"}}}}}
	stopped := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/job1", Family: "job", Revision: 1,
		DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped, StoppedReason: task.StopReasonEssentialExited,
		Containers: []*task.Container{{Name: "job", Image: "testapp:latest", KnownStatus: task.ContainerStopped, ExitCode: &code, Reason: "killed", Essential: true,
			RestartPolicy: &task.RestartPolicy{Enabled: true, IgnoredExitCodes: []int{137}}}}}
	src := fixedTasks{web, stopped}

	webJSON := `{"Arn":"arn:aws:ecs:local:000000000000:task/default/web1","DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"web","Version":"3",` +
		`"Containers":[{"DockerId":"0123456789abcdef0123","DockerName":"ecs-web-3-web-aa","Name":"web","Image":"testapp:latest","ImageID":"sha256:abc",` +
		`"CreatedAt":"2026-11-30T14:00:01.000000005Z","StartedAt":"2026-11-30T14:00:02Z",` +
		`"Ports":[{"ContainerPort":8080,"Protocol":"tcp","HostPort":32768}],` +
		`"Volumes":[{"DockerName":"data","Source":"/var/lib/docker/volumes/data/_data","Destination":"/data"},` +
		`{"Source":"/etc/hosts.web","Destination":"/etc/hosts"}],"KnownStatus":"RUNNING"}]}`
	jobJSON := `{"Arn":"arn:aws:ecs:local:000000000000:task/default/job1","DesiredStatus":"STOPPED","KnownStatus":"STOPPED","Family":"job","Version":"1",` +
		`"Containers":[{"DockerId":"","DockerName":"","Name":"job","Image":"testapp:latest","ImageID":"","RestartCount":0,"KnownStatus":"STOPPED",` +
		`"ExitCode":137,"Reason":"killed","Essential":true}],"StoppedReason":"Essential container in task exited"}`
	tests := []struct {
		name       string
		query      string
		wantStatus int
		wantBody   string
	}{
		{"all, sorted by ARN", "", http.StatusOK, `{"Tasks":[` + jobJSON + `,` + webJSON + `]}`},
		{"by task ARN", "?taskarn=arn:aws:ecs:local:000000000000:task/default/job1", http.StatusOK, jobJSON},
		{"unknown ARN", "?taskarn=nope", http.StatusNotFound, emptyTaskBody},
		{"empty ARN", "?taskarn=", http.StatusNotFound, emptyTaskBody},
		{"by full docker ID", "?dockerid=0123456789abcdef0123", http.StatusOK, webJSON},
		{"a 13-character ID is whole, not a prefix", "?dockerid=0123456789abc", http.StatusNotFound, emptyTaskBody},
		{"by a 12-character prefix", "?dockerid=0123456789ab", http.StatusOK, webJSON},
		{"by a short prefix", "?dockerid=0123", http.StatusOK, webJSON},
		{"unknown docker ID", "?dockerid=fedcba987654", http.StatusNotFound, emptyTaskBody},
		{"both selectors", "?taskarn=a&dockerid=b", http.StatusBadRequest, emptyTaskBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(src, "/v1/tasks"+tt.query)
			require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, tt.wantBody, rec.Body.String())
		})
	}
	t.Run("no tasks is an empty list", func(t *testing.T) {
		assert.Equal(t, `{"Tasks":[]}`, get(fixedTasks(nil), "/v1/tasks").Body.String())
	})
}

// TestTasksStatuses: the statuses as ECS names them (ecs-agent/api/task/status/taskstatus.go
// BackendStatus), the desired status left out once the task is past it (agent/handlers/v1/response.go).
func TestTasksStatuses(t *testing.T) {
	for _, tt := range []struct {
		desired, known         task.TaskStatus
		wantDesired, wantKnown string
	}{
		{task.TaskRunning, task.TaskNone, `"DesiredStatus":"RUNNING",`, "PENDING"},
		{task.TaskRunning, task.TaskPulled, `"DesiredStatus":"RUNNING",`, "PENDING"},
		{task.TaskRunning, task.TaskCreated, `"DesiredStatus":"RUNNING",`, "PENDING"},
		{task.TaskRunning, task.TaskRunning, `"DesiredStatus":"RUNNING",`, "RUNNING"},
		{task.TaskStopped, task.TaskRunning, `"DesiredStatus":"STOPPED",`, "RUNNING"},
		{task.TaskStopped, task.TaskPulled, `"DesiredStatus":"STOPPED",`, "PENDING"},
		{task.TaskStopped, task.TaskStopped, `"DesiredStatus":"STOPPED",`, "STOPPED"},
		{task.TaskRunning, task.TaskStopped, ``, "STOPPED"},
		{task.TaskNone, task.TaskRunning, ``, "RUNNING"},
		{task.TaskNone, task.TaskNone, `"DesiredStatus":"PENDING",`, "PENDING"},
	} {
		t.Run(tt.desired.String()+"/"+tt.known.String(), func(t *testing.T) {
			tk := &task.Task{Arn: "arn:t", Family: "f", Revision: 1, DesiredStatus: tt.desired, KnownStatus: tt.known}
			want := `{"Arn":"arn:t",` + tt.wantDesired + `"KnownStatus":"` + tt.wantKnown + `","Family":"f","Version":"1","Containers":[]}`
			assert.Equal(t, want, get(fixedTasks{tk}, "/v1/tasks?taskarn=arn:t").Body.String())
		})
	}
}

// TestTasksAWSVPC: the pause container is not listed but its Docker ID finds its task, as the ECS
// agent's internal containers; ports and the network are the task's own address's.
func TestTasksAWSVPC(t *testing.T) {
	vpc := &task.Task{Arn: "arn:vpc", Family: "api", Revision: 7, NetworkMode: task.NetworkAWSVPC, AWSVPC: &task.AWSVPC{IPv4: "172.31.250.5"},
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{
			{Name: "~internal~ecs~pause", Pause: true, DockerID: "cccc00000000000000000000000000000000000000000000000000000000003",
				KnownStatus: task.ContainerResourcesProvisioned},
			{Name: "app", DockerID: "dddd00000000000000000000000000000000000000000000000000000000004", KnownStatus: task.ContainerRunning,
				PortMappings: []task.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}, {ContainerPort: 53, Protocol: "udp"}, {ContainerPort: 9090}}}}}
	want := `{"Arn":"arn:vpc","DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"api","Version":"7","Containers":[` +
		`{"DockerId":"dddd00000000000000000000000000000000000000000000000000000000004","DockerName":"","Name":"app","Image":"","ImageID":"",` +
		`"Ports":[{"ContainerPort":8080,"Protocol":"tcp","HostPort":8080},{"ContainerPort":53,"Protocol":"udp","HostPort":53},` +
		`{"ContainerPort":9090,"Protocol":"tcp","HostPort":9090}],` +
		`"Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["172.31.250.5"]}],"KnownStatus":"RUNNING"}]}`
	assert.Equal(t, want, get(fixedTasks{vpc}, "/v1/tasks?taskarn=arn:vpc").Body.String())
	assert.Equal(t, want, get(fixedTasks{vpc}, "/v1/tasks?dockerid=cccc00000000000000000000000000000000000000000000000000000000003").Body.String(),
		"the pause container's whole ID")
	rec := get(fixedTasks{vpc}, "/v1/tasks?dockerid=")
	assert.Equal(t, http.StatusBadRequest, rec.Code, "an empty prefix is of both containers")
	assert.Equal(t, emptyTaskBody, rec.Body.String())
}

// TestTasksShortIDOfMany: a short Docker ID of containers of two tasks, or of two containers of one
// task, is 400, as the ECS agent counts its matches by container.
func TestTasksShortIDOfMany(t *testing.T) {
	a := &task.Task{Arn: "arn:a", Containers: []*task.Container{{Name: "x", DockerID: "abc111"}, {Name: "y", DockerID: "abc222"}}}
	b := &task.Task{Arn: "arn:b", Containers: []*task.Container{{Name: "z", DockerID: "abd333"}}}
	src := fixedTasks{a, b}
	for query, want := range map[string]int{"ab": http.StatusBadRequest, "abc": http.StatusBadRequest, "abc1": http.StatusOK, "abd": http.StatusOK} {
		rec := get(src, "/v1/tasks?dockerid="+query)
		assert.Equal(t, want, rec.Code, query)
	}
}

func TestTasksListsUnknownContainers(t *testing.T) {
	web := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/web1", Family: "web", Revision: 3,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning}
	since := time.Date(2026, 11, 30, 14, 0, 0, 0, time.FixedZone("CET", 3600))
	src := withUnknown{fixedTasks: fixedTasks{web}, unknown: []task.UnknownContainer{
		{DockerID: "feedfacefeedface0001", DockerName: "ecs-ghost-1-app-9a8b", TaskArn: "arn:aws:ecs:local:000000000000:task/default/ghost",
			Name: "app", Image: "testapp:latest", Since: since},
		{DockerID: "feedfacefeedface0002", DockerName: "hand-made", Image: "busybox"}, // no task labels, no start time
	}}
	rec := get(src, "/v1/tasks")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"Tasks":[{"Arn":"arn:aws:ecs:local:000000000000:task/default/web1","DesiredStatus":"RUNNING","KnownStatus":"RUNNING",
		"Family":"web","Version":"3","Containers":[]}],
		"UnknownContainers":[
			{"DockerId":"feedfacefeedface0001","DockerName":"ecs-ghost-1-app-9a8b","TaskArn":"arn:aws:ecs:local:000000000000:task/default/ghost",
			 "Name":"app","Image":"testapp:latest","Since":"2026-11-30T13:00:00Z"},
			{"DockerId":"feedfacefeedface0002","DockerName":"hand-made","Image":"busybox"}]}`, rec.Body.String())

	rec = get(src, "/v1/tasks?dockerid=feedfacefeedface0001")
	assert.Equal(t, http.StatusNotFound, rec.Code, "an unknown container is no task")
	rec = get(src, "/v1/tasks?taskarn=arn:aws:ecs:local:000000000000:task/default/web1")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.NotContains(t, rec.Body.String(), "UnknownContainers", "one task's answer keeps the ECS shape")
}

// withUsage is a task source that knows the resource use of some containers.
type withUsage struct {
	fixedTasks
	usage map[string]Usage
}

func (w withUsage) ContainerUsage(dockerID string) (Usage, bool) {
	u, ok := w.usage[dockerID]
	return u, ok
}

func TestTasksShowUsage(t *testing.T) {
	web := &task.Task{Arn: "arn:web", Family: "web", Revision: 1, DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{
			{Name: "app", DockerID: "id-app", KnownStatus: task.ContainerRunning},
			{Name: "side", DockerID: "id-side", KnownStatus: task.ContainerRunning},
			{Name: "new", DockerID: "id-new", KnownStatus: task.ContainerRunning},
		}}
	src := withUsage{fixedTasks: fixedTasks{web}, usage: map[string]Usage{
		"id-app":  {CPUPercent: 12.3456, MemoryBytes: 20 << 20},
		"id-side": {CPUPercent: 1, MemoryBytes: 1 << 19},
	}}
	rec := httptest.NewRecorder()
	NewIntrospection(fixedMetadata{}, src, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks?taskarn=arn:web", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"Arn":"arn:web","DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"web","Version":"1",
		"CPUPercent":13.35,"MemoryMiB":20.5,"Containers":[
		{"DockerId":"id-app","DockerName":"","Name":"app","Image":"","ImageID":"","KnownStatus":"RUNNING","CPUPercent":12.35,"MemoryMiB":20},
		{"DockerId":"id-side","DockerName":"","Name":"side","Image":"","ImageID":"","KnownStatus":"RUNNING","CPUPercent":1,"MemoryMiB":0.5},
		{"DockerId":"id-new","DockerName":"","Name":"new","Image":"","ImageID":"","KnownStatus":"RUNNING"}]}`, rec.Body.String())
}

// TestTasksShowManagedAgents: a container's managed agents (Berth extension) with their status,
// reason, last start (UTC) and restarts; left out of a container without any.
func TestTasksShowManagedAgents(t *testing.T) {
	started := time.Date(2026, 12, 1, 9, 30, 0, 0, time.FixedZone("x", 3600))
	tk := &task.Task{Arn: "arn:exec", Family: "exec", Revision: 1, DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{{Name: "app", KnownStatus: task.ContainerRunning, ManagedAgents: []task.ManagedAgent{{
			Name: task.ExecuteCommandAgent, Status: task.ManagedAgentRunning, Reason: "ExecuteCommandAgent restarted",
			LastStartedAt: started, Restarts: 2, ID: "secret-free-id", ExecID: "e1"}}}}}
	want := `{"Arn":"arn:exec","DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"exec","Version":"1","Containers":[` +
		`{"DockerId":"","DockerName":"","Name":"app","Image":"","ImageID":"","KnownStatus":"RUNNING",` +
		`"ManagedAgents":[{"Name":"ExecuteCommandAgent","LastStatus":"RUNNING","Reason":"ExecuteCommandAgent restarted",` +
		`"LastStartedAt":"2026-12-01T08:30:00Z","Restarts":2}]}]}`
	assert.Equal(t, want, get(fixedTasks{tk}, "/v1/tasks?taskarn=arn:exec").Body.String())
}

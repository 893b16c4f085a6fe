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

func TestTasks(t *testing.T) {
	code := 137
	web := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/web1", Family: "web", Revision: 3,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		Containers: []*task.Container{{Name: "web", Image: "testapp:latest", ImageID: "sha256:abc", DockerID: "0123456789abcdef0123",
			DockerName: "ecs-web-3-web-aa", KnownStatus: task.ContainerRunning,
			NetworkBindings: []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}},
			Networks:        []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.2"}}}}}}
	stopped := &task.Task{Arn: "arn:aws:ecs:local:000000000000:task/default/job1", Family: "job", Revision: 1,
		DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped, StoppedReason: task.StopReasonEssentialExited,
		Containers: []*task.Container{{Name: "job", Image: "testapp:latest", KnownStatus: task.ContainerStopped, ExitCode: &code, Reason: "killed",
			RestartPolicy: &task.RestartPolicy{Enabled: true, IgnoredExitCodes: []int{137}}}}}
	src := fixedTasks{web, stopped}

	webJSON := `{"Arn":"arn:aws:ecs:local:000000000000:task/default/web1","DesiredStatus":"RUNNING","KnownStatus":"RUNNING","Family":"web","Version":"3",
		"Containers":[{"DockerId":"0123456789abcdef0123","DockerName":"ecs-web-3-web-aa","Name":"web","Image":"testapp:latest","ImageID":"sha256:abc",
		"Ports":[{"ContainerPort":8080,"Protocol":"tcp","HostPort":8080,"HostIp":"0.0.0.0"}],
		"Networks":[{"NetworkMode":"bridge","IPv4Addresses":["172.17.0.2"]}],"KnownStatus":"RUNNING"}]}`
	jobJSON := `{"Arn":"arn:aws:ecs:local:000000000000:task/default/job1","DesiredStatus":"STOPPED","KnownStatus":"STOPPED","Family":"job","Version":"1",
		"StoppedReason":"Essential container in task exited",
		"Containers":[{"DockerId":"","DockerName":"","Name":"job","Image":"testapp:latest","ImageID":"","KnownStatus":"STOPPED","ExitCode":137,"Reason":"killed","RestartCount":0}]}`
	tests := []struct {
		name       string
		query      string
		wantStatus int
		wantBody   string
	}{
		{name: "all, sorted by ARN", query: "", wantStatus: http.StatusOK, wantBody: `{"Tasks":[` + jobJSON + `,` + webJSON + `]}`},
		{name: "by task ARN", query: "?taskarn=arn:aws:ecs:local:000000000000:task/default/job1", wantStatus: http.StatusOK, wantBody: jobJSON},
		{name: "by full docker ID", query: "?dockerid=0123456789abcdef0123", wantStatus: http.StatusOK, wantBody: webJSON},
		{name: "by short docker ID", query: "?dockerid=0123456789ab", wantStatus: http.StatusOK, wantBody: webJSON},
		{name: "docker ID too short to be unambiguous", query: "?dockerid=0123", wantStatus: http.StatusNotFound},
		{name: "unknown ARN", query: "?taskarn=nope", wantStatus: http.StatusNotFound, wantBody: `{"error":"no task with ARN \"nope\""}`},
		{name: "both selectors", query: "?taskarn=a&dockerid=b", wantStatus: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewIntrospection(fixedMetadata{}, src, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks"+tt.query, nil))
			require.Equal(t, tt.wantStatus, rec.Code, rec.Body.String())
			if tt.wantBody != "" {
				assert.JSONEq(t, tt.wantBody, rec.Body.String())
			}
		})
	}
	t.Run("awsvpc task shows its address", func(t *testing.T) {
		vpc := &task.Task{Arn: "arn:vpc", NetworkMode: task.NetworkAWSVPC, AWSVPC: &task.AWSVPC{IPv4: "172.31.250.5"},
			Containers: []*task.Container{{Name: "app", KnownStatus: task.ContainerRunning}}}
		rec := httptest.NewRecorder()
		NewIntrospection(fixedMetadata{}, fixedTasks{vpc}, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks?taskarn=arn:vpc", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Body.String(), `"Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["172.31.250.5"]}]`)
	})
	t.Run("no tasks is an empty list", func(t *testing.T) {
		rec := httptest.NewRecorder()
		NewIntrospection(fixedMetadata{}, fixedTasks(nil), nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks", nil))
		assert.JSONEq(t, `{"Tasks":[]}`, rec.Body.String())
	})
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
	get := func(query string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		NewIntrospection(fixedMetadata{}, src, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/tasks"+query, nil))
		return rec
	}

	rec := get("")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"Tasks":[{"Arn":"arn:aws:ecs:local:000000000000:task/default/web1","DesiredStatus":"RUNNING","KnownStatus":"RUNNING",
		"Family":"web","Version":"3","Containers":[]}],
		"UnknownContainers":[
			{"DockerId":"feedfacefeedface0001","DockerName":"ecs-ghost-1-app-9a8b","TaskArn":"arn:aws:ecs:local:000000000000:task/default/ghost",
			 "Name":"app","Image":"testapp:latest","Since":"2026-11-30T13:00:00Z"},
			{"DockerId":"feedfacefeedface0002","DockerName":"hand-made","Image":"busybox"}]}`, rec.Body.String())

	rec = get("?dockerid=feedfacefeedface0001")
	assert.Equal(t, http.StatusNotFound, rec.Code, "an unknown container is no task")
	rec = get("?taskarn=arn:aws:ecs:local:000000000000:task/default/web1")
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

package prommetrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

type fakePuller struct {
	res dockerclient.PullResult
	err error
}

func (f fakePuller) Pull(context.Context, string, dockerclient.AuthSource) (dockerclient.PullResult, error) {
	return f.res, f.err
}

type fakeDocker struct{ inspectErr error }

func (fakeDocker) InspectImage(context.Context, string) (*docker.Image, error) {
	return &docker.Image{}, nil
}
func (fakeDocker) CreateContainer(context.Context, docker.CreateContainerOptions) (*docker.Container, error) {
	return &docker.Container{ID: "c1"}, nil
}
func (fakeDocker) StartContainer(context.Context, string) error                         { return nil }
func (fakeDocker) StopContainer(context.Context, string, time.Duration) error           { return nil }
func (fakeDocker) RemoveContainer(context.Context, docker.RemoveContainerOptions) error { return nil }
func (f fakeDocker) InspectContainer(context.Context, string) (*docker.Container, error) {
	return nil, f.inspectErr
}
func (fakeDocker) RemoveVolume(context.Context, string) error { return nil }
func (fakeDocker) ListContainersByLabel(context.Context, map[string]string) ([]docker.APIContainers, error) {
	return nil, nil
}
func (fakeDocker) Events(context.Context, map[string][]string) (<-chan dockerclient.Event, error) {
	return nil, nil
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(body)
}

func TestMetrics(t *testing.T) {
	tasks := []*task.Task{
		{KnownStatus: task.TaskRunning, Containers: []*task.Container{{KnownStatus: task.ContainerRunning}, {KnownStatus: task.ContainerStopped}}},
		{KnownStatus: task.TaskRunning, Containers: []*task.Container{{KnownStatus: task.ContainerRunning}}},
		{KnownStatus: task.TaskStopped, Containers: []*task.Container{{KnownStatus: task.ContainerStopped}}},
	}
	m := New()
	m.CountTasks(func() []*task.Task { return tasks })
	ctx := context.Background()

	attempts := []dockerclient.AttemptResult{{Number: 1, Err: errors.New("503")}, {Number: 2}}
	_, _ = m.Puller(fakePuller{res: dockerclient.PullResult{Attempts: attempts, Pulled: true}}).Pull(ctx, "a", nil)
	_, _ = m.Puller(fakePuller{res: dockerclient.PullResult{Cached: true}}).Pull(ctx, "b", nil)
	_, _ = m.Puller(fakePuller{res: dockerclient.PullResult{Attempts: attempts[:1]}, err: errors.New("x")}).Pull(ctx, "c", nil)
	_, _ = m.Puller(fakePuller{res: dockerclient.PullResult{Attempts: attempts, Pulled: true, Shared: true}}).Pull(ctx, "a", nil)

	d := m.Docker(fakeDocker{inspectErr: &dockerclient.NotFoundError{Kind: "container", Name: "x", Err: errors.New("no such container")}})
	_, _ = d.CreateContainer(ctx, docker.CreateContainerOptions{})
	_, _ = d.InspectContainer(ctx, "x")

	body := scrape(t, m)
	for _, want := range []string{
		`berth_tasks{status="RUNNING"} 2`,
		`berth_tasks{status="STOPPED"} 1`,
		`berth_tasks{status="NONE"} 0`,
		`berth_containers{status="RUNNING"} 2`,
		`berth_containers{status="STOPPED"} 2`,
		`berth_image_pulls_total{outcome="pulled"} 2`,
		`berth_image_pulls_total{outcome="cached"} 1`,
		`berth_image_pulls_total{outcome="failed"} 1`,
		`berth_image_pull_attempts_total 3`,
		`berth_image_pull_retries_total 1`,
		`berth_docker_call_duration_seconds_count{op="create_container",outcome="ok"} 1`,
		`berth_docker_call_duration_seconds_count{op="inspect_container",outcome="not_found"} 1`,
	} {
		assert.Contains(t, body, want)
	}
}

func TestUnknownRunningContainers(t *testing.T) {
	m := New()
	assert.Contains(t, scrape(t, m), "berth_unknown_running_containers 0\n", "0 before the engine is wired")
	var unknown []task.UnknownContainer
	m.CountUnknownContainers(func() []task.UnknownContainer { return unknown })
	assert.Contains(t, scrape(t, m), "berth_unknown_running_containers 0\n")
	unknown = []task.UnknownContainer{{DockerID: "a"}, {DockerID: "b"}}
	assert.Contains(t, scrape(t, m), "berth_unknown_running_containers 2\n", "read at every scrape")
	unknown = unknown[:1]
	assert.Contains(t, scrape(t, m), "berth_unknown_running_containers 1\n")
}

func TestContainerUsage(t *testing.T) {
	m := New()
	assert.NotContains(t, scrape(t, m), "berth_container_cpu_percent", "nothing before the source is wired")
	m.ReportUsage(func() []ContainerUsage {
		return []ContainerUsage{{TaskArn: "arn:t", ContainerName: "web", CPUPercent: 12.5, MemoryBytes: 20 << 20}}
	})
	body := scrape(t, m)
	assert.Contains(t, body, `berth_container_cpu_percent{container="web",task_arn="arn:t"} 12.5`+"\n")
	assert.Contains(t, body, `berth_container_memory_bytes{container="web",task_arn="arn:t"} 2.097152e+07`+"\n")
}

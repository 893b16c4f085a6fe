package taskendpoint_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// firelensTask is a running bridge task with a Fluent Bit router that logs with awslogs and an app
// that logs through it, with a secret option.
func firelensTask() *task.Task {
	return &task.Task{
		Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/5e1f0c2a9b8d4e7f", Family: "logs", Revision: 2,
		NetworkMode: task.NetworkBridge, DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning, CreatedAt: at(0),
		Containers: []*task.Container{
			{
				Name: "log_router", Image: "public.ecr.aws/aws-observability/aws-for-fluent-bit:stable", Essential: true,
				Firelens: &task.FirelensConfiguration{Type: task.FirelensFluentbit, Options: map[string]string{"enable-ecs-log-metadata": "true"}},
				LogConfiguration: &task.LogConfiguration{LogDriver: "awslogs",
					Options: map[string]string{"awslogs-group": "firelens", "awslogs-region": "us-west-2"}},
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning, DockerID: "f1", DockerName: "ecs-logs-2-log_router",
			},
			{
				Name: "app", Image: "nginx", Essential: true,
				LogConfiguration: &task.LogConfiguration{LogDriver: task.LogDriverFirelens,
					Options: map[string]string{"Name": "datadog", "dd_service": "app", "TLS": "on"},
					SecretOptions: []task.Secret{{Name: "apikey",
						ValueFrom: "arn:aws:secretsmanager:us-west-2:012345678901:secret:datadog-Ab12Cd"}}},
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning, DockerID: "f2", DockerName: "ecs-logs-2-app",
			},
		},
	}
}

// TestMetadataV4FirelensLogDrivers: v4 shows each container's log driver and options as the
// definition gives them, as the ECS agent shows its hostConfig's LogConfig: the router's own driver,
// awsfirelens with the output options for the app; never a secret option, by name or by where its
// value comes from.
func TestMetadataV4FirelensLogDrivers(t *testing.T) {
	e := newEnv(t)
	fl := firelensTask()
	e.tasks.tasks = append(e.tasks.tasks, fl)
	e.tasks.tokens["tok-router"] = held{fl, "log_router"}
	e.tasks.tokens["tok-app"] = held{fl, "app"}

	type shown struct {
		Name       string
		LogDriver  string
		LogOptions map[string]string
	}
	wantRouter := shown{"log_router", "awslogs", map[string]string{"awslogs-group": "firelens", "awslogs-region": "us-west-2"}}
	wantApp := shown{"app", "awsfirelens", map[string]string{"Name": "datadog", "dd_service": "app", "TLS": "on"}}
	for _, tc := range []struct {
		path string
		want []shown
	}{
		{"/v4/tok-router", []shown{wantRouter}},
		{"/v4/tok-app", []shown{wantApp}},
		{"/v4/tok-app/task", []shown{wantRouter, wantApp}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			rec := e.get(tc.path, "172.17.0.9:41234")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			body := rec.Body.String()
			var got []shown
			if strings.HasSuffix(tc.path, "/task") {
				var tk struct{ Containers []shown }
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tk))
				got = tk.Containers
			} else {
				var c shown
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &c))
				got = []shown{c}
			}
			assert.Equal(t, tc.want, got)
			for _, hidden := range []string{"apikey", "secretsmanager", "datadog-Ab12Cd", "ecretOptions"} {
				assert.NotContains(t, body, hidden)
			}
		})
	}
}

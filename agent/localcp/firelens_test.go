package localcp

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
)

// TestFirelensDefinitionWithSDK registers a FireLens task definition with aws-sdk-go-v2's ECS
// client, reads it back with DescribeTaskDefinition as it was given, runs it, and finds in the ACS
// payload what ECS sends: the router's firelensConfiguration as a field, the app's awsfirelens
// driver in its hostConfig's LogConfig and its secret option as a LOG_DRIVER secret. A definition
// with two routers is refused by name.
func TestFirelensDefinitionWithSDK(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), Credentials: testKeys.Provider()})
	ctx := t.Context()
	ci := registerInstance(t, h)

	router := types.ContainerDefinition{
		Name: aws.String("log_router"), Image: aws.String("public.ecr.aws/aws-observability/aws-for-fluent-bit:stable"),
		MemoryReservation: aws.Int32(50), Essential: aws.Bool(true),
		FirelensConfiguration: &types.FirelensConfiguration{Type: types.FirelensConfigurationTypeFluentbit,
			Options: map[string]string{"enable-ecs-log-metadata": "true", "config-file-type": "file", "config-file-value": "/fluent-bit/configs/parse-json.conf"}},
	}
	app := types.ContainerDefinition{
		Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(32), Essential: aws.Bool(true),
		LogConfiguration: &types.LogConfiguration{LogDriver: types.LogDriverAwsfirelens,
			Options:       map[string]string{"Name": "cloudwatch_logs", "region": "us-east-1", "log_group_name": "app"},
			SecretOptions: []types.Secret{{Name: aws.String("apikey"), ValueFrom: aws.String("arn:aws:ssm:us-east-1:000000000000:parameter/key")}}},
	}
	_, err := client.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("logs"),
		ContainerDefinitions: []types.ContainerDefinition{router, app}})
	require.NoError(t, err)

	desc, err := client.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("logs")})
	require.NoError(t, err)
	got := desc.TaskDefinition.ContainerDefinitions
	require.Len(t, got, 2)
	assert.Equal(t, router.FirelensConfiguration, got[0].FirelensConfiguration)
	assert.Nil(t, got[1].FirelensConfiguration)
	assert.Equal(t, app.LogConfiguration, got[1].LogConfiguration)

	run, err := client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("logs")})
	require.NoError(t, err)
	arn := aws.ToString(run.Tasks[0].TaskArn)

	p := dialACS(t, ts, ci).payload()
	require.Len(t, p.Tasks, 1)
	wt := p.Tasks[0]
	assert.Equal(t, arn, wt.Arn)
	require.Len(t, wt.Containers, 2)
	assert.Equal(t, &acswire.FirelensConfiguration{Type: "fluentbit", Options: map[string]string{"enable-ecs-log-metadata": "true",
		"config-file-type": "file", "config-file-value": "/fluent-bit/configs/parse-json.conf"}}, wt.Containers[0].FirelensConfiguration)
	assert.Nil(t, wt.Containers[1].FirelensConfiguration)
	var hostConfig struct {
		LogConfig struct {
			Type   string
			Config map[string]string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(wt.Containers[1].DockerConfig.HostConfig), &hostConfig))
	assert.Equal(t, "awsfirelens", hostConfig.LogConfig.Type)
	assert.Equal(t, map[string]string{"Name": "cloudwatch_logs", "region": "us-east-1", "log_group_name": "app"}, hostConfig.LogConfig.Config)
	assert.Equal(t, []acswire.Secret{{Name: "apikey", ValueFrom: "arn:aws:ssm:us-east-1:000000000000:parameter/key",
		Type: "ENVIRONMENT_VARIABLE", Target: "LOG_DRIVER", Provider: "ssm"}}, wt.Containers[1].Secrets)
	accepted, err := acstranslate.TranslateTask(wt)
	require.NoError(t, err, "the agent accepts the payload")
	assert.Equal(t, task.FirelensFluentbit, accepted.Task.Containers[0].Firelens.Type)

	second := router
	second.Name = aws.String("second_router")
	_, err = client.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("two-routers"),
		ContainerDefinitions: []types.ContainerDefinition{router, second, app}})
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
	assert.Equal(t, "ClientException", apiErr.ErrorCode())
	assert.Contains(t, apiErr.ErrorMessage(), `containerDefinitions[1].firelensConfiguration: a task has at most one log router and container "log_router" already is one`)
}

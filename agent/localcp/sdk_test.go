package localcp

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSDKClient drives the control plane with aws-sdk-go-v2's ECS client, as the agent does.
func TestSDKClient(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	client := ecs.New(ecs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ts.URL),
		Credentials:  testKeys.Provider(),
	})
	ctx := t.Context()

	attrs := []types.Attribute{{Name: aws.String("ecs.os-type"), Value: aws.String("linux")}, {Name: aws.String("ecs.capability.privileged-container")}}
	reg, err := client.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster:        aws.String("default"),
		Attributes:     attrs,
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024}},
		VersionInfo:    &types.VersionInfo{AgentVersion: aws.String("0.1.0")},
	})
	require.NoError(t, err)
	ci := aws.ToString(reg.ContainerInstance.ContainerInstanceArn)
	require.Len(t, reg.ContainerInstance.Attributes, 2)
	assert.Equal(t, "ecs.os-type", aws.ToString(reg.ContainerInstance.Attributes[0].Name))
	assert.Equal(t, "linux", aws.ToString(reg.ContainerInstance.Attributes[0].Value))

	poll, err := client.DiscoverPollEndpoint(ctx, &ecs.DiscoverPollEndpointInput{Cluster: aws.String("default"), ContainerInstance: aws.String(ci)})
	require.NoError(t, err)
	assert.Equal(t, ts.URL+"/", aws.ToString(poll.Endpoint))

	_, err = client.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("sdk"),
		ContainerDefinitions: []types.ContainerDefinition{{
			Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(32), Essential: aws.Bool(true),
		}},
	})
	require.NoError(t, err)
	run, err := client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("sdk")})
	require.NoError(t, err)
	arn := aws.ToString(run.Tasks[0].TaskArn)

	pulled := time.Unix(1740830400, 500e6)
	_, err = client.SubmitTaskStateChange(ctx, &ecs.SubmitTaskStateChangeInput{
		Cluster: aws.String("default"), Task: aws.String(arn), Status: aws.String("RUNNING"),
		PullStartedAt: aws.Time(pulled),
		Containers: []types.ContainerStateChange{{
			ContainerName: aws.String("app"), RuntimeId: aws.String("abc"), Status: aws.String("RUNNING"),
			NetworkBindings: []types.NetworkBinding{{BindIP: aws.String("0.0.0.0"), ContainerPort: aws.Int32(80), HostPort: aws.Int32(8080), Protocol: types.TransportProtocolTcp}},
		}},
	})
	require.NoError(t, err)
	_, err = client.SubmitContainerStateChange(ctx, &ecs.SubmitContainerStateChangeInput{
		Cluster: aws.String("default"), Task: aws.String(arn), ContainerName: aws.String("app"),
		Status: aws.String("STOPPED"), ExitCode: aws.Int32(3), Reason: aws.String("boom"),
	})
	require.NoError(t, err)

	desc, err := client.DescribeTasks(ctx, &ecs.DescribeTasksInput{Tasks: []string{arn}})
	require.NoError(t, err)
	task := desc.Tasks[0]
	assert.Equal(t, "RUNNING", aws.ToString(task.LastStatus))
	assert.True(t, pulled.Equal(aws.ToTime(task.PullStartedAt)))
	assert.True(t, h.clock.Now().Equal(aws.ToTime(task.StartedAt)))
	assert.Equal(t, types.LaunchTypeEc2, task.LaunchType)
	assert.Equal(t, int32(3), aws.ToInt32(task.Containers[0].ExitCode))
	assert.Equal(t, "STOPPED", aws.ToString(task.Containers[0].LastStatus))
	assert.Equal(t, int32(8080), aws.ToInt32(task.Containers[0].NetworkBindings[0].HostPort))

	cis, err := client.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{ContainerInstances: []string{ci}})
	require.NoError(t, err)
	assert.Equal(t, int32(1), cis.ContainerInstances[0].RunningTasksCount)

	_, err = client.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("nope")})
	var ce *types.ClientException
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, "Unable to describe task definition.", ce.ErrorMessage())

	_, err = client.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("nope")})
	var cnf *types.ClusterNotFoundException
	require.True(t, errors.As(err, &cnf), "%v", err)
}

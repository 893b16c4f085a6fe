package ecsstandin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/tcs"
	"github.com/berth-agent/berth/agent/tcswire"
)

// tasksSource is a TCS source with a fixed number of running tasks and no health checks.
type tasksSource int

func (n tasksSource) Metrics(time.Time) []tcswire.TaskMetric {
	out := make([]tcswire.TaskMetric, n)
	for i := range out {
		out[i] = tcswire.TaskMetric{TaskArn: fmt.Sprintf("arn:aws:ecs:us-east-1:000000000000:task/c/%d", i),
			TaskDefinitionFamily: "f", TaskDefinitionVersion: "1"}
	}
	return out
}

func (tasksSource) Health(time.Time) []tcswire.TaskHealth { return nil }

// TestTelemetryRelaysAndCountsTheAgentsTCS runs the agent's own TCS client against the front, at the
// telemetry endpoint the front's DiscoverPollEndpoint names: the control plane accepts the signed
// frames the relay passed on, and the relay counts the session and each complete batch (12 tasks:
// two messages).
func TestTelemetryRelaysAndCountsTheAgentsTCS(t *testing.T) {
	s, err := Start(t.TempDir(), Options{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	api, err := ecsclient.New(ctx, ecsclient.Config{Region: Region, Endpoint: s.Endpoint, Credentials: Keys.Provider(), Cluster: "default"})
	require.NoError(t, err)
	instance, err := api.RegisterContainerInstance(ctx, ecsclient.Registration{CPU: 1024, MemoryMiB: 1024, AgentVersion: "test", DockerAPIVersion: "1.41"})
	require.NoError(t, err)
	endpoint, err := api.TelemetryEndpoint(ctx, instance)
	require.NoError(t, err)
	require.Contains(t, endpoint, s.Endpoint, "the telemetry endpoint must be the front's")

	client, err := tcs.New(tcs.Config{Endpoint: endpoint, Cluster: "default", ContainerInstanceArn: instance, Region: Region,
		Credentials: Keys.Provider(), Source: tasksSource(12), PublishInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Run(cctx)
	}()
	defer func() { stop(); <-done }()

	require.NoError(t, s.Telemetry.WaitSession(ctx))
	start := time.Now()
	first, err := s.Telemetry.WaitPublish(ctx, start, 1)
	require.NoError(t, err)
	assert.Equal(t, 12, first.Tasks, "one batch is every message of one message ID, up to fin")
	assert.False(t, first.Idle)
	second, err := s.Telemetry.WaitPublish(ctx, first.At, 1)
	require.NoError(t, err)
	assert.Len(t, s.Telemetry.Publishes(first.At, second.At.Add(time.Nanosecond)), 2)
	assert.Empty(t, s.Telemetry.Publishes(time.Time{}, start))

	deadline := time.Now().Add(10 * time.Second)
	for len(s.cp.LastMetrics(instance)) != 12 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the control plane's view, bounded by deadline
	}
	assert.Len(t, s.cp.LastMetrics(instance), 12, "the control plane must have accepted the relayed, signed frames")
	opened, open := s.Telemetry.Sessions()
	assert.Equal(t, 1, opened)
	assert.Equal(t, 1, open)
}

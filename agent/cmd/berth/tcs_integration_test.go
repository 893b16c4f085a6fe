//go:build integration

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/tcs/tcstest"
	"github.com/berth-agent/berth/agent/tcswire"
)

// telemetryStandIn answers DiscoverPollEndpoint with ACS on itself and TCS at telemetry, and passes
// every other request on.
type telemetryStandIn struct {
	next      http.Handler
	telemetry string
}

func (s telemetryStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".DiscoverPollEndpoint") {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]string{"endpoint": "http://" + r.Host + "/", "telemetryEndpoint": s.telemetry})
		return
	}
	s.next.ServeHTTP(w, r)
}

// TestIntegrationTCSPublishesTaskMetrics runs an ecs-mode agent with one ACS task that holds 20 MiB
// against a stand-in whose telemetry endpoint is tcstest's: a metrics batch for the task arrives,
// with memory, signed with the agent's key, and the same figures show on /v1/tasks and /metrics.
func TestIntegrationTCSPublishesTaskMetrics(t *testing.T) {
	bin := buildBerth(t)
	telemetrySrv := tcstest.NewServer(t)
	cp := standInECS(t, "us-east-1")
	standIn := &scriptedACS{cp: cp.Handler(), out: make(chan acswire.Message, 8)}
	t.Cleanup(func() { close(standIn.out) })
	addr := serveLoopback(t, telemetryStandIn{next: standIn, telemetry: telemetrySrv.URL})

	env := newRecoveryEnv(t, bin)
	arn := "arn:aws:ecs:us-east-1:000000000000:task/tcs/" + randomHex(t, 16)
	allocTask := func(desired string) *acswire.Task {
		return &acswire.Task{Arn: arn, Family: "tcs-alloc", Version: "1", DesiredStatus: desired, NetworkMode: "bridge",
			Containers: []*acswire.Container{{Name: "app", Image: testappImage, Memory: 64, Command: []string{"alloc", "-mib", "20"},
				Essential: new(true), StopTimeout: 2}}}
	}
	standIn.out <- &acswire.PayloadMessage{MessageID: "tcs-1", SeqNum: 1, Tasks: []*acswire.Task{allocTask("RUNNING")}}
	agent := env.start(ecsModeEnv(addr)...)
	defer agent.stop()
	agent.waitTasks(2*time.Minute, "the ACS task runs", familySettled("tcs-alloc"))
	defer func() {
		standIn.out <- &acswire.PayloadMessage{MessageID: "tcs-2", SeqNum: 2, Tasks: []*acswire.Task{allocTask("STOPPED")}}
		agent.waitTasks(time.Minute, "the task stops", func(ts []introspection.TaskResponse) bool {
			for _, tr := range ts {
				if tr.Arn == arn {
					return tr.KnownStatus == "STOPPED"
				}
			}
			return true
		})
	}()

	var metric tcswire.ContainerMetric
	deadline := time.Now().Add(60 * time.Second)
	for metric.MemoryStatsSet == nil {
		require.True(t, time.Now().Before(deadline), "no metrics for the task within 60 s; batches: %+v", telemetrySrv.MetricsBatches())
		time.Sleep(500 * time.Millisecond)
		for _, b := range telemetrySrv.MetricsBatches() {
			for _, tm := range b.Tasks {
				if tm.TaskArn == arn && len(tm.ContainerMetrics) == 1 && tm.ContainerMetrics[0].MemoryStatsSet != nil {
					assert.Equal(t, "tcs-alloc", tm.TaskDefinitionFamily)
					assert.Equal(t, "1", tm.TaskDefinitionVersion)
					metric = tm.ContainerMetrics[0]
				}
			}
		}
	}
	assert.Equal(t, "app", metric.ContainerName)
	assert.Greater(t, metric.MemoryStatsSet.Max, 0.0)
	assert.NotNil(t, metric.CPUStatsSet)
	assert.NotNil(t, metric.StorageStatsSet)
	assert.Empty(t, telemetrySrv.Problems())
	for _, key := range telemetrySrv.AccessKeyIDs() {
		assert.Equal(t, "berth-test", key, "every frame is signed with the agent's key")
	}
	assert.Equal(t, "berth-test", telemetrySrv.Upgrades()[0].AccessKeyID)
	statuses := telemetrySrv.InstanceStatuses()
	require.NotEmpty(t, statuses)
	if last := statuses[len(statuses)-1].Statuses; assert.Len(t, last, 1) {
		assert.Equal(t, tcswire.InstanceStatusTypeRuntime, last[0].Type)
		assert.Equal(t, tcswire.InstanceStatusOK, last[0].Status, "the Docker Engine answers")
	}

	// Local display: the same container's figures on /v1/tasks and /metrics.
	ts := agent.waitTasks(10*time.Second, "the container's figures on /v1/tasks", func(ts []introspection.TaskResponse) bool {
		for _, tr := range ts {
			if tr.Arn == arn && len(tr.Containers) == 1 && tr.Containers[0].MemoryMiB != nil {
				return true
			}
		}
		return false
	})
	for _, tr := range ts {
		if tr.Arn == arn {
			assert.Greater(t, *tr.Containers[0].MemoryMiB, 0.0)
			assert.NotNil(t, tr.Containers[0].CPUPercent)
			require.NotNil(t, tr.MemoryMiB)
		}
	}
	resp, err := http.Get("http://" + agent.addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), `berth_container_memory_bytes{container="app",task_arn="`+arn+`"}`)
	assert.Contains(t, string(body), `berth_container_cpu_percent{container="app",task_arn="`+arn+`"}`)
}

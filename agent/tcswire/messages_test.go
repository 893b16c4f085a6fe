package tcswire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/tcswire"
	"github.com/berth-agent/berth/agent/wire"
)

func TestMessageJSONFieldNames(t *testing.T) {
	restarts := int64(5)
	m := &tcswire.PublishMetricsRequest{
		Metadata:  tcswire.MetricsMetadata{Cluster: "c", ContainerInstance: "ci", Fin: true, MessageID: "id"},
		Timestamp: tcswire.At(time.UnixMilli(1700000000250)),
		TaskMetrics: []tcswire.TaskMetric{{
			TaskArn: "t", TaskDefinitionFamily: "f", TaskDefinitionVersion: "1",
			ContainerMetrics: []tcswire.ContainerMetric{{
				ContainerName:   "app",
				CPUStatsSet:     tcswire.FloatStats(1),
				NetworkStatsSet: &tcswire.NetworkStatsSet{RxBytesPerSecond: tcswire.FloatStats(2), TxBytes: tcswire.ULongStats(3)},
				StorageStatsSet: &tcswire.StorageStatsSet{WriteSizeBytes: tcswire.ULongStats(4)},
				RestartStatsSet: &tcswire.RestartStatsSet{RestartCount: &restarts},
			}},
		}},
	}
	data, err := tcswire.Encode(m)
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"PublishMetricsRequest","message":{
		"metadata":{"cluster":"c","containerInstance":"ci","idle":false,"fin":true,"messageId":"id"},
		"timestamp":1700000000.25,
		"taskMetrics":[{"taskArn":"t","taskDefinitionFamily":"f","taskDefinitionVersion":"1","containerMetrics":[{
			"containerName":"app",
			"cpuStatsSet":{"min":1,"max":1,"sampleCount":1,"sum":1},
			"networkStatsSet":{"rxBytesPerSecond":{"min":2,"max":2,"sampleCount":1,"sum":2},
				"txBytes":{"min":3,"max":3,"sampleCount":1,"sum":3,"overflowMin":0,"overflowMax":0,"overflowSum":0}},
			"storageStatsSet":{"writeSizeBytes":{"min":4,"max":4,"sampleCount":1,"sum":4,"overflowMin":0,"overflowMax":0,"overflowSum":0}},
			"restartStatsSet":{"restartCount":5}
		}]}]}}`, string(data))

	back, err := tcswire.Decode(data)
	require.NoError(t, err)
	assert.Equal(t, m.Timestamp.UnixMilli(), back.(*tcswire.PublishMetricsRequest).Timestamp.UnixMilli())

	h, err := tcswire.Encode(&tcswire.PublishHealthRequest{
		Metadata: tcswire.HealthMetadata{Cluster: "c", ContainerInstance: "ci", MessageID: "h"},
		Tasks: []tcswire.TaskHealth{{TaskArn: "t", TaskDefinitionFamily: "f", TaskDefinitionVersion: "1",
			Containers: []tcswire.ContainerHealth{{ContainerName: "app", HealthStatus: tcswire.HealthStatusUnhealthy, StatusSince: tcswire.At(time.Unix(5, 0))}}}},
		Timestamp: tcswire.At(time.Unix(6, 0)),
	})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"PublishHealthRequest","message":{
		"metadata":{"cluster":"c","containerInstance":"ci","fin":false,"messageId":"h"},
		"tasks":[{"taskArn":"t","taskDefinitionFamily":"f","taskDefinitionVersion":"1",
			"containers":[{"containerName":"app","healthStatus":"UNHEALTHY","statusSince":5}]}],
		"timestamp":6}}`, string(h))

	s, err := tcswire.Encode(&tcswire.PublishInstanceStatusRequest{
		Metadata:  tcswire.InstanceStatusMetadata{Cluster: "c", ContainerInstance: "ci", RequestID: "r"},
		Statuses:  []tcswire.InstanceStatus{{Type: "ContainerRuntime", Status: "OK", LastStatusChange: tcswire.At(time.Unix(1, 0)), LastUpdated: tcswire.At(time.Unix(2, 0))}},
		Timestamp: tcswire.At(time.Unix(3, 0)),
	})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"PublishInstanceStatusRequest","message":{
		"metadata":{"cluster":"c","containerInstance":"ci","requestId":"r"},
		"statuses":[{"type":"ContainerRuntime","status":"OK","lastStatusChange":1,"lastUpdated":2}],
		"timestamp":3}}`, string(s))
}

func TestDecodeServerFrames(t *testing.T) {
	for _, tc := range []struct {
		frame string
		want  tcswire.Message
	}{
		{`{"type":"HeartbeatMessage","message":{"healthy":true}}`, &tcswire.HeartbeatMessage{Healthy: true}},
		{`{"type":"AckPublishMetric","message":{"message":"ok"}}`, &tcswire.AckPublishMetric{Message: "ok"}},
		{`{"type":"AckPublishHealth","message":{}}`, &tcswire.AckPublishHealth{}},
		{`{"type":"AckPublishInstanceStatus","message":{}}`, &tcswire.AckPublishInstanceStatus{}},
		{`{"type":"ServerException","message":{"message":"boom"}}`, &wire.ServerException{Message: "boom"}},
	} {
		t.Run(tc.want.MessageType(), func(t *testing.T) {
			got, err := tcswire.Decode([]byte(tc.frame))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := tcswire.Decode([]byte(`{"type":"Nope","message":{}}`))
	var unknown *wire.UnknownTypeError
	assert.ErrorAs(t, err, &unknown)
	_, err = tcswire.Decode([]byte(`not json`))
	assert.Error(t, err)
}

package tcswire_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/tcswire"
	"github.com/berth-agent/berth/agent/wire"
)

func TestFloatStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []float64
		want    *tcswire.CWStatsSet
	}{
		{"none", nil, nil},
		{"only NaN", []float64{math.NaN()}, nil},
		{"one", []float64{42}, &tcswire.CWStatsSet{Min: 42, Max: 42, SampleCount: 1, Sum: 42}},
		{"several", []float64{3, 1, 2}, &tcswire.CWStatsSet{Min: 1, Max: 3, SampleCount: 3, Sum: 6}},
		{"NaN skipped", []float64{5, math.NaN(), 7}, &tcswire.CWStatsSet{Min: 5, Max: 7, SampleCount: 2, Sum: 12}},
		{"zero and negative", []float64{0, -1}, &tcswire.CWStatsSet{Min: -1, Max: 0, SampleCount: 2, Sum: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tcswire.FloatStats(tc.samples...))
		})
	}
}

func TestULongStats(t *testing.T) {
	const maxI = math.MaxInt64
	for _, tc := range []struct {
		name    string
		samples []uint64
		want    *tcswire.ULongStatsSet
	}{
		{"none", nil, nil},
		{"small", []uint64{10, 30, 20}, &tcswire.ULongStatsSet{Min: 10, Max: 30, SampleCount: 3, Sum: 60}},
		{"at MaxInt64", []uint64{maxI}, &tcswire.ULongStatsSet{Min: maxI, Max: maxI, SampleCount: 1, Sum: maxI}},
		{"above MaxInt64", []uint64{maxI + 5}, &tcswire.ULongStatsSet{
			Min: maxI, OverflowMin: 5, Max: maxI, OverflowMax: 5, SampleCount: 1, Sum: maxI, OverflowSum: 5}},
		{"sum overflows int64", []uint64{maxI, 10}, &tcswire.ULongStatsSet{
			Min: 10, Max: maxI, SampleCount: 2, Sum: maxI, OverflowSum: 10}},
		{"sum saturates", []uint64{math.MaxUint64, math.MaxUint64}, &tcswire.ULongStatsSet{
			Min: maxI, OverflowMin: maxI, Max: maxI, OverflowMax: maxI, SampleCount: 2, Sum: maxI, OverflowSum: maxI}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tcswire.ULongStats(tc.samples...))
		})
	}
}

func TestCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cpu, wall time.Duration
		units     int64
		want      float64
	}{
		{"one busy core, one vCPU", time.Second, time.Second, 1024, 100},
		{"one busy core, half a vCPU", time.Second, time.Second, 512, 200},
		{"half a core, two vCPUs", time.Second / 2, time.Second, 2048, 25},
		{"no reservation means one vCPU", 2 * time.Second, 4 * time.Second, 0, 50},
		{"idle", 0, time.Second, 256, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, tcswire.CPUPercent(tc.cpu, tc.wall, tc.units), 1e-9)
		})
	}
	assert.True(t, math.IsNaN(tcswire.CPUPercent(time.Second, 0, 1024)))
}

func TestWindow(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	w := tcswire.NewWindow(512)
	_, ok := w.Take("app")
	assert.False(t, ok, "no sample yet")

	net := func(rx, tx uint64) *tcswire.NetworkCounters {
		return &tcswire.NetworkCounters{RxBytes: rx, TxBytes: tx, RxPackets: rx / 100}
	}
	w.Add(tcswire.Sample{Read: t0, CPUTime: 0, MemoryBytes: 64 << 20, Network: net(1000, 500), StorageReadBytes: 10})
	w.Add(tcswire.Sample{Read: t0.Add(time.Second), CPUTime: time.Second / 2, MemoryBytes: 128 << 20, Network: net(3000, 500), StorageReadBytes: 30})
	w.Add(tcswire.Sample{Read: t0.Add(time.Second), CPUTime: time.Second, MemoryBytes: 1 << 30}) // not later: ignored
	w.Add(tcswire.Sample{Read: t0.Add(3 * time.Second), CPUTime: time.Second / 2, MemoryBytes: 96 << 20, Network: net(7000, 1500), StorageReadBytes: 30})

	m, ok := w.Take("app")
	require.True(t, ok)
	assert.Equal(t, "app", m.ContainerName)
	// 0.5 s of CPU in 1 s on 512 units (half a vCPU) is 100 %; then nothing for 2 s.
	assert.Equal(t, &tcswire.CWStatsSet{Min: 0, Max: 100, SampleCount: 2, Sum: 100}, m.CPUStatsSet)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 64, Max: 128, SampleCount: 3, Sum: 288}, m.MemoryStatsSet)
	require.NotNil(t, m.NetworkStatsSet)
	assert.Equal(t, &tcswire.ULongStatsSet{Min: 1000, Max: 7000, SampleCount: 3, Sum: 11000}, m.NetworkStatsSet.RxBytes)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 2000, Max: 2000, SampleCount: 2, Sum: 4000}, m.NetworkStatsSet.RxBytesPerSecond)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 0, Max: 500, SampleCount: 2, Sum: 500}, m.NetworkStatsSet.TxBytesPerSecond)
	assert.Equal(t, &tcswire.ULongStatsSet{Min: 10, Max: 30, SampleCount: 3, Sum: 70}, m.StorageStatsSet.ReadSizeBytes)

	// The next interval starts empty but rates continue from the last sample.
	_, ok = w.Take("app")
	assert.False(t, ok)
	w.Add(tcswire.Sample{Read: t0.Add(4 * time.Second), CPUTime: time.Second, MemoryBytes: 64 << 20})
	m, ok = w.Take("app")
	require.True(t, ok)
	assert.Equal(t, &tcswire.CWStatsSet{Min: 100, Max: 100, SampleCount: 1, Sum: 100}, m.CPUStatsSet)
	assert.Nil(t, m.NetworkStatsSet, "no network in this interval")
}

func TestMessageJSONFieldNames(t *testing.T) {
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
			"storageStatsSet":{"writeSizeBytes":{"min":4,"max":4,"sampleCount":1,"sum":4,"overflowMin":0,"overflowMax":0,"overflowSum":0}}
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

func TestParseFrame(t *testing.T) {
	h, body, err := tcswire.ParseFrame([]byte("Authorization: AWS4-HMAC-SHA256 Credential=AKID/20240101/us-west-2/ecs/aws4_request, SignedHeaders=host;x-amz-date, Signature=ab\r\nHost: h:1\r\nX-Amz-Date: 20240101T000000Z\r\n\r\n{\"a\":1}"))
	require.NoError(t, err)
	assert.Equal(t, "AKID", tcswire.AccessKeyID(h.Get("Authorization")))
	assert.Equal(t, "h:1", h.Get("Host"))
	assert.JSONEq(t, `{"a":1}`, string(body))
	assert.True(t, json.Valid(body))

	_, _, err = tcswire.ParseFrame([]byte(`{"type":"PublishMetricsRequest"}`))
	assert.ErrorIs(t, err, wire.ErrMalformedFrame)
	assert.Empty(t, tcswire.AccessKeyID("Bearer x"))
}

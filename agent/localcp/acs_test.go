package localcp

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type acsClient struct {
	t  *testing.T
	ws *websocket.Conn
}

// dialACS connects as the agent of instance ci does: to the discovered endpoint joined with "ws".
func dialACS(t *testing.T, ts *httptest.Server, ci string) *acsClient {
	t.Helper()
	q := url.Values{
		"clusterArn":           {"default"},
		"containerInstanceArn": {ci},
		"agentVersion":         {"0.1.0"},
		"seqNum":               {"1"},
		"protocolVersion":      {"2"},
		"sendCredentials":      {"true"},
	}
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws?" + q.Encode()
	ws, resp, err := websocket.DefaultDialer.Dial(u, map[string][]string{
		"Authorization": {"AWS4-HMAC-SHA256 Credential=x/20250301/us-east-1/ecs/aws4_request, SignedHeaders=host, Signature=abc"},
	})
	require.NoError(t, err)
	_ = resp.Body.Close()
	c := &acsClient{t: t, ws: ws}
	t.Cleanup(func() { _ = ws.Close() })
	return c
}

// read returns the next frame, failing the test after a deadline.
func (c *acsClient) read() (string, json.RawMessage) {
	c.t.Helper()
	require.NoError(c.t, c.ws.SetReadDeadline(time.Now().Add(10*time.Second)))
	var f acsFrame
	require.NoError(c.t, c.ws.ReadJSON(&f))
	return f.Type, f.Message
}

func (c *acsClient) payload() acsPayloadMessage {
	c.t.Helper()
	typ, msg := c.read()
	require.Equal(c.t, "PayloadMessage", typ, "%s", msg)
	var p acsPayloadMessage
	require.NoError(c.t, json.Unmarshal(msg, &p))
	return p
}

func (c *acsClient) send(typ string, msg any) {
	c.t.Helper()
	b, err := json.Marshal(msg)
	require.NoError(c.t, err)
	require.NoError(c.t, c.ws.WriteJSON(acsFrame{Type: typ, Message: b}))
}

func (c *acsClient) ack(p acsPayloadMessage) {
	c.t.Helper()
	c.send("AckRequest", acs.AckRequest{Cluster: p.ClusterArn, ContainerInstance: p.ContainerInstanceArn, MessageID: p.MessageID})
}

func TestACS(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)

	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", webRequest(t))
	h.ok("RegisterTaskDefinition", sleepDef)
	before := at(t, h.ok("RunTask", `{"taskDefinition":"web"}`), "tasks", 0, "taskArn").(string)

	agent := dialACS(t, ts, ci)
	p := agent.payload()
	assert.Equal(t, ci, p.ContainerInstanceArn)
	assert.Equal(t, "arn:aws:ecs:local:000000000000:cluster/default", p.ClusterArn)
	assert.NotEmpty(t, p.MessageID)
	assert.EqualValues(t, 1, p.SeqNum)
	require.Len(t, p.Tasks, 1)
	web := p.Tasks[0]
	assert.Equal(t, before, web.Arn)
	assert.Equal(t, "web", web.Family)
	assert.Equal(t, "1", web.Version)
	assert.Equal(t, "RUNNING", web.DesiredStatus)
	assert.Equal(t, "bridge", web.NetworkMode)
	assert.InDelta(t, 0.25, web.CPU, 1e-9)
	assert.Equal(t, 512, web.Memory)
	require.Len(t, web.Containers, 2)
	c0, c1 := web.Containers[0], web.Containers[1]
	assert.Equal(t, "web", c0.Name)
	assert.Equal(t, map[string]string{"TESTAPP_NAME": "berth-example"}, c0.Environment)
	assert.Equal(t, []acsPortMapping{{ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}}, c0.PortMappings)
	assert.Equal(t, "docker", c0.HealthCheckType)
	var cfg dockerConfig
	require.NoError(t, json.Unmarshal([]byte(c0.DockerConfig.Config), &cfg))
	require.NotNil(t, cfg.Healthcheck)
	assert.Equal(t, []string{"CMD", "/testapp", "health", "-url", "http://127.0.0.1:8080/health"}, cfg.Healthcheck.Test)
	assert.Equal(t, 5*time.Second, cfg.Healthcheck.Interval)
	assert.Equal(t, 2*time.Second, cfg.Healthcheck.Timeout)
	assert.Equal(t, 3, cfg.Healthcheck.Retries)
	assert.False(t, c1.Essential)
	assert.Equal(t, []acs.ContainerDependency{{ContainerName: "web", Condition: "HEALTHY"}}, c1.DependsOn)
	assert.Equal(t, []string{"sleep"}, c1.Command)

	// Connected now: DescribeContainerInstances says so.
	out := h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.Equal(t, true, at(t, out, "containerInstances", 0, "agentConnected"))

	// A task run while connected arrives at once, with overrides applied.
	after := at(t, h.ok("RunTask", `{"taskDefinition":"sleep","overrides":{"containerOverrides":[
		{"name":"app","command":["sleep","5"],"environment":[{"name":"A","value":"2"},{"name":"B","value":"3"}]}]}}`), "tasks", 0, "taskArn").(string)
	p2 := agent.payload()
	assert.Greater(t, p2.SeqNum, p.SeqNum)
	require.Len(t, p2.Tasks, 1)
	assert.Equal(t, after, p2.Tasks[0].Arn)
	assert.Equal(t, []string{"sleep", "5"}, p2.Tasks[0].Containers[0].Command)
	assert.Equal(t, map[string]string{"A": "2", "B": "3"}, p2.Tasks[0].Containers[0].Environment)
	agent.ack(p)
	agent.ack(p2)

	// Heartbeats come on the clock's timer and are acked.
	h.clock.ticks <- h.clock.Now()
	typ, msg := agent.read()
	require.Equal(t, "HeartbeatMessage", typ)
	var hb acs.HeartbeatMessage
	require.NoError(t, json.Unmarshal(msg, &hb))
	assert.True(t, hb.Healthy)
	agent.send("HeartbeatAckRequest", map[string]string{"messageId": hb.MessageID})

	// StopTask sends the new desired status.
	h.ok("StopTask", mustJSON(map[string]any{"task": before, "reason": "test"}))
	p3 := agent.payload()
	require.Len(t, p3.Tasks, 1)
	assert.Equal(t, before, p3.Tasks[0].Arn)
	assert.Equal(t, "STOPPED", p3.Tasks[0].DesiredStatus)
	assert.Greater(t, p3.SeqNum, p2.SeqNum)

	// Not acked: a new connection gets it again, and only it. The old connection is closed.
	agent2 := dialACS(t, ts, ci)
	p4 := agent2.payload()
	require.Len(t, p4.Tasks, 1)
	assert.Equal(t, before, p4.Tasks[0].Arn)
	assert.Equal(t, "STOPPED", p4.Tasks[0].DesiredStatus)
	assert.Greater(t, p4.SeqNum, p3.SeqNum)
	require.NoError(t, agent.ws.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, _, err := agent.ws.ReadMessage()
	require.Error(t, err, "the replaced connection is closed")

	// After a restart of the control plane, un-acked payloads are still resent and seqNum keeps growing.
	ts.Close()
	h.restart()
	ts = httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	agent3 := dialACS(t, ts, ci)
	p5 := agent3.payload()
	require.Len(t, p5.Tasks, 1)
	assert.Equal(t, before, p5.Tasks[0].Arn)
	assert.Greater(t, p5.SeqNum, p4.SeqNum)
	agent3.ack(p5)

	// Once acked, reconnecting resends nothing: the next payload carries only a new task.
	agent4 := dialACS(t, ts, ci)
	next := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	p6 := agent4.payload()
	require.Len(t, p6.Tasks, 1)
	assert.Equal(t, next, p6.Tasks[0].Arn)
}

func TestACSUnknownInstance(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	agent := dialACS(t, ts, "arn:aws:ecs:local:000000000000:container-instance/default/nope")
	typ, _ := agent.read()
	assert.Equal(t, "InvalidInstanceException", typ)
}

func TestACSTaskPlacedWhenInstanceRegisters(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	ci := registerInstance(t, h)
	agent := dialACS(t, ts, ci)
	p := agent.payload()
	require.Len(t, p.Tasks, 1)
	assert.Equal(t, arn, p.Tasks[0].Arn)
	out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}}))
	assert.Equal(t, ci, at(t, out, "tasks", 0, "containerInstanceArn"))
}

package localcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/task"
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
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/ws?"+q.Encode(), signedUpgrade(t, ts.URL+"/ws?"+q.Encode(), testKeys))
	require.NoError(t, err)
	_ = resp.Body.Close()
	c := &acsClient{t: t, ws: ws}
	t.Cleanup(func() { _ = ws.Close() })
	return c
}

// signedUpgrade returns the headers of a websocket upgrade to u signed with keys, as the agent's ACS
// client signs it.
func signedUpgrade(t *testing.T, u string, keys localauth.Keys) http.Header {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	require.NoError(t, localauth.Sign(t.Context(), req, nil, keys, "us-east-1", time.Now()))
	return req.Header
}

// readRaw returns the bytes of the next frame, failing the test after a deadline.
func (c *acsClient) readRaw() []byte {
	c.t.Helper()
	require.NoError(c.t, c.ws.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, b, err := c.ws.ReadMessage()
	require.NoError(c.t, err)
	return b
}

// read returns the next frame as the agent's ACS client decodes it.
func (c *acsClient) read() acswire.Message {
	c.t.Helper()
	b := c.readRaw()
	m, err := acswire.Decode(b)
	require.NoError(c.t, err, "%s", b)
	return m
}

func (c *acsClient) payload() *acswire.PayloadMessage {
	c.t.Helper()
	m := c.read()
	p, ok := m.(*acswire.PayloadMessage)
	require.True(c.t, ok, "want a PayloadMessage, got %T", m)
	return p
}

// send writes a frame as the agent's ACS client encodes it.
func (c *acsClient) send(m acswire.Message) {
	c.t.Helper()
	b, err := acswire.Encode(m)
	require.NoError(c.t, err)
	c.sendRaw(string(b))
}

// sendRaw writes a text frame as is, well-formed or not.
func (c *acsClient) sendRaw(frame string) {
	c.t.Helper()
	require.NoError(c.t, c.ws.WriteMessage(websocket.TextMessage, []byte(frame)))
}

func (c *acsClient) ack(p *acswire.PayloadMessage) {
	c.t.Helper()
	c.send(&acswire.AckRequest{Cluster: p.ClusterArn, ContainerInstance: p.ContainerInstanceArn, MessageID: p.MessageID})
}

// waitAcked waits until the control plane has recorded the agent's ack of a task's desired status:
// acks are read asynchronously, and a connection opened before would be sent the task again.
func waitAcked(t *testing.T, h *harness, arn string, desired task.TaskStatus) {
	t.Helper()
	require.Eventually(t, func() bool {
		var rec taskRecord
		err := h.srv.db.View(func(tx *bolt.Tx) error { return get(tx, bucketTasks, arn, &rec) })
		return err == nil && rec.AckedDesired >= desired
	}, 10*time.Second, 5*time.Millisecond, "the ack of %s is recorded", arn)
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
	assert.EqualValues(t, 512, web.Memory)
	require.Len(t, web.Containers, 2)
	c0, c1 := web.Containers[0], web.Containers[1]
	assert.Equal(t, "web", c0.Name)
	assert.Equal(t, map[string]string{"TESTAPP_NAME": "berth-example"}, c0.Environment)
	assert.Equal(t, []acswire.PortMapping{{ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}}, c0.PortMappings)
	assert.Equal(t, "docker", c0.HealthCheckType)
	var cfg acstranslate.DockerContainerConfig
	require.NoError(t, json.Unmarshal([]byte(c0.DockerConfig.Config), &cfg))
	require.NotNil(t, cfg.Healthcheck)
	assert.Equal(t, []string{"CMD", "/testapp", "health", "-url", "http://127.0.0.1:8080/health"}, cfg.Healthcheck.Test)
	assert.Equal(t, int64(5*time.Second), cfg.Healthcheck.Interval)
	assert.Equal(t, int64(2*time.Second), cfg.Healthcheck.Timeout)
	assert.Equal(t, 3, cfg.Healthcheck.Retries)
	require.NotNil(t, c1.Essential)
	assert.False(t, *c1.Essential)
	assert.Equal(t, []acswire.ContainerDependency{{ContainerName: "web", Condition: "HEALTHY"}}, c1.DependsOn)
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
	// Frames the control plane cannot read, or does not know, are skipped; the acks behind them count
	// (the new connection below is sent only what was not acked).
	agent.sendRaw(`{"type":"NoSuchMessage","message":{}}`)
	agent.sendRaw(`not a frame`)
	agent.sendRaw(`{"type":"AckRequest","message":{"messageId":7}}`)
	agent.ack(p)
	agent.ack(p2)
	waitAcked(t, h, after, task.TaskRunning)

	// Heartbeats come every interval of the clock and are acked.
	h.heartbeatDue()
	hb, ok := agent.read().(*acswire.HeartbeatMessage)
	require.True(t, ok, "want a HeartbeatMessage")
	assert.True(t, hb.Healthy)
	assert.NotEmpty(t, hb.MessageID)
	agent.send(&acswire.HeartbeatAckRequest{MessageID: hb.MessageID})

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
	waitAcked(t, h, before, task.TaskStopped)

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
	m, ok := agent.read().(*acswire.InvalidInstanceException)
	require.True(t, ok, "want an InvalidInstanceException")
	assert.Contains(t, m.Message, "register it first")
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

// TestRunTaskEnableExecuteCommand: RunTask's enableExecuteCommand is recorded (DescribeTasks shows
// it, false otherwise) and every container of the task gets ECS Exec's managed agent in the ACS
// payload, which the agent's translation accepts.
func TestRunTaskEnableExecuteCommand(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", webRequest(t))
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"web","enableExecuteCommand":true}`), "tasks", 0, "taskArn").(string)
	plain := at(t, h.ok("RunTask", `{"taskDefinition":"web"}`), "tasks", 0, "taskArn").(string)
	described := h.ok("DescribeTasks", `{"tasks":["`+arn+`","`+plain+`"]}`)
	byArn := map[string]any{}
	for i := range 2 {
		byArn[at(t, described, "tasks", i, "taskArn").(string)] = at(t, described, "tasks", i, "enableExecuteCommand")
	}
	assert.Equal(t, map[string]any{arn: true, plain: false}, byArn)

	p := dialACS(t, ts, ci).payload()
	require.Len(t, p.Tasks, 2)
	for _, tk := range p.Tasks {
		var want []acswire.ManagedAgent
		if tk.Arn == arn {
			want = []acswire.ManagedAgent{{Name: "ExecuteCommandAgent"}}
		}
		for _, c := range tk.Containers {
			assert.Equal(t, want, c.ManagedAgents, "%s %s", tk.Arn, c.Name)
		}
		accepted, err := acstranslate.TranslateTask(tk)
		require.NoError(t, err)
		if tk.Arn == arn {
			assert.Equal(t, task.ManagedAgentPending, accepted.Task.Containers[0].ManagedAgent(task.ExecuteCommandAgent).Status)
		}
	}
}

// TestManagedAgentStatesShownByDescribeTasks: DescribeTasks shows each container's ECS Exec agent as
// ECS does: PENDING from RunTask, then the status and reason of the agent's task state changes, with
// lastStartedAt when it was reported RUNNING; reports of agents or containers the task does not
// have change nothing.
func TestManagedAgentStatesShownByDescribeTasks(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", webRequest(t))
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"web","enableExecuteCommand":true}`), "tasks", 0, "taskArn").(string)
	agents := func() any {
		return at(t, h.ok("DescribeTasks", `{"tasks":["`+arn+`"]}`), "tasks", 0, "containers", 0, "managedAgents")
	}
	assert.Equal(t, []any{map[string]any{"name": "ExecuteCommandAgent", "lastStatus": "PENDING"}}, agents())

	started := h.clock.Now()
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": arn, "status": "RUNNING", "managedAgents": []any{
		map[string]any{"containerName": "web", "managedAgentName": "ExecuteCommandAgent", "status": "RUNNING"},
		map[string]any{"containerName": "web", "managedAgentName": "SomeOtherAgent", "status": "RUNNING"},
		map[string]any{"containerName": "nobody", "managedAgentName": "ExecuteCommandAgent", "status": "RUNNING"},
	}}))
	assert.Equal(t, []any{map[string]any{"name": "ExecuteCommandAgent", "lastStatus": "RUNNING",
		"lastStartedAt": float64(started.Unix())}}, agents())

	h.clock.Advance(time.Minute)
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": arn, "status": "RUNNING", "managedAgents": []any{
		map[string]any{"containerName": "web", "managedAgentName": "ExecuteCommandAgent", "status": "STOPPED", "reason": "gave up"},
	}}))
	assert.Equal(t, []any{map[string]any{"name": "ExecuteCommandAgent", "lastStatus": "STOPPED", "reason": "gave up",
		"lastStartedAt": float64(started.Unix())}}, agents())
}

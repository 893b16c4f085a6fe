package taskendpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// fakeFaults is a FaultInjector that records what it is asked and answers what it is told.
type fakeFaults struct {
	mu         sync.Mutex
	calls      []string
	blackholes []taskendpoint.BlackholePort
	netems     []taskendpoint.Netem
	err        error
	running    bool
	latency    bool
	loss       bool
}

var _ taskendpoint.FaultInjector = (*fakeFaults)(nil)

func (f *fakeFaults) note(call string, t *task.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+t.Arn)
}

func (f *fakeFaults) StartBlackholePort(_ context.Context, t *task.Task, bh taskendpoint.BlackholePort) error {
	f.note("start-blackhole", t)
	f.blackholes = append(f.blackholes, bh)
	return f.err
}

func (f *fakeFaults) StopBlackholePort(_ context.Context, t *task.Task, bh taskendpoint.BlackholePort) error {
	f.note("stop-blackhole", t)
	f.blackholes = append(f.blackholes, bh)
	return f.err
}

func (f *fakeFaults) BlackholePortRunning(_ context.Context, t *task.Task, bh taskendpoint.BlackholePort) (bool, error) {
	f.note("check-blackhole", t)
	f.blackholes = append(f.blackholes, bh)
	return f.running, f.err
}

func (f *fakeFaults) StartNetem(_ context.Context, t *task.Task, n taskendpoint.Netem) error {
	f.note("start-"+string(n.Kind), t)
	f.netems = append(f.netems, n)
	return f.err
}

func (f *fakeFaults) StopNetem(_ context.Context, t *task.Task, kind taskendpoint.NetemKind) error {
	f.note("stop-"+string(kind), t)
	return f.err
}

func (f *fakeFaults) NetemRunning(_ context.Context, t *task.Task) (bool, bool, error) {
	f.note("check-netem", t)
	return f.latency, f.loss, f.err
}

const (
	chaosARN = "arn:aws:ecs:us-west-2:012345678901:task/default/chaos"
	plainARN = "arn:aws:ecs:us-west-2:012345678901:task/default/plain"
	chaosSrc = "169.254.172.9:40000" // the chaos tasks' task-bridge address
	hostSrc  = "10.0.0.5:40000"      // the host's
)

type faultEnv struct {
	h      *taskendpoint.Handler
	faults *fakeFaults
	clock  *clockwork.FakeClock
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	awsvpc := func(arn string, enabled bool) *task.Task {
		return &task.Task{Arn: arn, Family: "chaos", NetworkMode: task.NetworkAWSVPC, EnableFaultInjection: enabled,
			AWSVPC: &task.AWSVPC{NetNS: "/proc/4242/ns/net", BridgeIPv4: "169.254.172.9"}, Containers: []*task.Container{{Name: "app"}}}
	}
	host := &task.Task{Arn: chaosARN + "-host", NetworkMode: task.NetworkHost, EnableFaultInjection: true,
		Containers: []*task.Container{{Name: "app"}}}
	bridge := &task.Task{Arn: chaosARN + "-bridge", NetworkMode: task.NetworkBridge, EnableFaultInjection: true,
		Containers: []*task.Container{{Name: "app"}}}
	notUp := awsvpc(chaosARN+"-pending", true)
	notUp.AWSVPC = nil
	tasks := &fakeTasks{tokens: map[string]held{
		"tok-chaos": {awsvpc(chaosARN, true), "app"}, "tok-plain": {awsvpc(plainARN, false), "app"},
		"tok-host": {host, "app"}, "tok-bridge": {bridge, "app"}, "tok-pending": {notUp, "app"},
	}}
	faults := &fakeFaults{}
	clock := clockwork.NewFakeClockAt(at(0))
	isHost := func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.5") }
	h, err := taskendpoint.New(taskendpoint.Config{Tasks: tasks, Faults: faults, Clock: clock, HostAddress: isHost})
	require.NoError(t, err)
	return &faultEnv{h: h, faults: faults, clock: clock}
}

func (e *faultEnv) post(path, body string) *httptest.ResponseRecorder {
	return e.send(http.MethodPost, path, body, chaosSrc)
}

func (e *faultEnv) send(method, path, body, from string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://169.254.170.2"+path, strings.NewReader(body))
	req.RemoteAddr = from
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func assertAnswer(t *testing.T, rec *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	assert.Equal(t, status, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, body, rec.Body.String())
}

const blackholeBody = `{"Port": 8080, "Protocol": "tcp", "TrafficType": "ingress"}`

// The answers of every route to a request that is good, as the ECS agent words them, and what the
// injector is asked.
func TestFaultRoutesAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		setup            func(*fakeFaults)
		status           int
		answer, call     string
	}{
		{"blackhole start", "network-blackhole-port/start", blackholeBody, nil, 200, `{"Status":"running"}`, "start-blackhole"},
		{"blackhole stop", "network-blackhole-port/stop", blackholeBody, nil, 200, `{"Status":"stopped"}`, "stop-blackhole"},
		{"blackhole status running", "network-blackhole-port/status", blackholeBody, func(f *fakeFaults) { f.running = true }, 200, `{"Status":"running"}`, "check-blackhole"},
		{"blackhole status not running", "network-blackhole-port/status", blackholeBody, nil, 200, `{"Status":"not-running"}`, "check-blackhole"},
		{"latency start", "network-latency/start", `{"DelayMilliseconds":100,"JitterMilliseconds":0,"Sources":["10.0.0.0/8"]}`, nil, 200, `{"Status":"running"}`, "start-network-latency"},
		{"latency stop without a body", "network-latency/stop", "", nil, 200, `{"Status":"stopped"}`, "stop-network-latency"},
		{"latency status", "network-latency/status", "", func(f *fakeFaults) { f.latency = true }, 200, `{"Status":"running"}`, "check-netem"},
		{"latency status while loss runs", "network-latency/status", "", func(f *fakeFaults) { f.loss = true }, 200, `{"Status":"not-running"}`, "check-netem"},
		{"loss start", "network-packet-loss/start", `{"LossPercent":10,"Sources":["10.0.0.1"]}`, nil, 200, `{"Status":"running"}`, "start-network-packet-loss"},
		{"loss stop", "network-packet-loss/stop", "ignored", nil, 200, `{"Status":"stopped"}`, "stop-network-packet-loss"},
		{"loss status", "network-packet-loss/status", "", func(f *fakeFaults) { f.loss = true }, 200, `{"Status":"running"}`, "check-netem"},
		{"a second latency fault", "network-latency/start", `{"DelayMilliseconds":1,"JitterMilliseconds":1,"Sources":["10.0.0.1"]}`,
			func(f *fakeFaults) { f.err = taskendpoint.ErrLatencyRunning }, 409, `{"Error":"There is already one network latency fault running"}`, "start-network-latency"},
		{"loss while packet loss runs", "network-packet-loss/start", `{"LossPercent":1,"Sources":["10.0.0.1"]}`,
			func(f *fakeFaults) { f.err = taskendpoint.ErrPacketLossRunning }, 409, `{"Error":"There is already one network packet loss fault running"}`, "start-network-packet-loss"},
		{"tc fails (no netem)", "network-latency/start", `{"DelayMilliseconds":1,"JitterMilliseconds":1,"Sources":["10.0.0.1"]}`,
			func(f *fakeFaults) { f.err = errors.New("tc: exit status 2: Error: Specified qdisc kind is unknown.") }, 500, `{"Error":"internal error"}`, "start-network-latency"},
		{"iptables times out", "network-blackhole-port/start", blackholeBody,
			func(f *fakeFaults) { f.err = fmt.Errorf("iptables: %w", context.DeadlineExceeded) }, 500, `{"Error":"start network-blackhole-port: request timed out"}`, "start-blackhole"},
		{"the host's interface is not found", "network-latency/status", "",
			func(f *fakeFaults) { f.err = fmt.Errorf("no IPv4 default route: %w", taskendpoint.ErrNoFaultTarget) }, 500,
			`{"Error":"failed to get task metadata due to internal server error for container: tok-chaos"}`, "check-netem"},
		{"status times out", "network-packet-loss/status", "",
			func(f *fakeFaults) { f.err = context.DeadlineExceeded }, 500, `{"Error":"check status network-packet-loss: request timed out"}`, "check-netem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t)
			if tc.setup != nil {
				tc.setup(e.faults)
			}
			assertAnswer(t, e.post("/api/tok-chaos/fault/v1/"+tc.path, tc.body), tc.status, tc.answer)
			assert.Equal(t, []string{tc.call + " " + chaosARN}, e.faults.calls)
		})
	}
}

// The request reaches the injector as it was sent, with the task endpoint's address added to an
// egress black hole of port 80 (once), and FlowsPercent defaulting to 100.
func TestFaultRequestsDecoded(t *testing.T) {
	e := newFaultEnv(t)
	e.post("/api/tok-chaos/fault/v1/network-blackhole-port/start", `{"Port":443,"Protocol":"udp","TrafficType":"egress","SourcesToFilter":["10.1.0.0/16"]}`)
	e.send(http.MethodPost, "/api/tok-host/fault/v1/network-blackhole-port/start", `{"Port":80,"Protocol":"tcp","TrafficType":"egress","SourcesToFilter":["fd00::/8"]}`, "10.0.0.5:1")
	e.post("/api/tok-chaos/fault/v1/network-blackhole-port/stop", `{"Port":80,"Protocol":"tcp","TrafficType":"egress","SourcesToFilter":["169.254.170.2"]}`)
	e.post("/api/tok-chaos/fault/v1/network-blackhole-port/status", `{"Port":80,"Protocol":"tcp","TrafficType":"ingress"}`)
	assert.Equal(t, []taskendpoint.BlackholePort{
		{Port: 443, Protocol: "udp", TrafficType: "egress", SourcesToFilter: []string{"10.1.0.0/16"}},
		{Port: 80, Protocol: "tcp", TrafficType: "egress", SourcesToFilter: []string{"fd00::/8", "169.254.170.2"}},
		{Port: 80, Protocol: "tcp", TrafficType: "egress", SourcesToFilter: []string{"169.254.170.2"}},
		{Port: 80, Protocol: "tcp", TrafficType: "ingress", SourcesToFilter: []string{}},
	}, e.faults.blackholes)

	e.post("/api/tok-chaos/fault/v1/network-latency/start", `{"DelayMilliseconds":0,"JitterMilliseconds":30,"Sources":["10.0.0.1","::1"],"SourcesToFilter":["10.0.0.2"],"FlowsPercent":40}`)
	e.post("/api/tok-chaos/fault/v1/network-packet-loss/start", `{"LossPercent":100,"Sources":["0.0.0.0/0"]}`)
	assert.Equal(t, []taskendpoint.Netem{
		{Kind: taskendpoint.NetemLatency, JitterMilliseconds: 30, Sources: []string{"10.0.0.1", "::1"}, SourcesToFilter: []string{"10.0.0.2"}, FlowsPercent: 40},
		{Kind: taskendpoint.NetemPacketLoss, LossPercent: 100, Sources: []string{"0.0.0.0/0"}, SourcesToFilter: []string{}, FlowsPercent: 100},
	}, e.faults.netems)
}

// Bad bodies are refused 400 with the ECS agent's words (Go's JSON errors among them, which name
// the ECS agent's request types), before the task is looked at and before the injector is asked.
func TestFaultRequestValidation(t *testing.T) {
	const (
		bh      = "network-blackhole-port/start"
		latency = "network-latency/start"
		loss    = "network-packet-loss/start"
	)
	for _, tc := range []struct{ path, body, answer string }{
		{bh, "", "required request body is missing"},
		{"network-blackhole-port/status", "  ", "required request body is missing"},
		{bh, "not json", "invalid character 'o' in literal null (expecting 'u')"},
		{bh, `{}`, "required parameter Port is missing"},
		{bh, `{"Port":80}`, "required parameter Protocol is missing"},
		{bh, `{"Port":80,"Protocol":""}`, "required parameter Protocol is missing"},
		{bh, `{"Port":80,"Protocol":"tcp"}`, "required parameter TrafficType is missing"},
		{bh, `{"Port":80,"Protocol":"icmp","TrafficType":"ingress"}`, "invalid value icmp for parameter Protocol"},
		{bh, `{"Port":80,"Protocol":"tcp","TrafficType":"both"}`, "invalid value both for parameter TrafficType"},
		{bh, `{"Port":80,"Protocol":"tcp","TrafficType":"ingress","SourcesToFilter":["10.0.0.0/33"]}`, "invalid value 10.0.0.0/33 for parameter SourcesToFilter"},
		{bh, `{"Port":80,"Protocol":"tcp","TrafficType":"ingress","SourcesToFilter":[null]}`, "invalid value  for parameter SourcesToFilter"},
		{bh, `{"Port":70000,"Protocol":"tcp","TrafficType":"ingress"}`, "json: cannot unmarshal number 70000 into Go struct field NetworkBlackholePortRequest.Port of type uint16"},
		{bh, `{"Port":"80","Protocol":"tcp","TrafficType":"ingress"}`, "json: cannot unmarshal string into Go struct field NetworkBlackholePortRequest.Port of type uint16"},
		{latency, `{}`, "required parameter DelayMilliseconds is missing"},
		{latency, `{"DelayMilliseconds":10}`, "required parameter JitterMilliseconds is missing"},
		{latency, `{"DelayMilliseconds":0,"JitterMilliseconds":0,"Sources":["10.0.0.1"]}`, "required either DelayMilliseconds or JitterMilliseconds to be non-zero"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0}`, "required parameter Sources is missing"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":[]}`, "required parameter Sources is missing"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":["example.com"]}`, "invalid value example.com for parameter Sources"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":["10.0.0.1"],"SourcesToFilter":["1.2.3"]}`, "invalid value 1.2.3 for parameter SourcesToFilter"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":["10.0.0.1"],"FlowsPercent":0}`, "invalid value 0 for parameter flowsPercent"},
		{latency, `{"DelayMilliseconds":10,"JitterMilliseconds":0,"Sources":["10.0.0.1"],"FlowsPercent":101}`, "invalid value 101 for parameter flowsPercent"},
		{latency, `{"DelayMilliseconds":-1,"JitterMilliseconds":0,"Sources":["10.0.0.1"]}`, "json: cannot unmarshal number -1 into Go struct field NetworkLatencyRequest.DelayMilliseconds of type uint64"},
		{loss, `{}`, "required parameter LossPercent is missing"},
		{loss, `{"LossPercent":0,"Sources":["10.0.0.1"]}`, "invalid value 0 for parameter LossPercent"},
		{loss, `{"LossPercent":101,"Sources":["10.0.0.1"]}`, "invalid value 101 for parameter LossPercent"},
		{loss, `{"LossPercent":5}`, "required parameter Sources is missing"},
		{loss, `{"LossPercent":5,"Sources":["10.0.0.1"],"FlowsPercent":-3}`, "invalid value -3 for parameter flowsPercent"},
	} {
		t.Run(tc.path+" "+tc.body, func(t *testing.T) {
			e := newFaultEnv(t)
			assertAnswer(t, e.post("/api/tok-nobody/fault/v1/"+tc.path, tc.body), http.StatusBadRequest, fmt.Sprintf(`{"Error":%q}`, tc.answer))
			assert.Empty(t, e.faults.calls)
		})
	}
}

// Unknown fields, and what follows the first JSON value, are ignored, as by the ECS agent's decoder.
func TestFaultRequestLeniency(t *testing.T) {
	e := newFaultEnv(t)
	rec := e.post("/api/tok-chaos/fault/v1/network-blackhole-port/start", `{"Port":80,"Protocol":"tcp","TrafficType":"ingress","Extra":true} trailing`)
	assertAnswer(t, rec, http.StatusOK, `{"Status":"running"}`)
}

// A task's token is answered only to the task's own addresses and the host's: another task's
// container that learned it (another awsvpc task, a bridge container) is told the token is unknown.
func TestFaultTokenOfAnotherTask(t *testing.T) {
	e := newFaultEnv(t)
	const unknown = `{"Error":"unable to get task arn from request: unable to get task Arn from v3 endpoint ID: tok-chaos"}`
	for _, from := range []string{"169.254.172.50:40000", "172.17.0.3:40000", "bogus"} {
		assertAnswer(t, e.send(http.MethodPost, "/api/tok-chaos/fault/v1/network-blackhole-port/start", blackholeBody, from), http.StatusNotFound, unknown)
	}
	assert.Empty(t, e.faults.calls)
	assertAnswer(t, e.send(http.MethodPost, "/api/tok-chaos/fault/v1/network-blackhole-port/start", blackholeBody, hostSrc), http.StatusOK, `{"Status":"running"}`)
}

// Strangers are refused before the injector is asked: a token nobody holds (404), a task without
// enableFaultInjection (400), a network mode faults do not apply to (400), an awsvpc task whose
// namespace is not set up (500), and any other method than POST (405).
func TestFaultRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, method, token string
		status              int
		answer              string
	}{
		{"unknown token", http.MethodPost, "tok-nobody", 404, `{"Error":"unable to get task arn from request: unable to get task Arn from v3 endpoint ID: tok-nobody"}`},
		{"fault injection not enabled", http.MethodPost, "tok-plain", 400, `{"Error":"enableFaultInjection is not enabled for task: ` + plainARN + `"}`},
		{"bridge mode", http.MethodPost, "tok-bridge", 400, `{"Error":"bridge mode is not supported. Please use either host or awsvpc mode."}`},
		{"namespace not set up", http.MethodPost, "tok-pending", 500, `{"Error":"failed to get task metadata due to internal server error for container: tok-pending"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t)
			for _, path := range []string{"network-blackhole-port/status", "network-latency/start", "network-packet-loss/stop"} {
				body := blackholeBody
				if strings.HasPrefix(path, "network-latency") {
					body = `{"DelayMilliseconds":1,"JitterMilliseconds":1,"Sources":["10.0.0.1"]}`
				}
				assertAnswer(t, e.send(tc.method, "/api/"+tc.token+"/fault/v1/"+path, body, hostSrc), tc.status, tc.answer)
			}
			assert.Empty(t, e.faults.calls)
		})
	}
	e := newFaultEnv(t)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		rec := e.send(m, "/api/tok-chaos/fault/v1/network-blackhole-port/start", blackholeBody, chaosSrc)
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, m)
		assert.Equal(t, "POST", rec.Header().Get("Allow"))
		assert.Empty(t, rec.Body.String(), "the ECS agent's router answers 405 without a body")
	}
	// A fault or operation the ECS agent has no route for is 404 whatever the method, as its router
	// answers (seen on the ECS agent v1.105.1).
	for _, path := range []string{"network-foo/start", "network-latency/restart", "network-blackhole-port"} {
		for _, m := range []string{http.MethodPost, http.MethodGet} {
			rec := e.send(m, "/api/tok-chaos/fault/v1/"+path, "{}", chaosSrc)
			assert.Equal(t, http.StatusNotFound, rec.Code, "%s %s", m, path)
			assert.Equal(t, "404 page not found\n", rec.Body.String())
		}
	}
	assert.Empty(t, e.faults.calls)
}

// Each route takes one request per source address every 5 seconds, as the ECS agent's; the others
// and other sources are not held up.
func TestFaultRateLimit(t *testing.T) {
	e := newFaultEnv(t)
	const start = "/api/tok-chaos/fault/v1/network-blackhole-port/start"
	assert.Equal(t, http.StatusOK, e.post(start, blackholeBody).Code)
	rec := e.post(start, blackholeBody)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "You have reached maximum request limit", rec.Body.String())
	assert.Equal(t, http.StatusOK, e.post("/api/tok-chaos/fault/v1/network-blackhole-port/status", blackholeBody).Code)
	assert.Equal(t, http.StatusOK, e.send(http.MethodPost, start, blackholeBody, hostSrc).Code)
	e.clock.Advance(4 * time.Second)
	assert.Equal(t, http.StatusTooManyRequests, e.post(start, blackholeBody).Code)
	e.clock.Advance(time.Second)
	assert.Equal(t, http.StatusOK, e.post(start, blackholeBody).Code)
}

// A body larger than any valid one is refused without being read to its end.
func TestFaultBodyLimit(t *testing.T) {
	e := newFaultEnv(t)
	body := `{"Port":80,"Protocol":"tcp","TrafficType":"ingress","SourcesToFilter":["` + strings.Repeat("1", 1<<20) + `"]}`
	rec := e.post("/api/tok-chaos/fault/v1/network-blackhole-port/start", body)
	assertAnswer(t, rec, http.StatusBadRequest, `{"Error":"http: request body too large"}`)
	assert.Empty(t, e.faults.calls)
}

// v4 task metadata shows the task's own enableFaultInjection, as the ECS agent does (not the host's
// support).
func TestFaultInjectionEnabledInMetadata(t *testing.T) {
	e := newFaultEnv(t)
	for token, want := range map[string]string{"tok-chaos": `"FaultInjectionEnabled":true`, "tok-plain": `"FaultInjectionEnabled":false`} {
		rec := e.send(http.MethodGet, "/v4/"+token+"/task", "", chaosSrc)
		require.Equal(t, http.StatusOK, rec.Code, token)
		assert.Contains(t, rec.Body.String(), want, token)
	}
}

package acs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/wire"
	"github.com/berth-agent/berth/agent/wsclient"
)

const (
	testCluster  = "arn:aws:ecs:us-west-2:123456789012:cluster/default"
	testInstance = "arn:aws:ecs:us-west-2:123456789012:container-instance/default/abc"
	waitFor      = 5 * time.Second
	tick         = 5 * time.Millisecond
)

// fakeACS is a test ACS server. Each accepted connection is handed to the test on conns; the test
// scripts what the server sends and reads what the client sent.
type fakeACS struct {
	t        *testing.T
	srv      *httptest.Server
	upgrader websocket.Upgrader
	conns    chan *serverConn
	status   atomic.Int32 // non-zero: refuse the upgrade with this status

	mu       sync.Mutex
	requests []*http.Request
}

type serverConn struct {
	ws    *websocket.Conn
	query url.Values
	in    chan []byte // frames from the client; closed when the connection ends
}

func newFakeACS(t *testing.T) *fakeACS {
	f := &fakeACS{t: t, conns: make(chan *serverConn, 16)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeACS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(context.Background()))
	f.mu.Unlock()
	if r.URL.Path != "/ws" {
		http.Error(w, "wrong path "+r.URL.Path, http.StatusNotFound)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") ||
		!strings.Contains(r.Header.Get("Authorization"), "/us-west-2/ecs/aws4_request") ||
		r.Header.Get("X-Amz-Date") == "" {
		http.Error(w, "missing SigV4 signature", http.StatusForbidden)
		return
	}
	if err := verifySignature(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if s := f.status.Load(); s != 0 {
		http.Error(w, "refused", int(s))
		return
	}
	ws, err := f.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	sc := &serverConn{ws: ws, query: r.URL.Query(), in: make(chan []byte, 64)}
	go func() {
		defer close(sc.in)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			sc.in <- data
		}
	}()
	f.conns <- sc
}

// verifySignature signs the request the server received again, from scratch, and compares: the
// signature must cover what was actually dialed (host, /ws, the query).
func verifySignature(r *http.Request) error {
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return err
	}
	creds := aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", SessionToken: "token"}
	emptyBody := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(emptyBody[:]), "ecs", "us-west-2", at); err != nil {
		return err
	}
	if got, want := r.Header.Get("Authorization"), req.Header.Get("Authorization"); got != want {
		return fmt.Errorf("signature mismatch:\n got %s\nwant %s", got, want)
	}
	return nil
}

func (f *fakeACS) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// next returns the next connection the client opens.
func (f *fakeACS) next(t *testing.T) *serverConn {
	t.Helper()
	select {
	case c := <-f.conns:
		t.Cleanup(func() { c.ws.Close() })
		return c
	case <-time.After(waitFor):
		t.Fatal("the client did not connect")
		return nil
	}
}

func (c *serverConn) send(t *testing.T, m acswire.Message) {
	t.Helper()
	data, err := acswire.Encode(m)
	require.NoError(t, err)
	c.sendRaw(t, data)
}

func (c *serverConn) sendRaw(t *testing.T, data []byte) {
	t.Helper()
	require.NoError(t, c.ws.WriteMessage(websocket.TextMessage, data))
}

// recv returns the next message the client sent.
func (c *serverConn) recv(t *testing.T) acswire.Message {
	t.Helper()
	select {
	case data, ok := <-c.in:
		require.True(t, ok, "the connection closed")
		m, err := acswire.Decode(data)
		require.NoError(t, err)
		return m
	case <-time.After(waitFor):
		t.Fatal("no message from the client")
		return nil
	}
}

// expectNothing asserts that the client sends nothing for a short while.
func (c *serverConn) expectNothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case data := <-c.in:
		t.Fatalf("unexpected frame from the client: %s", data)
	case <-time.After(d):
	}
}

// fakeHandler records what the client hands it.
type fakeHandler struct {
	mu       sync.Mutex
	payloads []Payload
	creds    []Credentials
	enis     []ENIAttachment
	tasks    map[string]int // task ARN → times seen
	seq      atomic.Int64

	manifests  [][]acswire.TaskIdentifier // the task lists of the manifests handled
	candidates []acswire.TaskIdentifier   // what HandleTaskManifest answers
	stopped    []acswire.TaskIdentifier   // the tasks HandleStopVerification was asked to stop

	block   chan struct{} // when set, HandlePayload waits for it
	entered chan string   // when set, receives each payload's message ID on entry
	fail    atomic.Bool   // HandlePayload fails
}

func newFakeHandler() *fakeHandler { return &fakeHandler{tasks: map[string]int{}} }

func (h *fakeHandler) HandlePayload(ctx context.Context, p Payload) error {
	if h.entered != nil {
		h.entered <- p.MessageID
	}
	if h.block != nil {
		select {
		case <-h.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.fail.Load() {
		return errors.New("disk full")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.payloads = append(h.payloads, p)
	for _, a := range p.Tasks {
		h.tasks[a.Task.Arn]++
	}
	h.seq.Store(p.SeqNum)
	return nil
}

func (h *fakeHandler) HandleCredentials(_ context.Context, c Credentials) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.creds = append(h.creds, c)
	return nil
}

func (h *fakeHandler) HandleENIAttachment(_ context.Context, a ENIAttachment) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enis = append(h.enis, a)
	return nil
}

func (h *fakeHandler) SeqNum() int64 { return h.seq.Load() }

func (h *fakeHandler) HandleTaskManifest(_ context.Context, tasks []acswire.TaskIdentifier) ([]acswire.TaskIdentifier, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.manifests = append(h.manifests, tasks)
	return h.candidates, nil
}

func (h *fakeHandler) HandleStopVerification(_ context.Context, tasks []acswire.TaskIdentifier) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = append(h.stopped, tasks...)
	return nil
}

func (h *fakeHandler) payloadCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.payloads)
}

// fakeClock is clockwork's fake clock that also records every wait asked of it.
type fakeClock struct {
	*clockwork.FakeClock
	mu    sync.Mutex
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{FakeClock: clockwork.NewFakeClock()} }

// NewTimer records d and starts a fake timer.
func (c *fakeClock) NewTimer(d time.Duration) clockwork.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return c.FakeClock.NewTimer(d)
}

func (c *fakeClock) count(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waits {
		if w == d {
			n++
		}
	}
	return n
}

// asked waits until the client has asked for its n-th wait of d.
func (c *fakeClock) asked(t *testing.T, d time.Duration, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.count(d) >= n }, waitFor, time.Millisecond, "no wait of %v asked for", d)
}

func testConfig(f *fakeACS) Config {
	return Config{
		Endpoint:             f.srv.URL + "/",
		Cluster:              testCluster,
		ContainerInstanceArn: testInstance,
		AgentVersion:         "1.2.3",
		AgentHash:            "abcdef",
		DockerVersion:        "27.1.1",
		Region:               "us-west-2",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", SessionToken: "token"}, nil
		}),
		HeartbeatTimeout:  waitFor,
		ReconnectBackoff:  retry.NewExponentialBackoff(time.Millisecond, 5*time.Millisecond, 0, 1.5),
		PeriodicReconnect: -1,
	}
}

// start runs a client until the test ends.
func start(t *testing.T, cfg Config, h Handler) {
	t.Helper()
	c, err := New(cfg, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(waitFor):
			t.Error("Run did not return after its context ended")
		}
	})
}

func payload(id string, seq int64, arns ...string) *acswire.PayloadMessage {
	p := &acswire.PayloadMessage{MessageID: id, ClusterArn: testCluster, ContainerInstanceArn: testInstance, SeqNum: seq}
	for _, arn := range arns {
		p.Tasks = append(p.Tasks, &acswire.Task{Arn: arn, Family: "f", Version: "1", DesiredStatus: "RUNNING",
			Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}}})
	}
	return p
}

func requireAck(t *testing.T, c *serverConn, id string) {
	t.Helper()
	m := c.recv(t)
	ack, ok := m.(*acswire.AckRequest)
	require.True(t, ok, "want AckRequest, got %T", m)
	assert.Equal(t, &acswire.AckRequest{Cluster: testCluster, ContainerInstance: testInstance, MessageID: id}, ack)
}

func TestConnectQueryAndSignature(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	h.seq.Store(41)
	start(t, testConfig(f), h)

	c := f.next(t)
	q := c.query
	assert.Equal(t, testCluster, q.Get("clusterArn"))
	assert.Equal(t, testInstance, q.Get("containerInstanceArn"))
	assert.Equal(t, "abcdef", q.Get("agentHash"))
	assert.Equal(t, "1.2.3", q.Get("agentVersion"))
	assert.Equal(t, "41", q.Get("seqNum"))
	assert.Equal(t, "2", q.Get("protocolVersion"))
	assert.Equal(t, "DockerVersion: 27.1.1", q.Get("dockerVersion"))
	assert.Equal(t, "true", q.Get("sendCredentials"))
	f.mu.Lock()
	req := f.requests[0]
	f.mu.Unlock()
	assert.Equal(t, "token", req.Header.Get("X-Amz-Security-Token"))
}

func TestHeartbeatAcked(t *testing.T) {
	f := newFakeACS(t)
	start(t, testConfig(f), newFakeHandler())
	c := f.next(t)
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb-1", Healthy: true})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb-1"}, c.recv(t))
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb-2", Healthy: true})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb-2"}, c.recv(t))
}

func TestPayloadAckedAfterHandlerReturns(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	h.block = make(chan struct{})
	h.entered = make(chan string, 1)
	start(t, testConfig(f), h)
	c := f.next(t)

	p := payload("p-1", 1, "arn:task/1")
	p.Tasks[0].RoleCredentials = &acswire.IAMRoleCredentials{CredentialsID: "cred-1", AccessKeyID: "A", SecretAccessKey: "S", Expiration: "2030-01-01T00:00:00Z"}
	c.send(t, p)
	select {
	case id := <-h.entered:
		assert.Equal(t, "p-1", id)
	case <-time.After(waitFor):
		t.Fatal("the handler was not called")
	}
	// Heartbeats are still answered while the handler works; the payload is not acked.
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t))
	c.expectNothing(t, 50*time.Millisecond)

	close(h.block)
	requireAck(t, c, "p-1")
	assert.Equal(t, &acswire.IAMRoleCredentialsAckRequest{MessageID: "p-1", CredentialsID: "cred-1", Expiration: "2030-01-01T00:00:00Z"}, c.recv(t))
	require.Equal(t, 1, h.payloadCount())
	assert.Equal(t, "arn:task/1", h.payloads[0].Tasks[0].Task.Arn)
}

func TestPayloadNotAckedWhenHandlerFails(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	h.fail.Store(true)
	start(t, testConfig(f), h)
	c := f.next(t)

	c.send(t, payload("p-1", 1, "arn:task/1"))
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t))
	c.expectNothing(t, 50*time.Millisecond)

	// ACS resends; this time the handler succeeds.
	h.fail.Store(false)
	c.send(t, payload("p-1", 1, "arn:task/1"))
	requireAck(t, c, "p-1")
}

func TestRejectedTasksReachHandler(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)

	p := payload("p-1", 1, "arn:good", "arn:bad")
	p.Tasks[1].Containers[0].Image = ""
	c.send(t, p)
	requireAck(t, c, "p-1")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.payloads, 1)
	require.Len(t, h.payloads[0].Tasks, 1)
	require.Len(t, h.payloads[0].Rejected, 1)
	assert.Equal(t, "arn:bad", h.payloads[0].Rejected[0].Arn)
	assert.Contains(t, h.payloads[0].Rejected[0].Err.Error(), "image")
}

func TestDuplicatePayloadHandledOnce(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)

	c.send(t, payload("p-1", 1, "arn:task/1"))
	c.send(t, payload("p-1", 1, "arn:task/1"))
	requireAck(t, c, "p-1")
	requireAck(t, c, "p-1") // the duplicate is acked again, not handled again

	// After a reconnect too.
	c.ws.Close()
	c2 := f.next(t)
	c2.send(t, payload("p-1", 1, "arn:task/1"))
	requireAck(t, c2, "p-1")

	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Len(t, h.payloads, 1)
	assert.Equal(t, 1, h.tasks["arn:task/1"])
}

func TestGarbageAndUnknownFramesSkipped(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	cfg := testConfig(f)
	var logs logger.Buffer
	log, err := logger.New(logger.Config{Level: logger.LevelDebug}, &logs)
	require.NoError(t, err)
	cfg.Logger = log
	start(t, cfg, h)
	c := f.next(t)

	c.sendRaw(t, []byte(`{this is not json SECRETVALUE`))
	c.sendRaw(t, []byte(`{"type":"FancyNewMessage","message":{"secret":"SECRETVALUE"}}`))
	c.sendRaw(t, []byte(`{"type":"PayloadMessage","message":{"messageId":"p-0","tasks":"oops"}}`))
	c.sendRaw(t, []byte(`[]`))
	p := payload("p-1", 1, "arn:task/1")
	p.Tasks[0].RoleCredentials = &acswire.IAMRoleCredentials{CredentialsID: "c", AccessKeyID: "SECRETVALUE", SecretAccessKey: "SECRETVALUE"}
	p.Tasks[0].Containers[0].Environment = map[string]string{"PASSWORD": "SECRETVALUE"}
	c.send(t, p)
	requireAck(t, c, "p-1")
	assert.Equal(t, 1, h.payloadCount())
	assert.Equal(t, 1, f.requestCount(), "the session went on")
	out := logs.String()
	assert.Contains(t, out, "FancyNewMessage")
	assert.Contains(t, out, "malformed")
	assert.NotContains(t, out, "SECRETVALUE")
}

func TestDropMidPayloadReconnects(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)

	// Half of a text frame, then the connection drops.
	data, err := acswire.Encode(payload("p-1", 1, "arn:task/1"))
	require.NoError(t, err)
	require.Greater(t, len(data), 125)
	require.Less(t, len(data), 1<<16)
	header := []byte{0x81, 126, 0, 0}
	binary.BigEndian.PutUint16(header[2:], uint16(len(data)))
	raw := c.ws.UnderlyingConn()
	_, err = raw.Write(append(header, data[:len(data)/2]...))
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	c2 := f.next(t)
	assert.Equal(t, "false", c2.query.Get("sendCredentials"))
	c2.send(t, payload("p-1", 1, "arn:task/1"))
	requireAck(t, c2, "p-1")
	assert.Equal(t, 1, h.payloadCount())
}

func TestHeartbeatTimeoutReconnects(t *testing.T) {
	const timeout = time.Minute
	f := newFakeACS(t)
	cfg := testConfig(f)
	cfg.HeartbeatTimeout = timeout
	clock := newFakeClock()
	cfg.Clock = clock
	start(t, cfg, newFakeHandler())

	c := f.next(t)
	// Frames 40 s apart keep the session alive for four timeouts; each ack says the frame was read.
	clock.asked(t, timeout, 1)
	for range 6 {
		clock.Advance(40 * time.Second)
		c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
		assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t))
	}
	select {
	case <-f.conns:
		t.Fatal("reconnected although frames came in time")
	default:
	}
	// Then the server goes quiet for a whole timeout: the client reconnects, after its backoff.
	clock.Advance(timeout - time.Second)
	c.expectNothing(t, 50*time.Millisecond)
	clock.Advance(time.Second)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the client waits its reconnect backoff")
	clock.Advance(time.Second)
	f.next(t)
}

func TestSeqNumInReconnectQuery(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)
	assert.Equal(t, "0", c.query.Get("seqNum"))
	assert.Equal(t, "true", c.query.Get("sendCredentials"))

	c.send(t, payload("p-9", 9, "arn:task/9"))
	requireAck(t, c, "p-9")
	c.send(t, &wire.CloseMessage{Message: "bye"})

	c2 := f.next(t)
	assert.Equal(t, "9", c2.query.Get("seqNum"))
	assert.Equal(t, "false", c2.query.Get("sendCredentials"))
}

func TestUpgradeForbiddenBacksOffAndRetries(t *testing.T) {
	f := newFakeACS(t)
	f.status.Store(http.StatusForbidden)
	cfg := testConfig(f)
	var attempts atomic.Int32
	cfg.ReconnectBackoff = countingBackoff{Backoff: cfg.ReconnectBackoff, n: &attempts}
	start(t, cfg, newFakeHandler())

	require.Eventually(t, func() bool { return f.requestCount() >= 3 }, waitFor, tick)
	assert.GreaterOrEqual(t, int(attempts.Load()), 2, "each refusal is followed by a backoff")

	f.status.Store(0)
	c := f.next(t)
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t))
}

func TestHandshakeErrorCarriesStatus(t *testing.T) {
	f := newFakeACS(t)
	f.status.Store(http.StatusForbidden)
	c, err := New(testConfig(f), newFakeHandler())
	require.NoError(t, err)
	_, err = c.session(context.Background())
	var he *wsclient.HandshakeError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, http.StatusForbidden, he.StatusCode)
	assert.Contains(t, err.Error(), "403")
}

type countingBackoff struct {
	retry.Backoff
	n *atomic.Int32
}

func (b countingBackoff) Duration() time.Duration {
	b.n.Add(1)
	return b.Backoff.Duration()
}

func TestInactiveInstanceBacksOffLong(t *testing.T) {
	f := newFakeACS(t)
	cfg := testConfig(f)
	clock := newFakeClock()
	cfg.Clock = clock
	cfg.InactiveBackoff = 7 * time.Hour
	var backoffs atomic.Int32
	cfg.ReconnectBackoff = countingBackoff{Backoff: cfg.ReconnectBackoff, n: &backoffs}
	start(t, cfg, newFakeHandler())

	c := f.next(t)
	c.send(t, &acswire.InactiveInstanceException{Message: "instance deregistered"})
	clock.asked(t, 7*time.Hour, 1)
	clock.Advance(7*time.Hour - time.Second)
	select {
	case <-f.conns:
		t.Fatal("reconnected before the inactive backoff ended")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(time.Second)
	f.next(t)
	assert.Equal(t, 1, clock.count(7*time.Hour))
	assert.Zero(t, backoffs.Load(), "the short backoff was not used")
}

func TestExceptionErrorClasses(t *testing.T) {
	tests := []struct {
		typ       string
		class     error // nil: none
		retriable bool
	}{
		{acswire.TypeInactiveInstanceException, ecsclient.ErrInactiveInstance, false},
		{acswire.TypeAccessDeniedException, errdefs.ErrUnauthorized, false},
		{wire.TypeBadRequestException, errdefs.ErrInvalidArgument, false},
		{wire.TypeServerException, errdefs.ErrUnavailable, true},
		{acswire.TypeErrorMessage, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			err := fmt.Errorf("session: %w", &ExceptionError{Type: tt.typ, Message: "m"})
			if tt.class != nil {
				assert.ErrorIs(t, err, tt.class)
			}
			assert.Equal(t, tt.typ == acswire.TypeInactiveInstanceException, errors.Is(err, ecsclient.ErrInactiveInstance),
				"one notion of an inactive instance, shared with the ECS API client")
			assert.Equal(t, tt.typ == acswire.TypeInactiveInstanceException, errdefs.IsFailedPrecondition(err))
			assert.Equal(t, tt.retriable, errdefs.IsRetriable(err))
		})
	}
}

func TestCredentialsStoredThenAcked(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)

	c.send(t, &acswire.IAMRoleCredentialsMessage{MessageID: "cm-1", TaskArn: "arn:task/1", RoleType: acswire.RoleTypeTaskExecution,
		RoleCredentials: acswire.IAMRoleCredentials{CredentialsID: "cred-9", AccessKeyID: "A", SecretAccessKey: "S", SessionToken: "T", Expiration: "2030-01-01T00:00:00Z"}})
	assert.Equal(t, &acswire.IAMRoleCredentialsAckRequest{MessageID: "cm-1", CredentialsID: "cred-9", Expiration: "2030-01-01T00:00:00Z"}, c.recv(t))
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.creds, 1, "stored before the ack was sent")
	assert.Equal(t, "arn:task/1", h.creds[0].TaskArn)
	assert.Equal(t, acswire.RoleTypeTaskExecution, h.creds[0].RoleType)
	assert.Equal(t, "S", h.creds[0].Credentials.SecretAccessKey)
}

func TestENIAttachmentAcked(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	start(t, testConfig(f), h)
	c := f.next(t)

	c.send(t, &acswire.AttachTaskNetworkInterfacesMessage{MessageID: "eni-msg", ClusterArn: testCluster, ContainerInstanceArn: testInstance,
		TaskArn: "arn:task/1", WaitTimeoutMs: 5000,
		ElasticNetworkInterfaces: []*acswire.ElasticNetworkInterface{{Ec2ID: "eni-1", MacAddress: "0a:00:00:00:00:01"}}})
	requireAck(t, c, "eni-msg")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.enis, 1)
	assert.Equal(t, 5*time.Second, h.enis[0].WaitTimeout)
	assert.Equal(t, "eni-1", h.enis[0].ENIs[0].Ec2ID)
}

func TestPeriodicReconnect(t *testing.T) {
	f := newFakeACS(t)
	cfg := testConfig(f)
	cfg.PeriodicReconnect = time.Hour
	cfg.HeartbeatTimeout = 2 * time.Hour
	clock := newFakeClock()
	cfg.Clock = clock
	var backoffs atomic.Int32
	cfg.ReconnectBackoff = countingBackoff{Backoff: cfg.ReconnectBackoff, n: &backoffs}
	start(t, cfg, newFakeHandler())
	for i := 1; i <= 3; i++ {
		f.next(t)
		clock.asked(t, time.Hour, i)
		clock.Advance(time.Hour)
	}
	f.next(t)
	assert.Zero(t, backoffs.Load(), "a voluntary reconnect does not back off")
}

func TestNewRejectsBadEndpoint(t *testing.T) {
	for _, ep := range []string{"", "ftp://x", "://", "wss://x"} {
		_, err := New(Config{Endpoint: ep}, newFakeHandler())
		assert.Error(t, err, ep)
	}
	_, err := New(Config{Endpoint: "https://ecs-a-1.us-west-2.amazonaws.com/"}, nil)
	assert.Error(t, err)
}

func TestConnectURL(t *testing.T) {
	c, err := New(Config{Endpoint: "https://ecs-a-1.us-west-2.amazonaws.com/", Cluster: "default", DockerVersion: "27.0"}, newFakeHandler())
	require.NoError(t, err)
	u := c.connectURL()
	assert.Equal(t, "https", u.Scheme)
	assert.Equal(t, "/ws", u.Path)
	assert.Equal(t, "DockerVersion: 27.0", u.Query().Get("dockerVersion"))
}

func TestRecentIDsForgetsOldest(t *testing.T) {
	r := newRecentIDs(2)
	r.add("a")
	r.add("b")
	r.add("b")
	assert.True(t, r.has("a"))
	r.add("c")
	assert.False(t, r.has("a"))
	assert.True(t, r.has("b"))
	assert.True(t, r.has("c"))
}

// After a connection attempt fails, the client asks Rediscover for the endpoint and connects there:
// ACS may have moved the instance.
func TestFailedConnectionRediscoversTheEndpoint(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // the old endpoint refuses connections
	f := newFakeACS(t)
	cfg := testConfig(f)
	cfg.Endpoint = gone.URL + "/"
	var asked atomic.Int32
	cfg.Rediscover = func(context.Context) (string, error) {
		asked.Add(1)
		return f.srv.URL + "/", nil
	}
	start(t, cfg, newFakeHandler())
	c := f.next(t)
	assert.Equal(t, testInstance, c.query.Get("containerInstanceArn"))
	assert.GreaterOrEqual(t, asked.Load(), int32(1))
}

// TestTaskManifestAskedThenStopped: a manifest is acknowledged and the handler's candidates are sent
// back for verification; the tasks ACS then confirms reach the handler to be stopped.
func TestTaskManifestAskedThenStopped(t *testing.T) {
	f := newFakeACS(t)
	h := newFakeHandler()
	h.candidates = []acswire.TaskIdentifier{{TaskArn: "arn:task/gone", DesiredStatus: "STOPPED"}}
	start(t, testConfig(f), h)
	c := f.next(t)

	c.send(t, &acswire.TaskManifestMessage{MessageID: "m-1", Tasks: []acswire.TaskIdentifier{{TaskArn: "arn:task/kept", DesiredStatus: "RUNNING"}}})
	requireAck(t, c, "m-1")
	verify, ok := c.recv(t).(*acswire.TaskStopVerificationMessage)
	require.True(t, ok, "the agent asks ACS to confirm the candidates")
	assert.NotEmpty(t, verify.MessageID)
	assert.Equal(t, h.candidates, verify.StopCandidates)

	c.send(t, &acswire.TaskStopVerificationAck{MessageID: verify.MessageID, StopTasks: h.candidates})
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.stopped) == 1
	}, waitFor, tick)
	h.mu.Lock()
	assert.Equal(t, []acswire.TaskIdentifier{{TaskArn: "arn:task/kept", DesiredStatus: "RUNNING"}}, h.manifests[0])
	assert.Equal(t, "arn:task/gone", h.stopped[0].TaskArn)
	h.mu.Unlock()

	// No candidates: acknowledged, nothing asked.
	h.mu.Lock()
	h.candidates = nil
	h.mu.Unlock()
	c.send(t, &acswire.TaskManifestMessage{MessageID: "m-2"})
	requireAck(t, c, "m-2")
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t), "nothing was sent between the ack and the heartbeat's")
}

// TestUpdatesRefusedAndOtherMessagesLoggedOnce: ACS's self-update messages get a NackRequest; the
// instance-level attachment messages Berth does not support are logged once per type.
func TestUpdatesRefusedAndOtherMessagesLoggedOnce(t *testing.T) {
	f := newFakeACS(t)
	var buf logger.Buffer
	log, err := logger.New(logger.Config{Level: logger.LevelInfo}, &buf)
	require.NoError(t, err)
	t.Cleanup(log.Close)
	cfg := testConfig(f)
	cfg.Logger = log
	start(t, cfg, newFakeHandler())
	c := f.next(t)

	c.send(t, &acswire.StageUpdateMessage{MessageID: "u-1"})
	nack, ok := c.recv(t).(*acswire.NackRequest)
	require.True(t, ok)
	assert.Equal(t, "u-1", nack.MessageID)
	assert.Equal(t, testCluster, nack.Cluster)
	assert.Contains(t, nack.Reason, "does not update itself")
	c.send(t, &acswire.PerformUpdateMessage{MessageID: "u-2"})
	nack, ok = c.recv(t).(*acswire.NackRequest)
	require.True(t, ok)
	assert.Equal(t, "u-2", nack.MessageID)

	for i := range 3 {
		c.send(t, &acswire.AttachInstanceNetworkInterfacesMessage{MessageID: fmt.Sprintf("a-%d", i)})
		c.send(t, &acswire.ConfirmAttachmentMessage{MessageID: fmt.Sprintf("c-%d", i)})
	}
	c.send(t, &acswire.HeartbeatMessage{MessageID: "hb"})
	assert.Equal(t, &acswire.HeartbeatAckRequest{MessageID: "hb"}, c.recv(t), "the unsupported messages got no answer")
	assert.Equal(t, 1, strings.Count(buf.String(), acswire.TypeAttachInstanceNetworkInterfacesMessage), buf.String())
	assert.Equal(t, 1, strings.Count(buf.String(), acswire.TypeConfirmAttachmentMessage), buf.String())
}

// TestDefaultsAsTheECSAgent: the heartbeat timeout, the periodic reconnect and the wait after
// InactiveInstanceException are the ECS agent's.
func TestDefaultsAsTheECSAgent(t *testing.T) {
	for name, c := range map[string]struct{ got, want time.Duration }{
		"heartbeat timeout":         {DefaultHeartbeatTimeout, time.Minute},
		"heartbeat jitter":          {DefaultHeartbeatJitter, time.Minute},
		"periodic reconnect":        {DefaultPeriodicReconnect, 30 * time.Minute},
		"periodic reconnect jitter": {DefaultPeriodicReconnectJitter, 5 * time.Minute},
		"inactive instance wait":    {DefaultInactiveBackoff, time.Hour},
	} {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", name, c.got, c.want)
		}
	}
}

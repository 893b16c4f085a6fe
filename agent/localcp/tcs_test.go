//lint:file-ignore SA1019 the Amazon ECS agent signs TCS frames with the AWS SDK for Go v1; the test signs as it does.

package localcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	awsv1creds "github.com/aws/aws-sdk-go/aws/credentials"
	awsv1signer "github.com/aws/aws-sdk-go/aws/signer/v4"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/tcs"
	"github.com/berth-agent/berth/agent/tcswire"
)

// oneTask is a telemetry source with one task's memory.
type oneTask struct{}

func (oneTask) Metrics(time.Time) []tcswire.TaskMetric {
	return []tcswire.TaskMetric{{TaskArn: "arn:task", ContainerMetrics: []tcswire.ContainerMetric{{ContainerName: "web", MemoryStatsSet: tcswire.FloatStats(20)}}}}
}

func (oneTask) Health(time.Time) []tcswire.TaskHealth { return nil }

// TestTCSAcksTheAgent: the agent's TCS client, signing with the control plane's keys, gets every
// publish acknowledged (so none is pending), and the control plane keeps its last metrics.
func TestTCSAcksTheAgent(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	client, err := tcs.New(tcs.Config{Endpoint: ts.URL + tcsPath, Cluster: "default", ContainerInstanceArn: ci, Region: "us-east-1",
		Credentials: testKeys.Provider(), Source: oneTask{}, PublishInterval: 20 * time.Millisecond, AckTimeout: time.Hour})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- client.Run(runCtx) }()
	defer func() { stop(); <-done }()
	require.Eventually(t, func() bool { return len(h.srv.LastMetrics(ci)) == 1 }, 10*time.Second, 10*time.Millisecond,
		"metrics acknowledged and kept (with an hour's ack timeout, a missing ack would stall the client)")
	assert.Equal(t, "arn:task", h.srv.LastMetrics(ci)[0].TaskArn)
	assert.Empty(t, h.srv.LastMetrics("arn:other"))
}

// TestTCSRefusesStrangers: an unsigned or wrongly signed upgrade to /tcs/ws is refused, and a frame
// signed with other keys, as a POST, or for another URL on a good connection closes it
// unacknowledged.
func TestTCSRefusesStrangers(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	q := url.Values{"cluster": {"default"}, "containerInstance": {ci}}
	path := "/tcs/ws?" + q.Encode()
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + path
	for name, tc := range map[string]struct {
		header http.Header
		want   string
	}{
		"unsigned":     {nil, "MissingAuthenticationTokenException"},
		"other keys":   {signedUpgrade(t, ts.URL+path, localauth.Keys{AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}), "UnrecognizedClientException"},
		"wrong secret": {signedUpgrade(t, ts.URL+path, localauth.Keys{AccessKeyID: testKeys.AccessKeyID, SecretAccessKey: "guess"}), "InvalidSignatureException"},
		// Signed with the right keys, but for a foreign Host: what DNS rebinding would send.
		"foreign Host": {foreignHost(signedUpgrade(t, ts.URL+path, testKeys)), "AccessDeniedException"},
	} {
		t.Run(name, func(t *testing.T) {
			ws, resp, err := websocket.DefaultDialer.Dial(wsURL, tc.header)
			if ws != nil {
				_ = ws.Close()
			}
			require.ErrorIs(t, err, websocket.ErrBadHandshake)
			defer resp.Body.Close()
			assert.GreaterOrEqual(t, resp.StatusCode, 400)
			var out map[string]string
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			assert.Equal(t, tc.want, out["__type"])
		})
	}

	// Each of these frames carries a signature TCS must refuse: the connection closes unacknowledged.
	for name, frame := range map[string]func(body []byte) []byte{
		"frame signed with other keys": func(body []byte) []byte {
			return v1Frame(t, http.MethodGet, ts.URL+path, body, awsv1creds.NewStaticCredentials("AKIASTRANGER", "x", ""))
		},
		// What Berth sent before it signed as the ECS agent does: a POST of the endpoint.
		"frame signed as a POST of the endpoint": func(body []byte) []byte {
			return v1Frame(t, http.MethodPost, ts.URL+tcsPath, body, awsv1creds.NewStaticCredentials(testKeys.AccessKeyID, testKeys.SecretAccessKey, ""))
		},
		"frame signed for another query": func(body []byte) []byte {
			return v1Frame(t, http.MethodGet, ts.URL+"/tcs/ws?cluster=other", body, awsv1creds.NewStaticCredentials(testKeys.AccessKeyID, testKeys.SecretAccessKey, ""))
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws := dialTCS(t, wsURL, signedUpgrade(t, ts.URL+path, testKeys))
			require.NoError(t, ws.WriteMessage(websocket.TextMessage, frame(instanceStatusBody(t, ci))))
			require.NoError(t, ws.SetReadDeadline(time.Now().Add(10*time.Second)))
			for {
				_, data, err := ws.ReadMessage()
				if err != nil {
					break // closed, as wanted
				}
				m, derr := tcswire.Decode(data)
				require.NoError(t, derr)
				_, hb := m.(*tcswire.HeartbeatMessage)
				require.True(t, hb, "a refused frame got %s", m.MessageType())
			}
		})
	}
}

// TestTCSAcceptsTheECSAgentsFrames: a frame signed the way the Amazon ECS agent signs it (the AWS SDK
// for Go v1 signer, a GET of the upgrade URL with the body as payload; ecs-agent/tcs/client/client.go)
// is acknowledged, so the real agent can publish to the embedded control plane.
func TestTCSAcceptsTheECSAgentsFrames(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	// The ECS agent's query: what its formatURL sets, spaces and all.
	q := url.Values{"cluster": {"default"}, "containerInstance": {ci}, "agentVersion": {"1.105.1"}, "agentHash": {"a8b3e7d3"}, "dockerVersion": {"DockerVersion: 27.5.1 x"}}
	path := "/tcs/ws?" + q.Encode()
	ws := dialTCS(t, "ws"+strings.TrimPrefix(ts.URL, "http")+path, signedUpgrade(t, ts.URL+path, testKeys))
	creds := awsv1creds.NewStaticCredentials(testKeys.AccessKeyID, testKeys.SecretAccessKey, "")
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, v1Frame(t, http.MethodGet, ts.URL+path, instanceStatusBody(t, ci), creds)))
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		_, data, err := ws.ReadMessage()
		require.NoError(t, err, "the connection closed before the ack")
		m, err := tcswire.Decode(data)
		require.NoError(t, err)
		if _, ok := m.(*tcswire.AckPublishInstanceStatus); ok {
			return
		}
		_, hb := m.(*tcswire.HeartbeatMessage)
		require.True(t, hb, "got %s", m.MessageType())
	}
}

// dialTCS opens a TCS websocket with the upgrade header given; it is closed when the test ends.
func dialTCS(t *testing.T, wsURL string, header http.Header) *websocket.Conn {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(wsURL, header)
	require.NoError(t, err)
	_ = resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// instanceStatusBody is the JSON of an instance status publish for instance ci.
func instanceStatusBody(t *testing.T, ci string) []byte {
	t.Helper()
	body, err := tcswire.Encode(&tcswire.PublishInstanceStatusRequest{Metadata: tcswire.InstanceStatusMetadata{Cluster: "default", ContainerInstance: ci}})
	require.NoError(t, err)
	return body
}

// v1Frame is a TCS frame for body signed by the AWS SDK for Go v1 (the signer the ECS agent uses) as
// a request of method for target: the header lines in Go's order, an empty line, the body.
func v1Frame(t *testing.T, method, target string, body []byte, creds *awsv1creds.Credentials) []byte {
	t.Helper()
	payload := bytes.NewReader(body)
	req, err := http.NewRequest(method, target, payload)
	require.NoError(t, err)
	_, err = awsv1signer.NewSigner(creds).Sign(req, payload, "ecs", "us-east-1", time.Now())
	require.NoError(t, err)
	req.Header.Add("Host", req.Host)
	var b bytes.Buffer
	require.NoError(t, req.Header.Write(&b))
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// foreignHost sets a Host that is not loopback on h: the dialer sends it instead of the URL's.
func foreignHost(h http.Header) http.Header {
	h.Set("Host", "berth.attacker.example")
	return h
}

package localcp

import (
	"context"
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
// signed with other keys on a good connection closes it unacknowledged.
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

	t.Run("frame signed with other keys", func(t *testing.T) {
		ws, resp, err := websocket.DefaultDialer.Dial(wsURL, signedUpgrade(t, ts.URL+path, testKeys))
		require.NoError(t, err)
		_ = resp.Body.Close()
		defer ws.Close()
		body, err := tcswire.Encode(&tcswire.PublishInstanceStatusRequest{Metadata: tcswire.InstanceStatusMetadata{Cluster: "default", ContainerInstance: ci}})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, ts.URL+tcsPath, nil)
		require.NoError(t, err)
		require.NoError(t, localauth.Sign(t.Context(), req, body, localauth.Keys{AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}, "us-east-1", time.Now()))
		frame := "Authorization: " + req.Header.Get("Authorization") + "\r\nHost: " + req.Host + "\r\nX-Amz-Date: " +
			req.Header.Get("X-Amz-Date") + "\r\n\r\n" + string(body)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(frame)))
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(10*time.Second)))
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				break // closed, as wanted
			}
			m, derr := tcswire.Decode(data)
			require.NoError(t, derr)
			_, hb := m.(*tcswire.HeartbeatMessage)
			require.True(t, hb, "a stranger's frame got %s", m.MessageType())
		}
	})
}

// foreignHost sets a Host that is not loopback on h: the dialer sends it instead of the URL's.
func foreignHost(h http.Header) http.Header {
	h.Set("Host", "berth.attacker.example")
	return h
}

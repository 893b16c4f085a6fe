//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/controlplane"
)

// rejectingACS stands in for Amazon ECS: the embedded control plane answers the ECS API, while the
// ACS websocket is the test's, which sends one payload on the first connection only (so a report that
// arrives later can only come from what the agent saved), and records acks and task state changes.
type rejectingACS struct {
	cp      http.Handler
	payload *acswire.PayloadMessage

	mu       sync.Mutex
	conns    int
	acks     []string
	stopped  map[string]string // task ARN → reason of a STOPPED SubmitTaskStateChange
	upgrader websocket.Upgrader
}

func (s *rejectingACS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ws" {
		s.serveACS(w, r)
		return
	}
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SubmitTaskStateChange") {
		body, _ := io.ReadAll(r.Body)
		var ch struct{ Task, Status, Reason string }
		if json.Unmarshal(body, &ch) == nil && ch.Task == s.payload.Tasks[0].Arn {
			s.mu.Lock()
			if ch.Status == "STOPPED" {
				s.stopped[ch.Task] = ch.Reason
			}
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			_, _ = w.Write([]byte(`{"acknowledgment":"ok"}`))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.cp.ServeHTTP(w, r)
}

func (s *rejectingACS) serveACS(w http.ResponseWriter, r *http.Request) {
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	s.mu.Lock()
	s.conns++
	first := s.conns == 1
	s.mu.Unlock()
	if first {
		frame, err := acswire.Encode(s.payload)
		if err != nil || ws.WriteMessage(websocket.TextMessage, frame) != nil {
			return
		}
	}
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if m, err := acswire.Decode(data); err == nil {
			if ack, ok := m.(*acswire.AckRequest); ok {
				s.mu.Lock()
				s.acks = append(s.acks, ack.MessageID)
				s.mu.Unlock()
			}
		}
	}
}

func (s *rejectingACS) state() (acks []string, stopped map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stopped = map[string]string{}
	for k, v := range s.stopped {
		stopped[k] = v
	}
	return append([]string(nil), s.acks...), stopped
}

// TestIntegrationRejectedTaskSurvivesAKill kills the agent (SIGKILL) after it saved the STOPPED
// report of a task it rejected and before it acknowledged the payload. ACS never sends the payload
// again, yet after the restart the control plane learns that the task stopped, and why.
func TestIntegrationRejectedTaskSurvivesAKill(t *testing.T) {
	srv := standInECS(t, "us-east-1")
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	const arn = "arn:aws:ecs:us-east-1:000000000000:task/rejected/0123456789abcdef"
	standIn := &rejectingACS{cp: srv.Handler(), stopped: map[string]string{}, payload: &acswire.PayloadMessage{
		MessageID: "payload-1", SeqNum: 1, Tasks: []*acswire.Task{{Arn: arn, Family: "rejected", Version: "1",
			DesiredStatus: "RUNNING", NetworkMode: "awsvpc",
			Containers: []*acswire.Container{{Name: "c", Image: testappImage, Memory: 16}},
			ElasticNetworkInterfaces: []*acswire.ElasticNetworkInterface{{MacAddress: "not-a-mac", AttachmentArn: "arn:att",
				IPv4Addresses: []acswire.IPv4Address{{PrivateAddress: "10.0.0.5", Primary: true}}, SubnetGatewayIPv4Address: "10.0.0.1/24"}}}}}}
	addr := serveLoopback(t, standIn)
	ecsMode := []string{"AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://" + addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}

	first := env.start(append(ecsMode, "BERTH_TEST_CRASH_AT="+controlplane.ProbeRejectedSaved)...)
	first.waitKilled(60 * time.Second)
	acks, stopped := standIn.state()
	assert.Empty(t, acks, "killed before the ack")
	assert.Empty(t, stopped, "killed before the report")

	second := env.start(ecsMode...)
	require.Eventually(t, func() bool {
		_, stopped := standIn.state()
		return stopped[arn] != ""
	}, 60*time.Second, 100*time.Millisecond, "the saved report is delivered after the restart; log:\n%s", second.out.String())
	_, stopped = standIn.state()
	assert.Contains(t, stopped[arn], "TaskDefinitionError")
	assert.Contains(t, stopped[arn], "elasticNetworkInterfaces[0].macAddress", "the reason names the field")
	// The report goes through the ECS API and needs no ACS session: the second agent's ACS
	// connection may come after it.
	require.Eventually(t, func() bool {
		standIn.mu.Lock()
		defer standIn.mu.Unlock()
		return standIn.conns >= 2
	}, 30*time.Second, 100*time.Millisecond, "the second agent connects to ACS")
	second.stop()
	standIn.mu.Lock()
	assert.Equal(t, 2, standIn.conns, "each agent connected once; the payload was sent to the first only")
	standIn.mu.Unlock()
}

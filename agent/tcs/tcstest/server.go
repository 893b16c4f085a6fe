// Package tcstest is a stand-in TCS for tests: a websocket server on 127.0.0.1 that accepts only a
// SigV4-signed upgrade, parses every signed frame the client sends, records the decoded messages
// with the access key ID that signed them, acknowledges each, and can send heartbeats or drop the
// connection on demand.
package tcstest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/berth-agent/berth/agent/tcswire"
)

// Received is one message a client sent.
type Received struct {
	Conn        int // 1 for the first connection, and so on
	AccessKeyID string
	Header      http.Header // the frame's header lines
	Message     tcswire.Message
	Frame       []byte // the whole frame as sent
}

// Upgrade is one accepted websocket upgrade.
type Upgrade struct {
	Host        string // the upgrade's Host header
	URI         string // the upgrade's path and query, as sent
	Query       url.Values
	AccessKeyID string
}

// MetricsBatch is a complete metrics batch: the messages of one messageId on one connection, the
// last with fin=true.
type MetricsBatch struct {
	Conn      int
	MessageID string
	Idle      bool
	Messages  int
	Tasks     []tcswire.TaskMetric
}

// HealthBatch is a complete health batch, as MetricsBatch.
type HealthBatch struct {
	Conn      int
	MessageID string
	Messages  int
	Tasks     []tcswire.TaskHealth
}

// Server is a stand-in TCS. It is safe for concurrent use.
type Server struct {
	// URL is the telemetry endpoint to give the client (http://127.0.0.1:port/).
	URL string

	srv      *httptest.Server
	upgrader websocket.Upgrader

	mu        sync.Mutex
	conns     int
	cur       *conn
	upgrades  []Upgrade
	received  []Received
	problems  []string
	dropAfter int // frames still to read on the current connection before dropping it; 0: never
}

// conn is one client connection; wmu orders writes.
type conn struct {
	ws  *websocket.Conn
	n   int
	wmu sync.Mutex
}

// NewServer starts a Server; it is closed when the test ends.
func NewServer(t testing.TB) *Server {
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/"
	t.Cleanup(s.Close)
	return s
}

// Close drops the connection and stops the server.
func (s *Server) Close() {
	s.Drop()
	s.srv.Close()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ws" {
		http.NotFound(w, r)
		return
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || tcswire.AccessKeyID(auth) == "" {
		http.Error(w, "unsigned upgrade", http.StatusUnauthorized)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.conns++
	c := &conn{ws: ws, n: s.conns}
	s.cur = c
	s.upgrades = append(s.upgrades, Upgrade{Host: r.Host, URI: r.URL.RequestURI(), Query: r.URL.Query(), AccessKeyID: tcswire.AccessKeyID(auth)})
	s.mu.Unlock()
	defer func() {
		_ = ws.Close()
		s.mu.Lock()
		if s.cur == c {
			s.cur = nil
		}
		s.mu.Unlock()
	}()
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		ack, drop := s.record(c, data)
		if drop {
			return
		}
		if ack != nil {
			_ = c.write(ack)
		}
	}
}

// record parses and records one frame; it returns the ack to send, and whether to drop the
// connection instead.
func (s *Server) record(c *conn, data []byte) (tcswire.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	header, body, err := tcswire.ParseFrame(data)
	if err != nil {
		s.problems = append(s.problems, err.Error())
		return nil, false
	}
	auth := header.Get("Authorization")
	key := tcswire.AccessKeyID(auth)
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || key == "" {
		s.problems = append(s.problems, "frame without a SigV4 Authorization header")
	}
	if header.Get("Host") == "" || header.Get("X-Amz-Date") == "" {
		s.problems = append(s.problems, "frame without Host or X-Amz-Date")
	}
	m, err := tcswire.Decode(body)
	if err != nil {
		s.problems = append(s.problems, err.Error())
		return nil, false
	}
	s.received = append(s.received, Received{Conn: c.n, AccessKeyID: key, Header: header, Message: m, Frame: data})
	if s.dropAfter > 0 {
		s.dropAfter--
		if s.dropAfter == 0 {
			s.cur = nil
			return nil, true
		}
	}
	switch m.(type) {
	case *tcswire.PublishMetricsRequest:
		return &tcswire.AckPublishMetric{}, false
	case *tcswire.PublishHealthRequest:
		return &tcswire.AckPublishHealth{}, false
	case *tcswire.PublishInstanceStatusRequest:
		return &tcswire.AckPublishInstanceStatus{}, false
	}
	s.problems = append(s.problems, fmt.Sprintf("unexpected %s from the client", m.MessageType()))
	return nil, false
}

func (c *conn) write(m tcswire.Message) error {
	data, err := tcswire.Encode(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// DropAfter makes the server close the current connection right after it read n more frames
// (recording the nth but not acknowledging it). n <= 0 cancels.
func (s *Server) DropAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAfter = max(n, 0)
}

// Drop closes the current connection, if any.
func (s *Server) Drop() {
	s.mu.Lock()
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.ws.Close()
	}
}

// Send writes m to the current connection.
func (s *Server) Send(m tcswire.Message) error {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("no client connected")
	}
	return c.write(m)
}

// SendHeartbeat sends a HeartbeatMessage{healthy: true} to the current connection.
func (s *Server) SendHeartbeat() error { return s.Send(&tcswire.HeartbeatMessage{Healthy: true}) }

// Connections returns how many upgrades the server accepted.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Connected reports whether a client is connected now.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

// Upgrades returns the accepted upgrades in order.
func (s *Server) Upgrades() []Upgrade {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upgrade(nil), s.upgrades...)
}

// Received returns every message recorded, in order.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Problems returns what was wrong with the client's frames: unparsable, unsigned, undecodable or
// unexpected ones.
func (s *Server) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.problems...)
}

// AccessKeyIDs returns the access key ID of every frame recorded, in order.
func (s *Server) AccessKeyIDs() []string {
	var keys []string
	for _, r := range s.Received() {
		keys = append(keys, r.AccessKeyID)
	}
	return keys
}

// MetricsBatches returns the complete metrics batches, in the order their fin arrived. A batch cut
// by a dropped connection is not one.
func (s *Server) MetricsBatches() []MetricsBatch {
	type key struct {
		conn int
		id   string
	}
	open := map[key]*MetricsBatch{}
	var done []MetricsBatch
	for _, r := range s.Received() {
		m, ok := r.Message.(*tcswire.PublishMetricsRequest)
		if !ok {
			continue
		}
		k := key{r.Conn, m.Metadata.MessageID}
		b := open[k]
		if b == nil {
			b = &MetricsBatch{Conn: r.Conn, MessageID: m.Metadata.MessageID}
			open[k] = b
		}
		b.Messages++
		b.Idle = b.Idle || m.Metadata.Idle
		b.Tasks = append(b.Tasks, m.TaskMetrics...)
		if m.Metadata.Fin {
			done = append(done, *b)
			delete(open, k)
		}
	}
	return done
}

// HealthBatches returns the complete health batches, as MetricsBatches.
func (s *Server) HealthBatches() []HealthBatch {
	type key struct {
		conn int
		id   string
	}
	open := map[key]*HealthBatch{}
	var done []HealthBatch
	for _, r := range s.Received() {
		m, ok := r.Message.(*tcswire.PublishHealthRequest)
		if !ok {
			continue
		}
		k := key{r.Conn, m.Metadata.MessageID}
		b := open[k]
		if b == nil {
			b = &HealthBatch{Conn: r.Conn, MessageID: m.Metadata.MessageID}
			open[k] = b
		}
		b.Messages++
		b.Tasks = append(b.Tasks, m.Tasks...)
		if m.Metadata.Fin {
			done = append(done, *b)
			delete(open, k)
		}
	}
	return done
}

// InstanceStatuses returns every PublishInstanceStatusRequest recorded, in order.
func (s *Server) InstanceStatuses() []*tcswire.PublishInstanceStatusRequest {
	var out []*tcswire.PublishInstanceStatusRequest
	for _, r := range s.Received() {
		if m, ok := r.Message.(*tcswire.PublishInstanceStatusRequest); ok {
			out = append(out, m)
		}
	}
	return out
}

// WaitFor polls cond until it holds, failing the test after five seconds.
func (s *Server) WaitFor(t testing.TB, what string, cond func(s *Server) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(s) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package localcp

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/tcswire"
)

// tcsPath is where DiscoverPollEndpoint's telemetryEndpoint points; the agent's TCS client connects
// to tcsPath + "ws".
const tcsPath = "/tcs/"

// tcsConn is one agent's TCS websocket; wmu orders the acks and heartbeats written to it.
type tcsConn struct {
	ws          *websocket.Conn
	instanceArn string
	wmu         sync.Mutex
	closeOnce   sync.Once
}

func (c *tcsConn) close() { c.closeOnce.Do(func() { _ = c.ws.Close() }) }

func (c *tcsConn) write(m tcswire.Message) error {
	data, err := tcswire.Encode(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// LastMetrics returns the task metrics of the last complete PublishMetricsRequest batch the agent of
// instanceArn sent over TCS (nil when none, or when it was idle).
func (s *Server) LastMetrics(instanceArn string) []tcswire.TaskMetric {
	s.tcsMu.Lock()
	defer s.tcsMu.Unlock()
	return s.metrics[instanceArn]
}

// serveTCS runs one agent's TCS session: it checks every frame's signature, keeps the metrics,
// acknowledges each publish and sends heartbeats. The upgrade was verified already.
func (s *Server) serveTCS(w http.ResponseWriter, r *http.Request) {
	instanceArn := r.URL.Query().Get("containerInstance")
	if instanceArn == "" {
		http.Error(w, "containerInstance is required", http.StatusBadRequest)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Warn("TCS upgrade failed", "error", err)
		return
	}
	c := &tcsConn{ws: ws, instanceArn: instanceArn}
	s.connMu.Lock()
	select {
	case <-s.closing:
		s.connMu.Unlock()
		c.close()
		return
	default:
	}
	s.tcsConns[c] = struct{}{}
	s.wg.Add(1)
	s.connMu.Unlock()
	defer s.wg.Done()
	s.log.Info("agent connected to TCS", "container_instance", instanceArn)

	idle := idleHeartbeats * s.heartbeat
	ws.SetReadLimit(maxFrame)
	_ = ws.SetReadDeadline(time.Now().Add(idle))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(idle)) })
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readTCS(c, r.Host, r.URL.RequestURI())
	}()
	defer func() {
		c.close()
		<-readerDone
		s.connMu.Lock()
		delete(s.tcsConns, c)
		s.connMu.Unlock()
		s.log.Info("agent disconnected from TCS", "container_instance", instanceArn)
	}()
	heartbeat := s.clock.NewTicker(s.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-readerDone:
			return
		case <-s.closing:
			return
		case <-heartbeat.Chan():
			if err := c.write(&tcswire.HeartbeatMessage{Healthy: true}); err != nil {
				return
			}
			c.wmu.Lock()
			err := ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout))
			c.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// readTCS handles the agent's frames until the connection fails or a frame is not signed with the
// control plane's keys, which closes it. host and target are the upgrade request's Host and URI.
func (s *Server) readTCS(c *tcsConn, host, target string) {
	idle := idleHeartbeats * s.heartbeat
	open := map[string][]tcswire.TaskMetric{} // metrics batches by message ID, until their fin
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				s.log.Warn("TCS frame over the size limit; connection closed", "container_instance", c.instanceArn, "limit_bytes", maxFrame)
			}
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(idle))
		header, body, err := tcswire.ParseFrame(data)
		if err != nil {
			s.log.Warn("TCS frame unreadable; connection closed", "container_instance", c.instanceArn, "error", err)
			return
		}
		if aerr := s.verifyFrame(header, body, host, target); aerr != nil {
			s.log.Warn("TCS frame not signed with the control plane's keys; connection closed", "container_instance", c.instanceArn,
				"access_key_id", tcswire.AccessKeyID(header.Get("Authorization")), "type", aerr.Type)
			return
		}
		m, err := tcswire.Decode(body)
		if err != nil {
			s.log.Debug("TCS frame ignored", "container_instance", c.instanceArn, "error", err)
			continue
		}
		var ack tcswire.Message
		switch m := m.(type) {
		case *tcswire.PublishMetricsRequest:
			id := m.Metadata.MessageID
			open[id] = append(open[id], m.TaskMetrics...)
			if m.Metadata.Fin {
				s.tcsMu.Lock()
				s.metrics[c.instanceArn] = open[id]
				s.tcsMu.Unlock()
				delete(open, id)
			}
			ack = &tcswire.AckPublishMetric{}
		case *tcswire.PublishHealthRequest:
			ack = &tcswire.AckPublishHealth{}
		case *tcswire.PublishInstanceStatusRequest:
			ack = &tcswire.AckPublishInstanceStatus{}
		default:
			s.log.Debug("TCS frame ignored", "container_instance", c.instanceArn, "type", m.MessageType())
			continue
		}
		if err := c.write(ack); err != nil {
			return
		}
	}
}

// verifyFrame checks a frame's SigV4 signature: the client signs each body as a GET of the upgrade's
// URI (target, with its query), with the Host and X-Amz-Date of its header lines, as the ECS agent
// does.
func (s *Server) verifyFrame(header http.Header, body []byte, host, target string) *localauth.Error {
	frameHost := header.Get("Host")
	if frameHost == "" {
		frameHost = host
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+frameHost+target, nil)
	if err != nil {
		return &localauth.Error{Status: http.StatusBadRequest, Type: "InvalidSignatureException", Message: "bad Host in the frame"}
	}
	req.Host = frameHost
	for _, name := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		if v := header.Get(name); v != "" {
			req.Header.Set(name, v)
		}
	}
	return s.auth.Verify(req, body)
}

// isTCSPath reports whether path is the TCS websocket's (the client joins the endpoint and "ws",
// which may double a slash).
func isTCSPath(path string) bool {
	rest, ok := strings.CutPrefix(strings.TrimLeft(path, "/"), "tcs/")
	return ok && strings.Trim(rest, "/") == "ws"
}

package localcp

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
	"github.com/berth-agent/berth/agent/wire"
)

// writeTimeout bounds one websocket write.
const writeTimeout = 10 * time.Second

// maxFrame bounds a frame from an agent: acks and heartbeat acks are a few hundred bytes. A larger
// frame closes the connection before its payload is read.
const maxFrame = 1 << 20

// idleHeartbeats is how many heartbeat intervals a connection may go without a frame or a pong from
// the agent before it is closed; a ping goes with every heartbeat.
const idleHeartbeats = 3

// Every frame is an agent/acswire message, encoded and decoded by acswire.Encode and acswire.Decode:
// the agent's ACS client and this control plane share one definition of the wire format.

// acsTaskOf renders a stored task as ACS sends it, through taskdef's translation to the task model
// and acstranslate's to the wire.
func acsTaskOf(t *taskRecord, desired task.TaskStatus) (*acswire.Task, error) {
	def, err := taskdef.Parse(t.Definition)
	if err != nil {
		return nil, fmt.Errorf("task %s: stored definition: %w", t.Arn, err)
	}
	def.Revision = t.Revision
	out, err := acstranslate.WireTask(def.NewTask(t.Arn))
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.Arn, err)
	}
	out.DesiredStatus = taskStatusName(desired)
	out.LaunchType = launchTypeOf(t.LaunchType)
	for _, c := range out.Containers {
		for _, rec := range t.Containers {
			if rec.Name == c.Name {
				c.ContainerArn = rec.Arn
			}
		}
		if t.EnableExecuteCommand {
			// As ECS sends it for a task run with enableExecuteCommand: every container, no properties
			// (the SSM agent's session limit then is its default).
			c.ManagedAgents = []acswire.ManagedAgent{{Name: task.ExecuteCommandAgent}}
		}
	}
	out.TaskDefinitionAccountID = accountID
	return out, nil
}

// acsConn is one agent's ACS websocket. Only its handler goroutine writes to ws.
type acsConn struct {
	ws          *websocket.Conn
	instanceArn string
	clusterArn  string
	kick        chan struct{} // capacity 1: "look for tasks to send"
	closeOnce   sync.Once

	mu       sync.Mutex
	inflight map[string]task.TaskStatus // task ARN → desired status sent on this connection, not yet acked
	messages map[string][]sentState     // message ID → what it carried
}

type sentState struct {
	taskArn string
	desired task.TaskStatus
}

func (c *acsConn) close() { c.closeOnce.Do(func() { _ = c.ws.Close() }) }

// kick asks the connection of the agent on instance, if any, to send what it has not received.
func (s *Server) kick(instanceArn string) {
	if instanceArn == "" {
		return
	}
	s.connMu.Lock()
	c := s.conns[instanceArn]
	s.connMu.Unlock()
	if c != nil {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// connected reports whether the agent of the instance has an ACS connection open.
func (s *Server) connected(instanceArn string) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	_, ok := s.conns[instanceArn]
	return ok
}

var upgrader = websocket.Upgrader{
	// The agent is not a browser: its upgrade is authenticated by its SigV4 signature, not its origin.
	CheckOrigin:      func(*http.Request) bool { return true },
	HandshakeTimeout: writeTimeout,
}

// serveACS runs one agent's ACS session: payloads for its tasks, heartbeats, acks.
func (s *Server) serveACS(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	instanceArn := q.Get("containerInstanceArn")
	var known bool
	err := s.db.View(func(tx *bolt.Tx) error {
		known = tx.Bucket(bucketInstances).Get([]byte(instanceArn)) != nil
		return nil
	})
	if err != nil || instanceArn == "" {
		http.Error(w, "containerInstanceArn is required", http.StatusBadRequest)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		s.log.Warn("ACS upgrade failed", "error", err)
		return
	}
	c := &acsConn{
		ws:          ws,
		instanceArn: instanceArn,
		clusterArn:  q.Get("clusterArn"),
		kick:        make(chan struct{}, 1),
		inflight:    map[string]task.TaskStatus{},
		messages:    map[string][]sentState{},
	}
	if !known {
		_ = c.write(&acswire.InvalidInstanceException{Message: "unknown container instance " + instanceArn + "; register it first"})
		c.close()
		return
	}

	s.connMu.Lock()
	select {
	case <-s.closing:
		s.connMu.Unlock()
		c.close()
		return
	default:
	}
	if old := s.conns[instanceArn]; old != nil {
		old.close()
	}
	s.conns[instanceArn] = c
	s.wg.Add(1)
	s.connMu.Unlock()
	s.log.Info("agent connected", "container_instance", instanceArn, "agent_version", q.Get("agentVersion"), "seq_num", q.Get("seqNum"))
	// The HTTP server's read deadline would cut the session; from here the agent's frames and pongs
	// keep it open.
	idle := idleHeartbeats * s.heartbeat
	ws.SetReadLimit(maxFrame)
	_ = ws.SetReadDeadline(time.Now().Add(idle))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(idle)) })

	defer s.wg.Done()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readACS(c)
	}()
	defer func() {
		c.close()
		<-readerDone
		s.connMu.Lock()
		if s.conns[instanceArn] == c {
			delete(s.conns, instanceArn)
		}
		s.connMu.Unlock()
		s.log.Info("agent disconnected", "container_instance", instanceArn)
	}()

	c.kick <- struct{}{}
	heartbeat := s.clock.NewTicker(s.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-readerDone:
			return
		case <-s.closing:
			return
		case <-c.kick:
			if err := s.deliver(c); err != nil {
				s.log.Warn("ACS send failed", "container_instance", instanceArn, "error", err)
				return
			}
		case <-heartbeat.Chan():
			if err := c.write(&acswire.HeartbeatMessage{MessageID: newUUID(), Healthy: true}); err != nil {
				s.log.Debug("ACS heartbeat failed", "container_instance", instanceArn, "error", err)
				return
			}
			if err := ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
				s.log.Debug("ACS ping failed", "container_instance", instanceArn, "error", err)
				return
			}
		}
	}
}

// write sends one frame.
func (c *acsConn) write(m acswire.Message) error {
	frame, err := acswire.Encode(m)
	if err != nil {
		return err
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
		return fmt.Errorf("send %s: %w", m.MessageType(), err)
	}
	return nil
}

// readACS handles the agent's frames until the connection fails, closes, stays silent for
// idleHeartbeats heartbeats, or sends a frame over maxFrame.
func (s *Server) readACS(c *acsConn) {
	idle := idleHeartbeats * s.heartbeat
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				s.log.Warn("ACS frame over the size limit; connection closed", "container_instance", c.instanceArn, "limit_bytes", maxFrame)
			} else if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				s.log.Warn("ACS connection silent too long; closed", "container_instance", c.instanceArn, "idle", idle)
			}
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(idle))
		m, err := acswire.Decode(data)
		if unknown := (*wire.UnknownTypeError)(nil); errors.As(err, &unknown) {
			s.log.Debug("ACS frame ignored", "container_instance", c.instanceArn, "type", unknown.Type)
			continue
		}
		if err != nil {
			s.log.Warn("ACS frame unreadable", "container_instance", c.instanceArn, "error", err)
			continue
		}
		switch m := m.(type) {
		case *acswire.AckRequest:
			if err := s.acked(c, m.MessageID); err != nil {
				s.log.Error("recording ACS ack failed", "container_instance", c.instanceArn, "message_id", m.MessageID, "error", err)
			}
		case *acswire.HeartbeatAckRequest, *acswire.IAMRoleCredentialsAckRequest:
			// Nothing to do: any frame shows the agent is alive.
		default:
			s.log.Debug("ACS frame ignored", "container_instance", c.instanceArn, "type", m.MessageType())
		}
	}
}

// deliver sends one PayloadMessage with every task of the instance whose desired status the agent
// has neither acknowledged nor been sent on this connection.
func (s *Server) deliver(c *acsConn) error {
	var (
		msg  acswire.PayloadMessage
		sent []sentState
	)
	c.mu.Lock()
	inflight := maps.Clone(c.inflight)
	c.mu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		var cluster string
		// A STOPPED task has nothing left to send: the agent stopped it, or it never ran.
		err := eachLive(tx, s.badRecord, func(t *taskRecord) error {
			if t.ContainerInstanceArn != c.instanceArn || t.DesiredStatus == t.AckedDesired || inflight[t.Arn] == t.DesiredStatus {
				return nil
			}
			at, err := acsTaskOf(t, t.DesiredStatus)
			if err != nil {
				s.log.Error("task cannot be sent", "task", t.Arn, "error", err)
				return nil
			}
			cluster = t.ClusterName
			msg.Tasks = append(msg.Tasks, at)
			sent = append(sent, sentState{taskArn: t.Arn, desired: t.DesiredStatus})
			return nil
		})
		if err != nil || len(sent) == 0 {
			return err
		}
		seq, err := nextSeqNum(tx)
		if err != nil {
			return err
		}
		msg.SeqNum = seq
		msg.ClusterArn = s.clusterArn(cluster)
		return nil
	})
	if err != nil || len(sent) == 0 {
		return err
	}
	msg.MessageID = newUUID()
	msg.ContainerInstanceArn = c.instanceArn
	msg.GeneratedAt = s.clock.Now().UnixMilli()
	c.mu.Lock()
	for _, st := range sent {
		c.inflight[st.taskArn] = st.desired
	}
	c.messages[msg.MessageID] = sent
	c.mu.Unlock()
	arns := make([]string, 0, len(sent))
	for _, st := range sent {
		arns = append(arns, st.taskArn+"="+taskStatusName(st.desired))
	}
	s.log.Info("payload sent", "container_instance", c.instanceArn, "message_id", msg.MessageID, "seq_num", msg.SeqNum, "tasks", strings.Join(arns, ","))
	return c.write(&msg)
}

// acked records that the agent accepted the payload with messageID.
func (s *Server) acked(c *acsConn, messageID string) error {
	c.mu.Lock()
	sent, ok := c.messages[messageID]
	delete(c.messages, messageID)
	c.mu.Unlock()
	if !ok {
		s.log.Debug("ack for an unknown message", "container_instance", c.instanceArn, "message_id", messageID)
		return nil
	}
	// Record the ack before forgetting what is in flight, so that deliver never sees neither.
	defer func() {
		c.mu.Lock()
		for _, st := range sent {
			if c.inflight[st.taskArn] == st.desired {
				delete(c.inflight, st.taskArn)
			}
		}
		c.mu.Unlock()
	}()
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, st := range sent {
			t := &taskRecord{}
			if err := get(tx, bucketTasks, st.taskArn, t); err != nil {
				s.log.Warn("ack for a task that is gone", "task", st.taskArn, "error", err)
				continue
			}
			if st.desired <= t.AckedDesired {
				continue
			}
			t.AckedDesired = st.desired
			if err := saveTask(tx, t); err != nil {
				return err
			}
		}
		return nil
	})
}

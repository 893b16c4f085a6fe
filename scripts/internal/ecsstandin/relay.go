package ecsstandin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Relay passes ACS frames between the agent and localcp unchanged, except while holding: then
// the PayloadMessages localcp sends are kept, and release sends them to the agent as one
// PayloadMessage (their tasks in order, the highest seqNum, a new messageId). The agent's AckRequest
// for that message is passed on as one AckRequest per original message. It speaks the ACS wire format
// (shared/protocol/ACS.md) as raw JSON, so it depends on no Go type of the agent.
type Relay struct {
	upstream string
	wg       sync.WaitGroup

	mu       sync.Mutex
	sess     *relaySession
	sessions int // ACS sessions opened by the agent
	holding  bool
	held     []heldPayload
	merged   map[string][]string // merged messageId → the original messageIds
	payloads int                 // PayloadMessages received from localcp
	sent     int                 // PayloadMessages sent to the agent
	changed  chan struct{}       // closed and replaced when held or sess changes
}

type heldPayload struct {
	fields map[string]json.RawMessage
	id     string
	seq    int64
	tasks  []json.RawMessage
	arns   []string
}

type relaySession struct {
	agent, cp *websocket.Conn
	wmu       sync.Mutex // writes to agent
}

func (s *relaySession) toAgent(data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.agent.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return s.agent.WriteMessage(websocket.TextMessage, data)
}

func (s *relaySession) close() {
	_ = s.agent.Close()
	_ = s.cp.Close()
}

func newRelay(upstream string) *Relay {
	return &Relay{upstream: upstream, merged: map[string][]string{}, changed: make(chan struct{})}
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// relayUpgrade opens the control plane's websocket at upstream for the agent's upgrade request req,
// then upgrades the agent's connection. The agent's Host and signature headers go along, so a control
// plane checking signatures sees the request as the agent signed it. When the control plane refuses,
// the agent gets its status; ok is false when there is no session.
func relayUpgrade(w http.ResponseWriter, req *http.Request, upstream string) (sess *relaySession, ok bool) {
	hdr := http.Header{}
	hdr.Set("Host", req.Host)
	for _, k := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		if v := req.Header.Get(k); v != "" {
			hdr.Set(k, v)
		}
	}
	cp, resp, err := websocket.DefaultDialer.DialContext(req.Context(), upstream, hdr)
	if err != nil {
		code := http.StatusBadGateway
		if resp != nil {
			code = resp.StatusCode
		}
		http.Error(w, "relay: "+err.Error(), code)
		return nil, false
	}
	agent, err := upgrader.Upgrade(w, req, nil)
	if err != nil {
		_ = cp.Close()
		return nil, false
	}
	return &relaySession{agent: agent, cp: cp}, true
}

type acsFrame struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message"`
}

// serve relays one agent ACS session until either side closes it.
func (r *Relay) serve(w http.ResponseWriter, req *http.Request) {
	sess, ok := relayUpgrade(w, req, r.upstream+"?"+req.URL.RawQuery)
	if !ok {
		return
	}
	r.mu.Lock()
	if old := r.sess; old != nil {
		old.close()
	}
	r.sess = sess
	r.sessions++
	r.notifyLocked()
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.fromControlPlane(sess)
	}()
	r.fromAgent(sess)
	sess.close()
	<-done
	r.mu.Lock()
	if r.sess == sess {
		r.sess = nil
		r.notifyLocked()
	}
	r.mu.Unlock()
}

func (r *Relay) fromControlPlane(sess *relaySession) {
	defer sess.close()
	for {
		_, data, err := sess.cp.ReadMessage()
		if err != nil {
			return
		}
		var f acsFrame
		if json.Unmarshal(data, &f) == nil && f.Type == "PayloadMessage" {
			r.mu.Lock()
			r.payloads++
			if r.holding {
				p, err := parsePayload(f.Message)
				if err == nil {
					r.held = append(r.held, p)
					r.notifyLocked()
					r.mu.Unlock()
					continue
				}
			}
			r.sent++
			r.mu.Unlock()
		}
		if err := sess.toAgent(data); err != nil {
			return
		}
	}
}

func (r *Relay) fromAgent(sess *relaySession) {
	for {
		mt, data, err := sess.agent.ReadMessage()
		if err != nil {
			return
		}
		frames := [][]byte{data}
		var f acsFrame
		if json.Unmarshal(data, &f) == nil && f.Type == "AckRequest" {
			frames = r.expandAck(f.Message, data)
		}
		for _, out := range frames {
			_ = sess.cp.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := sess.cp.WriteMessage(mt, out); err != nil {
				return
			}
		}
	}
}

// expandAck turns the agent's ack of a merged payload into the acks of the payloads it merged.
func (r *Relay) expandAck(msg json.RawMessage, frame []byte) [][]byte {
	var fields map[string]json.RawMessage
	if json.Unmarshal(msg, &fields) != nil {
		return [][]byte{frame}
	}
	var id string
	_ = json.Unmarshal(fields["messageId"], &id)
	r.mu.Lock()
	originals, ok := r.merged[id]
	delete(r.merged, id)
	r.mu.Unlock()
	if !ok {
		return [][]byte{frame}
	}
	out := make([][]byte, 0, len(originals))
	for _, orig := range originals {
		fields["messageId"], _ = json.Marshal(orig)
		m, _ := json.Marshal(fields)
		f, _ := json.Marshal(acsFrame{Type: "AckRequest", Message: m})
		out = append(out, f)
	}
	return out
}

func parsePayload(msg json.RawMessage) (heldPayload, error) {
	p := heldPayload{}
	if err := json.Unmarshal(msg, &p.fields); err != nil {
		return p, err
	}
	_ = json.Unmarshal(p.fields["messageId"], &p.id)
	_ = json.Unmarshal(p.fields["seqNum"], &p.seq)
	if err := json.Unmarshal(p.fields["tasks"], &p.tasks); err != nil {
		return p, err
	}
	for _, t := range p.tasks {
		var a struct {
			Arn string `json:"arn"`
		}
		if err := json.Unmarshal(t, &a); err != nil {
			return p, err
		}
		p.arns = append(p.arns, a.Arn)
	}
	return p, nil
}

func (r *Relay) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// WaitSession waits until the agent has an ACS session open through the relay.
func (r *Relay) WaitSession(ctx context.Context) error {
	for {
		r.mu.Lock()
		ok, changed := r.sess != nil, r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no ACS session: %w", context.Cause(ctx))
		case <-changed:
		}
	}
}

// Hold starts keeping PayloadMessages back.
func (r *Relay) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = true
}

// Release waits until the held payloads carry every task of arns, then sends them to the agent as
// one PayloadMessage. It returns how many PayloadMessages localcp sent for them and when the merged
// one went out.
func (r *Relay) Release(ctx context.Context, arns []string) (int, time.Time, error) {
	held, sess, id, err := r.takeHeld(ctx, arns)
	if err != nil {
		return 0, time.Time{}, err
	}
	fields := held[len(held)-1].fields
	var tasks []json.RawMessage
	seq := int64(0)
	for _, p := range held {
		tasks = append(tasks, p.tasks...)
		seq = max(seq, p.seq)
	}
	fields["messageId"], _ = json.Marshal(id)
	fields["seqNum"], _ = json.Marshal(seq)
	fields["tasks"], _ = json.Marshal(tasks)
	msg, err := json.Marshal(fields)
	if err != nil {
		return 0, time.Time{}, err
	}
	frame, err := json.Marshal(acsFrame{Type: "PayloadMessage", Message: msg})
	if err != nil {
		return 0, time.Time{}, err
	}
	sentAt := time.Now()
	if err := sess.toAgent(frame); err != nil {
		return 0, time.Time{}, fmt.Errorf("send the payload to the agent: %w", err)
	}
	return len(held), sentAt, nil
}

// takeHeld waits until the held payloads carry every task of arns, stops holding, and returns the
// payloads, the session to send them on and the messageId their merged payload gets.
func (r *Relay) takeHeld(ctx context.Context, arns []string) ([]heldPayload, *relaySession, string, error) {
	want := map[string]bool{}
	for _, a := range arns {
		want[a] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		have := 0
		for _, p := range r.held {
			for _, a := range p.arns {
				if want[a] {
					have++
				}
			}
		}
		if have >= len(want) {
			break
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.holding = false
			return nil, nil, "", fmt.Errorf("localcp sent %d of %d tasks over ACS: %w", have, len(want), context.Cause(ctx))
		case <-changed:
		}
		r.mu.Lock()
	}
	held := r.held
	r.held, r.holding = nil, false
	if r.sess == nil {
		return nil, nil, "", errSessionClosed
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := "merged-" + hex.EncodeToString(b[:])
	originals := make([]string, 0, len(held))
	for _, p := range held {
		originals = append(originals, p.id)
	}
	r.merged[id] = originals
	r.sent++
	return held, r.sess, id, nil
}

// Counts returns the ACS sessions opened and the PayloadMessages received from localcp and sent to the agent.
func (r *Relay) Counts() (sessions, received, sent int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions, r.payloads, r.sent
}

// Cut closes the agent's open ACS session, if any, as a network fault would; the agent reconnects.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess != nil {
		r.sess.close()
	}
}

// close ends the open session and waits for the relay goroutines.
func (r *Relay) close() {
	r.mu.Lock()
	if r.sess != nil {
		r.sess.close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

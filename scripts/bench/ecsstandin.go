package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
)

// ecsStandIn is the ECS endpoint the agent talks to in the ecs bench: the embedded control plane
// (agent/localcp, through its public API only) behind a front server on loopback that
//   - records when the control plane accepted each SubmitTaskStateChange (the bench's clock stops
//     there, no polling), and
//   - relays the ACS websocket so that the tasks of several RunTask calls (localcp, like ECS, starts
//     at most 10 per call) reach the agent in one PayloadMessage, as ECS sends a batch of placements.
//
// DiscoverPollEndpoint is answered from the request's Host, so the agent, pointed at the front by
// ECS_BACKEND_HOST, opens its ACS websocket on the front too.
type ecsStandIn struct {
	cp       *localcp.Server
	back     *http.Server // localcp itself, reached only by the relay
	front    *http.Server // what the agent and the bench talk to
	endpoint string       // http://127.0.0.1:port of the front
	tmpfs    string       // the directory of localcp's state on tmpfs, if any
	relay    *acsRelay
	states   *stateLog
}

// startStandIn serves localcp on one loopback port and the front on another. Close stops both.
// localcp's state file goes to tmpfs (/dev/shm) when there is one: the stand-in plays a remote
// service, and its own fsyncs, serialised with every RunTask and state change, are not the agent's
// cost. The agent's ECS_DATADIR stays on disk.
func startStandIn(dir string) (s *ecsStandIn, err error) {
	dbDir, tmpfs := dir, ""
	if d, err := os.MkdirTemp("/dev/shm", "berth-bench-ecs-cp"); err == nil {
		dbDir, tmpfs = d, d
	}
	defer func() {
		if err != nil && tmpfs != "" {
			_ = os.RemoveAll(tmpfs)
		}
	}()
	cp, err := localcp.New(localcp.Config{DBPath: filepath.Join(dbDir, "localcp.db"), Region: "us-east-1", Keys: benchKeys}, logger.Nop())
	if err != nil {
		return nil, err
	}
	backLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = cp.Close()
		return nil, err
	}
	frontLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = backLn.Close()
		_ = cp.Close()
		return nil, err
	}
	s = &ecsStandIn{
		cp:       cp,
		tmpfs:    tmpfs,
		back:     &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second},
		endpoint: "http://" + frontLn.Addr().String(),
		relay:    newACSRelay("ws://" + backLn.Addr().String() + "/ws"),
		states:   newStateLog(),
	}
	s.front = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.back.Serve(backLn) }()
	go func() { _ = s.front.Serve(frontLn) }()
	return s, nil
}

// ServeHTTP relays ACS and passes the ECS API to localcp, noting accepted task state changes.
func (s *ecsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Trim(r.URL.Path, "/") == "ws" {
		s.relay.serve(w, r)
		return
	}
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SubmitTaskStateChange") {
		s.cp.Handler().ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	s.cp.Handler().ServeHTTP(rec, r)
	if rec.code != http.StatusOK {
		return
	}
	var change struct {
		Task   string `json:"task"`
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &change) == nil {
		s.states.record(taskID(change.Task), change.Status, time.Now())
	}
}

// Close stops the front (and with it the relayed ACS sessions), then localcp.
func (s *ecsStandIn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.front.Shutdown(ctx)
	s.relay.close()
	_ = s.cp.Close()
	_ = s.back.Shutdown(ctx)
	if s.tmpfs != "" {
		_ = os.RemoveAll(s.tmpfs)
	}
}

// call sends one ECS API operation to the stand-in, as any ECS client would.
func (s *ecsStandIn) call(ctx context.Context, op string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return localcp.Call(ctx, http.DefaultClient, s.endpoint, benchKeys, op, in, out)
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// taskID is the last segment of a task ARN (or the ID itself).
func taskID(arnOrID string) string {
	return arnOrID[strings.LastIndexByte(arnOrID, '/')+1:]
}

// stateLog remembers when the control plane first accepted each status of each task.
type stateLog struct {
	mu      sync.Mutex
	at      map[string]map[string]time.Time // task ID → status → first accepted
	changed chan struct{}                   // closed and replaced on every record
}

func newStateLog() *stateLog {
	return &stateLog{at: map[string]map[string]time.Time{}, changed: make(chan struct{})}
}

func (l *stateLog) record(id, status string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at[id] == nil {
		l.at[id] = map[string]time.Time{}
	}
	if _, ok := l.at[id][status]; !ok {
		l.at[id][status] = at
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns the latest acceptance time of status over ids once every one of them has been
// accepted, or ctx's cause.
func (l *stateLog) wait(ctx context.Context, ids []string, status string) (time.Time, error) {
	for {
		l.mu.Lock()
		var last time.Time
		missing := 0
		for _, id := range ids {
			at, ok := l.at[id][status]
			if !ok {
				missing++
			} else if at.After(last) {
				last = at
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if missing == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d tasks not accepted as %s: %w", missing, len(ids), status, context.Cause(ctx))
		case <-changed:
		}
	}
}

// acsRelay passes ACS frames between the agent and localcp unchanged, except while holding: then
// the PayloadMessages localcp sends are kept, and release sends them to the agent as one
// PayloadMessage (their tasks in order, the highest seqNum, a new messageId). The agent's AckRequest
// for that message is passed on as one AckRequest per original message. It speaks the ACS wire format
// (shared/protocol/ACS.md) as raw JSON, so it depends on no Go type of the agent.
type acsRelay struct {
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

func newACSRelay(upstream string) *acsRelay {
	return &acsRelay{upstream: upstream, merged: map[string][]string{}, changed: make(chan struct{})}
}

var relayUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

type acsFrame struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message"`
}

// serve relays one agent ACS session until either side closes it. The relay signs its own upgrade
// to localcp with the bench's keys, as the agent signed its upgrade to the relay.
func (r *acsRelay) serve(w http.ResponseWriter, req *http.Request) {
	upstream := r.upstream + "?" + req.URL.RawQuery
	signReq, err := http.NewRequestWithContext(req.Context(), http.MethodGet, "http"+strings.TrimPrefix(upstream, "ws"), nil)
	if err == nil {
		err = localauth.Sign(req.Context(), signReq, nil, benchKeys, "us-east-1", time.Now())
	}
	if err != nil {
		http.Error(w, "relay: "+err.Error(), http.StatusInternalServerError)
		return
	}
	cp, resp, err := websocket.DefaultDialer.DialContext(req.Context(), upstream, signReq.Header)
	if err != nil {
		code := http.StatusBadGateway
		if resp != nil {
			code = resp.StatusCode
		}
		http.Error(w, "relay: "+err.Error(), code)
		return
	}
	agent, err := relayUpgrader.Upgrade(w, req, nil)
	if err != nil {
		_ = cp.Close()
		return
	}
	sess := &relaySession{agent: agent, cp: cp}
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

func (r *acsRelay) fromControlPlane(sess *relaySession) {
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

func (r *acsRelay) fromAgent(sess *relaySession) {
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
func (r *acsRelay) expandAck(msg json.RawMessage, frame []byte) [][]byte {
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

func (r *acsRelay) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitSession waits until the agent has an ACS session open through the relay.
func (r *acsRelay) waitSession(ctx context.Context) error {
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

// hold starts keeping PayloadMessages back.
func (r *acsRelay) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = true
}

// release waits until the held payloads carry every task of arns, then sends them to the agent as
// one PayloadMessage. It returns how many PayloadMessages localcp sent for them and when the merged
// one went out.
func (r *acsRelay) release(ctx context.Context, arns []string) (int, time.Time, error) {
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
func (r *acsRelay) takeHeld(ctx context.Context, arns []string) ([]heldPayload, *relaySession, string, error) {
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
		return nil, nil, "", errors.New("the agent's ACS session closed while payloads were held")
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := "bench-" + hex.EncodeToString(b[:])
	originals := make([]string, 0, len(held))
	for _, p := range held {
		originals = append(originals, p.id)
	}
	r.merged[id] = originals
	r.sent++
	return held, r.sess, id, nil
}

// counts returns the ACS sessions opened and the PayloadMessages received from localcp and sent to the agent.
func (r *acsRelay) counts() (sessions, received, sent int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions, r.payloads, r.sent
}

// close ends the open session and waits for the relay goroutines.
func (r *acsRelay) close() {
	r.mu.Lock()
	if r.sess != nil {
		r.sess.close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Package ecsstandin is the ECS endpoint that scripts drive the real berth binary against in ecs mode:
// the embedded control plane (agent/localcp, through its public API only) behind a front server on
// loopback that
//   - records when the control plane accepted each SubmitTaskStateChange (StateLog) and, for whoever
//     asks, hands over every state-change submission with what became of it (Options.Observe);
//   - relays the ACS websocket (Relay), so that payloads can be held and merged (the bench) or the
//     session cut (the soak);
//   - relays the TCS websocket (Telemetry), noting its sessions and the metrics the agent publishes;
//   - can drop the agent's connections for a while (Disrupt): the ACS websocket is closed and
//     refused, TCS upgrades are refused, and ECS API calls lose their connection before or after
//     the control plane saw them.
//
// DiscoverPollEndpoint is answered from the request's Host, so the agent, pointed at the front by
// ECS_BACKEND_HOST, opens its ACS and TCS websockets on the front too. The scripts' own calls (Call)
// go to the control plane directly, never disrupted.
//
// Every localcp.Config and every localcp.Call of the scripts is made in one place each here
// (NewControlPlane, Call), with the test credentials AccessKeyID and SecretAccessKey, which the agent
// gets through AgentCredentialsEnv.
package ecsstandin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
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

// Fixed, random test credentials: the stand-in accepts these and the agent signs with them. They
// open nothing anywhere else.
const (
	AccessKeyID     = "AKIAL6Q63MXCWBKAESQL"
	SecretAccessKey = "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"
	// Region is the region of the stand-in's ARNs and the agent's AWS_DEFAULT_REGION.
	Region = "us-east-1"
)

// Keys are the test credentials as the embedded control plane takes them.
var Keys = localauth.Keys{AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey}

// AgentCredentialsEnv is the environment that makes the agent sign its requests with the test
// credentials and never ask an instance metadata service.
func AgentCredentialsEnv() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + SecretAccessKey,
		"AWS_DEFAULT_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// NewControlPlane opens (or creates) an embedded control plane keeping its state at dbPath. It is the
// one place the scripts configure localcp.
func NewControlPlane(dbPath string) (*localcp.Server, error) {
	return localcp.New(localcp.Config{DBPath: dbPath, Region: Region, Keys: Keys}, logger.Nop())
}

// Call sends one ECS JSON 1.1 operation, signed with keys, to the control plane at endpoint and
// decodes the answer into out (nil: ignore it), bounded by 30 s. It is the one place the scripts call
// localcp.Call.
func Call(ctx context.Context, endpoint string, keys localauth.Keys, op string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return localcp.Call(ctx, http.DefaultClient, endpoint, keys, op, in, out)
}

// Submission is one state-change request the agent sent, and what became of it.
type Submission struct {
	Op       string // SubmitTaskStateChange or SubmitContainerStateChange
	Body     []byte // the request body, JSON
	Accepted bool   // the control plane answered 200
	Dropped  bool   // the answer never reached the agent: its connection was cut after the control plane saw it
	At       time.Time
}

// Options configures a StandIn.
type Options struct {
	// Observe, if set, is called with every SubmitTaskStateChange and SubmitContainerStateChange that
	// reached the control plane, in the order the control plane answered them per connection. It must
	// not block for long.
	Observe func(Submission)
}

// StandIn is the control plane and its front. Close stops both.
type StandIn struct {
	cp        *localcp.Server
	back      *http.Server // localcp itself, reached by the relay and by Call
	front     *http.Server // what the agent talks to
	backURL   string
	Endpoint  string // http://127.0.0.1:port of the front: the agent's ECS_BACKEND_HOST
	Tmpfs     string // the directory of localcp's state on tmpfs, or "" when it is on disk
	Relay     *Relay
	Telemetry *Telemetry
	States    *StateLog
	observe   func(Submission)

	mu           sync.Mutex
	disruptUntil time.Time
	dropped      int // API requests whose connection was cut
	refused      int // ACS upgrades refused while disrupted
}

// Start serves localcp on one loopback port and the front on another. localcp's state file goes to
// tmpfs (/dev/shm) when there is one: the stand-in plays a remote service, and its own fsyncs are not
// the agent's cost. Close stops both and removes that file.
func Start(dir string, opts Options) (s *StandIn, err error) {
	dbDir, tmpfs := dir, ""
	if d, err := os.MkdirTemp("/dev/shm", "berth-ecs-standin"); err == nil {
		dbDir, tmpfs = d, d
	}
	defer func() {
		if err != nil && tmpfs != "" {
			_ = os.RemoveAll(tmpfs)
		}
	}()
	cp, err := NewControlPlane(filepath.Join(dbDir, "localcp.db"))
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
	s = &StandIn{
		cp:        cp,
		Tmpfs:     tmpfs,
		back:      &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second},
		backURL:   "http://" + backLn.Addr().String(),
		Endpoint:  "http://" + frontLn.Addr().String(),
		Relay:     newRelay("ws://" + backLn.Addr().String() + "/ws"),
		Telemetry: newTelemetry("ws://" + backLn.Addr().String()),
		States:    newStateLog(),
		observe:   opts.Observe,
	}
	s.front = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.back.Serve(backLn) }()
	go func() { _ = s.front.Serve(frontLn) }()
	return s, nil
}

// Call sends one ECS API operation to the control plane, bypassing the front: never disrupted.
func (s *StandIn) Call(ctx context.Context, op string, in, out any) error {
	return Call(ctx, s.backURL, Keys, op, in, out)
}

// Disrupt cuts the agent's ACS session now and, for d, refuses new ones and cuts every ECS API
// connection of the agent: at random before the control plane sees the request, or after it answered
// (so the agent does not learn that its call succeeded).
func (s *StandIn) Disrupt(d time.Duration) {
	s.mu.Lock()
	s.disruptUntil = time.Now().Add(d)
	s.mu.Unlock()
	s.Relay.Cut()
}

// Disruptions returns how many API requests had their connection cut and how many ACS upgrades were
// refused.
func (s *StandIn) Disruptions() (droppedAPI, refusedACS int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped, s.refused
}

func (s *StandIn) disrupted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.disruptUntil)
}

// ServeHTTP relays ACS and TCS and passes the ECS API to localcp, noting state-change submissions.
func (s *StandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	disrupted := s.disrupted()
	if strings.Trim(r.URL.Path, "/") == "ws" {
		if disrupted {
			s.mu.Lock()
			s.refused++
			s.mu.Unlock()
			hangUp(w)
			return
		}
		s.Relay.serve(w, r)
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		if disrupted {
			s.countDrop()
			hangUp(w)
			return
		}
		s.Telemetry.serve(w, r)
		return
	}
	if disrupted && rand.IntN(2) == 0 {
		s.countDrop()
		hangUp(w)
		return
	}
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndexByte(target, '.')+1:]
	observed := op == "SubmitTaskStateChange" || op == "SubmitContainerStateChange"
	if !observed && !disrupted {
		s.cp.Handler().ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	s.cp.Handler().ServeHTTP(rec, r)
	at := time.Now()
	if observed && rec.Code == http.StatusOK && op == "SubmitTaskStateChange" {
		s.States.recordChange(body, at)
	}
	if observed && s.observe != nil {
		s.observe(Submission{Op: op, Body: body, Accepted: rec.Code == http.StatusOK, Dropped: disrupted, At: at})
	}
	if disrupted {
		s.countDrop()
		hangUp(w)
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (s *StandIn) countDrop() {
	s.mu.Lock()
	s.dropped++
	s.mu.Unlock()
}

// hangUp closes the client's connection without an answer, as a network fault would.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, not an orderly close
	}
	_ = conn.Close()
}

// Close stops the front (and with it the relayed ACS and TCS sessions), then localcp.
func (s *StandIn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.front.Shutdown(ctx)
	s.Relay.close()
	s.Telemetry.close()
	_ = s.cp.Close()
	_ = s.back.Shutdown(ctx)
	if s.Tmpfs != "" {
		_ = os.RemoveAll(s.Tmpfs)
	}
}

// TaskID is the last segment of a task ARN (or the ID itself).
func TaskID(arnOrID string) string {
	return arnOrID[strings.LastIndexByte(arnOrID, '/')+1:]
}

var errSessionClosed = errors.New("the agent's ACS session closed while payloads were held")

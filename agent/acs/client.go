// Package acs is the agent's client of the ECS Agent Communication Service: a SigV4-signed websocket
// over which the control plane sends tasks (PayloadMessage), task role credentials and ENI
// attachments, and the agent acknowledges them. The frames are agent/acswire's, which the embedded
// control plane speaks too, so it sends exactly what the client reads.
//
// A session, from connect to disconnect:
//
//	dial (signed upgrade) ──▶ read frames ──▶ heartbeat: ack at once
//	      ▲                       │           payload, credentials, ENI: queued, handled in order,
//	      │                       │             acked once the Handler returned nil
//	      │                       ▼
//	      └── backoff ◀── heartbeat timeout, read error, CloseMessage, exception, periodic reconnect
//
// The payload of an ACS message may hold credentials and environment values: nothing here logs a
// frame's contents, only its type, size and message ID.
package acs

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/wire"
	"github.com/berth-agent/berth/agent/wsclient"
)

// Handler is what the agent does with the messages ACS sends. The client calls it from one goroutine
// at a time, in the order the messages arrived, and acknowledges a message only after the call
// returned nil; after an error ACS resends the message later. Calls get a context that ends with the
// session and must return promptly when it does.
type Handler interface {
	// HandlePayload hands the tasks to the engine and persists them. The client drops a payload whose
	// message ID it already handled, but ACS may also send a known task again in a new payload (after
	// a reconnect, or as an update of its desired status): a task ARN the agent already has is an
	// update, never a second task. Rejected tasks are to be reported STOPPED with their error.
	HandlePayload(ctx context.Context, p Payload) error
	// HandleCredentials stores the credentials of a task role.
	HandleCredentials(ctx context.Context, c Credentials) error
	// HandleENIAttachment records ENIs announced for a task ahead of its payload.
	HandleENIAttachment(ctx context.Context, a ENIAttachment) error
	// SeqNum returns the seqNum of the last payload handled; it is sent when connecting.
	SeqNum() int64
	// HandleTaskManifest compares ACS's list of the instance's tasks with the agent's and returns
	// the candidates to stop: tasks the agent runs that the manifest does not list, or lists as
	// STOPPED. The client acknowledges the manifest and asks ACS to confirm the candidates.
	HandleTaskManifest(ctx context.Context, tasks []acswire.TaskIdentifier) ([]acswire.TaskIdentifier, error)
	// HandleStopVerification stops the tasks ACS confirmed may be stopped.
	HandleStopVerification(ctx context.Context, tasks []acswire.TaskIdentifier) error
}

// Payload is a PayloadMessage translated into the task model.
type Payload struct {
	MessageID string
	SeqNum    int64
	Tasks     []acstranslate.Accepted
	Rejected  []acstranslate.Rejected
}

// Credentials are the credentials of a task role from an IAMRoleCredentialsMessage.
type Credentials struct {
	MessageID   string
	TaskArn     string
	RoleType    string // RoleTypeTaskApplication or RoleTypeTaskExecution
	Credentials acswire.IAMRoleCredentials
}

// ENIAttachment is an AttachTaskNetworkInterfacesMessage.
type ENIAttachment struct {
	MessageID   string
	TaskArn     string
	ENIs        []*acswire.ElasticNetworkInterface
	WaitTimeout time.Duration // how long ACS waits for the attachment; 0 when not given
}

// Defaults applied by New to zero Config fields: the ECS agent's (ecs-agent/acs/session/session.go,
// ecs-agent/wsclient/client.go).
const (
	DefaultHeartbeatTimeout        = time.Minute      // plus up to DefaultHeartbeatJitter
	DefaultHeartbeatJitter         = time.Minute      //
	DefaultPeriodicReconnect       = 30 * time.Minute // plus up to DefaultPeriodicReconnectJitter
	DefaultPeriodicReconnectJitter = 5 * time.Minute  //
	DefaultInactiveBackoff         = time.Hour
)

const (
	// stableConnection is how long a connection must have lived for the reconnect backoff to start
	// again from its minimum.
	stableConnection = time.Minute
	writeTimeout     = 10 * time.Second
	readLimit        = 64 << 20
	queueSize        = 128
	rememberedIDs    = 1024
)

// Config configures a Client.
type Config struct {
	// Endpoint is the ACS base URL from DiscoverPollEndpoint, http or https.
	Endpoint string
	// Rediscover, if set, is called after a connection attempt failed (ACS may have moved the
	// instance to another endpoint); the endpoint it returns is used from then on. An error keeps the
	// current endpoint.
	Rediscover           func(ctx context.Context) (string, error)
	Cluster              string
	ContainerInstanceArn string
	AgentVersion         string
	AgentHash            string
	DockerVersion        string // the bare version; sent as "DockerVersion: <it>"
	Region               string
	// Credentials sign the upgrade request (SigV4, service ecs). Nil sends it unsigned, which only a
	// local control plane accepts.
	Credentials aws.CredentialsProvider
	// HeartbeatTimeout is how long a session may go without a frame; zero means
	// DefaultHeartbeatTimeout plus a random jitter up to DefaultHeartbeatJitter, drawn per session.
	HeartbeatTimeout time.Duration
	// ReconnectBackoff spaces reconnects; nil means 250 ms to 2 min, ×1.5, 20 % jitter. It is reset
	// after a connection that lived a minute.
	ReconnectBackoff retry.Backoff
	// PeriodicReconnect is how long a session lasts before the client reconnects by itself; zero
	// means DefaultPeriodicReconnect plus up to DefaultPeriodicReconnectJitter, negative never.
	PeriodicReconnect time.Duration
	// InactiveBackoff is the wait after InactiveInstanceException; zero means DefaultInactiveBackoff.
	InactiveBackoff time.Duration
	// Clock is the time source: Now for signing and connection lifetimes, timers for every wait
	// (backoff, heartbeat timeout, periodic reconnect). Nil is the wall clock. Write deadlines on the
	// socket are always wall-clock time.
	Clock  clockwork.Clock
	Logger *logger.Logger // nil: no logging
}

// Client keeps a session with ACS open and hands what it receives to a Handler.
type Client struct {
	cfg     Config
	h       Handler
	log     *logger.Logger
	clock   clockwork.Clock
	backoff retry.Backoff
	base    *url.URL
	dialer  *wsclient.Dialer

	firstConnection atomic.Bool // sendCredentials=true until a connection succeeded
	seen            *recentIDs  // payload message IDs handled and acked

	unsupportedMu sync.Mutex
	unsupported   set.Set[string] // types of unsupported messages already logged
}

// New returns a client for cfg; it fails only for an unusable Endpoint or a nil handler.
func New(cfg Config, h Handler) (*Client, error) {
	if h == nil {
		return nil, errors.New("acs: nil handler")
	}
	base, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.InactiveBackoff <= 0 {
		cfg.InactiveBackoff = DefaultInactiveBackoff
	}
	c := &Client{
		cfg:     cfg,
		h:       h,
		log:     cfg.Logger.With("component", "acs"),
		clock:   cfg.Clock,
		backoff: cfg.ReconnectBackoff,
		base:    base,
		seen:    newRecentIDs(rememberedIDs),
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	c.dialer = wsclient.NewDialer("ACS", cfg.Region, cfg.Credentials, readLimit, c.clock)
	if c.backoff == nil {
		c.backoff = retry.NewExponentialBackoff(250*time.Millisecond, 2*time.Minute, 0.2, 1.5)
	}
	c.firstConnection.Store(true)
	return c, nil
}

// parseEndpoint checks an ACS base URL.
func parseEndpoint(endpoint string) (*url.URL, error) {
	base, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("acs endpoint %q: %w", endpoint, err)
	}
	if base.Scheme != "http" && base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("acs endpoint %q: want an http or https URL", endpoint)
	}
	return base, nil
}

// rediscover asks Config.Rediscover for the endpoint after a failed connection attempt.
func (c *Client) rediscover(ctx context.Context) {
	if c.cfg.Rediscover == nil {
		return
	}
	endpoint, err := c.cfg.Rediscover(ctx)
	if err == nil {
		var base *url.URL
		if base, err = parseEndpoint(endpoint); err == nil {
			if base.String() != c.base.String() {
				c.log.Info("ACS endpoint rediscovered", "endpoint", base.Host)
			}
			c.base = base
			return
		}
	}
	if ctx.Err() == nil {
		c.log.Warn("cannot rediscover the ACS endpoint; keeping the current one", "error", err)
	}
}

// ExceptionError is an ErrorMessage or exception frame ACS sent; it ends the session. It matches
// (errors.Is) the class of its exception: ecsclient.ErrInactiveInstance for an
// InactiveInstanceException (the container instance was deregistered — the same notion the ECS API
// client reports), errdefs.ErrUnauthorized for AccessDeniedException, errdefs.ErrInvalidArgument for
// BadRequestException and errdefs.ErrUnavailable for ServerException.
type ExceptionError struct {
	Type    string // the frame type, e.g. InactiveInstanceException
	Message string
}

// Error names the exception and its message.
func (e *ExceptionError) Error() string {
	return fmt.Sprintf("ACS sent %s: %s", e.Type, e.Message)
}

// Unwrap returns the class of the exception, or nil for one of no known class.
func (e *ExceptionError) Unwrap() error {
	switch e.Type {
	case acswire.TypeInactiveInstanceException:
		return ecsclient.ErrInactiveInstance
	case acswire.TypeAccessDeniedException:
		return errdefs.ErrUnauthorized
	case wire.TypeBadRequestException:
		return errdefs.ErrInvalidArgument
	case wire.TypeServerException:
		return errdefs.ErrUnavailable
	}
	return nil
}

var (
	errHeartbeatTimeout  = errors.New("no frame from ACS within the heartbeat timeout")
	errPeriodicReconnect = errors.New("periodic reconnect")
)

// Run connects to ACS and keeps reconnecting, with backoff, until ctx ends; it then returns ctx's
// error. Run must not be called concurrently on one Client.
func (c *Client) Run(ctx context.Context) error {
	for {
		start := c.clock.Now()
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if connected && c.clock.Now().Sub(start) >= stableConnection {
			c.backoff.Reset()
		}
		var delay time.Duration
		switch {
		case errors.Is(err, ecsclient.ErrInactiveInstance):
			delay = c.cfg.InactiveBackoff
			c.log.Error("the container instance was deregistered: ACS reports it inactive; waiting before reconnecting",
				"container_instance", c.cfg.ContainerInstanceArn, "cluster", c.cfg.Cluster, "retry_in", delay)
		case errors.Is(err, errPeriodicReconnect):
			c.log.Debug("reconnecting to ACS (periodic)")
		default:
			delay = c.backoff.Duration()
			c.log.Warn("ACS session ended; reconnecting", "error", err, "retry_in", delay)
			if !connected {
				c.rediscover(ctx)
			}
		}
		if err := retry.Sleep(ctx, c.clock, delay); err != nil {
			return err
		}
	}
}

// connectURL returns the http(s) URL of the upgrade request, with its query.
func (c *Client) connectURL() *url.URL {
	q := url.Values{}
	q.Set("clusterArn", c.cfg.Cluster)
	q.Set("containerInstanceArn", c.cfg.ContainerInstanceArn)
	q.Set("agentHash", c.cfg.AgentHash)
	q.Set("agentVersion", c.cfg.AgentVersion)
	q.Set("seqNum", strconv.FormatInt(c.h.SeqNum(), 10))
	q.Set("protocolVersion", "2")
	q.Set("dockerVersion", "DockerVersion: "+c.cfg.DockerVersion)
	q.Set("sendCredentials", strconv.FormatBool(c.firstConnection.Load()))
	return wsclient.ConnectURL(c.base, q)
}

// session runs one connection until it ends; connected reports whether the upgrade succeeded.
func (c *Client) session(ctx context.Context) (connected bool, err error) {
	conn, err := c.dialer.Dial(ctx, c.connectURL())
	if err != nil {
		return false, err
	}
	c.firstConnection.Store(false)
	c.log.Info("connected to ACS", "endpoint", c.base.Host)

	sctx, cancel := context.WithCancel(ctx)
	s := &session{c: c, conn: conn}
	frames := make(chan []byte)
	readErr := make(chan error, 1)
	work := make(chan acswire.Message, queueSize)
	workErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wsclient.Close(conn)
		wg.Wait()
	}()
	wg.Go(func() { wsclient.ReadFrames(sctx, conn, frames, readErr) })
	wg.Go(func() { s.work(sctx, work, workErr) })

	hbTimeout := c.cfg.HeartbeatTimeout
	if hbTimeout <= 0 {
		hbTimeout = DefaultHeartbeatTimeout + rand.N(DefaultHeartbeatJitter)
	}
	var periodic <-chan time.Time // nil: never
	switch p := c.cfg.PeriodicReconnect; {
	case p == 0:
		p = DefaultPeriodicReconnect + rand.N(DefaultPeriodicReconnectJitter)
		fallthrough
	case p > 0:
		t := c.clock.NewTimer(p)
		defer t.Stop()
		periodic = t.Chan()
	}
	heartbeat := c.clock.NewTimer(hbTimeout)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-readErr:
			return true, fmt.Errorf("read from ACS: %w", err)
		case err := <-workErr:
			return true, err
		case <-heartbeat.Chan():
			return true, errHeartbeatTimeout
		case <-periodic:
			return true, errPeriodicReconnect
		case data := <-frames:
			wsclient.Restart(heartbeat, hbTimeout)
			if err := s.dispatch(data, work); err != nil {
				return true, err
			}
		}
	}
}

// session is one websocket connection.
type session struct {
	c    *Client
	conn *websocket.Conn
	wmu  sync.Mutex // one writer at a time
}

// write sends one message as a text frame.
func (s *session) write(m acswire.Message) error {
	data, err := acswire.Encode(m)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return fmt.Errorf("write %s to ACS: %w", m.MessageType(), err)
	}
	if err := s.conn.WriteMessage(websocket.TextMessage, data); err != nil {
		return fmt.Errorf("write %s to ACS: %w", m.MessageType(), err)
	}
	return nil
}

// dispatch handles one frame: heartbeats at once, messages for the Handler through the work queue.
// It returns an error to end the session.
func (s *session) dispatch(data []byte, work chan<- acswire.Message) error {
	log := s.c.log
	m, err := acswire.Decode(data)
	var unknown *wire.UnknownTypeError
	switch {
	case errors.As(err, &unknown):
		log.Warn("skipping ACS frame of unknown type", "type", unknown.Type, "bytes", len(data))
		return nil
	case err != nil:
		log.Warn("skipping malformed ACS frame", "bytes", len(data), "error", err)
		return nil
	}
	log.Debug("ACS frame", "type", m.MessageType(), "bytes", len(data))
	switch m := m.(type) {
	case *acswire.HeartbeatMessage:
		return s.write(&acswire.HeartbeatAckRequest{MessageID: m.MessageID})
	case *acswire.StageUpdateMessage:
		s.c.logUnsupported(m.MessageType(), "Berth is updated by its package, not by ACS; refused")
		return s.write(s.nack(m.MessageID, m.ClusterArn, m.ContainerInstanceArn))
	case *acswire.PerformUpdateMessage:
		s.c.logUnsupported(m.MessageType(), "Berth is updated by its package, not by ACS; refused")
		return s.write(s.nack(m.MessageID, m.ClusterArn, m.ContainerInstanceArn))
	case *acswire.AttachInstanceNetworkInterfacesMessage:
		s.c.logUnsupported(m.MessageType(), "instance ENIs (trunking) are not supported by Berth; ignored")
		return nil
	case *acswire.ConfirmAttachmentMessage:
		s.c.logUnsupported(m.MessageType(), "resource attachments (EBS volumes) are not supported by Berth; ignored")
		return nil
	case *acswire.PayloadMessage, *acswire.IAMRoleCredentialsMessage, *acswire.AttachTaskNetworkInterfacesMessage, *acswire.TaskManifestMessage, *acswire.TaskStopVerificationAck:
		select {
		case work <- m:
		default:
			log.Warn("too many ACS messages waiting; dropping one unacknowledged for ACS to resend", "type", m.MessageType())
		}
		return nil
	case *wire.CloseMessage:
		return fmt.Errorf("ACS closed the session: %s", m.Message)
	}
	if msg, ok := exceptionMessage(m); ok {
		return &ExceptionError{Type: m.MessageType(), Message: msg}
	}
	log.Warn("skipping ACS frame the agent does not expect", "type", m.MessageType(), "bytes", len(data))
	return nil
}

// exceptionMessage returns the text of an ErrorMessage or exception.
func exceptionMessage(m acswire.Message) (string, bool) {
	switch m := m.(type) {
	case *acswire.ErrorMessage:
		return m.Message, true
	case *wire.ServerException:
		return m.Message, true
	case *wire.BadRequestException:
		return m.Message, true
	case *acswire.InvalidClusterException:
		return m.Message, true
	case *acswire.InvalidInstanceException:
		return m.Message, true
	case *acswire.AccessDeniedException:
		return m.Message, true
	case *acswire.InactiveInstanceException:
		return m.Message, true
	}
	return "", false
}

// work hands queued messages to the Handler in order; a failed write ends it and the session.
func (s *session) work(ctx context.Context, work <-chan acswire.Message, errc chan<- error) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-work:
			if err := s.handle(ctx, m); err != nil {
				errc <- err
				return
			}
		}
	}
}

// handle calls the Handler for m and acknowledges it when the Handler succeeded. Only a failed
// write is returned; a Handler error is logged and leaves m unacknowledged.
func (s *session) handle(ctx context.Context, m acswire.Message) error {
	h, log := s.c.h, s.c.log
	switch m := m.(type) {
	case *acswire.PayloadMessage:
		if m.MessageID != "" && s.c.seen.has(m.MessageID) {
			log.Debug("ACS sent a payload again; acknowledging it without handling it twice", "message_id", m.MessageID)
			return s.ackPayload(m)
		}
		accepted, rejected := acstranslate.TranslatePayload(m)
		p := Payload{MessageID: m.MessageID, SeqNum: m.SeqNum, Tasks: accepted, Rejected: rejected}
		if err := h.HandlePayload(ctx, p); err != nil {
			if ctx.Err() == nil {
				log.Warn("payload not accepted; leaving it unacknowledged for ACS to resend", "message_id", m.MessageID, "error", err)
			}
			return nil
		}
		if m.MessageID != "" {
			s.c.seen.add(m.MessageID)
		}
		return s.ackPayload(m)
	case *acswire.IAMRoleCredentialsMessage:
		cr := Credentials{MessageID: m.MessageID, TaskArn: m.TaskArn, RoleType: m.RoleType, Credentials: m.RoleCredentials}
		if err := h.HandleCredentials(ctx, cr); err != nil {
			if ctx.Err() == nil {
				log.Warn("credentials not stored; leaving them unacknowledged", "message_id", m.MessageID, "task", m.TaskArn, "error", err)
			}
			return nil
		}
		return s.write(&acswire.IAMRoleCredentialsAckRequest{
			MessageID:     m.MessageID,
			CredentialsID: m.RoleCredentials.CredentialsID,
			Expiration:    m.RoleCredentials.Expiration,
		})
	case *acswire.TaskManifestMessage:
		candidates, err := h.HandleTaskManifest(ctx, m.Tasks)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("task manifest not handled; leaving it unacknowledged", "message_id", m.MessageID, "error", err)
			}
			return nil
		}
		if err := s.write(s.ack(m.MessageID, m.ClusterArn, m.ContainerInstanceArn)); err != nil {
			return err
		}
		if len(candidates) == 0 {
			return nil
		}
		log.Info("tasks missing from ACS's task manifest; asking ACS whether to stop them", "tasks", len(candidates))
		return s.write(&acswire.TaskStopVerificationMessage{MessageID: crand.Text(), StopCandidates: candidates})
	case *acswire.TaskStopVerificationAck:
		if err := h.HandleStopVerification(ctx, m.StopTasks); err != nil && ctx.Err() == nil {
			log.Warn("stopping the tasks ACS confirmed failed", "message_id", m.MessageID, "error", err)
		}
		return nil
	case *acswire.AttachTaskNetworkInterfacesMessage:
		a := ENIAttachment{
			MessageID:   m.MessageID,
			TaskArn:     m.TaskArn,
			ENIs:        m.ElasticNetworkInterfaces,
			WaitTimeout: time.Duration(m.WaitTimeoutMs) * time.Millisecond,
		}
		if err := h.HandleENIAttachment(ctx, a); err != nil {
			if ctx.Err() == nil {
				log.Warn("ENI attachment not recorded; leaving it unacknowledged", "message_id", m.MessageID, "task", m.TaskArn, "error", err)
			}
			return nil
		}
		return s.write(s.ack(m.MessageID, m.ClusterArn, m.ContainerInstanceArn))
	}
	return nil
}

// nack refuses an update: Berth does not update itself.
func (s *session) nack(messageID, cluster, instance string) *acswire.NackRequest {
	a := s.ack(messageID, cluster, instance)
	return &acswire.NackRequest{Cluster: a.Cluster, ContainerInstance: a.ContainerInstance, MessageID: messageID,
		Reason: "Berth does not update itself over ACS; update its package"}
}

// logUnsupported logs a message type Berth does not act on, once per type for the client's life.
func (c *Client) logUnsupported(typ, what string) {
	c.unsupportedMu.Lock()
	defer c.unsupportedMu.Unlock()
	if c.unsupported.Has(typ) {
		return
	}
	c.unsupported.Add(typ)
	c.log.Warn("ACS message not supported by Berth: "+what, "type", typ)
}

// ack builds an AckRequest naming the cluster and instance as the message did, or as configured.
func (s *session) ack(messageID, cluster, instance string) *acswire.AckRequest {
	if cluster == "" {
		cluster = s.c.cfg.Cluster
	}
	if instance == "" {
		instance = s.c.cfg.ContainerInstanceArn
	}
	return &acswire.AckRequest{Cluster: cluster, ContainerInstance: instance, MessageID: messageID}
}

// ackPayload acknowledges a payload, then each credentials it carried.
func (s *session) ackPayload(m *acswire.PayloadMessage) error {
	if err := s.write(s.ack(m.MessageID, m.ClusterArn, m.ContainerInstanceArn)); err != nil {
		return err
	}
	for _, t := range m.Tasks {
		if t == nil {
			continue
		}
		for _, cr := range []*acswire.IAMRoleCredentials{t.RoleCredentials, t.ExecutionRoleCredentials} {
			if cr == nil {
				continue
			}
			if err := s.write(&acswire.IAMRoleCredentialsAckRequest{MessageID: m.MessageID, CredentialsID: cr.CredentialsID, Expiration: cr.Expiration}); err != nil {
				return err
			}
		}
	}
	return nil
}

// recentIDs remembers the last n message IDs added. It is safe for concurrent use.
type recentIDs struct {
	mu   sync.Mutex
	ids  set.Set[string]
	ring []string
	next int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{ring: make([]string, n)}
}

func (r *recentIDs) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids.Has(id)
}

func (r *recentIDs) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids.Has(id) {
		return
	}
	if old := r.ring[r.next]; old != "" {
		r.ids.Remove(old)
	}
	r.ring[r.next] = id
	r.ids.Add(id)
	r.next = (r.next + 1) % len(r.ring)
}

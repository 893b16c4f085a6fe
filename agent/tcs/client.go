// Package tcs is the agent's client of the ECS Telemetry Communication Service: a SigV4-signed
// websocket over which the agent publishes, every PublishInterval, its tasks' container metrics
// (PublishMetricsRequest), their container health (PublishHealthRequest) and the instance's status
// (PublishInstanceStatusRequest). Every frame the client sends is itself a signed request (see
// frame.go). The frames, and the stats sets the metrics are made of, are agent/tcswire's.
//
// A session, from connect to disconnect:
//
//	dial (signed upgrade) ──▶ resend the pending batches ──▶ every PublishInterval: snapshot the
//	      ▲                                                   Source into batches, send each whole,
//	      │                                                   wait for its acks
//	      │                                                       │
//	      └── backoff ◀── read or write error, heartbeat timeout, CloseMessage ◀┘
//
// # Batches: nothing lost, nothing counted twice
//
// Each round makes up to three batches, in order: metrics (one or more PublishMetricsRequest sharing
// one messageId, at most MaxTasksPerMessage tasks each, fin=true on the last; one idle message when
// no task runs), health (likewise, left out when no task has a health check) and instance status
// (one message). A batch is a snapshot: the Source is asked once per round, and a batch is rebuilt
// from its snapshot whenever it is sent.
//
// A batch stays pending until every one of its messages was written and answered (an ack of its
// type, or an exception frame). If the connection ends before that, the whole batch is sent again,
// first thing, on the next connection, under a new messageId: the server never sees a fin for the
// partial copy, so it is never a complete batch, and the resent one holds every task exactly once.
// A server that does not answer within AckTimeout is taken to have received the batch (it was
// written whole), so a silent server causes no duplicates. While disconnected nothing is
// snapshotted: samples keep accumulating in the Source until the next round.
package tcs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/tcswire"
	"github.com/berth-agent/berth/agent/wire"
	"github.com/berth-agent/berth/agent/wsclient"
)

// Source is what the client publishes: a snapshot of the tasks that run, taken once per round.
// Calls come from one goroutine at a time.
type Source interface {
	// Metrics returns each running task's container metrics for the interval ending at now, and
	// starts the next interval (see tcswire.Window.Take). No task means the instance is idle.
	Metrics(now time.Time) []tcswire.TaskMetric
	// Health returns the health of each task's containers that have a health check; tasks without
	// one are left out.
	Health(now time.Time) []tcswire.TaskHealth
}

// InstanceStatusSource is implemented by a Source that knows the instance's statuses. Without it the
// client reports a ContainerRuntime status OK since the client was made.
type InstanceStatusSource interface {
	InstanceStatuses(now time.Time) []tcswire.InstanceStatus
}

// Defaults applied by New to zero Config fields, and the ECS agent's batch size.
const (
	DefaultPublishInterval  = 20 * time.Second
	DefaultHeartbeatTimeout = time.Minute // plus up to DefaultHeartbeatJitter
	DefaultHeartbeatJitter  = time.Minute
	DefaultAckTimeout       = 30 * time.Second
	// DefaultSessionLifetime is how long the client keeps one connection before it reconnects, plus
	// up to DefaultSessionJitter: the ECS agent's DisconnectTimeout and DisconnectJitterMax
	// (ecs-agent/wsclient/client.go), which keep the signed upgrade fresh.
	DefaultSessionLifetime = 30 * time.Minute
	DefaultSessionJitter   = 5 * time.Minute
	// MaxTasksPerMessage is the most tasks one PublishMetricsRequest or PublishHealthRequest holds
	// (the model's TaskMetrics list has max 10).
	MaxTasksPerMessage = 10
)

const (
	stableConnection = time.Minute
	writeTimeout     = 10 * time.Second
	readLimit        = 1 << 20
	answerQueue      = 64
)

// Config configures a Client.
type Config struct {
	// Endpoint is the telemetryEndpoint from DiscoverPollEndpoint, http or https; the client
	// connects to Endpoint + "ws" with ws or wss.
	Endpoint             string
	Cluster              string
	ContainerInstanceArn string
	Region               string
	// Discover, when set, is asked for the telemetry endpoint before each connection, as the ECS
	// agent asks DiscoverPollEndpoint (cached) for every session; its answer replaces Endpoint, and
	// its error ends the attempt like a failed connection.
	Discover func(ctx context.Context) (string, error)
	// Credentials sign the upgrade and every frame (SigV4, service ecs). Nil sends them unsigned,
	// which only a local stand-in accepts.
	Credentials   aws.CredentialsProvider
	AgentVersion  string
	AgentHash     string
	DockerVersion string // the bare version, e.g. 27.3.1; left out of the query when empty
	Source        Source
	// PublishInterval spaces publishing rounds; zero means DefaultPublishInterval.
	PublishInterval time.Duration
	// DisableMetrics (ECS_DISABLE_METRICS) leaves metrics out; health and instance status still go.
	DisableMetrics bool
	// DisableHealth (ECS_DISABLE_DOCKER_HEALTH_CHECK) leaves container health out.
	DisableHealth bool
	// HeartbeatTimeout is how long a session may go without a frame from the server; zero means
	// DefaultHeartbeatTimeout plus a random jitter up to DefaultHeartbeatJitter, drawn per session.
	HeartbeatTimeout time.Duration
	// AckTimeout bounds the wait for a batch's acks; zero means DefaultAckTimeout.
	AckTimeout time.Duration
	// SessionLifetime is how long a connection is kept before the client closes it and reconnects at
	// once; zero means DefaultSessionLifetime plus a random jitter up to DefaultSessionJitter.
	SessionLifetime time.Duration
	// ReconnectBackoff spaces reconnects after a failure; nil means the ECS agent's, 1 s to 1 min,
	// ×2, 20 % jitter. It is reset after a connection that lived a minute.
	ReconnectBackoff retry.Backoff
	// Clock times rounds, timeouts, backoff and signatures; nil is the wall clock. Write deadlines on
	// the socket are always wall-clock time.
	Clock  clockwork.Clock
	Logger *logger.Logger // nil: no logging
}

// Client keeps a session with TCS open and publishes to it.
type Client struct {
	cfg     Config
	log     *logger.Logger
	clock   clockwork.Clock
	backoff retry.Backoff
	base    *url.URL
	frames  *frameSigner
	dialer  *wsclient.Dialer
	started time.Time

	// pending are the batches snapshotted and not yet answered, oldest first. Only the publishing
	// goroutine of the current session touches them; sessions run one after another.
	pending []*batch
}

// batch is one snapshot to publish; build makes its messages under a message ID.
type batch struct {
	kind   string // the ack type that answers each of its messages
	build  func(id string) []tcswire.Message
	events int // tasks in the snapshot, for the log
}

// New returns a client for cfg; it fails for an unusable Endpoint or a nil Source.
func New(cfg Config) (*Client, error) {
	if cfg.Source == nil {
		return nil, errors.New("tcs: nil source")
	}
	base, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.PublishInterval <= 0 {
		cfg.PublishInterval = DefaultPublishInterval
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "tcs"),
		clock:   cfg.Clock,
		backoff: cfg.ReconnectBackoff,
		base:    base,
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.backoff == nil {
		c.backoff = newReconnectBackoff()
	}
	c.dialer = wsclient.NewDialer("TCS", cfg.Region, cfg.Credentials, readLimit, c.clock)
	c.frames = &frameSigner{region: cfg.Region, credentials: cfg.Credentials, signer: v4.NewSigner()}
	c.started = c.clock.Now()
	return c, nil
}

// parseEndpoint checks a telemetry endpoint: an http or https URL.
func parseEndpoint(endpoint string) (*url.URL, error) {
	base, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("tcs endpoint %q: %w", endpoint, err)
	}
	if base.Scheme != "http" && base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("tcs endpoint %q: want an http or https URL", endpoint)
	}
	return base, nil
}

// newReconnectBackoff is the ECS agent's TCS reconnect backoff (ecs-agent/tcs/handler/handler.go):
// 1 s doubling up to 1 min, each delay jittered by 20 %.
func newReconnectBackoff() *retry.ExponentialBackoff {
	return retry.NewExponentialBackoff(time.Second, time.Minute, 0.2, 2)
}

var (
	errHeartbeatTimeout = errors.New("no frame from TCS within the heartbeat timeout")
	// errSessionLifetime ends a session that lived its lifetime; the client reconnects at once.
	errSessionLifetime = errors.New("the session lived its lifetime")
)

// Run connects to TCS and publishes, reconnecting with backoff, until ctx ends; it then returns
// ctx's error. Run must not be called concurrently on one Client.
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
		if errors.Is(err, errSessionLifetime) {
			c.log.Info("TCS session renewed", "pending_batches", len(c.pending))
			continue
		}
		delay := c.backoff.Duration()
		c.log.Warn("TCS session ended; reconnecting", "error", err, "retry_in", delay, "pending_batches", len(c.pending))
		if err := retry.Sleep(ctx, c.clock, delay); err != nil {
			return err
		}
	}
}

// connectURL returns the http(s) URL of the upgrade request, with its query.
func (c *Client) connectURL() *url.URL {
	q := url.Values{}
	q.Set("cluster", c.cfg.Cluster)
	q.Set("containerInstance", c.cfg.ContainerInstanceArn)
	q.Set("agentVersion", c.cfg.AgentVersion)
	q.Set("agentHash", c.cfg.AgentHash)
	if c.cfg.DockerVersion != "" {
		q.Set("dockerVersion", c.cfg.DockerVersion)
	}
	return wsclient.ConnectURL(c.base, q)
}

// session runs one connection until it ends; connected reports whether the upgrade succeeded.
func (c *Client) session(ctx context.Context) (connected bool, err error) {
	if c.cfg.Discover != nil {
		endpoint, err := c.cfg.Discover(ctx)
		if err != nil {
			return false, fmt.Errorf("discover the TCS endpoint: %w", err)
		}
		if c.base, err = parseEndpoint(endpoint); err != nil {
			return false, err
		}
	}
	target := c.connectURL()
	conn, err := c.dialer.Dial(ctx, target)
	if err != nil {
		return false, err
	}
	c.log.Info("connected to TCS", "endpoint", c.base.Host)

	sctx, cancel := context.WithCancel(ctx)
	s := &session{c: c, conn: conn, target: target}
	frames := make(chan []byte)
	readErr := make(chan error, 1)
	pubErr := make(chan error, 1)
	answers := make(chan string, answerQueue)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wsclient.Close(conn)
		wg.Wait()
	}()
	wg.Go(func() { wsclient.ReadFrames(sctx, conn, frames, readErr) })
	wg.Go(func() {
		if err := s.publish(sctx, answers); err != nil && sctx.Err() == nil {
			pubErr <- err
		}
	})

	hbTimeout := c.cfg.HeartbeatTimeout
	if hbTimeout <= 0 {
		hbTimeout = DefaultHeartbeatTimeout + mrand.N(DefaultHeartbeatJitter)
	}
	heartbeat := c.clock.NewTimer(hbTimeout)
	defer heartbeat.Stop()
	lifetime := c.cfg.SessionLifetime
	if lifetime <= 0 {
		lifetime = DefaultSessionLifetime + mrand.N(DefaultSessionJitter)
	}
	renew := c.clock.NewTimer(lifetime)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-readErr:
			return true, fmt.Errorf("read from TCS: %w", err)
		case err := <-pubErr:
			return true, err
		case <-heartbeat.Chan():
			return true, errHeartbeatTimeout
		case <-renew.Chan():
			return true, errSessionLifetime
		case data := <-frames:
			wsclient.Restart(heartbeat, hbTimeout)
			if err := s.dispatch(data, answers); err != nil {
				return true, err
			}
		}
	}
}

// session is one websocket connection.
type session struct {
	c      *Client
	conn   *websocket.Conn
	target *url.URL // the upgrade URL, which every frame is signed for
}

// dispatch handles one server frame: acks and exceptions are passed to the publisher as answers,
// heartbeats only count as life; CloseMessage and StopTelemetrySessionMessage end the session.
func (s *session) dispatch(data []byte, answers chan<- string) error {
	log := s.c.log
	m, err := tcswire.Decode(data)
	var unknown *wire.UnknownTypeError
	switch {
	case errors.As(err, &unknown):
		log.Warn("skipping TCS frame of unknown type", "type", unknown.Type, "bytes", len(data))
		return nil
	case err != nil:
		log.Warn("skipping malformed TCS frame", "bytes", len(data), "error", err)
		return nil
	}
	answer := m.MessageType()
	switch m := m.(type) {
	case *tcswire.HeartbeatMessage:
		log.Debug("TCS heartbeat", "healthy", m.Healthy)
		return nil
	case *tcswire.AckPublishMetric, *tcswire.AckPublishHealth, *tcswire.AckPublishInstanceStatus:
	case *wire.CloseMessage:
		return fmt.Errorf("TCS closed the session: %s", m.Message)
	case *tcswire.StopTelemetrySessionMessage:
		return fmt.Errorf("TCS stopped the session: %s", m.Message)
	case *wire.BadRequestException, *tcswire.ResourceValidationException, *tcswire.InvalidParameterException, *wire.ServerException:
		log.Warn("TCS rejected a message", "type", m.MessageType(), "message", exceptionText(m))
		answer = answerException
	default:
		log.Warn("skipping TCS frame the agent does not expect", "type", m.MessageType())
		return nil
	}
	select {
	case answers <- answer:
	default:
		log.Debug("TCS answer not awaited; dropping it", "type", answer)
	}
	return nil
}

// answerException is the answer an exception frame gives to the message in flight.
const answerException = "exception"

func exceptionText(m tcswire.Message) string {
	switch m := m.(type) {
	case *wire.BadRequestException:
		return m.Message
	case *tcswire.ResourceValidationException:
		return m.Message
	case *tcswire.InvalidParameterException:
		return m.Message
	case *wire.ServerException:
		return m.Message
	}
	return ""
}

// publish resends the pending batches, then publishes a round every PublishInterval until ctx
// ends or a write fails.
func (s *session) publish(ctx context.Context, answers <-chan string) error {
	c := s.c
	ticker := c.clock.NewTicker(c.cfg.PublishInterval)
	defer ticker.Stop()
	for {
		if err := s.flush(ctx, answers); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.Chan():
			c.pending = append(c.pending, c.round(c.clock.Now())...)
		}
	}
}

// flush sends the pending batches in order, each whole, dropping one once its answers came.
func (s *session) flush(ctx context.Context, answers <-chan string) error {
	c := s.c
	for len(c.pending) > 0 {
		b := c.pending[0]
	drain: // answers that came too late for an earlier batch
		for {
			select {
			case <-answers:
			default:
				break drain
			}
		}
		id := newUUID()
		msgs := b.build(id)
		for _, m := range msgs {
			if err := s.write(ctx, m); err != nil {
				return err
			}
		}
		if err := s.await(ctx, answers, b.kind, len(msgs)); err != nil {
			return err
		}
		c.pending = c.pending[1:]
		c.log.Debug("published to TCS", "type", msgs[0].MessageType(), "message_id", id, "messages", len(msgs), "tasks", b.events)
	}
	return nil
}

// await waits for n answers of kind (or exceptions); after AckTimeout it gives up and returns nil.
func (s *session) await(ctx context.Context, answers <-chan string, kind string, n int) error {
	t := s.c.clock.NewTimer(s.c.cfg.AckTimeout)
	defer t.Stop()
	for n > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.Chan():
			s.c.log.Warn("TCS did not acknowledge a batch; taking it as received", "type", kind, "missing", n)
			return nil
		case a := <-answers:
			if a == kind || a == answerException {
				n--
			}
		}
	}
	return nil
}

// write signs m and sends it as one text frame.
func (s *session) write(ctx context.Context, m tcswire.Message) error {
	body, err := tcswire.Encode(m)
	if err != nil {
		return err
	}
	frame, err := s.c.frames.sign(ctx, s.target, body, s.c.clock.Now())
	if err != nil {
		return err
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return fmt.Errorf("write %s to TCS: %w", m.MessageType(), err)
	}
	if err := s.conn.WriteMessage(websocket.TextMessage, frame); err != nil {
		return fmt.Errorf("write %s to TCS: %w", m.MessageType(), err)
	}
	return nil
}

// round snapshots the Source into this round's batches.
func (c *Client) round(now time.Time) []*batch {
	var out []*batch
	if !c.cfg.DisableMetrics {
		out = append(out, c.metricsBatch(now))
	}
	if b := c.healthBatch(now); b != nil {
		out = append(out, b)
	}
	return append(out, c.instanceStatusBatch(now))
}

func (c *Client) metricsBatch(now time.Time) *batch {
	tasks := c.cfg.Source.Metrics(now)
	ts := tcswire.At(now)
	return &batch{kind: tcswire.TypeAckPublishMetric, events: len(tasks), build: func(id string) []tcswire.Message {
		md := tcswire.MetricsMetadata{Cluster: c.cfg.Cluster, ContainerInstance: c.cfg.ContainerInstanceArn, MessageID: id}
		if len(tasks) == 0 {
			md.Idle, md.Fin = true, true
			return []tcswire.Message{&tcswire.PublishMetricsRequest{Metadata: md, Timestamp: ts}}
		}
		var msgs []tcswire.Message
		for chunk := range slices.Chunk(tasks, MaxTasksPerMessage) {
			msgs = append(msgs, &tcswire.PublishMetricsRequest{Metadata: md, TaskMetrics: chunk, Timestamp: ts})
		}
		msgs[len(msgs)-1].(*tcswire.PublishMetricsRequest).Metadata.Fin = true
		return msgs
	}}
}

func (c *Client) healthBatch(now time.Time) *batch {
	if c.cfg.DisableHealth {
		return nil
	}
	tasks := c.cfg.Source.Health(now)
	if len(tasks) == 0 {
		return nil
	}
	ts := tcswire.At(now)
	return &batch{kind: tcswire.TypeAckPublishHealth, events: len(tasks), build: func(id string) []tcswire.Message {
		md := tcswire.HealthMetadata{Cluster: c.cfg.Cluster, ContainerInstance: c.cfg.ContainerInstanceArn, MessageID: id}
		var msgs []tcswire.Message
		for chunk := range slices.Chunk(tasks, MaxTasksPerMessage) {
			msgs = append(msgs, &tcswire.PublishHealthRequest{Metadata: md, Tasks: chunk, Timestamp: ts})
		}
		msgs[len(msgs)-1].(*tcswire.PublishHealthRequest).Metadata.Fin = true
		return msgs
	}}
}

func (c *Client) instanceStatusBatch(now time.Time) *batch {
	var statuses []tcswire.InstanceStatus
	if src, ok := c.cfg.Source.(InstanceStatusSource); ok {
		statuses = src.InstanceStatuses(now)
	} else {
		statuses = []tcswire.InstanceStatus{{
			Type:             tcswire.InstanceStatusTypeRuntime,
			Status:           tcswire.InstanceStatusOK,
			LastStatusChange: tcswire.At(c.started),
			LastUpdated:      tcswire.At(now),
		}}
	}
	ts := tcswire.At(now)
	return &batch{kind: tcswire.TypeAckPublishInstanceStatus, build: func(id string) []tcswire.Message {
		return []tcswire.Message{&tcswire.PublishInstanceStatusRequest{
			Metadata:  tcswire.InstanceStatusMetadata{Cluster: c.cfg.Cluster, ContainerInstance: c.cfg.ContainerInstanceArn, RequestID: id},
			Statuses:  statuses,
			Timestamp: ts,
		}}
	}}
}

// newUUID returns a random version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

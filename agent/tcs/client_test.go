package tcs_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/tcs"
	"github.com/berth-agent/berth/agent/tcs/tcstest"
	"github.com/berth-agent/berth/agent/tcswire"
	"github.com/berth-agent/berth/agent/wire"
)

const (
	interval  = 20 * time.Second
	accessKey = "AKIDTCSTEST"
)

// fakeSource serves fixed tasks and counts how often it was asked.
type fakeSource struct {
	mu           sync.Mutex
	metrics      []tcswire.TaskMetric
	health       []tcswire.TaskHealth
	metricsCalls int
}

func (f *fakeSource) Metrics(time.Time) []tcswire.TaskMetric {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metricsCalls++
	return f.metrics
}

func (f *fakeSource) Health(time.Time) []tcswire.TaskHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

func (f *fakeSource) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metricsCalls
}

// noBackoff reconnects at once.
type noBackoff struct{}

func (noBackoff) Duration() time.Duration { return 0 }
func (noBackoff) Reset()                  {}

type harness struct {
	srv   *tcstest.Server
	clock *clockwork.FakeClock
	src   *fakeSource
	ctx   context.Context
}

// start runs a client against a stand-in TCS until the test ends.
func start(t *testing.T, src *fakeSource, edit func(*tcs.Config)) *harness {
	t.Helper()
	srv := tcstest.NewServer(t)
	clock := clockwork.NewFakeClock()
	cfg := tcs.Config{
		Endpoint:             srv.URL,
		Cluster:              "default",
		ContainerInstanceArn: "arn:aws:ecs:us-west-2:123456789012:container-instance/default/abc",
		Region:               "us-west-2",
		Credentials:          credentials.NewStaticCredentialsProvider(accessKey, "secret", ""),
		AgentVersion:         "1.0.0",
		AgentHash:            "deadbeef",
		DockerVersion:        "27.3.1",
		Source:               src,
		PublishInterval:      interval,
		HeartbeatTimeout:     time.Hour,
		AckTimeout:           time.Hour,
		SessionLifetime:      24 * time.Hour,
		ReconnectBackoff:     noBackoff{},
		Clock:                clock,
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := tcs.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.Empty(t, srv.Problems())
	})
	srv.WaitFor(t, "a connection", func(s *tcstest.Server) bool { return s.Connected() })
	return &harness{srv: srv, clock: clock, src: src, ctx: ctx}
}

// tick lets one publish interval pass once the client waits on its ticker and heartbeat timer.
func (h *harness) tick(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, h.clock.BlockUntilContext(ctx, 3)) // the ticker, the heartbeat and the lifetime
	h.clock.Advance(interval)
}

func tasks(n int) []tcswire.TaskMetric {
	var out []tcswire.TaskMetric
	for i := range n {
		out = append(out, tcswire.TaskMetric{
			TaskArn:               fmt.Sprintf("arn:aws:ecs:us-west-2:123456789012:task/default/%02d", i),
			TaskDefinitionFamily:  "web",
			TaskDefinitionVersion: "3",
			ContainerMetrics: []tcswire.ContainerMetric{{
				ContainerName:  "app",
				CPUStatsSet:    tcswire.FloatStats(1, 2, 3),
				MemoryStatsSet: tcswire.FloatStats(64),
			}},
		})
	}
	return out
}

func healths(n int) []tcswire.TaskHealth {
	var out []tcswire.TaskHealth
	for i := range n {
		out = append(out, tcswire.TaskHealth{
			TaskArn:               fmt.Sprintf("arn:aws:ecs:us-west-2:123456789012:task/default/%02d", i),
			TaskDefinitionFamily:  "web",
			TaskDefinitionVersion: "3",
			Containers:            []tcswire.ContainerHealth{{ContainerName: "app", HealthStatus: tcswire.HealthStatusHealthy, StatusSince: tcswire.At(time.Unix(1700000000, 0))}},
		})
	}
	return out
}

func TestPublishesIdleMetricsEveryInterval(t *testing.T) {
	h := start(t, &fakeSource{}, nil)
	for round := 1; round <= 3; round++ {
		h.tick(t)
		h.srv.WaitFor(t, fmt.Sprintf("round %d", round), func(s *tcstest.Server) bool {
			return len(s.MetricsBatches()) == round && len(s.InstanceStatuses()) == round
		})
	}
	batches := h.srv.MetricsBatches()
	for _, b := range batches {
		assert.True(t, b.Idle)
		assert.Equal(t, 1, b.Messages)
		assert.Empty(t, b.Tasks)
	}
	assert.Empty(t, h.srv.HealthBatches(), "no task has a health check")
	assert.Equal(t, 3, h.src.calls())

	up := h.srv.Upgrades()
	require.Len(t, up, 1)
	assert.Equal(t, accessKey, up[0].AccessKeyID)
	for k, want := range map[string]string{
		"cluster":           "default",
		"containerInstance": "arn:aws:ecs:us-west-2:123456789012:container-instance/default/abc",
		"agentVersion":      "1.0.0",
		"agentHash":         "deadbeef",
		"dockerVersion":     "27.3.1",
	} {
		assert.Equal(t, want, up[0].Query.Get(k), k)
	}

	st := h.srv.InstanceStatuses()[0]
	assert.Equal(t, "default", st.Metadata.Cluster)
	assert.NotEmpty(t, st.Metadata.RequestID)
	require.Len(t, st.Statuses, 1)
	assert.Equal(t, tcswire.InstanceStatusTypeRuntime, st.Statuses[0].Type)
	assert.Equal(t, tcswire.InstanceStatusOK, st.Statuses[0].Status)
	assert.False(t, st.Statuses[0].LastUpdated.IsZero())
}

func TestFramesSignedWithGivenKey(t *testing.T) {
	h := start(t, &fakeSource{metrics: tasks(3), health: healths(1)}, nil)
	h.tick(t)
	h.srv.WaitFor(t, "a round", func(s *tcstest.Server) bool { return len(s.InstanceStatuses()) == 1 })
	keys := h.srv.AccessKeyIDs()
	assert.Len(t, keys, 3)
	for _, r := range h.srv.Received() {
		assert.Equal(t, accessKey, r.AccessKeyID)
		assert.Contains(t, r.Header.Get("Authorization"), "/us-west-2/ecs/aws4_request, SignedHeaders=host;x-amz-date, Signature=")
		assert.Equal(t, h.srv.URL[len("http://"):len(h.srv.URL)-1], r.Header.Get("Host"))
		assert.Regexp(t, `^\d{8}T\d{6}Z$`, r.Header.Get("X-Amz-Date"))
	}
}

func TestBatchesWithFinOnTheLast(t *testing.T) {
	h := start(t, &fakeSource{metrics: tasks(25), health: healths(12)}, nil)
	h.tick(t)
	h.srv.WaitFor(t, "a round", func(s *tcstest.Server) bool { return len(s.InstanceStatuses()) == 1 })

	var metrics []*tcswire.PublishMetricsRequest
	var health []*tcswire.PublishHealthRequest
	for _, r := range h.srv.Received() {
		switch m := r.Message.(type) {
		case *tcswire.PublishMetricsRequest:
			metrics = append(metrics, m)
		case *tcswire.PublishHealthRequest:
			health = append(health, m)
		}
	}
	require.Len(t, metrics, 3)
	for i, m := range metrics {
		assert.Equal(t, []int{10, 10, 5}[i], len(m.TaskMetrics))
		assert.Equal(t, i == 2, m.Metadata.Fin, "fin on message %d", i)
		assert.False(t, m.Metadata.Idle)
		assert.Equal(t, metrics[0].Metadata.MessageID, m.Metadata.MessageID, "one messageId per batch")
	}
	require.Len(t, health, 2)
	assert.Len(t, health[0].Tasks, 10)
	assert.Len(t, health[1].Tasks, 2)
	assert.False(t, health[0].Metadata.Fin)
	assert.True(t, health[1].Metadata.Fin)
	assert.NotEqual(t, metrics[0].Metadata.MessageID, health[0].Metadata.MessageID)

	mb := h.srv.MetricsBatches()
	require.Len(t, mb, 1)
	assert.Len(t, mb[0].Tasks, 25)
	hb := h.srv.HealthBatches()
	require.Len(t, hb, 1)
	assert.Len(t, hb[0].Tasks, 12)
}

// twoRoundsWith runs two publishing rounds of a client configured by mod and waits until each has
// published the instance status and the batches still counts.
func twoRoundsWith[B any](t *testing.T, mod func(*tcs.Config), still func(*tcstest.Server) []B) *harness {
	t.Helper()
	h := start(t, &fakeSource{metrics: tasks(2), health: healths(2)}, mod)
	for round := 1; round <= 2; round++ {
		h.tick(t)
		h.srv.WaitFor(t, "a round", func(s *tcstest.Server) bool {
			return len(s.InstanceStatuses()) == round && len(still(s)) == round
		})
	}
	return h
}

func TestDisableMetricsStopsOnlyMetrics(t *testing.T) {
	h := twoRoundsWith(t, func(c *tcs.Config) { c.DisableMetrics = true }, (*tcstest.Server).HealthBatches)
	assert.Empty(t, h.srv.MetricsBatches())
	assert.Zero(t, h.src.calls(), "metrics not even gathered")
}

func TestDisableHealthStopsOnlyHealth(t *testing.T) {
	h := twoRoundsWith(t, func(c *tcs.Config) { c.DisableHealth = true }, (*tcstest.Server).MetricsBatches)
	assert.Empty(t, h.srv.HealthBatches())
}

func TestReconnectMidBatchLosesAndDuplicatesNothing(t *testing.T) {
	h := start(t, &fakeSource{metrics: tasks(25), health: healths(12)}, nil)
	// The second metrics frame of the batch arrives, then the connection drops before its ack.
	h.srv.DropAfter(2)
	h.tick(t)
	h.srv.WaitFor(t, "the batch resent on a new connection", func(s *tcstest.Server) bool {
		return len(s.InstanceStatuses()) == 1
	})
	assert.Equal(t, 2, h.srv.Connections())

	var partial, resent []string
	for _, r := range h.srv.Received() {
		if m, ok := r.Message.(*tcswire.PublishMetricsRequest); ok {
			if r.Conn == 1 {
				partial = append(partial, m.Metadata.MessageID)
			} else {
				resent = append(resent, m.Metadata.MessageID)
			}
		}
	}
	assert.Len(t, partial, 2, "two frames before the drop")
	assert.Len(t, resent, 3, "the whole batch again")
	assert.Len(t, slices.Compact(resent), 1)
	assert.NotEqual(t, partial[0], resent[0], "the resent batch has a new messageId")

	mb := h.srv.MetricsBatches()
	require.Len(t, mb, 1, "one complete metrics batch")
	seen := map[string]int{}
	for _, task := range mb[0].Tasks {
		seen[task.TaskArn]++
	}
	assert.Len(t, seen, 25)
	for arn, n := range seen {
		assert.Equal(t, 1, n, arn)
	}
	hb := h.srv.HealthBatches()
	require.Len(t, hb, 1)
	assert.Len(t, hb[0].Tasks, 12)
	assert.Equal(t, 1, h.src.calls(), "the batch is rebuilt from its snapshot, not gathered again")

	// The next round goes on the new connection as usual.
	h.tick(t)
	h.srv.WaitFor(t, "the next round", func(s *tcstest.Server) bool { return len(s.InstanceStatuses()) == 2 })
	assert.Len(t, h.srv.MetricsBatches(), 2)
	ids := map[string]bool{}
	for _, b := range h.srv.MetricsBatches() {
		ids[b.MessageID] = true
	}
	assert.Len(t, ids, 2, "distinct messageIds")
}

func TestReconnectAfterServerDrop(t *testing.T) {
	h := start(t, &fakeSource{}, nil)
	h.srv.Drop()
	h.srv.WaitFor(t, "a reconnect", func(s *tcstest.Server) bool { return s.Connections() == 2 && s.Connected() })
	require.NoError(t, h.srv.SendHeartbeat())
	h.tick(t)
	h.srv.WaitFor(t, "a round", func(s *tcstest.Server) bool { return len(s.MetricsBatches()) == 1 })
	assert.Equal(t, 2, h.srv.MetricsBatches()[0].Conn)
}

// TestSessionEndsAsTheECSAgentsDoes: like the ECS agent (ecs-agent/tcs/handler/handler.go), the
// client reconnects when TCS sends StopTelemetrySessionMessage or CloseMessage, and when no frame came
// within the heartbeat timeout.
func TestSessionEndsAsTheECSAgentsDoes(t *testing.T) {
	for name, end := range map[string]func(t *testing.T, h *harness){
		"StopTelemetrySessionMessage": func(t *testing.T, h *harness) {
			require.NoError(t, h.srv.Send(&tcswire.StopTelemetrySessionMessage{Message: "rebalancing"}))
		},
		"CloseMessage": func(t *testing.T, h *harness) { require.NoError(t, h.srv.Send(&wire.CloseMessage{Message: "bye"})) },
		"heartbeat timeout": func(t *testing.T, h *harness) {
			ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, h.clock.BlockUntilContext(ctx, 3))
			h.clock.Advance(time.Minute)
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := start(t, &fakeSource{}, func(c *tcs.Config) { c.HeartbeatTimeout = time.Minute })
			end(t, h)
			h.srv.WaitFor(t, "a reconnect", func(s *tcstest.Server) bool { return s.Connections() == 2 && s.Connected() })
		})
	}
}

// TestSessionRenewedAfterItsLifetime: like the ECS agent (ecs-agent/wsclient/client.go,
// DisconnectTimeout), the client closes a connection that lived its lifetime and reconnects at once,
// without the backoff of a failure.
func TestSessionRenewedAfterItsLifetime(t *testing.T) {
	h := start(t, &fakeSource{}, func(c *tcs.Config) {
		c.SessionLifetime = 30 * time.Minute
		c.ReconnectBackoff = retry.NewExponentialBackoff(time.Hour, time.Hour, 0, 1)
	})
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, h.clock.BlockUntilContext(ctx, 3))
	h.clock.Advance(30 * time.Minute)
	h.srv.WaitFor(t, "a reconnect without the hour of backoff", func(s *tcstest.Server) bool { return s.Connections() == 2 && s.Connected() })
}

func TestUnsignedUpgradeRefused(t *testing.T) {
	srv := tcstest.NewServer(t)
	c, err := tcs.New(tcs.Config{Endpoint: srv.URL, Source: &fakeSource{}, ReconnectBackoff: noBackoff{}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, c.Run(ctx), context.DeadlineExceeded)
	assert.Zero(t, srv.Connections())
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]tcs.Config{
		"no source":   {Endpoint: "https://tcs.example/"},
		"bad scheme":  {Endpoint: "ftp://tcs.example/", Source: &fakeSource{}},
		"no host":     {Endpoint: "https:///", Source: &fakeSource{}},
		"unparseable": {Endpoint: "http://[::1", Source: &fakeSource{}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tcs.New(cfg)
			assert.Error(t, err)
		})
	}
}

// TestEndpointDiscoveredForEachSession: like the ECS agent (ecs-agent/tcs/handler/handler.go,
// getTelemetryEndpoint), the client asks for the endpoint before every connection, so a moved
// endpoint is followed on the next reconnect.
func TestEndpointDiscoveredForEachSession(t *testing.T) {
	moved := tcstest.NewServer(t)
	var mu sync.Mutex
	asked := 0
	h := start(t, &fakeSource{}, func(c *tcs.Config) {
		first := c.Endpoint
		c.Discover = func(context.Context) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			asked++
			if asked == 1 {
				return first, nil
			}
			return moved.URL, nil
		}
	})
	h.srv.Drop()
	moved.WaitFor(t, "a connection to the moved endpoint", func(s *tcstest.Server) bool { return s.Connected() })
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, asked)
	assert.Equal(t, 1, h.srv.Connections(), "the old endpoint is not asked again")
}

package ecsstandin

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/berth-agent/berth/agent/tcswire"
)

// Telemetry relays the agent's TCS websocket (any websocket other than ACS's: the telemetry endpoint
// DiscoverPollEndpoint names) to the control plane unchanged, and notes the sessions and every
// complete batch of metrics the agent publishes over it. It reads the frames as the TCS wire defines
// them (agent/tcswire), nothing of the agent's own code.
type Telemetry struct {
	upstream string // ws://host:port of the control plane
	wg       sync.WaitGroup

	mu        sync.Mutex
	open      map[*relaySession]struct{}
	sessions  int            // TCS sessions opened by the agent
	batches   map[string]int // message ID of a batch not finished yet → its task metrics so far
	publishes []MetricsPublish
	changed   chan struct{} // closed and replaced when a session opens or closes or a batch completes
}

// MetricsPublish is one complete batch of PublishMetricsRequest messages (the last one has fin set).
type MetricsPublish struct {
	At    time.Time // when its last message arrived
	Tasks int       // task metrics over the batch
	Idle  bool      // the agent said it runs no task
}

func newTelemetry(upstream string) *Telemetry {
	return &Telemetry{upstream: upstream, open: map[*relaySession]struct{}{}, batches: map[string]int{}, changed: make(chan struct{})}
}

func (t *Telemetry) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// serve relays one TCS session until either side closes it.
func (t *Telemetry) serve(w http.ResponseWriter, req *http.Request) {
	sess, ok := relayUpgrade(w, req, t.upstream+req.URL.RequestURI())
	if !ok {
		return
	}
	t.mu.Lock()
	t.open[sess] = struct{}{}
	t.sessions++
	t.notifyLocked()
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sess.close()
		for {
			mt, data, err := sess.cp.ReadMessage()
			if err != nil {
				return
			}
			sess.wmu.Lock()
			_ = sess.agent.SetWriteDeadline(time.Now().Add(10 * time.Second))
			err = sess.agent.WriteMessage(mt, data)
			sess.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		mt, data, err := sess.agent.ReadMessage()
		if err != nil {
			break
		}
		t.note(data)
		_ = sess.cp.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := sess.cp.WriteMessage(mt, data); err != nil {
			break
		}
	}
	sess.close()
	<-done
	t.mu.Lock()
	delete(t.open, sess)
	t.notifyLocked()
	t.mu.Unlock()
}

// note records a PublishMetricsRequest frame of the agent; other frames, and frames that do not parse
// (the control plane judges those), are passed on without a note.
func (t *Telemetry) note(frame []byte) {
	_, body, err := tcswire.ParseFrame(frame)
	if err != nil {
		return
	}
	m, err := tcswire.Decode(body)
	if err != nil {
		return
	}
	pub, ok := m.(*tcswire.PublishMetricsRequest)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id := pub.Metadata.MessageID
	t.batches[id] += len(pub.TaskMetrics)
	if pub.Metadata.Fin {
		t.publishes = append(t.publishes, MetricsPublish{At: time.Now(), Tasks: t.batches[id], Idle: pub.Metadata.Idle})
		delete(t.batches, id)
		t.notifyLocked()
	}
}

// Sessions returns how many TCS sessions the agent opened and how many are open now.
func (t *Telemetry) Sessions() (opened, open int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sessions, len(t.open)
}

// Publishes returns the complete metrics batches whose last message arrived in [from, to).
func (t *Telemetry) Publishes(from, to time.Time) []MetricsPublish {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []MetricsPublish
	for _, p := range t.publishes {
		if !p.At.Before(from) && p.At.Before(to) {
			out = append(out, p)
		}
	}
	return out
}

// WaitSession waits until the agent has a TCS session open through the front.
func (t *Telemetry) WaitSession(ctx context.Context) error {
	for {
		t.mu.Lock()
		ok, changed := len(t.open) > 0, t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no TCS session: %w", context.Cause(ctx))
		case <-changed:
		}
	}
}

// WaitPublish waits for a complete metrics batch with at least tasks task metrics that arrived after
// after, and returns it.
func (t *Telemetry) WaitPublish(ctx context.Context, after time.Time, tasks int) (MetricsPublish, error) {
	for {
		t.mu.Lock()
		changed := t.changed
		for _, p := range t.publishes {
			if p.At.After(after) && p.Tasks >= tasks {
				t.mu.Unlock()
				return p, nil
			}
		}
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return MetricsPublish{}, fmt.Errorf("no metrics of %d tasks published over TCS: %w", tasks, context.Cause(ctx))
		case <-changed:
		}
	}
}

// close ends the open sessions and waits for their relays.
func (t *Telemetry) close() {
	t.mu.Lock()
	for s := range t.open {
		s.close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

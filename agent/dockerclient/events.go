package dockerclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/retry"
)

// Synthetic event sent by Events after it re-subscribed to a dropped stream.
// Events may have been missed (or may be delivered twice) around it, so a
// consumer receiving it re-inspects the containers it cares about.
const (
	EventTypeBerth     = "berth"
	ActionResubscribed = "resubscribed"
)

// Event is one Docker Engine event, or the synthetic
// {Type: EventTypeBerth, Action: ActionResubscribed}.
type Event struct {
	Type       string // "container", "image", "network", ... or EventTypeBerth
	Action     string // "create", "start", "die", "oom", ... or ActionResubscribed
	ID         string // the actor: container ID, image name, ...
	Attributes map[string]string
	Time       time.Time
}

// EventsConfig configures event re-subscription; zero fields take defaults.
type EventsConfig struct {
	BackoffMin time.Duration   // first wait before re-subscribing (250 ms)
	BackoffMax time.Duration   // longest wait (10 s)
	Buffer     int             // events buffered for a slow consumer (100)
	Clock      clockwork.Clock // nil is the wall clock
}

func (c EventsConfig) withDefaults() EventsConfig {
	if c.BackoffMin <= 0 {
		c.BackoffMin = 250 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.Buffer <= 0 {
		c.Buffer = 100
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Events subscribes to the Engine's events matching filters (Docker's
// event filters, e.g. {"type": {"container"}}; nil: all). It fails if the
// first subscription fails. Afterwards a dropped stream is re-subscribed
// with backoff, from the time of the last event received, with a warning
// logged and an ActionResubscribed event sent before the events that
// follow. The channel is closed once ctx is done; the consumer must keep
// reading it until then.
func (c *Client) Events(ctx context.Context, filters map[string][]string) (<-chan Event, error) {
	since := c.events.Clock.Now()
	body, err := c.subscribe(ctx, filters, time.Time{})
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, c.events.Buffer)
	go c.streamEvents(ctx, filters, body, since, ch)
	return ch, nil
}

// subscribe opens the event stream; since zero means from now.
func (c *Client) subscribe(ctx context.Context, filters map[string][]string, since time.Time) (io.ReadCloser, error) {
	q := url.Values{}
	if len(filters) > 0 {
		b, err := json.Marshal(filters)
		if err != nil {
			return nil, fmt.Errorf("subscribe to docker events: filters: %w", err)
		}
		q.Set("filters", string(b))
	}
	if !since.IsZero() {
		q.Set("since", fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()))
	}
	sctx, cancel := context.WithCancelCause(ctx)
	// The stream lives as long as ctx; only getting its headers is bounded.
	limit := c.timeouts.Inspect
	timer := time.AfterFunc(limit, func() { cancel(&TimeoutError{Op: "subscribe to docker events", Limit: limit}) })
	resp, err := c.rawGet(sctx, "/events?"+q.Encode())
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = context.Cause(sctx)
	}
	if err != nil {
		cancel(nil)
		return nil, fmt.Errorf("subscribe to docker events: %w", err)
	}
	return &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, nil
}

// cancelOnClose releases the request's context with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}

// streamEvents forwards events to ch, re-subscribing after drops, until ctx ends.
func (c *Client) streamEvents(ctx context.Context, filters map[string][]string, body io.ReadCloser, since time.Time, ch chan<- Event) {
	defer close(ch)
	clock := c.events.Clock
	backoff := retry.NewExponentialBackoff(c.events.BackoffMin, c.events.BackoffMax, 0.2, 2)
	for {
		last, err := c.readEvents(ctx, body, ch)
		body.Close()
		if ctx.Err() != nil {
			return
		}
		if !last.IsZero() {
			since = last.Add(time.Nanosecond)
		}
		c.log.Warn("docker event stream dropped; resubscribing", "error", err)
		for {
			if retry.Sleep(ctx, clock, backoff.Duration()) != nil {
				return
			}
			body, err = c.subscribe(ctx, filters, since)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("cannot resubscribe to docker events; retrying", "error", err)
		}
		backoff.Reset()
		c.log.Info("resubscribed to docker events; events may have been missed", "since", since.UTC().Format(time.RFC3339Nano))
		select {
		case ch <- Event{Type: EventTypeBerth, Action: ActionResubscribed, Time: clock.Now()}:
		case <-ctx.Done():
			body.Close()
			return
		}
	}
}

// readEvents decodes events from body into ch until the stream ends; it
// returns the time of the last event read and why the stream ended.
func (c *Client) readEvents(ctx context.Context, body io.Reader, ch chan<- Event) (time.Time, error) {
	var last time.Time
	dec := json.NewDecoder(body)
	for {
		var ev docker.APIEvents
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the Engine never ends the stream on its own
			}
			return last, err
		}
		if ev.Type == "" && ev.Action == "" && ev.Status == "" {
			continue // not an event
		}
		e := Event{Type: ev.Type, Action: ev.Action, ID: ev.Actor.ID, Attributes: ev.Actor.Attributes}
		switch {
		case ev.TimeNano != 0:
			e.Time = time.Unix(0, ev.TimeNano)
		case ev.Time != 0:
			e.Time = time.Unix(ev.Time, 0)
		}
		if e.ID == "" {
			e.ID = ev.ID
		}
		if e.Action == "" {
			e.Action = ev.Status
		}
		if !e.Time.IsZero() {
			last = e.Time
		}
		select {
		case ch <- e:
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

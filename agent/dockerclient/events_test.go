package dockerclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eventJSON renders an event as the Engine sends it.
func eventJSON(action, id string, nanos int64) string {
	b, _ := json.Marshal(map[string]any{
		"Type": "container", "Action": action, "status": action, "id": id,
		"Actor":    map[string]any{"ID": id, "Attributes": map[string]string{"name": "c-" + id}},
		"time":     nanos / 1e9,
		"timeNano": nanos,
	})
	return string(b) + "\n"
}

func TestEventsResubscribeAfterDrop(t *testing.T) {
	f := newFakeDocker(t)
	var mu sync.Mutex
	var queries []string
	f.handle("GET /events", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		n := len(queries)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		switch n {
		case 1:
			_, _ = w.Write([]byte(eventJSON("start", "a", 1_700_000_000_000_000_001)))
			_, _ = w.Write([]byte(eventJSON("die", "a", 1_700_000_000_500_000_000)))
			w.(http.Flusher).Flush()
			return // the stream drops
		case 2:
			_, _ = w.Write([]byte(`{"message":"not ready"}` + "\n")) // not an event: skipped
			return
		}
		_, _ = w.Write([]byte(eventJSON("destroy", "a", 1_700_000_001_000_000_000)))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	log, buf := testLogger(t)
	c := f.client(Config{Logger: log, Events: EventsConfig{BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond}})
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := c.Events(ctx, map[string][]string{"type": {"container"}})
	require.NoError(t, err)

	var got []string
	for len(got) < 5 {
		select {
		case ev := <-ch:
			got = append(got, ev.Type+"/"+ev.Action+"/"+ev.ID)
			if ev.Action == "start" {
				assert.Equal(t, "c-a", ev.Attributes["name"])
				assert.Equal(t, int64(1_700_000_000_000_000_001), ev.Time.UnixNano())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far: %v", got)
		}
	}
	assert.Equal(t, []string{
		"container/start/a", "container/die/a",
		"berth/resubscribed/", "berth/resubscribed/",
		"container/destroy/a",
	}, got)

	mu.Lock()
	assert.Contains(t, queries[0], "filters=%7B%22type%22%3A%5B%22container%22%5D%7D")
	assert.NotContains(t, queries[0], "since=")
	assert.Contains(t, queries[1], "since=1700000000.500000001", "resubscribe from just after the last event")
	mu.Unlock()
	assert.Contains(t, buf.String(), `msg="docker event stream dropped; resubscribing"`)
	assert.Contains(t, buf.String(), `msg="resubscribed to docker events; events may have been missed"`)

	cancel()
	for range ch { // closed once ctx is done
	}
}

func TestEventsFirstSubscriptionFailure(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("GET /events", status(http.StatusInternalServerError, "daemon is shutting down"))
	c := f.client(Config{})
	_, err := c.Events(t.Context(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "daemon is shutting down")
}

func TestEventsKeepTryingWhileEngineIsDown(t *testing.T) {
	f := newFakeDocker(t)
	var mu sync.Mutex
	calls := 0
	f.handle("GET /events", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n > 1 && n < 4 {
			writeAPIError(w, http.StatusInternalServerError, "starting")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if n == 1 {
			return
		}
		_, _ = w.Write([]byte(eventJSON("start", fmt.Sprint(n), time.Now().UnixNano())))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := f.client(Config{Events: EventsConfig{BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := c.Events(ctx, nil)
	require.NoError(t, err)
	ev := <-ch
	assert.Equal(t, ActionResubscribed, ev.Action)
	ev = <-ch
	assert.Equal(t, "4", ev.ID)
}

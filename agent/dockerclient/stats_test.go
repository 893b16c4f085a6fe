package dockerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// statsJSON renders a stats object as the Engine sends it; read zero is the Engine's sample of a
// container that is not running, rx < 0 one without networks.
func statsJSON(read time.Time, rx, tx int64) string {
	readText := "0001-01-01T00:00:00Z"
	if !read.IsZero() {
		readText = read.UTC().Format(time.RFC3339Nano)
	}
	nets := ""
	if rx >= 0 {
		nets = fmt.Sprintf(`,"networks":{"eth0":{"rx_bytes":%d,"rx_packets":3,"tx_bytes":%d,"tx_packets":2}}`, rx, tx)
	}
	return fmt.Sprintf(`{"read":%q,"preread":"0001-01-01T00:00:00Z","pids_stats":{"current":1},"num_procs":0,`+
		`"cpu_stats":{"cpu_usage":{"total_usage":100}},"precpu_stats":{"cpu_usage":{"total_usage":0}},`+
		`"memory_stats":{"usage":4096},"name":"/c","id":"abc"%s}`, readText, nets)
}

// serveStats answers a stats request with 200 and the given objects, one a line, flushed one by one.
func serveStats(w http.ResponseWriter, objects ...string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	for _, o := range objects {
		_, _ = w.Write([]byte(o + "\n"))
		w.(http.Flusher).Flush()
	}
}

func TestContainerStatsDeliversSamplesUntilTheContainerStops(t *testing.T) {
	f := newFakeDocker(t)
	t0 := time.Date(2026, 11, 30, 14, 0, 0, 123456789, time.UTC)
	objects := []string{statsJSON(t0, 100, 50), statsJSON(t0.Add(time.Second), 300, 90), statsJSON(t0.Add(2*time.Second), -1, 0)}
	f.handle("GET /containers/abc/stats", func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "1", r.URL.Query().Get("stream"))
		serveStats(w, append(objects, statsJSON(time.Time{}, -1, 0))...)
		<-r.Context().Done() // the Engine keeps sending empty samples; the client must not wait for more
	})
	c := f.client(Config{})
	var got []StatsSample
	err := c.ContainerStats(t.Context(), "abc", func(s StatsSample) error {
		got = append(got, s)
		return nil
	})
	require.ErrorIs(t, err, ErrNotRunning)
	assert.True(t, errdefs.IsFailedPrecondition(err))
	assert.False(t, errdefs.IsRetriable(err))
	require.Len(t, got, 3)
	for i, s := range got {
		assert.JSONEq(t, objects[i], string(s.JSON))
		assert.True(t, t0.Add(time.Duration(i)*time.Second).Equal(s.Read), "read of sample %d: %v", i, s.Read)
	}
	assert.Equal(t, map[string]NetworkStats{"eth0": {RxBytes: 100, RxPackets: 3, TxBytes: 50, TxPackets: 2}}, got[0].Networks)
	assert.Equal(t, map[string]NetworkStats{"eth0": {RxBytes: 300, RxPackets: 3, TxBytes: 90, TxPackets: 2}}, got[1].Networks)
	assert.Equal(t, 100*time.Nanosecond, got[0].CPUTotal)
	assert.Equal(t, uint64(4096), got[0].MemoryUsage)
	assert.Nil(t, got[2].Networks, "no networks in network mode host")
}

func TestContainerStatsErrors(t *testing.T) {
	t0 := time.Now()
	fnErr := errors.New("enough")
	for _, tc := range []struct {
		name     string
		serve    http.HandlerFunc
		fn       func(StatsSample) error
		timeouts Timeouts
		check    func(t *testing.T, err error)
	}{
		{
			name:  "no such container",
			serve: status(http.StatusNotFound, "No such container: abc"),
			check: func(t *testing.T, err error) {
				var nf *NotFoundError
				require.ErrorAs(t, err, &nf)
				assert.Equal(t, "abc", nf.Name)
				assert.True(t, errdefs.IsNotFound(err))
				assert.False(t, errdefs.IsRetriable(err))
			},
		},
		{
			name:  "engine error",
			serve: status(http.StatusInternalServerError, "daemon is shutting down"),
			check: func(t *testing.T, err error) {
				assert.Contains(t, err.Error(), "daemon is shutting down")
				assert.True(t, errdefs.IsRetriable(err))
			},
		},
		{
			name: "the engine ends the stream",
			serve: func(w http.ResponseWriter, _ *http.Request) {
				serveStats(w, statsJSON(t0, 1, 1))
			},
			check: func(t *testing.T, err error) {
				assert.ErrorIs(t, err, ErrConnection)
				assert.True(t, errdefs.IsRetriable(err))
			},
		},
		{
			name: "garbage in the stream",
			serve: func(w http.ResponseWriter, _ *http.Request) {
				serveStats(w, statsJSON(t0, 1, 1), `{"read": 12}`)
			},
			check: func(t *testing.T, err error) {
				assert.ErrorIs(t, err, ErrConnection)
				assert.True(t, errdefs.IsRetriable(err))
			},
		},
		{
			name: "fn's error",
			serve: func(w http.ResponseWriter, r *http.Request) {
				serveStats(w, statsJSON(t0, 1, 1))
				<-r.Context().Done()
			},
			fn:    func(StatsSample) error { return fnErr },
			check: func(t *testing.T, err error) { assert.Equal(t, fnErr, err) },
		},
		{
			name: "silence",
			serve: func(w http.ResponseWriter, r *http.Request) {
				serveStats(w, statsJSON(t0, 1, 1))
				<-r.Context().Done()
			},
			timeouts: Timeouts{Stats: 50 * time.Millisecond},
			check: func(t *testing.T, err error) {
				var te *TimeoutError
				require.ErrorAs(t, err, &te)
				assert.Equal(t, 50*time.Millisecond, te.Limit)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.True(t, errdefs.IsRetriable(err))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.handle("GET /containers/abc/stats", tc.serve)
			c := f.client(Config{Timeouts: tc.timeouts})
			fn := tc.fn
			if fn == nil {
				fn = func(StatsSample) error { return nil }
			}
			err := c.ContainerStats(t.Context(), "abc", fn)
			require.Error(t, err)
			tc.check(t, err)
		})
	}
}

func TestContainerStatsEndsWithItsContext(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("GET /containers/abc/stats", func(w http.ResponseWriter, r *http.Request) {
		serveStats(w, statsJSON(time.Now(), 1, 1))
		<-r.Context().Done()
	})
	c := f.client(Config{})
	ctx, cancel := context.WithCancel(t.Context())
	err := c.ContainerStats(ctx, "abc", func(StatsSample) error {
		cancel()
		return nil
	})
	assert.ErrorIs(t, err, context.Canceled)
}

// TestParseStats decodes every counter Berth reads from one stats object, once.
func TestParseStats(t *testing.T) {
	raw := json.RawMessage(`{"read":"2026-11-30T14:00:01Z","preread":"2026-11-30T14:00:00Z",
		"cpu_stats":{"cpu_usage":{"total_usage":2500000000}},"precpu_stats":{"cpu_usage":{"total_usage":2000000000}},
		"memory_stats":{"usage":104857600,"stats":{"cache":4194304}},
		"networks":{"eth0":{"rx_bytes":10,"rx_packets":1,"rx_errors":2,"rx_dropped":3,"tx_bytes":20,"tx_packets":4,"tx_errors":5,"tx_dropped":6}},
		"blkio_stats":{"io_service_bytes_recursive":[{"op":"Read","value":7},{"op":"write","value":8},{"op":"Total","value":15},{"op":"read","value":1}]}}`)
	s, err := ParseStats(raw)
	require.NoError(t, err)
	assert.Equal(t, StatsSample{JSON: raw,
		Read: time.Date(2026, 11, 30, 14, 0, 1, 0, time.UTC), PreRead: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC),
		CPUTotal: 2500 * time.Millisecond, PreCPUTotal: 2 * time.Second, MemoryUsage: 100 << 20, MemoryCache: 4 << 20,
		StorageRead: 8, StorageWrite: 8,
		Networks: map[string]NetworkStats{"eth0": {RxBytes: 10, RxPackets: 1, RxErrors: 2, RxDropped: 3, TxBytes: 20, TxPackets: 4, TxErrors: 5, TxDropped: 6}},
	}, s)
	_, err = ParseStats(json.RawMessage(`{"read":`))
	assert.Error(t, err)
}

package localcp

import (
	"crypto/rand"
	"encoding/binary"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socket is one of the control plane's websockets, as an agent dials it.
type socket struct {
	name  string
	path  string // with its query
	query func(ci string) url.Values
	// open reports whether the server holds a connection of this kind for the instance.
	open func(srv *Server, ci string) bool
}

var sockets = []socket{
	{name: "ACS", path: "/ws", query: func(ci string) url.Values {
		return url.Values{"clusterArn": {"default"}, "containerInstanceArn": {ci}}
	}, open: func(srv *Server, ci string) bool { return srv.connected(ci) }},
	{name: "TCS", path: tcsPath + "ws", query: func(ci string) url.Values {
		return url.Values{"cluster": {"default"}, "containerInstance": {ci}}
	}, open: func(srv *Server, ci string) bool {
		srv.connMu.Lock()
		defer srv.connMu.Unlock()
		for c := range srv.tcsConns {
			if c.instanceArn == ci {
				return true
			}
		}
		return false
	}},
}

// dial opens the socket for instance ci, signed with the control plane's keys.
func (k socket) dial(t *testing.T, ts *httptest.Server, ci string) *websocket.Conn {
	t.Helper()
	target := k.path + "?" + k.query(ci).Encode()
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+target, signedUpgrade(t, ts.URL+target, testKeys))
	require.NoError(t, err)
	_ = resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// TestHugeFrameClosesTheConnection sends a 16 MiB frame on each websocket: the server closes the
// connection after the frame's header and allocates nothing for its payload.
func TestHugeFrameClosesTheConnection(t *testing.T) {
	for _, k := range sockets {
		t.Run(k.name, func(t *testing.T) {
			h := newHarness(t)
			ts := httptest.NewServer(h.srv.Handler())
			t.Cleanup(ts.Close)
			ci := registerInstance(t, h)
			ws := k.dial(t, ts, ci)
			require.Eventually(t, func() bool { return k.open(h.srv, ci) }, 10*time.Second, 10*time.Millisecond)

			const size = 16 << 20
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)

			// A masked text frame header announcing 16 MiB, then the payload streamed in small pieces,
			// written on the raw connection so that the client side allocates nothing large either.
			conn := ws.UnderlyingConn()
			header := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}
			binary.BigEndian.PutUint64(header[2:10], size)
			_, err := conn.Write(header)
			require.NoError(t, err)
			chunk := make([]byte, 64<<10)
			_, _ = rand.Read(chunk)
			for sent := 0; sent < size; sent += len(chunk) {
				_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := conn.Write(chunk); err != nil {
					break // the server closed the connection: what we want
				}
			}
			require.Eventually(t, func() bool { return !k.open(h.srv, ci) }, 10*time.Second, 10*time.Millisecond,
				"the connection is closed")

			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("the whole process allocated %d KiB while a %d MiB frame was refused", allocated>>10, size>>20)
			assert.Less(t, allocated, uint64(4<<20), "allocated %d bytes for a %d-byte frame", allocated, size)
		})
	}
}

// TestSilentConnectionIsClosed connects, on each websocket, an agent that never reads nor writes
// (so it answers no ping and no heartbeat): the server closes the connection after idleHeartbeats
// heartbeats.
func TestSilentConnectionIsClosed(t *testing.T) {
	for _, k := range sockets {
		t.Run(k.name, func(t *testing.T) {
			srv, err := New(Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Keys: testKeys, HeartbeatInterval: 100 * time.Millisecond}, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })
			h := &harness{t: t, srv: srv, keys: testKeys}
			ts := httptest.NewServer(srv.Handler())
			t.Cleanup(ts.Close)
			ci := registerInstance(t, h)
			k.dial(t, ts, ci)
			require.Eventually(t, func() bool { return k.open(srv, ci) }, 10*time.Second, 10*time.Millisecond)
			start := time.Now()
			require.Eventually(t, func() bool { return !k.open(srv, ci) }, 20*time.Second, 10*time.Millisecond, "a silent agent is disconnected")
			assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "not before a few heartbeats")
		})
	}
}

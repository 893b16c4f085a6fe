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

// TestACSHugeFrameClosesTheConnection sends a 16 MiB frame: the server closes the connection after
// the frame's header and allocates nothing for its payload.
func TestACSHugeFrameClosesTheConnection(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	agent := dialACS(t, ts, ci)
	require.Eventually(t, func() bool { return h.srv.connected(ci) }, 10*time.Second, 10*time.Millisecond)

	const size = 16 << 20
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	// A masked text frame header announcing 16 MiB, then the payload streamed in small pieces, written
	// on the raw connection so that the client side allocates nothing large either.
	conn := agent.ws.UnderlyingConn()
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
	require.Eventually(t, func() bool { return !h.srv.connected(ci) }, 10*time.Second, 10*time.Millisecond,
		"the connection is closed")

	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("the whole process allocated %d KiB while a %d MiB frame was refused", allocated>>10, size>>20)
	assert.Less(t, allocated, uint64(4<<20), "allocated %d bytes for a %d-byte frame", allocated, size)
}

// TestACSSilentConnectionIsClosed connects an agent that never reads nor writes (so it answers no
// ping and no heartbeat): the server closes the connection after idleHeartbeats heartbeats.
func TestACSSilentConnectionIsClosed(t *testing.T) {
	srv, err := New(Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Keys: testKeys, HeartbeatInterval: 100 * time.Millisecond}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	h := &harness{t: t, srv: srv, keys: testKeys}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)

	q := url.Values{"clusterArn": {"default"}, "containerInstanceArn": {ci}}
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/ws?"+q.Encode(), signedUpgrade(t, ts.URL+"/ws?"+q.Encode(), testKeys))
	require.NoError(t, err)
	_ = resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	require.Eventually(t, func() bool { return srv.connected(ci) }, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	require.Eventually(t, func() bool { return !srv.connected(ci) }, 20*time.Second, 10*time.Millisecond, "a silent agent is disconnected")
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "not before a few heartbeats")
}

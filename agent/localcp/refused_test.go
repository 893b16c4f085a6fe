package localcp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// TestRefusedRequestsLoggedOnceAMinute: any local process (or a web page) may send unsigned requests
// at will; they are refused, and the log gets one line for the burst, not one per request.
func TestRefusedRequestsLoggedOnceAMinute(t *testing.T) {
	var buf bytes.Buffer
	log, err := logger.New(logger.Config{Level: "info"}, &buf)
	require.NoError(t, err)
	srv, err := New(Config{DBPath: filepath.Join(t.TempDir(), "localcp.db"), Keys: testKeys}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	for range 200 {
		resp, err := http.Post(ts.URL, "application/x-amz-json-1.1", strings.NewReader("{}"))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.GreaterOrEqual(t, resp.StatusCode, 400, "refused")
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "control plane request refused"), "%s", buf.String())
}

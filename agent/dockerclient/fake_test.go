package dockerclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// pullCall is one POST /images/create the fake received.
type pullCall struct {
	N     int // 1-based
	Image string
	Auth  docker.AuthConfiguration
	W     http.ResponseWriter
	R     *http.Request
}

// fakeDocker speaks the few Docker Engine endpoints the client uses.
type fakeDocker struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	paths    []string // request paths as received
	pulls    []string // images, in call order
	images   map[string]bool
	active   int // pulls running now
	peak     int // most pulls running at once
	pullFn   func(c pullCall)
	handlers map[string]http.HandlerFunc // "METHOD /path" overrides
}

func newFakeDocker(t *testing.T) *fakeDocker {
	t.Helper()
	f := &fakeDocker{t: t, images: map[string]bool{}, handlers: map[string]http.HandlerFunc{}}
	f.pullFn = func(c pullCall) { streamOK(c, 2) }
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client returns a Client for the fake with cfg (its endpoint is set here).
func (f *fakeDocker) client(cfg Config) *Client {
	f.t.Helper()
	cfg.Endpoint = f.srv.URL
	c, err := NewClient(cfg)
	require.NoError(f.t, err)
	f.t.Cleanup(c.Close)
	return c
}

func (f *fakeDocker) setPull(fn func(c pullCall)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pullFn = fn
}

func (f *fakeDocker) handle(route string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[route] = h
}

func (f *fakeDocker) setImage(name string, present bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[name] = present
}

func (f *fakeDocker) pullCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pulls)
}

func (f *fakeDocker) maxActive() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

func (f *fakeDocker) serve(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v1.") && i > 0 {
		path = path[i+1:]
	}
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	h := f.handlers[r.Method+" "+path]
	f.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	switch {
	case r.Method == http.MethodPost && path == "/images/create":
		f.servePull(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/images/") && strings.HasSuffix(path, "/json"):
		name := strings.TrimSuffix(strings.TrimPrefix(path, "/images/"), "/json")
		f.mu.Lock()
		ok := f.images[name]
		f.mu.Unlock()
		if !ok {
			writeAPIError(w, http.StatusNotFound, fmt.Sprintf("no such image: %s: No such image: %s", name, name))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"Id":"sha256:%x","RepoTags":[%q]}`, len(name), name)
	default:
		writeAPIError(w, http.StatusNotFound, "page not found")
	}
}

func (f *fakeDocker) servePull(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	image := q.Get("fromImage")
	if tag := q.Get("tag"); tag != "" {
		sep := ":"
		if strings.Contains(tag, ":") {
			sep = "@"
		}
		image += sep + tag
	}
	var auth docker.AuthConfiguration
	if h := r.Header.Get("X-Registry-Auth"); h != "" {
		if b, err := base64.URLEncoding.DecodeString(h); err == nil {
			_ = json.Unmarshal(b, &auth)
		}
	}
	f.mu.Lock()
	f.pulls = append(f.pulls, image)
	n := len(f.pulls)
	f.active++
	f.peak = max(f.peak, f.active)
	fn := f.pullFn
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
	}()
	fn(pullCall{N: n, Image: image, Auth: auth, W: w, R: r})
}

func writeAPIError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// writeMsg writes one progress message and flushes it.
func writeMsg(c pullCall, m map[string]any) {
	if c.W.Header().Get("Content-Type") == "" {
		c.W.Header().Set("Content-Type", "application/json")
		c.W.WriteHeader(http.StatusOK)
	}
	b, _ := json.Marshal(m)
	_, _ = c.W.Write(append(b, '\r', '\n'))
	c.W.(http.Flusher).Flush()
}

func progress(status, id string, cur, total int64) map[string]any {
	return map[string]any{"status": status, "id": id, "progressDetail": map[string]int64{"current": cur, "total": total}}
}

// streamOK answers a successful pull of layers 1000-byte layers.
func streamOK(c pullCall, layers int) {
	writeMsg(c, map[string]any{"status": "Pulling from test", "id": "latest"})
	for i := range layers {
		writeMsg(c, map[string]any{"status": "Pulling fs layer", "id": layerID(i), "progressDetail": map[string]any{}})
	}
	for i := range layers {
		writeMsg(c, progress("Downloading", layerID(i), 500, 1000))
		writeMsg(c, progress("Downloading", layerID(i), 1000, 1000))
		writeMsg(c, map[string]any{"status": "Download complete", "id": layerID(i)})
		writeMsg(c, map[string]any{"status": "Pull complete", "id": layerID(i)})
	}
	writeMsg(c, map[string]any{"status": "Digest: sha256:0123"})
	writeMsg(c, map[string]any{"status": "Status: Downloaded newer image for " + c.Image})
}

// streamErr answers 200 with some progress, then an in-stream error.
func streamErr(c pullCall, msg string) {
	writeMsg(c, map[string]any{"status": "Pulling from test", "id": "latest"})
	writeMsg(c, map[string]any{"status": "Pulling fs layer", "id": layerID(0), "progressDetail": map[string]any{}})
	writeMsg(c, map[string]any{"errorDetail": map[string]string{"message": msg}, "error": msg})
}

// stall answers 200 with one message and then nothing until the client goes
// away or release is closed.
func stall(c pullCall, release <-chan struct{}) {
	writeMsg(c, map[string]any{"status": "Pulling from test", "id": "latest"})
	select {
	case <-c.R.Context().Done():
	case <-release:
	}
}

func layerID(i int) string { return fmt.Sprintf("%012x", 0xabc000+i) }

// fakeAuth is an AuthSource returning creds[i] after i invalidations (the
// last one once exhausted).
type fakeAuth struct {
	mu          sync.Mutex
	creds       []docker.AuthConfiguration
	invalidated int
	calls       int
	err         error
}

var _ AuthSource = (*fakeAuth)(nil)

func (a *fakeAuth) Auth(_ context.Context, _ string) (docker.AuthConfiguration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.err != nil {
		return docker.AuthConfiguration{}, a.err
	}
	return a.creds[min(a.invalidated, len(a.creds)-1)], nil
}

func (a *fakeAuth) Invalidate(string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.invalidated++
}

func (a *fakeAuth) counts() (calls, invalidated int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.invalidated
}

// testLogger returns a debug-level logger writing logfmt to the returned buffer.
func testLogger(t *testing.T) (*logger.Logger, *logger.Buffer) {
	t.Helper()
	buf := &logger.Buffer{}
	l, err := logger.New(logger.Config{Level: logger.LevelDebug}, buf)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l, buf
}

// fastPull is a PullConfig whose waits take milliseconds.
func fastPull() PullConfig {
	return PullConfig{
		BackoffMin:        time.Millisecond,
		BackoffMax:        2 * time.Millisecond,
		BackoffJitter:     -1,
		ThrottleDelay:     time.Millisecond,
		InactivityTimeout: 5 * time.Second,
		ProgressInterval:  -1,
	}
}

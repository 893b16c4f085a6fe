package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var blob = bytes.Repeat([]byte("0123456789abcdef"), 64*1024) // 1 MiB

// registry is a stand-in upstream serving a manifest, a blob and /v2/.
func registry(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch Classify(r.URL.Path) {
		case KindManifest:
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			w.Header().Set("X-Seen-Host", r.Host)
			_, _ = io.WriteString(w, `{"schemaVersion":2}`)
		case KindBlob:
			w.Header().Set("Content-Length", "1048576")
			_, _ = w.Write(blob)
		default:
			_, _ = io.WriteString(w, "{}")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func start(t *testing.T, rules ...Rule) *Proxy {
	t.Helper()
	p, err := Start(Config{Target: registry(t).URL, Seed: 1, Rules: rules})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func get(t *testing.T, p *Proxy, path string) (*http.Response, []byte, error) {
	t.Helper()
	// No keep-alive: net/http would silently resend a GET reset on a reused connection.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(p.URL() + path)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestClassify(t *testing.T) {
	assert.Equal(t, KindManifest, Classify("/v2/team/app/manifests/v1"))
	assert.Equal(t, KindManifest, Classify("/v2/app/manifests/sha256:abc"))
	assert.Equal(t, KindBlob, Classify("/v2/app/blobs/sha256:abc"))
	assert.Equal(t, KindOther, Classify("/v2/"))
	assert.Equal(t, KindOther, Classify("/v2/app/blobs/uploads/"))
}

func TestForwardsAndCounts(t *testing.T) {
	p := start(t)
	resp, body, err := get(t, p, "/v2/app/manifests/v1")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `{"schemaVersion":2}`, string(body))
	assert.Equal(t, p.Addr(), resp.Header.Get("X-Seen-Host"), "the registry sees the proxy's host")
	_, body, err = get(t, p, "/v2/app/blobs/sha256:1")
	require.NoError(t, err)
	assert.Equal(t, blob, body)
	_, _, err = get(t, p, "/v2/")
	require.NoError(t, err)

	assert.Equal(t, 1, p.Count(KindManifest))
	assert.Equal(t, 1, p.Count(KindBlob))
	assert.Equal(t, 1, p.Count(KindOther))
	assert.Equal(t, 3, p.Count(KindAny))
	assert.Equal(t, 1, p.CountMethod(KindManifest, http.MethodGet))
	assert.Equal(t, 0, p.Faulted())
	p.ResetCounts()
	assert.Equal(t, 0, p.Count(KindAny))
}

func TestStatusForFirstRequests(t *testing.T) {
	p := start(t, Rule{Kind: KindManifest, Times: 2, Faults: []Fault{
		{Type: FaultStatus, Code: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3"}}},
	}})
	for i := range 3 {
		resp, body, err := get(t, p, "/v2/app/manifests/v1")
		require.NoError(t, err)
		if i < 2 {
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, "3", resp.Header.Get("Retry-After"))
			assert.Contains(t, string(body), "TOOMANYREQUESTS")
		} else {
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
	_, _, err := get(t, p, "/v2/app/blobs/sha256:1")
	require.NoError(t, err, "other kinds are untouched")
	assert.Equal(t, 2, p.Faulted())
}

func TestMethodAndPathMatching(t *testing.T) {
	p := start(t, Rule{Kind: KindBlob, Method: http.MethodHead, Path: regexp.MustCompile(`sha256:2$`), Faults: []Fault{Status(503)}})
	resp, _, err := get(t, p, "/v2/app/blobs/sha256:2")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "GET does not match a HEAD rule")
	req, _ := http.NewRequest(http.MethodHead, p.URL()+"/v2/app/blobs/sha256:2", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	req, _ = http.NewRequest(http.MethodHead, p.URL()+"/v2/app/blobs/sha256:3", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestResetMidBody(t *testing.T) {
	p := start(t, Rule{Kind: KindBlob, Times: 1, Faults: []Fault{Reset(100_000)}})
	resp, err := http.Get(p.URL() + "/v2/app/blobs/sha256:1")
	require.NoError(t, err, "headers arrive")
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "connection reset"), "%v", err)
	assert.GreaterOrEqual(t, len(body), 100_000)
	assert.Less(t, len(body), len(blob))

	_, body, err = get(t, p, "/v2/app/blobs/sha256:1")
	require.NoError(t, err, "only the first request")
	assert.Equal(t, blob, body)
}

func TestResetBeforeResponse(t *testing.T) {
	p := start(t, Rule{Kind: KindManifest, Times: 1, Faults: []Fault{Reset(0)}})
	_, _, err := get(t, p, "/v2/app/manifests/v1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection reset")
}

func TestStallUntilReleased(t *testing.T) {
	p := start(t, Rule{Kind: KindBlob, Times: 1, Faults: []Fault{Stall(1000, 0)}})
	done := make(chan []byte)
	go func() {
		_, body, err := get(t, p, "/v2/app/blobs/sha256:1")
		assert.NoError(t, err)
		done <- body
	}()
	select {
	case <-done:
		t.Fatal("a stalled request finished")
	case <-time.After(100 * time.Millisecond):
	}
	p.Release()
	select {
	case body := <-done:
		assert.Equal(t, blob, body, "the body continues after the stall")
	case <-time.After(5 * time.Second):
		t.Fatal("release did not end the stall")
	}
}

func TestStallForDuration(t *testing.T) {
	p := start(t, Rule{Kind: KindManifest, Faults: []Fault{Stall(0, 150*time.Millisecond)}})
	begin := time.Now()
	resp, _, err := get(t, p, "/v2/app/manifests/v1")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(begin), 150*time.Millisecond)
}

func TestRandomFailureRate(t *testing.T) {
	p := start(t, Rule{Probability: 0.3, Faults: []Fault{Status(503), Reset(0)}})
	const n = 300
	failed := 0
	for range n {
		resp, _, err := get(t, p, "/v2/")
		if err != nil || resp.StatusCode != http.StatusOK {
			failed++
		}
	}
	assert.InDelta(t, 0.3*n, failed, 0.1*n)
	assert.Equal(t, failed, p.Faulted())
	kinds := map[string]int{}
	for _, r := range p.Requests() {
		kinds[r.Fault]++
	}
	assert.Positive(t, kinds["status 503"])
	assert.Positive(t, kinds["reset after 0 bytes"])
}

func TestStartRejectsBadTarget(t *testing.T) {
	_, err := Start(Config{Target: "127.0.0.1:5000"})
	assert.Error(t, err)
}

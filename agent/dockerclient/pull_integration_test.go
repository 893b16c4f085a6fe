//go:build integration

package dockerclient

import (
	"context"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient/faultproxy"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
	"github.com/berth-agent/berth/agent/retry"
)

// itPull is the pull configuration of the integration tests: real defaults
// except for short waits.
func itPull() PullConfig {
	return PullConfig{
		BackoffMin:        100 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
		InactivityTimeout: 30 * time.Second,
		PullTimeout:       2 * time.Minute,
		ThrottleDelay:     100 * time.Millisecond,
		Behavior:          BehaviorAlways,
	}
}

// pullVia pulls the fixture through p (the proxy's address is the registry
// part of the reference) after removing it from the engine.
func pullVia(t *testing.T, c *Client, fx imageFixture, p *faultproxy.Proxy, auth AuthSource) (PullResult, error) {
	t.Helper()
	purge(t, c, fx.id)
	t.Cleanup(func() { purge(t, c, fx.id) })
	return c.PullImage(t.Context(), p.Addr()+"/"+itRepo+":"+fx.tag, auth)
}

func TestIntegrationPullRetries503(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	fx := fixtureImage(t)
	const k = 2
	// Docker asks for the manifest with HEAD and, when that fails, with GET:
	// one failed attempt is one failed HEAD and one failed GET.
	p := proxy(t, registryAddr,
		faultproxy.Rule{Kind: faultproxy.KindManifest, Method: http.MethodHead, Times: k, Faults: []faultproxy.Fault{faultproxy.Status(http.StatusServiceUnavailable)}},
		faultproxy.Rule{Kind: faultproxy.KindManifest, Method: http.MethodGet, Times: k, Faults: []faultproxy.Fault{faultproxy.Status(http.StatusServiceUnavailable)}},
	)
	res, err := pullVia(t, c, fx, p, nil)
	require.NoError(t, err, requestLog(p))
	require.Len(t, res.Attempts, k+1, requestLog(p))
	for _, a := range res.Attempts[:k] {
		assert.ErrorIs(t, a.Err, ErrRegistryUnavailable)
		assert.Contains(t, a.Err.Error(), "received unexpected HTTP status: 503 Service Unavailable")
	}
	assert.NoError(t, res.Attempts[k].Err)
	assert.Equal(t, 2*k, p.Faulted())
	assert.Equal(t, fx.bytes, res.Attempts[k].Progress.BytesTotal)
	assert.Equal(t, fx.bytes, res.Bytes)
	assert.Equal(t, layerCount, res.Attempts[k].Progress.LayersDone)
}

func TestIntegrationPullSurvivesResetMidBlob(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	fx := fixtureImage(t)
	p := proxy(t, registryAddr, faultproxy.Rule{
		Kind: faultproxy.KindBlob, Path: regexp.MustCompile(regexp.QuoteMeta(fx.layers[1]) + "$"), Times: 1,
		Faults: []faultproxy.Fault{faultproxy.Reset(layerSize / 4)},
	})
	res, err := pullVia(t, c, fx, p, nil)
	// Docker retries the layer download itself ("Retrying in 5 seconds").
	require.NoError(t, err, requestLog(p))
	assert.Equal(t, 1, p.Faulted(), requestLog(p))
	assert.True(t, res.Pulled)
}

func TestIntegrationInactivityTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	tests := []struct {
		name string
		rule func(fx imageFixture) faultproxy.Rule
	}{
		{"no bytes at all", func(imageFixture) faultproxy.Rule {
			return faultproxy.Rule{Kind: faultproxy.KindManifest, Method: http.MethodHead, Times: 1,
				Faults: []faultproxy.Fault{faultproxy.Stall(0, 0)}}
		}},
		{"stalled layer", func(fx imageFixture) faultproxy.Rule {
			return faultproxy.Rule{Kind: faultproxy.KindBlob, Path: regexp.MustCompile(regexp.QuoteMeta(fx.layers[2]) + "$"), Times: 1,
				Faults: []faultproxy.Fault{faultproxy.Stall(layerSize/2, 0)}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := itPull()
			cfg.InactivityTimeout = timeout
			c := engine(t, Config{Pull: cfg})
			fx := fixtureImage(t)
			p := proxy(t, registryAddr, tt.rule(fx))
			res, err := pullVia(t, c, fx, p, nil)
			require.NoError(t, err, requestLog(p))
			require.Len(t, res.Attempts, 2, requestLog(p))
			first := res.Attempts[0]
			assert.ErrorIs(t, first.Err, ErrInactivity)
			// Fired between timeout and 1.5x timeout after the stream last moved.
			assert.GreaterOrEqual(t, first.Progress.Idle, timeout)
			assert.Less(t, first.Progress.Idle, timeout*3/2)
			assert.NoError(t, res.Attempts[1].Err)
		})
	}
}

func TestIntegrationWrongCredentials(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	fx := fixtureImage(t)
	good := docker.AuthConfiguration{Username: "berth", Password: "s3cret"}
	addr := testregistry.StartHtpasswd(t, good.Username, good.Password)
	copyImage(t, c, fx, addr, good)
	wrong := docker.AuthConfiguration{Username: "berth", Password: "wrong"}
	stale := docker.AuthConfiguration{Username: "berth", Password: "stale"}

	tests := []struct {
		name         string
		creds        []docker.AuthConfiguration // what the AuthSource returns after 0, 1, ... invalidations
		anonymous    bool
		wantErr      bool
		wantAttempts int
	}{
		{"wrong credentials", []docker.AuthConfiguration{wrong}, false, true, 1},
		{"no credentials", nil, true, true, 1},
		{"stale credentials refreshed", []docker.AuthConfiguration{stale, good}, false, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := proxy(t, addr)
			var auth AuthSource
			fa := &fakeAuth{creds: tt.creds}
			if !tt.anonymous {
				auth = fa
			}
			res, err := pullVia(t, c, fx, p, auth)
			require.Len(t, res.Attempts, tt.wantAttempts, requestLog(p))
			// Every attempt starts with Docker's GET /v2/ (the auth challenge).
			assert.Equal(t, tt.wantAttempts, p.CountMethod(faultproxy.KindOther, http.MethodGet), requestLog(p))
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrAuthRefused)
			var cp *CannotPullContainerError
			require.ErrorAs(t, err, &cp)
			assert.False(t, cp.Retry())
			var de *docker.Error
			require.ErrorAs(t, err, &de)
			t.Logf("Docker said: %d %q", de.Status, de.Message)
			if !tt.anonymous {
				_, invalidated := fa.counts()
				assert.Equal(t, 1, invalidated)
			}
		})
	}
}

func TestIntegrationUnknownTag(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	fx := fixtureImage(t)
	p := proxy(t, registryAddr)
	for _, ref := range []string{itRepo + ":no-such-tag", "no-such-repo-berth:latest"} {
		t.Run(ref, func(t *testing.T) {
			p.ResetCounts()
			res, err := c.PullImage(t.Context(), p.Addr()+"/"+ref, nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotFound)
			assert.Len(t, res.Attempts, 1)
			assert.Equal(t, 1, p.CountMethod(faultproxy.KindManifest, http.MethodHead), requestLog(p))
			var de *docker.Error
			require.ErrorAs(t, err, &de)
			assert.Contains(t, de.Message, "manifest unknown")
		})
	}
	_ = fx
}

func TestIntegrationInvalidReference(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	res, err := c.PullImage(t.Context(), "127.0.0.1:5000/Not-Lower-Case:1", nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidReference)
	assert.Len(t, res.Attempts, 1)
}

func TestIntegrationCancelDuringBackoff(t *testing.T) {
	cfg := itPull()
	cfg.BackoffMin, cfg.BackoffMax = time.Minute, time.Minute
	waiting := make(chan struct{})
	var once sync.Once
	cfg.Retrier = retry.Retrier{OnRetry: func(int, error, time.Duration) { once.Do(func() { close(waiting) }) }}
	c := engine(t, Config{Pull: cfg})
	fx := fixtureImage(t)
	p := proxy(t, registryAddr, faultproxy.Rule{Kind: faultproxy.KindManifest, Faults: []faultproxy.Fault{faultproxy.Status(http.StatusServiceUnavailable)}})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-waiting
		cancel()
	}()
	purge(t, c, fx.id)
	start := time.Now()
	res, err := c.PullImage(ctx, p.Addr()+"/"+itRepo+":"+fx.tag, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Len(t, res.Attempts, 1)
	<-waiting
	c.Puller().Close() // returns at once: the backoff wait woke up
}

func TestIntegrationConcurrentPullsShareOne(t *testing.T) {
	c := engine(t, Config{Pull: itPull()})
	fx := fixtureImage(t)
	p := proxy(t, registryAddr)
	purge(t, c, fx.id)
	t.Cleanup(func() { purge(t, c, fx.id) })
	ref := p.Addr() + "/" + itRepo + ":" + fx.tag
	const callers = 20
	var wg sync.WaitGroup
	errs := make([]error, callers)
	results := make([]PullResult, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.PullImage(t.Context(), ref, nil)
		}()
	}
	wg.Wait()
	shared := 0
	for i := range callers {
		require.NoError(t, errs[i])
		assert.True(t, results[i].Pulled)
		if results[i].Shared {
			shared++
		}
	}
	assert.Equal(t, callers-1, shared)
	// One pull: one HEAD by tag, and at most one GET by digest (Docker
	// keeps manifests it has seen in its content store and may skip it).
	assert.Equal(t, 1, p.CountMethod(faultproxy.KindOther, http.MethodGet), requestLog(p))
	assert.Equal(t, 1, p.CountMethod(faultproxy.KindManifest, http.MethodHead), requestLog(p))
	assert.LessOrEqual(t, p.CountMethod(faultproxy.KindManifest, http.MethodGet), 1, requestLog(p))
	assert.Equal(t, layerCount+1, p.Count(faultproxy.KindBlob), "config and layers once each")
}

func TestIntegrationBehaviorDefaultFallsBackToCache(t *testing.T) {
	cfg := itPull()
	cfg.Behavior = BehaviorDefault
	cfg.Attempts, cfg.TransportAttempts = 2, 2
	log, buf := testLogger(t)
	cfg.Logger = log
	c := engine(t, Config{Pull: cfg})
	fx := fixtureImage(t)
	p := proxy(t, registryAddr)
	ref := p.Addr() + "/" + itRepo + ":" + fx.tag
	_, err := pullVia(t, c, fx, p, nil)
	require.NoError(t, err)

	p.SetRules(faultproxy.Rule{Kind: faultproxy.KindManifest, Faults: []faultproxy.Fault{faultproxy.Status(http.StatusServiceUnavailable)}})
	res, err := c.PullImage(t.Context(), ref, nil)
	require.NoError(t, err)
	assert.True(t, res.Cached)
	assert.False(t, res.Pulled)
	assert.Len(t, res.Attempts, 2)
	assert.Contains(t, buf.String(), `msg="image pull failed; using the cached copy"`)
}

package dockerclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/retry"
)

const testImage = "127.0.0.1:5000/app:1"

func TestPullRetriesTransientErrors(t *testing.T) {
	tests := []struct {
		name     string
		fail     func(c pullCall)
		failures int
		class    error
	}{
		{"503 from the registry", func(c pullCall) {
			writeAPIError(c.W, 500, "received unexpected HTTP status: 503 Service Unavailable")
		}, 2, ErrRegistryUnavailable},
		{"in-stream error", func(c pullCall) {
			streamErr(c, "error pulling image configuration: download failed after attempts=6: read tcp 127.0.0.1:50504->127.0.0.1:36031: read: connection reset by peer")
		}, 3, ErrConnection},
		{"throttled", func(c pullCall) { writeAPIError(c.W, 500, "toomanyrequests") }, 1, ErrTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(func(c pullCall) {
				if c.N <= tt.failures {
					tt.fail(c)
					return
				}
				streamOK(c, 3)
			})
			c := f.client(Config{Pull: fastPull()})
			res, err := c.PullImage(t.Context(), testImage, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.failures+1, f.pullCount())
			require.Len(t, res.Attempts, tt.failures+1)
			for i, a := range res.Attempts[:tt.failures] {
				assert.Equal(t, i+1, a.Number)
				assert.ErrorIs(t, a.Err, tt.class)
			}
			last := res.Attempts[tt.failures]
			assert.NoError(t, last.Err)
			assert.True(t, res.Pulled)
			assert.False(t, res.Cached)
			assert.Equal(t, int64(3000), last.Bytes)
			assert.Equal(t, Progress{LayersDone: 3, LayersTotal: 3, BytesDone: 3000, BytesTotal: 3000, Idle: last.Progress.Idle}, last.Progress)
		})
	}
}

func TestPullStopsOnPermanentErrors(t *testing.T) {
	tests := []struct {
		name  string
		fail  func(c pullCall)
		class error
	}{
		{"unknown tag", func(c pullCall) {
			writeAPIError(c.W, 404, "manifest for 127.0.0.1:5000/app:1 not found: manifest unknown: manifest unknown")
		}, ErrNotFound},
		{"wrong credentials", func(c pullCall) { writeAPIError(c.W, 500, "unauthorized: authentication required") }, ErrAuthRefused},
		{"invalid reference", func(c pullCall) { writeAPIError(c.W, 400, "invalid reference format") }, ErrInvalidReference},
		{"denied in stream", func(c pullCall) { streamErr(c, "denied: requested access to the resource is denied") }, ErrAuthRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(tt.fail)
			c := f.client(Config{Pull: fastPull()})
			res, err := c.PullImage(t.Context(), testImage, nil)
			require.Error(t, err)
			assert.Equal(t, 1, f.pullCount())
			assert.Len(t, res.Attempts, 1)
			assert.ErrorIs(t, err, tt.class)
			var cp *CannotPullContainerError
			require.ErrorAs(t, err, &cp)
			assert.Equal(t, testImage, cp.Image)
			assert.False(t, cp.Retry())
			assert.False(t, res.Pulled)
		})
	}
}

func TestPullGivesUpAfterAttempts(t *testing.T) {
	tests := []struct {
		name  string
		fail  func(c pullCall)
		class error
		want  int
	}{
		{"registry 5xx: transport budget", func(c pullCall) {
			writeAPIError(c.W, 500, "received unexpected HTTP status: 502 Bad Gateway")
		}, ErrRegistryUnavailable, DefaultTransportAttempts},
		{"throttled: ECS budget", func(c pullCall) { writeAPIError(c.W, 500, "toomanyrequests") }, ErrTooManyRequests, DefaultPullAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(tt.fail)
			cfg := fastPull()
			var retries []int
			cfg.Retrier = retry.Retrier{OnRetry: func(n int, _ error, _ time.Duration) { retries = append(retries, n) }}
			c := f.client(Config{Pull: cfg})
			res, err := c.PullImage(t.Context(), testImage, nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.class)
			assert.Equal(t, tt.want, f.pullCount())
			assert.Len(t, res.Attempts, tt.want)
			assert.Len(t, retries, tt.want-1)
			var cp *CannotPullContainerError
			require.ErrorAs(t, err, &cp)
			assert.True(t, cp.Retry(), "the last error is still a transient one")
		})
	}
}

// Docker's answer when the registry reset the connection in the manifest phase, as the faulty-registry
// bench sees it.
const resetText = `Head "http://127.0.0.1:5000/v2/app/manifests/1": read tcp 127.0.0.1:51234->127.0.0.1:5000: read: connection reset by peer`

// advancingPull starts a pull of testImage with the default backoff on a fake clock that a goroutine
// advances past every backoff wait (the watchdog and progress logging are off, so backoff waits are
// the clock's only waiters), and returns the pull's outcome and the delays waited.
func advancingPull(t *testing.T, f *fakeDocker, cfg PullConfig) (pullOutcome, []time.Duration) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	cfg.InactivityTimeout = -1
	cfg.ProgressInterval = -1
	cfg.Clock = clock
	var mu sync.Mutex
	var delays []time.Duration
	cfg.Retrier = retry.Retrier{OnRetry: func(_ int, _ error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		delays = append(delays, d)
	}}
	c := f.client(Config{Pull: cfg})

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for clock.BlockUntilContext(ctx, 1) == nil {
			clock.Advance(time.Minute)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	out := make(chan pullOutcome, 1)
	go func() {
		res, err := c.PullImage(t.Context(), testImage, nil)
		out <- pullOutcome{res, err}
	}()
	o := wait(t, out)
	mu.Lock()
	defer mu.Unlock()
	return o, append([]time.Duration(nil), delays...)
}

func TestPullTransportFaultBudget(t *testing.T) {
	reset := func(c pullCall) { writeAPIError(c.W, 500, resetText) }
	unavailable := func(c pullCall) {
		writeAPIError(c.W, 500, "received unexpected HTTP status: 503 Service Unavailable")
	}
	eofInStream := func(c pullCall) { streamErr(c, "unexpected EOF") }
	throttled := func(c pullCall) { writeAPIError(c.W, 500, "toomanyrequests") }
	unknown := func(c pullCall) { writeAPIError(c.W, 500, "something nobody classified") }
	notFound := func(c pullCall) {
		writeAPIError(c.W, 404, "manifest for 127.0.0.1:5000/app:1 not found: manifest unknown: manifest unknown")
	}
	// script answers attempt n with steps[n-1], and the last step after that.
	script := func(steps ...func(c pullCall)) func(c pullCall) {
		return func(c pullCall) { steps[min(c.N, len(steps))-1](c) }
	}
	ok := func(c pullCall) { streamOK(c, 1) }
	tests := []struct {
		name      string
		pull      func(c pullCall)
		attempts  int
		pulled    bool
		class     error // the final error's, if any
		retriable bool  // the final error's decision
	}{
		{"8 resets, then success", script(reset, reset, reset, reset, reset, reset, reset, reset, ok), 9, true, nil, false},
		{"14 transport faults of all kinds, then success", script(reset, unavailable, eofInStream, reset, unavailable,
			eofInStream, reset, unavailable, eofInStream, reset, unavailable, eofInStream, reset, unavailable, ok), 15, true, nil, false},
		{"resets forever stop after the transport budget", reset, DefaultTransportAttempts, false, ErrConnection, true},
		{"a non-transport retriable error stops after 5", throttled, DefaultPullAttempts, false, ErrTooManyRequests, true},
		{"an unclassified error stops after 5", unknown, DefaultPullAttempts, false, nil, true},
		{"transport faults do not use up the other budget", script(reset, throttled, reset, throttled, reset, throttled,
			reset, throttled, reset, throttled, ok), 10, false, ErrTooManyRequests, true},
		{"not found stops at once", notFound, 1, false, ErrNotFound, false},
		{"not found after resets stops at once", script(reset, reset, notFound), 3, false, ErrNotFound, false},
		{"auth refused stops at once", func(c pullCall) { writeAPIError(c.W, 500, "unauthorized: authentication required") },
			1, false, ErrAuthRefused, false},
		{"invalid reference stops at once", func(c pullCall) { writeAPIError(c.W, 400, "invalid reference format") },
			1, false, ErrInvalidReference, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(tt.pull)
			start := time.Now()
			o, delays := advancingPull(t, f, PullConfig{})
			assert.Less(t, time.Since(start), 2*time.Second, "backoff waits are on the fake clock")

			assert.Equal(t, tt.attempts, f.pullCount())
			require.Len(t, o.res.Attempts, tt.attempts)
			require.Len(t, delays, tt.attempts-1)
			for i, d := range delays {
				base := min(DefaultBackoffMin<<i, DefaultBackoffMax)
				if o.res.Attempts[i].Err != nil && errors.Is(o.res.Attempts[i].Err, ErrTooManyRequests) {
					base = max(base, DefaultThrottleDelay)
				}
				assert.InDelta(t, float64(base), float64(d), float64(base)*DefaultBackoffJitter+1,
					"delay %d: the usual backoff, transport faults or not", i+1)
			}
			if tt.pulled {
				require.NoError(t, o.err)
				assert.True(t, o.res.Pulled)
				return
			}
			require.Error(t, o.err)
			if tt.class != nil {
				assert.ErrorIs(t, o.err, tt.class)
			}
			var cp *CannotPullContainerError
			require.ErrorAs(t, o.err, &cp)
			assert.Equal(t, tt.retriable, cp.Retry(), "the final error keeps its own retry decision")
		})
	}
}

func TestPullTimeoutEndsTransportRetries(t *testing.T) {
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) {
		time.Sleep(2 * time.Millisecond) // so that the budget below cannot run out before the timeout
		writeAPIError(c.W, 500, resetText)
	})
	cfg := PullConfig{TransportAttempts: 1 << 20, PullTimeout: 200 * time.Millisecond}
	start := time.Now()
	o, _ := advancingPull(t, f, cfg)
	assert.Less(t, time.Since(start), 2*time.Second)
	require.Error(t, o.err)
	assert.ErrorIs(t, o.err, context.DeadlineExceeded)
	var te *TimeoutError
	require.ErrorAs(t, o.err, &te)
	assert.Equal(t, cfg.PullTimeout, te.Limit)
	require.Greater(t, len(o.res.Attempts), DefaultTransportAttempts, "retried past the default budget until the timeout")
	assert.ErrorIs(t, o.res.Attempts[0].Err, ErrConnection)
}

func TestPullBackoffAndThrottleDelays(t *testing.T) {
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) {
		if c.N == 1 {
			writeAPIError(c.W, 500, "toomanyrequests")
			return
		}
		if c.N == 2 {
			writeAPIError(c.W, 500, "received unexpected HTTP status: 503 Service Unavailable")
			return
		}
		streamOK(c, 1)
	})
	cfg := fastPull()
	cfg.ThrottleDelay = 40 * time.Millisecond
	var delays []time.Duration
	cfg.Retrier = retry.Retrier{OnRetry: func(_ int, _ error, d time.Duration) { delays = append(delays, d) }}
	c := f.client(Config{Pull: cfg})
	_, err := c.PullImage(t.Context(), testImage, nil)
	require.NoError(t, err)
	require.Len(t, delays, 2)
	assert.Equal(t, 40*time.Millisecond, delays[0], "429 waits at least ThrottleDelay")
	assert.Equal(t, 2*time.Millisecond, delays[1], "then the backoff (1 ms, 2 ms, capped)")
}

func TestPullDefaultBackoffMatchesECS(t *testing.T) {
	cfg := PullConfig{}.withDefaults()
	assert.Equal(t, 5, cfg.Attempts)
	assert.Equal(t, 15, cfg.TransportAttempts)
	assert.Equal(t, 7, PullConfig{Attempts: 7, TransportAttempts: 3}.withDefaults().TransportAttempts, "never below Attempts")
	assert.Equal(t, 1100*time.Millisecond, cfg.BackoffMin)
	assert.Equal(t, 5*time.Second, cfg.BackoffMax)
	assert.Equal(t, 2.0, cfg.BackoffMultiple)
	assert.Equal(t, 0.2, cfg.BackoffJitter)
	assert.Equal(t, time.Minute, cfg.InactivityTimeout)
	assert.Equal(t, 2*time.Hour, cfg.PullTimeout)
	assert.Equal(t, 4, cfg.MaxConcurrent)
	assert.Equal(t, BehaviorDefault, cfg.Behavior)
	assert.Equal(t, 10*time.Second, cfg.ProgressInterval)
}

// watchdogPull starts a pull of testImage whose watchdog and progress run on a fake clock (backoff
// waits stay on the real clock, 1 ms), and returns the clock, the client and the pull's outcome.
func watchdogPull(t *testing.T, f *fakeDocker, timeout time.Duration) (*clockwork.FakeClock, *Client, <-chan pullOutcome) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	cfg := fastPull()
	cfg.InactivityTimeout = timeout
	cfg.Clock = clock
	cfg.Retrier = retry.Retrier{Clock: clockwork.NewRealClock()}
	c := f.client(Config{Pull: cfg})
	out := make(chan pullOutcome, 1)
	go func() {
		res, err := c.PullImage(t.Context(), testImage, nil)
		out <- pullOutcome{res, err}
	}()
	return clock, c, out
}

type pullOutcome struct {
	res PullResult
	err error
}

// wait returns the outcome, failing the test if the pull has not ended within 10 s.
func wait(t *testing.T, out <-chan pullOutcome) pullOutcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not end")
		return pullOutcome{}
	}
}

// streamRead waits until the attempt in flight on p has read a message of its stream, and returns
// the attempt's tracker.
func streamRead(t *testing.T, p *Puller) *progressTracker {
	t.Helper()
	var tr *progressTracker
	require.Eventually(t, func() bool {
		p.mu.Lock()
		for _, f := range p.flights {
			_, tr = f.current()
		}
		p.mu.Unlock()
		if tr == nil {
			return false
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.lastPlain != "" || len(tr.layers) > 0
	}, 5*time.Second, time.Millisecond)
	return tr
}

func TestPullInactivityWatchdogFires(t *testing.T) {
	const timeout = time.Minute
	tests := []struct {
		name  string
		first func(c pullCall)
	}{
		{"no bytes at all", func(c pullCall) { stall(c, nil) }},
		{"the same message again and again", func(c pullCall) {
			for c.R.Context().Err() == nil {
				writeMsg(c, progress("Downloading", layerID(0), 10, 1000))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(func(c pullCall) {
				if c.N == 1 {
					tt.first(c)
					return
				}
				streamOK(c, 1)
			})
			clock, c, out := watchdogPull(t, f, timeout)
			streamRead(t, c.Puller())
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the watchdog waits")
			clock.Advance(timeout - time.Second)
			select {
			case o := <-out:
				t.Fatalf("the pull ended before the inactivity timeout: %v", o.err)
			default:
			}
			clock.Advance(time.Second)

			o := wait(t, out)
			require.NoError(t, o.err)
			require.Len(t, o.res.Attempts, 2)
			first := o.res.Attempts[0]
			assert.ErrorIs(t, first.Err, ErrInactivity)
			assert.Equal(t, timeout, first.Duration, "the watchdog fires at its setting, on its clock")
		})
	}
}

func TestPullInactivityWatchdogSparesAdvancingStream(t *testing.T) {
	const timeout = time.Minute
	step := make(chan struct{})
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) {
		writeMsg(c, map[string]any{"status": "Pulling from test", "id": "latest"})
		for i := int64(1); i <= 12; i++ {
			<-step
			writeMsg(c, progress("Downloading", layerID(0), i*10, 1000))
		}
		streamOK(c, 1)
	})
	clock, c, out := watchdogPull(t, f, timeout)
	tr := streamRead(t, c.Puller())
	for range 12 { // three inactivity timeouts in all, a quarter of one between messages
		clock.Advance(timeout / 4)
		step <- struct{}{}
		require.Eventually(t, func() bool { return tr.idleSince().Equal(clock.Now()) }, 5*time.Second, time.Millisecond)
	}
	o := wait(t, out)
	require.NoError(t, o.err)
	assert.Len(t, o.res.Attempts, 1)
	assert.Equal(t, 1, f.pullCount())
}

func TestPullTimeoutBoundsEverything(t *testing.T) {
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) { stall(c, nil) })
	cfg := fastPull()
	cfg.InactivityTimeout = -1
	cfg.PullTimeout = 150 * time.Millisecond
	c := f.client(Config{Pull: cfg})
	start := time.Now()
	_, err := c.PullImage(t.Context(), testImage, nil)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, cfg.PullTimeout, te.Limit)
}

func TestPullCancelledDuringBackoffReturnsAtOnce(t *testing.T) {
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) { writeAPIError(c.W, 500, "received unexpected HTTP status: 503 Service Unavailable") })
	ctx, cancel := context.WithCancel(t.Context())
	cfg := fastPull()
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	waiting := make(chan struct{})
	cfg.Retrier = retry.Retrier{OnRetry: func(int, error, time.Duration) { close(waiting) }}
	c := f.client(Config{Pull: cfg})
	go func() {
		<-waiting
		cancel()
	}()
	start := time.Now()
	res, err := c.PullImage(ctx, testImage, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), time.Second)
	assert.Len(t, res.Attempts, 1)
	assert.Equal(t, 1, f.pullCount())
	c.Puller().Close() // the shared pull has ended too: Close does not wait an hour
}

func TestPullRefreshesRefusedCredentialsOnce(t *testing.T) {
	good := docker.AuthConfiguration{Username: "berth", Password: "good", ServerAddress: "127.0.0.1:5000"}
	bad := docker.AuthConfiguration{Username: "berth", Password: "bad", ServerAddress: "127.0.0.1:5000"}
	worse := docker.AuthConfiguration{Username: "berth", Password: "worse", ServerAddress: "127.0.0.1:5000"}
	tests := []struct {
		name            string
		creds           []docker.AuthConfiguration
		wantErr         bool
		wantAttempts    int
		wantInvalidated int
	}{
		{"fresh credentials work", []docker.AuthConfiguration{bad, good}, false, 2, 1},
		{"fresh credentials refused too", []docker.AuthConfiguration{bad, worse, good}, true, 2, 2},
		{"nothing new to try", []docker.AuthConfiguration{bad}, true, 1, 1},
		{"anonymous is not refreshed", []docker.AuthConfiguration{{}}, true, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.setPull(func(c pullCall) {
				if c.Auth != good {
					writeAPIError(c.W, 500, "unauthorized: authentication required")
					return
				}
				streamOK(c, 1)
			})
			auth := &fakeAuth{creds: tt.creds}
			c := f.client(Config{Pull: fastPull()})
			res, err := c.PullImage(t.Context(), testImage, auth)
			assert.Len(t, res.Attempts, tt.wantAttempts)
			assert.Equal(t, tt.wantAttempts, f.pullCount())
			_, invalidated := auth.counts()
			assert.Equal(t, tt.wantInvalidated, invalidated)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrAuthRefused)
			var cp *CannotPullContainerError
			require.ErrorAs(t, err, &cp)
			assert.False(t, cp.Retry())
		})
	}
}

func TestPullAuthSourceFailure(t *testing.T) {
	f := newFakeDocker(t)
	cfg := fastPull()
	cfg.Behavior = BehaviorAlways
	c := f.client(Config{Pull: cfg})
	_, err := c.PullImage(t.Context(), testImage, &fakeAuth{err: fmt.Errorf("ecr: %w", fakeECRError{})})
	require.Error(t, err)
	var cp *CannotPullContainerError
	require.ErrorAs(t, err, &cp)
	assert.False(t, cp.Retry())
	assert.Equal(t, 0, f.pullCount())
}

func TestPullInvalidReferenceFromAuthSource(t *testing.T) {
	f := newFakeDocker(t)
	c := f.client(Config{Pull: fastPull()})
	// What registryauth returns for "/busybox": an invalid argument of its own.
	authErr := fmt.Errorf("image %q: %w", "/busybox", errdefs.New(errdefs.ErrInvalidArgument, "invalid image reference"))
	res, err := c.PullImage(t.Context(), "/busybox", &fakeAuth{err: authErr})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidReference, "one notion of an invalid reference, whoever found it")
	assert.ErrorIs(t, err, authErr)
	assert.False(t, errdefs.IsRetriable(err))
	assert.Empty(t, res.Attempts)
	assert.Equal(t, 0, f.pullCount())
	assert.Equal(t, `cannot pull image "/busybox": registry credentials: image "/busybox": invalid image reference`, err.Error())
}

func TestConcurrentPullsShareOnePull(t *testing.T) {
	f := newFakeDocker(t)
	release := make(chan struct{})
	f.setPull(func(c pullCall) {
		<-release
		streamOK(c, 2)
	})
	c := f.client(Config{Pull: fastPull()})
	const callers = 20
	var wg sync.WaitGroup
	results := make([]PullResult, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.PullImage(t.Context(), testImage, nil)
		}()
	}
	require.Eventually(t, func() bool { return waiters(c.Puller()) == callers }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, 1, f.pullCount())
	shared := 0
	for i := range callers {
		require.NoError(t, errs[i])
		assert.True(t, results[i].Pulled)
		assert.Len(t, results[i].Attempts, 1)
		if results[i].Shared {
			shared++
		}
	}
	assert.Equal(t, callers-1, shared)
}

// waiters counts the callers attached to pulls in flight.
func waiters(p *Puller) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range p.flights {
		n += f.waiters
	}
	return n
}

func TestPullsWithDifferentCredentialsAreSeparate(t *testing.T) {
	f := newFakeDocker(t)
	release := make(chan struct{})
	f.setPull(func(c pullCall) {
		<-release
		streamOK(c, 1)
	})
	c := f.client(Config{Pull: fastPull()})
	var wg sync.WaitGroup
	for _, pw := range []string{"a", "b", "a"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			auth := &fakeAuth{creds: []docker.AuthConfiguration{{Username: "u", Password: pw}}}
			_, err := c.PullImage(t.Context(), testImage, auth)
			assert.NoError(t, err)
		}()
	}
	require.Eventually(t, func() bool { return waiters(c.Puller()) == 3 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, 2, f.pullCount())
}

func TestCallerLeavingDoesNotCancelSharedPull(t *testing.T) {
	f := newFakeDocker(t)
	release := make(chan struct{})
	pullGone := make(chan struct{})
	f.setPull(func(c pullCall) {
		select {
		case <-release:
			streamOK(c, 1)
		case <-c.R.Context().Done():
			close(pullGone)
		}
	})
	c := f.client(Config{Pull: fastPull()})

	ctx1, cancel1 := context.WithCancel(t.Context())
	done1 := make(chan error, 1)
	go func() {
		_, err := c.PullImage(ctx1, testImage, nil)
		done1 <- err
	}()
	done2 := make(chan error, 1)
	go func() {
		_, err := c.PullImage(t.Context(), testImage, nil)
		done2 <- err
	}()
	require.Eventually(t, func() bool { return waiters(c.Puller()) == 2 && f.pullCount() == 1 }, 5*time.Second, time.Millisecond)

	cancel1()
	select {
	case err := <-done1:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Second):
		t.Fatal("a cancelled caller did not return at once")
	}
	select {
	case <-pullGone:
		t.Fatal("the shared pull was cancelled while a caller still waited")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done2)
	assert.Equal(t, 1, f.pullCount())
}

func TestLastCallerLeavingCancelsPull(t *testing.T) {
	f := newFakeDocker(t)
	pullGone := make(chan struct{})
	f.setPull(func(c pullCall) {
		<-c.R.Context().Done()
		close(pullGone)
	})
	c := f.client(Config{Pull: fastPull()})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.PullImage(ctx, testImage, nil)
		done <- err
	}()
	require.Eventually(t, func() bool { return f.pullCount() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	select {
	case <-pullGone:
	case <-time.After(2 * time.Second):
		t.Fatal("the pull went on with nobody waiting")
	}
}

func TestMaxConcurrentPulls(t *testing.T) {
	f := newFakeDocker(t)
	release := make(chan struct{})
	f.setPull(func(c pullCall) {
		<-release
		streamOK(c, 1)
	})
	cfg := fastPull()
	cfg.MaxConcurrent = 2
	c := f.client(Config{Pull: cfg})
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.PullImage(t.Context(), fmt.Sprintf("127.0.0.1:5000/app%d:1", i), nil)
			assert.NoError(t, err)
		}()
	}
	require.Eventually(t, func() bool { return f.pullCount() == 2 }, 5*time.Second, time.Millisecond)

	// A caller waiting for a slot gives up when its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.PullImage(ctx, "127.0.0.1:5000/other:1", nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)

	assert.Equal(t, 2, f.pullCount(), "no third pull while two run")
	close(release)
	wg.Wait()
	assert.Equal(t, 5, f.pullCount())
	assert.Equal(t, 2, f.maxActive())
}

func TestPullBehaviors(t *testing.T) {
	ok := func(c pullCall) { streamOK(c, 1) }
	fail := func(c pullCall) { writeAPIError(c.W, 500, "received unexpected HTTP status: 503 Service Unavailable") }
	tests := []struct {
		behavior   Behavior
		present    bool
		pulledOnce bool // the Puller pulled the image before
		pull       func(c pullCall)
		wantPulls  int
		wantErr    bool
		wantCached bool
		wantWarn   bool
	}{
		{BehaviorDefault, false, false, ok, 1, false, false, false},
		{BehaviorDefault, true, false, ok, 1, false, false, false},
		{BehaviorDefault, true, false, fail, DefaultTransportAttempts, false, true, true},
		{BehaviorDefault, false, false, fail, DefaultTransportAttempts, true, false, false},
		{BehaviorAlways, true, false, ok, 1, false, false, false},
		{BehaviorAlways, true, false, fail, DefaultTransportAttempts, true, false, false},
		{BehaviorOnce, true, true, fail, 0, false, true, false},
		{BehaviorOnce, true, false, ok, 1, false, false, false},
		{BehaviorOnce, false, true, ok, 1, false, false, false},
		{BehaviorPreferCached, true, false, fail, 0, false, true, false},
		{BehaviorPreferCached, false, false, ok, 1, false, false, false},
		{BehaviorPreferCached, false, false, fail, DefaultTransportAttempts, true, false, false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/present=%v/pulledOnce=%v/pullOK=%v", tt.behavior, tt.present, tt.pulledOnce, !tt.wantErr && !tt.wantCached || tt.wantPulls == 0)
		t.Run(name, func(t *testing.T) {
			f := newFakeDocker(t)
			log, buf := testLogger(t)
			cfg := fastPull()
			cfg.Behavior = tt.behavior
			cfg.Logger = log
			c := f.client(Config{Pull: cfg})
			if tt.pulledOnce {
				_, err := c.PullImage(t.Context(), testImage, nil)
				require.NoError(t, err)
				f.mu.Lock()
				f.pulls = nil
				f.mu.Unlock()
			}
			f.setImage(testImage, tt.present)
			f.setPull(tt.pull)

			res, err := c.PullImage(t.Context(), testImage, nil)
			assert.Equal(t, tt.wantPulls, f.pullCount())
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrRegistryUnavailable)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantCached, res.Cached)
			assert.Equal(t, tt.wantPulls, len(res.Attempts))
			assert.Equal(t, tt.wantWarn, strings.Contains(buf.String(), `level=warn`) &&
				strings.Contains(buf.String(), `msg="image pull failed; using the cached copy" image=127.0.0.1:5000/app:1`), buf.String())
		})
	}
}

func TestParseBehavior(t *testing.T) {
	for in, want := range map[string]Behavior{"": BehaviorDefault, "default": BehaviorDefault, "ALWAYS": BehaviorAlways, " once ": BehaviorOnce, "prefer-cached": BehaviorPreferCached} {
		got, err := ParseBehavior(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got)
	}
	_, err := ParseBehavior("sometimes")
	assert.Error(t, err)
}

func TestPullLogsProgress(t *testing.T) {
	const interval = 10 * time.Second
	release := make(chan struct{})
	f := newFakeDocker(t)
	f.setPull(func(c pullCall) {
		writeMsg(c, map[string]any{"status": "Pulling from test", "id": "1"})
		for i := range 3 {
			writeMsg(c, map[string]any{"status": "Pulling fs layer", "id": layerID(i), "progressDetail": map[string]any{}})
		}
		writeMsg(c, map[string]any{"status": "Already exists", "id": layerID(0), "progressDetail": map[string]any{}})
		for i := int64(1); i <= 10; i++ {
			writeMsg(c, progress("Downloading", layerID(1), i*100, 1000))
			writeMsg(c, progress("Downloading", layerID(2), i*10, 2000))
		}
		writeMsg(c, map[string]any{"status": "Download complete", "id": layerID(1)})
		<-release
		streamOK(c, 0)
	})
	log, buf := testLogger(t)
	clock := clockwork.NewFakeClock()
	cfg := fastPull()
	cfg.ProgressInterval = interval
	cfg.InactivityTimeout = -1
	cfg.Clock = clock
	cfg.Logger = log
	c := f.client(Config{Pull: cfg})
	out := make(chan pullOutcome, 1)
	go func() {
		res, err := c.PullImage(t.Context(), testImage, nil)
		out <- pullOutcome{res, err}
	}()

	progressLines := func() []string {
		var lines []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `msg="image pull in progress"`) {
				lines = append(lines, l)
			}
		}
		return lines
	}
	tr := streamRead(t, c.Puller())
	require.Eventually(t, func() bool { return tr.snapshot().LayersDone == 2 }, 5*time.Second, time.Millisecond)
	for n := 1; n <= 3; n++ {
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the progress reporter waits")
		assert.Len(t, progressLines(), n-1, "no progress line before the interval has passed")
		clock.Advance(interval)
		require.Eventually(t, func() bool { return len(progressLines()) == n }, 5*time.Second, time.Millisecond)
	}
	close(release)
	require.NoError(t, wait(t, out).err)

	lines := progressLines()
	require.Len(t, lines, 3, buf.String())
	for i, l := range lines {
		assert.Contains(t, l, "level=info")
		assert.Contains(t, l, "image=127.0.0.1:5000/app:1")
		assert.Contains(t, l, "attempt=1")
		assert.Contains(t, l, "layers_done=2 layers_total=3 bytes_done=1100 bytes_total=3000", "layer 0 already existed, layer 1 is done")
		assert.Contains(t, l, fmt.Sprintf("idle=%s elapsed=%s", time.Duration(i+1)*interval, time.Duration(i+1)*interval))
	}
	assert.Contains(t, buf.String(), `msg="image pulled" image=127.0.0.1:5000/app:1 attempts=1`)
}

func TestPullRejectsAfterClose(t *testing.T) {
	f := newFakeDocker(t)
	c := f.client(Config{Pull: fastPull()})
	c.Close()
	_, err := c.PullImage(t.Context(), testImage, nil)
	assert.ErrorIs(t, err, ErrPullerClosed)
}

func TestSplitReference(t *testing.T) {
	tests := []struct{ in, repo, tag string }{
		{"busybox", "busybox", "latest"},
		{"busybox:1.36", "busybox", "1.36"},
		{"127.0.0.1:5000/app", "127.0.0.1:5000/app", "latest"},
		{"127.0.0.1:5000/app:v1", "127.0.0.1:5000/app", "v1"},
		{"127.0.0.1:5000/app@sha256:abcd", "127.0.0.1:5000/app", "sha256:abcd"},
		{"127.0.0.1:5000/app:v1@sha256:abcd", "127.0.0.1:5000/app", "sha256:abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			repo, tag := splitReference(tt.in)
			assert.Equal(t, tt.repo, repo)
			assert.Equal(t, tt.tag, tag)
		})
	}
}

func TestPullSendsCredentialsAndReference(t *testing.T) {
	f := newFakeDocker(t)
	var got pullCall
	f.setPull(func(c pullCall) {
		got = c
		streamOK(c, 1)
	})
	creds := docker.AuthConfiguration{Username: "u", Password: "p", ServerAddress: "127.0.0.1:5000"}
	c := f.client(Config{Pull: fastPull()})
	_, err := c.PullImage(t.Context(), "127.0.0.1:5000/app@sha256:abcd", &fakeAuth{creds: []docker.AuthConfiguration{creds}})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:5000/app@sha256:abcd", got.Image)
	assert.Equal(t, creds, got.Auth)
	assert.Equal(t, http.MethodPost, got.R.Method)
}

func TestCannotPullContainerErrorUnwraps(t *testing.T) {
	inner := &PullError{Err: errors.New("x"), Classes: []error{ErrNotFound}}
	err := fmt.Errorf("engine: %w", &CannotPullContainerError{Image: "i", Err: inner})
	assert.ErrorIs(t, err, ErrNotFound)
	var pe *PullError
	assert.ErrorAs(t, err, &pe)
}

// With ECS_IMAGE_PULL_BEHAVIOR=once the Puller remembers the images it pulled, but only the last
// pulledMax: tags that come and go with tasks over months do not pile up. An image pulled before
// those is pulled once more.
func TestPullOnceRemembersALimitedNumberOfImages(t *testing.T) {
	f := newFakeDocker(t)
	cfg := fastPull()
	cfg.Behavior = BehaviorOnce
	c := f.client(Config{Pull: cfg})
	p := c.Puller()
	p.pulledMax = 3
	image := func(i int) string { return fmt.Sprintf("127.0.0.1:5000/app:%d", i) }
	for i := range 10 {
		f.setImage(image(i), true)
		_, err := c.PullImage(t.Context(), image(i), nil)
		require.NoError(t, err)
	}
	require.Equal(t, 10, f.pullCount())
	p.mu.Lock()
	remembered, ring := p.pulled.Len(), len(p.ring)
	p.mu.Unlock()
	assert.Equal(t, 3, remembered, "only the last three images are remembered")
	assert.Equal(t, 3, ring)

	res, err := c.PullImage(t.Context(), image(9), nil)
	require.NoError(t, err)
	assert.True(t, res.Cached, "a remembered image is not pulled again")
	assert.Equal(t, 10, f.pullCount())
	_, err = c.PullImage(t.Context(), image(0), nil)
	require.NoError(t, err)
	assert.Equal(t, 11, f.pullCount(), "a forgotten image is pulled once more")
	res, err = c.PullImage(t.Context(), image(0), nil)
	require.NoError(t, err)
	assert.True(t, res.Cached, "and remembered again")
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Equal(t, 3, p.pulled.Len())
	assert.False(t, p.pulled.Has(image(7)), "the oldest remembered image made room")
}

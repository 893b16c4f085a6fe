package dockerstats

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
)

// t0 is the Engine's read time of the tests' first samples.
var t0 = time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)

func newTestCache(t *testing.T, cfg Config) (*Cache, *fakeDocker, *clockwork.FakeClock) {
	t.Helper()
	f := newFakeDocker()
	clock := clockwork.NewFakeClock()
	cfg.Clock = clock
	c := New(f, cfg)
	t.Cleanup(c.Close)
	return c, f, clock
}

type answer struct {
	raw json.RawMessage
	err error
}

// statsAsync calls Stats on its own goroutine; the answer arrives on the channel.
func statsAsync(ctx context.Context, c *Cache, id string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		raw, err := c.Stats(ctx, id, "")
		ch <- answer{raw, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("Stats did not answer")
		return answer{}
	}
}

// rateOf returns the network_rate_stats of a served sample, nil when it has none.
func rateOf(t *testing.T, raw json.RawMessage) *networkRate {
	t.Helper()
	var v struct {
		Rate *networkRate `json:"network_rate_stats"`
	}
	require.NoError(t, json.Unmarshal(raw, &v), string(raw))
	return v.Rate
}

func TestManyReadersShareOneStream(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	ctx := t.Context()
	const readers = 50
	answers := make([]<-chan answer, readers)
	for i := range answers {
		answers[i] = statsAsync(ctx, c, "abc")
	}
	st := f.nextStream(t)
	first := sample("abc", t0, 100, 10)
	st.send(t, first)
	for i := range answers {
		a := await(t, answers[i])
		require.NoError(t, a.err)
		assert.JSONEq(t, string(first.JSON), string(a.raw), "no rate without a sample before")
	}

	second := sample("abc", t0.Add(time.Second), 1100, 510)
	st.send(t, second)
	for range readers {
		raw, err := c.Stats(ctx, "abc", "")
		require.NoError(t, err)
		assert.Equal(t, &networkRate{RxBytesPerSec: 1000, TxBytesPerSec: 500}, rateOf(t, raw))
	}
	assert.Equal(t, 1, f.streamCount("abc"), "one stream for every reader")
	assert.Empty(t, f.opened)

	// Another container has a stream of its own.
	other := statsAsync(ctx, c, "def")
	f.nextStream(t).send(t, sample("def", t0, -1, 0))
	require.NoError(t, await(t, other).err)
	assert.Equal(t, 1, f.streamCount("def"))
	assert.False(t, st.ended())
}

func TestFirstSampleWaitIsBounded(t *testing.T) {
	c, f, clock := newTestCache(t, Config{FirstSampleWait: time.Second})
	ctx := t.Context()
	ch := statsAsync(ctx, c, "abc")
	st := f.nextStream(t)
	require.NoError(t, clock.BlockUntilContext(ctx, 2), "the idle check and the reader's wait")
	clock.Advance(time.Second)
	err := await(t, ch).err
	require.ErrorIs(t, err, ErrNoSample)
	assert.True(t, errdefs.IsUnavailable(err))

	// The reader's context ends the wait too.
	rctx, cancel := context.WithCancel(ctx)
	ch = statsAsync(rctx, c, "abc")
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	cancel()
	assert.ErrorIs(t, await(t, ch).err, context.Canceled)

	// The stream was left running: its first sample serves the next reader at once.
	st.send(t, sample("abc", t0, 1, 1))
	_, err = c.Stats(ctx, "abc", "")
	require.NoError(t, err)
	assert.Equal(t, 1, f.streamCount("abc"))
}

func TestIdleStreamIsClosed(t *testing.T) {
	c, f, clock := newTestCache(t, Config{IdleTimeout: time.Minute})
	ctx := t.Context()
	ch := statsAsync(ctx, c, "abc")
	st := f.nextStream(t)
	st.send(t, sample("abc", t0, 1, 1))
	require.NoError(t, await(t, ch).err)

	clock.Advance(30 * time.Second)
	_, err := c.Stats(ctx, "abc", "") // read at 30 s: the stream stays until 90 s
	require.NoError(t, err)
	clock.Advance(30 * time.Second)
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the idle check rescheduled")
	assert.False(t, st.ended(), "read 30 s ago")

	clock.Advance(30 * time.Second)
	waitClosed(t, st.done, "the idle stream to close")
	assert.ErrorIs(t, st.ctx.Err(), context.Canceled)

	// A later read starts a new stream.
	ch = statsAsync(ctx, c, "abc")
	st = f.nextStream(t)
	st.send(t, sample("abc", t0.Add(time.Minute), 2, 2))
	require.NoError(t, await(t, ch).err)
	assert.Equal(t, 2, f.streamCount("abc"))
}

func TestContainerGoneEndsItsEntry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		check func(t *testing.T, err error)
	}{
		{"not running", notRunning("abc"), func(t *testing.T, err error) {
			assert.ErrorIs(t, err, dockerclient.ErrNotRunning)
			assert.True(t, errdefs.IsFailedPrecondition(err))
		}},
		{"removed", &dockerclient.NotFoundError{Kind: "container", Name: "abc", Err: fmt.Errorf("no such container")}, func(t *testing.T, err error) {
			assert.True(t, errAs[*dockerclient.NotFoundError](err))
			assert.True(t, errdefs.IsNotFound(err))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f, clock := newTestCache(t, Config{StoppedTTL: 10 * time.Second})
			ctx := t.Context()
			ch := statsAsync(ctx, c, "abc")
			st := f.nextStream(t)
			st.send(t, sample("abc", t0, 1, 1))
			require.NoError(t, await(t, ch).err)

			st.end(t, tc.err)
			var err error
			requireEventually(t, func() bool {
				_, err = c.Stats(ctx, "abc", "")
				return err != nil
			}, "the stopped container's stats to fail")
			tc.check(t, err)
			_, err = c.Stats(ctx, "abc", "")
			tc.check(t, err)
			assert.Equal(t, 1, f.streamCount("abc"), "a stopped container is not asked again within StoppedTTL")

			clock.Advance(10 * time.Second)
			ch = statsAsync(ctx, c, "abc")
			st = f.nextStream(t)
			st.send(t, sample("abc", t0.Add(time.Minute), 1, 1))
			require.NoError(t, await(t, ch).err, "a container started again is read again")
			assert.Equal(t, 2, f.streamCount("abc"))
		})
	}
}

func TestContainerNotRunningBeforeAnySample(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	ch := statsAsync(t.Context(), c, "abc")
	f.nextStream(t).end(t, notRunning("abc"))
	require.ErrorIs(t, await(t, ch).err, dockerclient.ErrNotRunning, "the reader waiting for a first sample")
	_, err := c.Stats(t.Context(), "abc", "")
	require.ErrorIs(t, err, dockerclient.ErrNotRunning)
	assert.Equal(t, 1, f.streamCount("abc"))
}

func TestStreamFailuresReachReadersAndTheStreamReopens(t *testing.T) {
	c, f, clock := newTestCache(t, Config{BackoffMin: time.Second, BackoffMax: time.Second})
	ctx := t.Context()
	refused := fmt.Errorf("stats of container %q: %w: %w", "abc", dockerclient.ErrConnection, syscall.ECONNREFUSED)

	// A reader waiting for the first sample gets the failure at once.
	ch := statsAsync(ctx, c, "abc")
	st := f.nextStream(t)
	st.end(t, refused)
	err := await(t, ch).err
	require.ErrorIs(t, err, dockerclient.ErrConnection)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = c.Stats(ctx, "abc", "")
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "until a sample arrives")

	// The stream reopens after the backoff.
	require.NoError(t, clock.BlockUntilContext(ctx, 2), "the idle check and the backoff")
	clock.Advance(2 * time.Second)
	st = f.nextStream(t)
	first := sample("abc", t0, 1000, 100)
	st.send(t, first)
	raw, err := c.Stats(ctx, "abc", "")
	require.NoError(t, err)
	assert.JSONEq(t, string(first.JSON), string(raw))

	// A drop keeps the latest sample served while the stream reopens.
	st.end(t, refused)
	raw, err = c.Stats(ctx, "abc", "")
	require.NoError(t, err)
	assert.JSONEq(t, string(first.JSON), string(raw))
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	clock.Advance(2 * time.Second)
	st = f.nextStream(t)
	st.send(t, sample("abc", t0.Add(4*time.Second), 5000, 300))
	raw, err = c.Stats(ctx, "abc", "")
	require.NoError(t, err)
	assert.Equal(t, &networkRate{RxBytesPerSec: 1000, TxBytesPerSec: 50}, rateOf(t, raw), "the rate spans the drop")
	assert.Equal(t, 3, f.streamCount("abc"))
}

func TestDroppedStreamNobodyReadsIsNotReopened(t *testing.T) {
	c, f, clock := newTestCache(t, Config{IdleTimeout: 10 * time.Second, BackoffMin: time.Minute, BackoffMax: time.Minute})
	ctx := t.Context()
	ch := statsAsync(ctx, c, "abc")
	st := f.nextStream(t)
	st.send(t, sample("abc", t0, 1, 1))
	require.NoError(t, await(t, ch).err)

	st.end(t, fmt.Errorf("stats of container %q: %w", "abc", dockerclient.ErrConnection))
	require.NoError(t, clock.BlockUntilContext(ctx, 2), "the idle check and the backoff")
	clock.Advance(10 * time.Second)
	requireEventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.entries) == 0
	}, "the idle entry to go")
	clock.Advance(2 * time.Minute)
	c.Close()
	assert.Equal(t, 1, f.streamCount("abc"), "no stream reopened for nobody")
}

func TestCloseEndsEverything(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	ctx := t.Context()
	served := statsAsync(ctx, c, "abc")
	st1 := f.nextStream(t)
	st1.send(t, sample("abc", t0, 1, 1))
	require.NoError(t, await(t, served).err)
	waiting := statsAsync(ctx, c, "def")
	st2 := f.nextStream(t)

	c.Close()
	assert.True(t, st1.ended())
	assert.True(t, st2.ended())
	err := await(t, waiting).err
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.Stats(ctx, "abc", "")
	require.ErrorIs(t, err, ErrClosed)
	assert.True(t, errdefs.IsFailedPrecondition(err))
	c.Close() // idempotent
}

func TestNetworkRateSumsEveryInterface(t *testing.T) {
	c, f, _ := newTestCache(t, Config{})
	ctx := t.Context()
	two := func(read time.Time, rx0, tx0, rx1, tx1 uint64) dockerclient.StatsSample {
		return dockerclient.StatsSample{
			Read: read,
			Networks: map[string]dockerclient.NetworkStats{
				"eth0": {RxBytes: rx0, TxBytes: tx0}, "eth1": {RxBytes: rx1, TxBytes: tx1},
			},
			JSON: []byte(fmt.Sprintf(`{"read":%q,"networks":{"eth0":{"rx_bytes":%d,"tx_bytes":%d},"eth1":{"rx_bytes":%d,"tx_bytes":%d}}}`,
				read.Format(time.RFC3339Nano), rx0, tx0, rx1, tx1)),
		}
	}
	ch := statsAsync(ctx, c, "abc")
	st := f.nextStream(t)
	st.send(t, two(t0, 1000, 500, 200, 100))
	require.NoError(t, await(t, ch).err)
	second := two(t0.Add(2*time.Second), 5000, 1500, 1200, 100)
	st.send(t, second)
	raw, err := c.Stats(ctx, "abc", "")
	require.NoError(t, err)
	// rx: (5000+1200 - (1000+200)) / 2 s = 2500; tx: (1500+100 - (500+100)) / 2 s = 500.
	assert.Equal(t, &networkRate{RxBytesPerSec: 2500, TxBytesPerSec: 500}, rateOf(t, raw))
	var got, want map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.NoError(t, json.Unmarshal(second.JSON, &want))
	delete(got, "network_rate_stats")
	assert.Equal(t, want, got, "Docker's fields as they were")
}

func TestWithNetworkRate(t *testing.T) {
	net := func(read time.Time, rx, tx uint64) point { return point{read: read, hasNet: true, rx: rx, tx: tx} }
	raw := json.RawMessage(`{"read":"x","id":"abc"}`)
	for _, tc := range []struct {
		name      string
		raw       json.RawMessage
		prev, cur point
		want      string // "" when raw comes back unchanged
	}{
		{name: "first sample", raw: raw, cur: net(t0, 10, 10)},
		{name: "two seconds", raw: raw, prev: net(t0, 1200, 600), cur: net(t0.Add(2*time.Second), 6200, 1600),
			want: `{"read":"x","id":"abc","network_rate_stats":{"rx_bytes_per_sec":2500,"tx_bytes_per_sec":500}}`},
		{name: "half a second, nothing sent", raw: raw, prev: net(t0, 1000, 7), cur: net(t0.Add(500*time.Millisecond), 1250, 7),
			want: `{"read":"x","id":"abc","network_rate_stats":{"rx_bytes_per_sec":500,"tx_bytes_per_sec":0}}`},
		{name: "uneven", raw: raw, prev: net(t0, 0, 0), cur: net(t0.Add(1500*time.Millisecond), 1000, 1),
			want: fmt.Sprintf(`{"read":"x","id":"abc","network_rate_stats":{"rx_bytes_per_sec":%v,"tx_bytes_per_sec":%v}}`, 1000/1.5, 1/1.5)},
		{name: "network mode host", raw: raw, prev: point{read: t0}, cur: point{read: t0.Add(time.Second)}},
		{name: "counters reset", raw: raw, prev: net(t0, 5000, 10), cur: net(t0.Add(time.Second), 100, 20)},
		{name: "empty object", raw: json.RawMessage(`{}`), prev: net(t0, 0, 0), cur: net(t0.Add(time.Second), 8, 4),
			want: `{"network_rate_stats":{"rx_bytes_per_sec":8,"tx_bytes_per_sec":4}}`},
		{name: "trailing newline", raw: json.RawMessage("{\"id\":\"abc\"}\n"), prev: net(t0, 0, 0), cur: net(t0.Add(time.Second), 8, 4),
			want: `{"id":"abc","network_rate_stats":{"rx_bytes_per_sec":8,"tx_bytes_per_sec":4}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := withNetworkRate(tc.raw, tc.prev, tc.cur)
			if tc.want == "" {
				assert.Equal(t, string(tc.raw), string(got))
				return
			}
			assert.Equal(t, tc.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}

package dockerstats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// fakeDocker is a Docker whose streams the test drives: every ContainerStats call is handed to the
// test on opened, then delivers what the test sends and returns what the test ends it with.
type fakeDocker struct {
	opened chan *fakeStream

	mu      sync.Mutex
	streams map[string]int // ContainerStats calls by container
}

var _ Docker = (*fakeDocker)(nil)

func newFakeDocker() *fakeDocker {
	return &fakeDocker{opened: make(chan *fakeStream, 100), streams: map[string]int{}}
}

// fakeStream is one ContainerStats call.
type fakeStream struct {
	id      string
	ctx     context.Context
	samples chan delivery
	ends    chan error
	done    chan struct{} // closed when the call returned
}

type delivery struct {
	s         dockerclient.StatsSample
	delivered chan struct{}
}

func (f *fakeDocker) ContainerStats(ctx context.Context, id string, fn func(dockerclient.StatsSample) error) error {
	f.mu.Lock()
	f.streams[id]++
	f.mu.Unlock()
	st := &fakeStream{id: id, ctx: ctx, samples: make(chan delivery), ends: make(chan error), done: make(chan struct{})}
	defer close(st.done)
	f.opened <- st
	for {
		select {
		case d := <-st.samples:
			err := fn(d.s)
			close(d.delivered)
			if err != nil {
				return err
			}
		case err := <-st.ends:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// streamCount returns how many streams of id were opened.
func (f *fakeDocker) streamCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams[id]
}

// nextStream returns the next stream opened, failing the test if none opens within 5 s.
func (f *fakeDocker) nextStream(t *testing.T) *fakeStream {
	t.Helper()
	select {
	case st := <-f.opened:
		return st
	case <-time.After(5 * time.Second):
		t.Fatal("no stats stream was opened")
		return nil
	}
}

// send delivers s and returns once the cache has taken it.
func (st *fakeStream) send(t *testing.T, s dockerclient.StatsSample) {
	t.Helper()
	d := delivery{s: s, delivered: make(chan struct{})}
	select {
	case st.samples <- d:
	case <-st.done:
		t.Fatal("the stream ended before the sample was sent")
	case <-time.After(5 * time.Second):
		t.Fatal("the cache does not read the stream")
	}
	waitClosed(t, d.delivered, "the sample to be taken")
}

// end makes the stream return err.
func (st *fakeStream) end(t *testing.T, err error) {
	t.Helper()
	select {
	case st.ends <- err:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream does not end")
	}
	waitClosed(t, st.done, "the stream to end")
}

// ended reports whether the stream has returned.
func (st *fakeStream) ended() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

// waitClosed waits up to 5 s for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// sample returns a stats sample read at read with one interface's totals (rx < 0: no networks).
func sample(id string, read time.Time, rx, tx int64) dockerclient.StatsSample {
	s := dockerclient.StatsSample{Read: read}
	nets := ""
	if rx >= 0 {
		s.Networks = map[string]dockerclient.NetworkStats{"eth0": {RxBytes: uint64(rx), TxBytes: uint64(tx)}}
		nets = fmt.Sprintf(`,"networks":{"eth0":{"rx_bytes":%d,"tx_bytes":%d}}`, rx, tx)
	}
	s.JSON = []byte(fmt.Sprintf(`{"read":%q,"id":%q,"memory_stats":{"usage":4096}%s}`, read.UTC().Format(time.RFC3339Nano), id, nets))
	return s
}

// notRunning is the error dockerclient gives for a container that stopped.
func notRunning(id string) error {
	return fmt.Errorf("stats of container %q: %w", id, dockerclient.ErrNotRunning)
}

// errAs is errors.As for a test's checks.
func errAs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// requireEventually waits up to 5 s for cond.
func requireEventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond, what)
}

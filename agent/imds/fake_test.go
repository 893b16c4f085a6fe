package imds_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/imds"
)

const fakeToken = "fake-imdsv2-token"

// answer is what the fake IMDS serves for a path: a status and a body.
type answer struct {
	status int
	body   string
}

// fakeIMDS is an IMDSv2 server: PUT /latest/api/token (with X-aws-ec2-metadata-token-ttl-seconds)
// returns a token, and every GET without that token is refused with 401. Paths are relative to
// /latest/ ("meta-data/placement/region"); an unknown path is a 404.
type fakeIMDS struct {
	srv *httptest.Server

	mu          sync.Mutex
	paths       map[string]answer
	seq         map[string][]answer // served in turn, the last one repeated, before paths
	gets        map[string]int      // GETs per path that carried the token
	tokens      int                 // token PUTs answered
	refused     int                 // GETs without a valid token
	tokenStatus int                 // when not 0, the token endpoint answers it
}

// newFakeIMDS starts a fake IMDS serving paths; it stops with the test. It also makes sure
// AWS_EC2_METADATA_DISABLED (set by the Makefile) does not disable the clients under test.
func newFakeIMDS(t *testing.T, paths map[string]answer) *fakeIMDS {
	t.Helper()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "")
	f := &fakeIMDS{paths: map[string]answer{}, seq: map[string][]answer{}, gets: map[string]int{}}
	for p, a := range paths {
		f.paths[p] = a
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIMDS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/latest/api/token" {
		switch {
		case r.Method != http.MethodPut:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		case f.tokenStatus != 0:
			http.Error(w, http.StatusText(f.tokenStatus), f.tokenStatus)
		case r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "":
			http.Error(w, "missing ttl", http.StatusBadRequest)
		default:
			f.tokens++
			w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
			fmt.Fprint(w, fakeToken)
		}
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("X-aws-ec2-metadata-token") != fakeToken {
		f.refused++
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/latest/")
	f.gets[path]++
	a, ok := f.paths[path]
	if s := f.seq[path]; len(s) > 0 {
		a, ok = s[0], true
		if len(s) > 1 {
			f.seq[path] = s[1:]
		}
	}
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if a.status != http.StatusOK {
		http.Error(w, a.body, a.status)
		return
	}
	fmt.Fprint(w, a.body)
}

// sequence serves the answers at path one per GET, repeating the last.
func (f *fakeIMDS) sequence(path string, answers ...answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq[path] = answers
}

// refuseTokens makes the token endpoint answer status from now on.
func (f *fakeIMDS) refuseTokens(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenStatus = status
}

// count returns the GETs of path that carried the token.
func (f *fakeIMDS) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[path]
}

// client returns a client of the fake with clock clk (nil: the real clock).
func (f *fakeIMDS) client(clk clockwork.Clock) *imds.Client {
	return imds.New(imds.Options{Endpoint: f.srv.URL, Clock: clk})
}

// drive advances clk by d each time the poller waits on it, until done is closed. It fails the test
// when the poller neither waits nor finishes within 10 s.
func drive(t *testing.T, clk *clockwork.FakeClock, d time.Duration, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			select {
			case <-done:
				return
			default:
				require.FailNow(t, "the poller neither waited nor finished", "%v", err)
			}
		}
		clk.Advance(d)
	}
}

func ok(body string) answer { return answer{status: http.StatusOK, body: body} }

var notFound = answer{status: http.StatusNotFound, body: "not found"}

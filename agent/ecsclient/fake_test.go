package ecsclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/berth-agent/berth/agent/retry"
)

const targetPrefix = "AmazonEC2ContainerServiceV20141113."

// call is one request the stand-in received.
type call struct {
	Op        string
	Body      map[string]any
	Raw       []byte
	Auth      string
	Token     string // X-Amz-Security-Token
	UserAgent string
}

// handlerFunc answers one request: an HTTP status and a JSON body.
type handlerFunc func(body map[string]any) (int, any)

// fakeECS is a local stand-in of the ECS JSON 1.1 API.
type fakeECS struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	calls    []call
	accepted []call // calls answered 200
	handlers map[string]handlerFunc
	failN    map[string]int  // op → answers left to fail with 500
	down     map[string]bool // op → fail with 500 until set false
	failed   chan call       // signalled (non-blocking) on every injected failure
}

func newFakeECS(t *testing.T) *fakeECS {
	t.Helper()
	f := &fakeECS{
		t:        t,
		handlers: make(map[string]handlerFunc),
		failN:    make(map[string]int),
		down:     make(map[string]bool),
		failed:   make(chan call, 1),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeECS) serve(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	if r.Method != http.MethodPost || r.URL.Path != "/" || !strings.HasPrefix(target, targetPrefix) ||
		r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		f.t.Errorf("unexpected request %s %s target=%q content-type=%q", r.Method, r.URL.Path, target, r.Header.Get("Content-Type"))
		writeJSON(w, http.StatusBadRequest, map[string]string{"__type": "UnknownOperationException"})
		return
	}
	op := strings.TrimPrefix(target, targetPrefix)
	raw, _ := io.ReadAll(r.Body)
	body := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			f.t.Errorf("%s: bad JSON body: %v", op, err)
		}
	}
	c := call{Op: op, Body: body, Raw: raw, Auth: r.Header.Get("Authorization"), Token: r.Header.Get("X-Amz-Security-Token"),
		UserAgent: r.UserAgent()}

	f.mu.Lock()
	f.calls = append(f.calls, c)
	fail := f.down[op] || f.failN[op] > 0
	if f.failN[op] > 0 {
		f.failN[op]--
	}
	h := f.handlers[op]
	f.mu.Unlock()

	if fail {
		select {
		case f.failed <- c:
		default:
		}
		writeJSON(w, http.StatusInternalServerError, map[string]string{"__type": "ServerException", "message": "control plane down"})
		return
	}
	if h == nil {
		h = defaultHandler(op)
	}
	status, resp := h(body)
	if status == http.StatusOK {
		f.mu.Lock()
		f.accepted = append(f.accepted, c)
		f.mu.Unlock()
	}
	writeJSON(w, status, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

const testInstanceArn = "arn:aws:ecs:us-west-2:123456789012:container-instance/test/0123456789abcdef"

func defaultHandler(op string) handlerFunc {
	switch op {
	case "RegisterContainerInstance":
		return func(body map[string]any) (int, any) {
			arn, _ := body["containerInstanceArn"].(string)
			if arn == "" {
				arn = testInstanceArn
			}
			return http.StatusOK, map[string]any{"containerInstance": map[string]any{
				"containerInstanceArn": arn,
				"status":               "ACTIVE",
				"attributes":           body["attributes"],
			}}
		}
	case "DiscoverPollEndpoint":
		return func(map[string]any) (int, any) {
			return http.StatusOK, map[string]any{
				"endpoint":          "https://ecs-a-1.us-west-2.amazonaws.com/",
				"telemetryEndpoint": "https://ecs-t-1.us-west-2.amazonaws.com/",
			}
		}
	case "SubmitTaskStateChange", "SubmitContainerStateChange", "SubmitAttachmentStateChanges":
		return func(map[string]any) (int, any) { return http.StatusOK, map[string]any{"acknowledgment": "ACK"} }
	default:
		return func(map[string]any) (int, any) { return http.StatusOK, map[string]any{} }
	}
}

func apiError(status int, code, msg string) handlerFunc {
	return func(map[string]any) (int, any) {
		return status, map[string]string{"__type": code, "message": msg}
	}
}

func (f *fakeECS) handle(op string, h handlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[op] = h
}

func (f *fakeECS) failNext(op string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN[op] = n
}

func (f *fakeECS) setDown(op string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[op] = down
}

// callsOf returns the requests of op received so far (all of them when accepted is false).
func (f *fakeECS) callsOf(op string, accepted bool) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	src := f.calls
	if accepted {
		src = f.accepted
	}
	var out []call
	for _, c := range src {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// testEnv isolates the SDK from the host: no IMDS, no shared config.
func testEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_ECS", "")
}

func zeroBackoff() retry.Backoff { return retry.NewExponentialBackoff(0, 0, 0, 1) }

func newTestClient(t *testing.T, f *fakeECS, mod func(*Config)) *Client {
	t.Helper()
	testEnv(t)
	cfg := Config{
		Region:      "us-west-2",
		Endpoint:    f.srv.URL,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		Cluster:     "test",
		NewBackoff:  zeroBackoff,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

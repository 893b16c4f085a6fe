package dockerclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// fakeECRError stands in for registryauth's CannotPullECRContainerError: an
// error that already says it must not be retried.
type fakeECRError struct{}

func (fakeECRError) Error() string { return "ecr: not authorized to call GetAuthorizationToken" }
func (fakeECRError) Retry() bool   { return false }

// TestClassifyPull feeds the classifier the errors Docker Engine 20.10 (API
// 1.41) actually returned for each case, captured against the real engine,
// the local registry, an htpasswd registry and the fault proxy.
func TestClassifyPull(t *testing.T) {
	apiErr := func(status int, msg string) error { return &docker.Error{Status: status, Message: msg} }
	stream := func(msg string) error { return &StreamError{Message: msg} }
	tests := []struct {
		name       string
		err        error
		classes    []error
		retry      bool
		retryAfter time.Duration
	}{
		// 404 from POST /images/create for an unknown tag of an existing repository.
		{"manifest unknown", apiErr(404, "manifest for 127.0.0.1:5000/explore:nosuch not found: manifest unknown: manifest unknown"),
			[]error{ErrNotFound}, false, 0},
		// The distribution registry answers an unknown repository the same way.
		{"unknown repository", apiErr(404, "manifest for 127.0.0.1:5000/nosuchrepo:latest not found: manifest unknown: manifest unknown"),
			[]error{ErrNotFound}, false, 0},
		{"name unknown", apiErr(404, "name unknown: repository name not known to registry"), []error{ErrNotFound}, false, 0},
		// 403 from the registry (through the fault proxy).
		{"pull access denied", apiErr(404, "pull access denied for 127.0.0.1:34189/explore, repository does not exist or may require 'docker login': denied: forbidden"),
			[]error{ErrAuthRefused, ErrNotFound}, false, 0},
		// Wrong htpasswd credentials.
		{"wrong credentials", apiErr(500, "unauthorized: authentication required"), []error{ErrAuthRefused}, false, 0},
		// 401 with a registry error body (fault proxy).
		{"401", apiErr(500, "unauthorized: unauthorized"), []error{ErrAuthRefused}, false, 0},
		// No credentials for an htpasswd registry.
		{"no credentials", apiErr(500, `Head "http://127.0.0.1:40889/v2/explore/manifests/v1": no basic auth credentials`),
			[]error{ErrAuthRefused}, false, 0},
		{"ecr denied", stream("denied: Your authorization token has expired. Reauthenticate and try again."), []error{ErrAuthRefused}, false, 0},
		{"invalid reference", apiErr(400, "invalid reference format"), []error{ErrInvalidReference}, false, 0},
		{"uppercase reference", apiErr(400, "invalid reference format: repository name must be lowercase"), []error{ErrInvalidReference}, false, 0},
		{"invalid tag", apiErr(400, "invalid tag format"), []error{ErrInvalidReference}, false, 0},
		// 503 on the manifest (HEAD and GET) from the fault proxy.
		{"503", apiErr(500, "received unexpected HTTP status: 503 Service Unavailable"), []error{ErrRegistryUnavailable}, true, 0},
		{"500", apiErr(500, "received unexpected HTTP status: 500 Internal Server Error"), []error{ErrRegistryUnavailable}, true, 0},
		// 502 on every blob: Docker retries the download itself, then reports in the stream.
		{"502 blob in stream", stream("error pulling image configuration: download failed after attempts=6: received unexpected HTTP status: 502 Bad Gateway"),
			[]error{ErrRegistryUnavailable}, true, 0},
		// 429 on the manifest; Docker does not pass Retry-After on, so the floor applies.
		{"429", apiErr(500, "toomanyrequests"), []error{ErrTooManyRequests}, true, 7 * time.Second},
		{"429 docker hub", apiErr(500, "toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit"),
			[]error{ErrTooManyRequests}, true, 7 * time.Second},
		{"429 asking for a delay", stream("toomanyrequests: too many requests, retry after 30s"), []error{ErrTooManyRequests}, true, 30 * time.Second},
		// Connection reset on the manifest HEAD (fault proxy, SO_LINGER 0).
		{"reset", apiErr(500, `Head "http://127.0.0.1:43229/v2/explore/manifests/v1": read tcp 127.0.0.1:53458->127.0.0.1:43229: read: connection reset by peer`),
			[]error{ErrConnection}, true, 0},
		// Connection reset on every blob download.
		{"reset blob in stream", stream("error pulling image configuration: download failed after attempts=6: read tcp 127.0.0.1:50504->127.0.0.1:36031: read: connection reset by peer"),
			[]error{ErrConnection}, true, 0},
		{"registry down", apiErr(500, `Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`), []error{ErrConnection}, true, 0},
		{"eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), []error{ErrConnection}, true, 0},
		{"bare eof", io.EOF, []error{ErrConnection}, true, 0},
		{"engine down", docker.ErrConnectionRefused, []error{ErrConnection}, true, 0},
		{"inactivity", fmt.Errorf("no progress for 1m0s: %w", ErrInactivity), []error{ErrInactivity}, true, 0},
		{"unknown blob is retried", stream("error pulling image configuration: download failed after attempts=1: unknown blob"), nil, true, 0},
		{"unknown", errors.New("something odd"), nil, true, 0},
		{"bare 401 status", apiErr(401, "nope"), []error{ErrAuthRefused}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classifyPull(tt.err, 7*time.Second)
			var pe *PullError
			require.ErrorAs(t, got, &pe)
			assert.ElementsMatch(t, tt.classes, pe.Classes)
			for _, c := range tt.classes {
				assert.ErrorIs(t, got, c)
			}
			assert.ErrorIs(t, got, tt.err, "Docker's error stays reachable")
			assert.Equal(t, tt.retry, pe.Retry())
			assert.Equal(t, tt.retryAfter, pe.RetryAfter())
			assert.Equal(t, tt.err.Error(), got.Error())

			// Wrapped for the caller, the decision is the same.
			cp := &CannotPullContainerError{Image: "img", Err: got}
			assert.Equal(t, tt.retry, cp.Retry())
			assert.Equal(t, tt.retry, errdefs.IsRetriable(fmt.Errorf("engine: %w", cp)))
		})
	}
}

func TestIsTransportFault(t *testing.T) {
	apiErr := func(status int, msg string) error { return &docker.Error{Status: status, Message: msg} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"reset", apiErr(500, `Head "http://127.0.0.1:5000/v2/app/manifests/1": read tcp 127.0.0.1:1->127.0.0.1:5000: read: connection reset by peer`), true},
		{"503", apiErr(500, "received unexpected HTTP status: 503 Service Unavailable"), true},
		{"eof in stream", &StreamError{Message: "unexpected EOF"}, true},
		{"tls handshake timeout", apiErr(500, `Get "https://r/v2/": net/http: TLS handshake timeout`), true},
		{"the Engine's socket gone (dockerd restarting)", &url.Error{Op: "Post", URL: "http://unix.sock/images/create",
			Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}}, true},
		{"the Engine refusing", &url.Error{Op: "Post", URL: "http://unix.sock/images/create",
			Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, true},
		{"429", apiErr(500, "toomanyrequests"), false},
		{"inactivity", fmt.Errorf("no progress for 1m0s: %w", ErrInactivity), false},
		{"not found", apiErr(404, "manifest for r/app:1 not found: manifest unknown: manifest unknown"), false},
		{"auth refused", apiErr(500, "unauthorized: authentication required"), false},
		{"unknown", errors.New("something odd"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := &CannotPullContainerError{Image: "img", Err: classifyPull(tt.err, time.Second)}
			assert.Equal(t, tt.want, isTransportFault(fmt.Errorf("attempt: %w", err)))
		})
	}
}

func TestSentinelsMatchTheirErrdefsClass(t *testing.T) {
	tests := []struct {
		sentinel, class error
		retriable       bool
	}{
		{ErrNotFound, errdefs.ErrNotFound, false},
		{ErrConflict, errdefs.ErrConflict, false},
		{ErrNameInUse, errdefs.ErrConflict, false},
		{ErrAuthRefused, errdefs.ErrUnauthorized, false},
		{ErrInvalidReference, errdefs.ErrInvalidArgument, false},
		{ErrPullerClosed, errdefs.ErrFailedPrecondition, false},
		{ErrInactivity, errdefs.ErrUnavailable, true},
		{ErrRegistryUnavailable, errdefs.ErrUnavailable, true},
		{ErrConnection, errdefs.ErrUnavailable, true},
		{ErrTooManyRequests, errdefs.ErrResourceExhausted, true},
	}
	for _, tt := range tests {
		t.Run(tt.sentinel.Error(), func(t *testing.T) {
			err := fmt.Errorf("op: %w", tt.sentinel)
			assert.ErrorIs(t, err, tt.class)
			assert.Equal(t, tt.retriable, errdefs.IsRetriable(err))
		})
	}
	assert.NotErrorIs(t, ErrConnection, ErrRegistryUnavailable, "finer kinds of one class stay apart")
	nf := &NotFoundError{Kind: "image", Name: "x", Err: errors.New("no such image")}
	assert.True(t, errdefs.IsNotFound(nf))
}

func TestClassifyPullKeepsDecidedErrors(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		retry bool
	}{
		{"non-retriable from registryauth", fmt.Errorf("auth: %w", fakeECRError{}), false},
		{"explicitly retriable", errdefs.Transient(errors.New("unauthorized")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classifyPull(tt.err, time.Second)
			assert.Same(t, tt.err, got)
			cp := &CannotPullContainerError{Image: "img", Err: got}
			assert.Equal(t, tt.retry, cp.Retry())
		})
	}
	assert.Nil(t, classifyPull(nil, time.Second))
	assert.Same(t, context.Canceled, classifyPull(context.Canceled, time.Second))
}

func TestErrorMessagesNameTheObject(t *testing.T) {
	cp := &CannotPullContainerError{Image: "127.0.0.1:5000/app:1", Err: errors.New("boom")}
	assert.Equal(t, `cannot pull image "127.0.0.1:5000/app:1": boom`, cp.Error())
	nf := &NotFoundError{Kind: "container", Name: "abc", Err: errors.New("No such container: abc")}
	assert.Equal(t, `container "abc" not found`, nf.Error())
	assert.ErrorIs(t, nf, ErrNotFound)
	te := &TimeoutError{Op: "stop container", Limit: time.Second}
	assert.ErrorIs(t, te, context.DeadlineExceeded)
	assert.Equal(t, "stop container: timed out after 1s", te.Error())
}

func TestParseRetryAfter(t *testing.T) {
	tests := map[string]time.Duration{
		"toomanyrequests":                       0,
		"retry after 30s":                       30 * time.Second,
		"Retry-After: 12":                       12 * time.Second,
		"please try again in 2 minutes":         2 * time.Minute,
		"retry after 1500ms":                    1500 * time.Millisecond,
		"too many requests; retry after 1.5 s.": 1500 * time.Millisecond,
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) { assert.Equal(t, want, parseRetryAfter(in)) })
	}
}

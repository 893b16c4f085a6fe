package dockerclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/retry"
)

// Error classes. Errors returned by this package match at most a few of
// these with errors.Is, and through them an errdefs class; the text of
// Docker's messages is matched only in this file (see classifyPull and the
// container helpers below). ErrNotFound and ErrConflict are the errdefs
// classes themselves; the others are finer kinds that callers tell apart.
var (
	// ErrNotFound is errdefs.ErrNotFound: the container, image, repository or manifest does not exist.
	ErrNotFound = errdefs.ErrNotFound
	// ErrConflict is errdefs.ErrConflict: the Engine refused because something depends on the object
	// (HTTP 409), such as an image a container uses.
	ErrConflict = errdefs.ErrConflict
	// ErrNameInUse: a container with the requested name exists already. An errdefs.ErrConflict.
	ErrNameInUse = errdefs.New(errdefs.ErrConflict, "container name in use")
	// ErrAuthRefused: the registry refused the credentials (or their absence). An
	// errdefs.ErrUnauthorized; not retried.
	ErrAuthRefused = errdefs.New(errdefs.ErrUnauthorized, "registry refused the credentials")
	// ErrInvalidReference: the image reference is malformed — Berth's one notion of it, whether Docker
	// or the credentials lookup (AuthSource) found it out. An errdefs.ErrInvalidArgument; not retried.
	ErrInvalidReference = errdefs.New(errdefs.ErrInvalidArgument, "invalid image reference")
	// ErrInactivity: a pull attempt made no progress for the inactivity timeout. An
	// errdefs.ErrUnavailable; retried.
	ErrInactivity = errdefs.New(errdefs.ErrUnavailable, "pull made no progress")
	// ErrTooManyRequests: the registry throttled the pull (HTTP 429). An errdefs.ErrResourceExhausted;
	// retried after a delay.
	ErrTooManyRequests = errdefs.New(errdefs.ErrResourceExhausted, "registry throttled the request")
	// ErrRegistryUnavailable: the registry answered with a 5xx status. An errdefs.ErrUnavailable;
	// retried.
	ErrRegistryUnavailable = errdefs.New(errdefs.ErrUnavailable, "registry unavailable")
	// ErrConnection: the connection failed, was reset or timed out. An errdefs.ErrUnavailable; retried.
	ErrConnection = errdefs.New(errdefs.ErrUnavailable, "connection failed")
)

// CannotPullContainerError is returned by pulls; it names the image and
// wraps the classified cause. It is retriable exactly when its cause is.
type CannotPullContainerError struct {
	Image string
	Err   error
}

var _ errdefs.Retriable = (*CannotPullContainerError)(nil)

// Error names the image and the cause.
func (e *CannotPullContainerError) Error() string {
	return fmt.Sprintf("cannot pull image %q: %v", e.Image, e.Err)
}

// Unwrap returns the cause.
func (e *CannotPullContainerError) Unwrap() error { return e.Err }

// Retry reports whether another pull may succeed: errdefs.IsRetriable of the
// cause.
func (e *CannotPullContainerError) Retry() bool { return errdefs.IsRetriable(e.Err) }

// NotFoundError names the container or image that does not exist; it
// matches ErrNotFound.
type NotFoundError struct {
	Kind string // "container" or "image"
	Name string
	Err  error // Docker's error
}

// Error names the missing object.
func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }

// Unwrap returns ErrNotFound and Docker's error.
func (e *NotFoundError) Unwrap() []error { return []error{ErrNotFound, e.Err} }

// TimeoutError is the cause of a call that ran out of its own time limit;
// it matches context.DeadlineExceeded.
type TimeoutError struct {
	Op    string
	Limit time.Duration
}

// Error names the operation and its limit.
func (e *TimeoutError) Error() string { return fmt.Sprintf("%s: timed out after %v", e.Op, e.Limit) }

// Is matches context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, like net.Error.
func (e *TimeoutError) Timeout() bool { return true }

// PullError is a pull failure classified by classifyPull: Docker's error
// plus what it means. It matches its classes (ErrAuthRefused, ErrNotFound,
// ...) with errors.Is and Docker's error with errors.As.
type PullError struct {
	Err        error   // Docker's error as received
	Classes    []error // sentinels this failure matches; empty for unknown errors
	retriable  bool
	retryAfter time.Duration
}

var (
	_ errdefs.Retriable  = (*PullError)(nil)
	_ retry.RetryAfterer = (*PullError)(nil)
)

// Error returns Docker's message.
func (e *PullError) Error() string { return e.Err.Error() }

// Unwrap returns the classes and Docker's error.
func (e *PullError) Unwrap() []error { return append(append([]error(nil), e.Classes...), e.Err) }

// Retry reports whether another attempt may succeed.
func (e *PullError) Retry() bool { return e.retriable }

// RetryAfter returns the minimum wait before the next attempt (0: none).
func (e *PullError) RetryAfter() time.Duration { return e.retryAfter }

// pullRule maps a substring of Docker's (lower-cased) error text to classes.
type pullRule struct {
	substr    string
	classes   []error
	retriable bool
}

// pullRules is the one table of Docker error text. Order matters: the first
// rule whose text occurs wins. The strings are those Docker Engine 20.10
// (API 1.41) returns; see errors_test.go for the full messages observed.
var pullRules = []pullRule{
	// "invalid reference format", "invalid reference format: repository name must be lowercase", "invalid tag format"
	{"invalid reference format", []error{ErrInvalidReference}, false},
	{"invalid tag format", []error{ErrInvalidReference}, false},
	// "pull access denied for X, repository does not exist or may require 'docker login': denied: ..."
	// is Docker's answer both to a missing repository and to refused access.
	{"pull access denied", []error{ErrAuthRefused, ErrNotFound}, false},
	// "unauthorized: authentication required" (wrong htpasswd credentials)
	{"unauthorized", []error{ErrAuthRefused}, false},
	{"authentication required", []error{ErrAuthRefused}, false},
	// `Head "http://…/manifests/v1": no basic auth credentials` (no credentials for a protected registry)
	{"no basic auth credentials", []error{ErrAuthRefused}, false},
	// registry error code DENIED ("denied: …", e.g. ECR "denied: Your authorization token has expired")
	{"denied:", []error{ErrAuthRefused}, false},
	{"access denied", []error{ErrAuthRefused}, false},
	{"access to the resource is denied", []error{ErrAuthRefused}, false},
	{"401 unauthorized", []error{ErrAuthRefused}, false},
	{"403 forbidden", []error{ErrAuthRefused}, false},
	// "manifest for 127.0.0.1:5000/explore:nosuch not found: manifest unknown: manifest unknown"
	{"manifest unknown", []error{ErrNotFound}, false},
	{"name unknown", []error{ErrNotFound}, false},
	{"repository does not exist", []error{ErrNotFound}, false},
	{"not found", []error{ErrNotFound}, false},
	// "toomanyrequests", "toomanyrequests: You have reached your pull rate limit. …"
	{"toomanyrequests", []error{ErrTooManyRequests}, true},
	{"too many requests", []error{ErrTooManyRequests}, true},
	// "received unexpected HTTP status: 503 Service Unavailable"
	{"received unexpected http status: 5", []error{ErrRegistryUnavailable}, true},
	{"service unavailable", []error{ErrRegistryUnavailable}, true},
	{"bad gateway", []error{ErrRegistryUnavailable}, true},
	{"gateway timeout", []error{ErrRegistryUnavailable}, true},
	{"internal server error", []error{ErrRegistryUnavailable}, true},
	// `Head "…": read tcp …: read: connection reset by peer`
	{"connection reset", []error{ErrConnection}, true},
	{"connection refused", []error{ErrConnection}, true},
	{"broken pipe", []error{ErrConnection}, true},
	{" eof", []error{ErrConnection}, true}, // "EOF", "unexpected EOF", "read: EOF"
	{"i/o timeout", []error{ErrConnection}, true},
	{"tls handshake timeout", []error{ErrConnection}, true},
	{"timeout", []error{ErrConnection}, true},
	{"no such host", []error{ErrConnection}, true},
	{"cannot connect to docker endpoint", []error{ErrConnection}, true},
}

// retryAfterText finds a delay a throttling message asks for, such as
// "retry after 30s", "Retry-After: 30" or "try again in 30 seconds".
var retryAfterText = regexp.MustCompile(`(?i)(?:retry[- ]after:?|try again in)\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|minutes?)?\b`)

// classifyAuth classifies a failure of AuthSource.Auth. An invalid argument
// there can only be the image reference (AuthSource's contract), so it
// becomes ErrInvalidReference; anything else is classified like a pull
// attempt's error.
func classifyAuth(err error, throttleDelay time.Duration) error {
	err = fmt.Errorf("registry credentials: %w", err)
	if errdefs.IsInvalidArgument(err) && !errors.Is(err, ErrInvalidReference) {
		return &PullError{Err: err, Classes: []error{ErrInvalidReference}}
	}
	return classifyPull(err, throttleDelay)
}

// classifyPull turns an error from a pull attempt into a *PullError saying
// what it is and whether to retry; throttling gets at least throttleDelay.
// It is the only place pull error text and status codes are interpreted.
// Errors that already carry a retry decision (errdefs.Retriable) and context
// errors are returned unchanged.
func classifyPull(err error, throttleDelay time.Duration) error {
	if err == nil {
		return nil
	}
	var pe *PullError
	var r errdefs.Retriable
	if errors.As(err, &pe) || errors.As(err, &r) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, ErrInactivity) {
		return &PullError{Err: err, Classes: []error{ErrInactivity}, retriable: true}
	}

	text := strings.ToLower(err.Error())
	status := 0
	var de *docker.Error
	if errors.As(err, &de) {
		status = de.Status
		text = strings.ToLower(de.Message)
	}
	// The Docker Engine itself unreachable says nothing about the image: a transport fault, as a
	// registry connection that fails.
	if engineUnreachable(err) {
		return &PullError{Err: err, Classes: []error{ErrConnection}, retriable: true}
	}
	out := &PullError{Err: err, retriable: true}
	text = " " + text // so that " eof" also matches at the very start
	for _, rule := range pullRules {
		if strings.Contains(text, rule.substr) {
			out.Classes, out.retriable = rule.classes, rule.retriable
			break
		}
	}
	if len(out.Classes) == 0 {
		// Docker answers registry failures with 500 and puts the detail in
		// the text; its 4xx answers are about the request itself.
		switch {
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			out.Classes, out.retriable = []error{ErrAuthRefused}, false
		case status == http.StatusNotFound:
			out.Classes, out.retriable = []error{ErrNotFound}, false
		case status == http.StatusBadRequest:
			out.Classes, out.retriable = []error{ErrInvalidReference}, false
		case status == http.StatusTooManyRequests:
			out.Classes = []error{ErrTooManyRequests}
		}
	}
	if out.is(ErrTooManyRequests) {
		out.retryAfter = max(throttleDelay, parseRetryAfter(text))
	}
	return out
}

// isTransportFault reports whether err says only that the way to the
// registry failed — the connection failed, was reset or timed out, or the
// registry answered 5xx — and nothing about the image or the credentials.
// Such a failure gets the larger attempt budget (PullConfig.TransportAttempts).
// Throttling, inactivity and unclassified errors are not transport faults.
func isTransportFault(err error) bool {
	return errors.Is(err, ErrConnection) || errors.Is(err, ErrRegistryUnavailable)
}

func (e *PullError) is(class error) bool {
	for _, c := range e.Classes {
		if c == class {
			return true
		}
	}
	return false
}

// parseRetryAfter returns the delay a message asks for, or 0.
func parseRetryAfter(text string) time.Duration {
	m := retryAfterText.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || n < 0 {
		return 0
	}
	unit := time.Second
	switch {
	case m[2] == "ms":
		unit = time.Millisecond
	case strings.HasPrefix(m[2], "m") && m[2] != "ms":
		unit = time.Minute
	}
	return time.Duration(n * float64(unit))
}

// engineUnreachable reports a failed dial to the Docker Engine: its socket gone or refusing, as while
// dockerd restarts.
func engineUnreachable(err error) bool {
	var op *net.OpError
	return errors.Is(err, docker.ErrConnectionRefused) || errors.As(err, &op) && op.Op == "dial"
}

// transportFault reports whether err says only that the way to the Docker Engine failed: it could
// not be dialled (engineUnreachable), or the connection failed, was reset or closed before the whole
// answer came (EOF). The Engine may or may not have done what it was asked.
func transportFault(err error) bool {
	var op *net.OpError
	return engineUnreachable(err) || errors.As(err, &op) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// callErr is the cause of a failed container call: the context's cause once ctx is done (a
// *TimeoutError for the call's own limit), else err, marked ErrConnection when it is a transport fault.
func callErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if transportFault(err) {
		return fmt.Errorf("%w: %w", ErrConnection, err)
	}
	return err
}

// isRemovalInProgress reports Docker's 409 "removal of container X is
// already in progress".
func isRemovalInProgress(err error) bool {
	var de *docker.Error
	return errors.As(err, &de) && de.Status == http.StatusConflict &&
		strings.Contains(strings.ToLower(de.Message), "already in progress")
}

// isNoSuchImage reports Docker's "no such image" in any of its forms.
func isNoSuchImage(err error) bool {
	if errors.Is(err, docker.ErrNoSuchImage) {
		return true
	}
	var de *docker.Error
	return errors.As(err, &de) && de.Status == http.StatusNotFound
}

// isNoSuchContainer reports Docker's "No such container".
func isNoSuchContainer(err error) bool {
	var nsc *docker.NoSuchContainer
	if errors.As(err, &nsc) {
		return true
	}
	var de *docker.Error
	return errors.As(err, &de) && de.Status == http.StatusNotFound
}

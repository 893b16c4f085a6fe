// Package errdefs is Berth's one vocabulary of error classes, in the style of containerd's errdefs.
// A package says what kind of failure an error is by wrapping one of the classes with %w — directly,
// or through a sentinel of its own made with New when its callers need a finer distinction — and
// callers ask with the Is* helpers (or errors.Is), never by reading error text:
//
//	ErrNotFound            the object does not exist                     not retriable
//	ErrInvalidArgument     the request (a value, a reference, a config) is malformed   not retriable
//	ErrUnauthorized        credentials are missing, refused or not allowed             not retriable
//	ErrConflict            the object is in use or the name is taken                   not retriable
//	ErrFailedPrecondition  the system is not in a state that allows the operation      not retriable
//	ErrUnavailable         the peer cannot be reached or failed for now                retriable
//	ErrResourceExhausted   the peer throttled the request or ran out of capacity       retriable
//
// Cancellation and deadlines are not classes here: context.Canceled and context.DeadlineExceeded
// already say them, and errors.Is finds them.
//
// # Retriable
//
// "May the operation that failed succeed if tried again?" is asked in one way: IsRetriable. It
// takes, in order:
//
//  1. the answer of the first Retriable (an error with a Retry() bool method) in the error's chain,
//     found with errors.As — an error that knows better than its class says so itself: Permanent and
//     Transient wrap an error with an explicit decision, and typed errors such as a classified pull
//     failure implement Retriable;
//  2. otherwise its class: true for ErrUnavailable and ErrResourceExhausted, false for every other
//     class;
//  3. otherwise true: an error that says nothing (a reset connection, an EOF) is taken as transient.
//
// The retry package's loops stop on an error for which IsRetriable is false; everything else that
// needs the answer asks IsRetriable too, rather than looking for Retriable itself.
//
// errdefs imports nothing of Berth's, so every package can use it.
package errdefs

import "errors"

// The classes. Wrap them with %w (or through a sentinel made with New); compare with errors.Is or
// the Is* helpers, never with ==, since errors reach callers wrapped.
var (
	// ErrNotFound: the object (container, image, cluster, namespace, file) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument: the request is malformed — a value, a reference or a configuration that
	// does not parse or is not allowed. Sending it again will not help.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnauthorized: the credentials are missing, were refused, or may not do the operation.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrConflict: the object is in use by something else, or its name is taken.
	ErrConflict = errors.New("conflict")
	// ErrFailedPrecondition: the system is not in a state that allows the operation (a closed
	// component, a deregistered instance); it will not succeed until that state changes.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: the peer could not be reached or failed transiently (connection errors, 5xx).
	ErrUnavailable = errors.New("unavailable")
	// ErrResourceExhausted: the peer throttled the request (429) or is out of capacity; retry later.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is of class ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsUnauthorized reports whether err is of class ErrUnauthorized.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsConflict reports whether err is of class ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsFailedPrecondition reports whether err is of class ErrFailedPrecondition.
func IsFailedPrecondition(err error) bool { return errors.Is(err, ErrFailedPrecondition) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsResourceExhausted reports whether err is of class ErrResourceExhausted.
func IsResourceExhausted(err error) bool { return errors.Is(err, ErrResourceExhausted) }

// New returns a new sentinel error with the given text that is a finer kind of class:
// errors.Is(s, class) holds, and so does errors.Is(err, s) for any err that wraps s. Packages make
// their own sentinels with it where their callers need to tell that kind from the rest of the class.
func New(class error, text string) error { return &sentinel{text: text, class: class} }

// sentinel is a package's own error value within a class.
type sentinel struct {
	text  string
	class error
}

// Error returns the sentinel's text.
func (s *sentinel) Error() string { return s.text }

// Unwrap returns the class, so that errors.Is matches it.
func (s *sentinel) Unwrap() error { return s.class }

// Retriable is implemented by errors that say themselves whether the operation that failed may
// succeed if tried again. Ask IsRetriable rather than looking for it.
type Retriable interface {
	// Retry reports whether the operation that produced the error may be retried.
	Retry() bool
}

// IsRetriable reports whether the operation that failed with err may succeed if tried again: the
// first Retriable in err's chain decides; without one the class does (ErrUnavailable and
// ErrResourceExhausted are retriable, the other classes are not); an error with neither is
// retriable. A nil error is not.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var r Retriable
	if errors.As(err, &r) {
		return r.Retry()
	}
	return !(IsNotFound(err) || IsInvalidArgument(err) || IsUnauthorized(err) || IsConflict(err) || IsFailedPrecondition(err))
}

// Permanent returns err marked as not retriable, whatever its class; nil stays nil. The result
// matches everything err matches.
func Permanent(err error) error { return decide(err, false) }

// Transient returns err marked as retriable, whatever its class; nil stays nil. The result matches
// everything err matches.
func Transient(err error) error { return decide(err, true) }

func decide(err error, retry bool) error {
	if err == nil {
		return nil
	}
	return &decided{err: err, retry: retry}
}

// decided is an error with an explicit retry decision.
type decided struct {
	err   error
	retry bool
}

var _ Retriable = (*decided)(nil)

// Error returns the wrapped error's text.
func (d *decided) Error() string { return d.err.Error() }

// Unwrap returns the wrapped error.
func (d *decided) Unwrap() error { return d.err }

// Retry reports the decision the error was marked with.
func (d *decided) Retry() bool { return d.retry }

package registryauth

import (
	"fmt"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrInvalidConfig is wrapped by every error New returns for engine auth settings that do not parse.
// Those errors name the setting and the registry key, never the credentials. An
// errdefs.ErrInvalidArgument.
var ErrInvalidConfig = errdefs.New(errdefs.ErrInvalidArgument, "invalid registry auth configuration")

// errInvalidReference is wrapped by the error Auth returns for an image reference it cannot read.
// Callers ask errdefs.IsInvalidArgument (the pull path turns it into dockerclient.ErrInvalidReference,
// Berth's one notion of a bad reference); it is not retriable.
var errInvalidReference = errdefs.New(errdefs.ErrInvalidArgument, "invalid image reference")

// CannotPullECRContainerError says ECR refused to hand out credentials for an image's registry
// (access denied or another 4xx answer, or no AWS credentials to ask with). It matches
// errdefs.ErrUnauthorized. Retrying does not help; the message names the image and the registry and
// never contains a token.
type CannotPullECRContainerError struct {
	Image    string
	Registry string
	Role     string // the task's execution role the pull asked for; "" for the host's own credentials
	Err      error
}

var _ errdefs.Retriable = (*CannotPullECRContainerError)(nil)

// Error names the image, the registry and the execution role, if any, and gives the cause.
func (e *CannotPullECRContainerError) Error() string {
	if e.Role != "" {
		return fmt.Sprintf("cannot pull ECR image %q with execution role %s: no credentials for registry %s: %v", e.Image, e.Role, e.Registry, e.Err)
	}
	return fmt.Sprintf("cannot pull ECR image %q: no credentials for registry %s: %v", e.Image, e.Registry, e.Err)
}

// Unwrap returns the cause.
func (e *CannotPullECRContainerError) Unwrap() error { return e.Err }

// Is matches errdefs.ErrUnauthorized.
func (e *CannotPullECRContainerError) Is(target error) bool { return target == errdefs.ErrUnauthorized }

// Retry reports false: the refusal will not change by asking again.
func (e *CannotPullECRContainerError) Retry() bool { return false }

// ECRUnreachableError says ECR could not be reached (network error, timeout, throttling or a 5xx
// answer) while fetching credentials for an image's registry. It matches errdefs.ErrUnavailable and
// is retriable.
type ECRUnreachableError struct {
	Image    string
	Registry string
	Role     string // the task's execution role the pull asked for; "" for the host's own credentials
	Err      error
}

var _ errdefs.Retriable = (*ECRUnreachableError)(nil)

// Error names the image, the registry and the execution role, if any, and gives the cause.
func (e *ECRUnreachableError) Error() string {
	if e.Role != "" {
		return fmt.Sprintf("ECR credentials for image %q (registry %s, execution role %s): %v", e.Image, e.Registry, e.Role, e.Err)
	}
	return fmt.Sprintf("ECR credentials for image %q (registry %s): %v", e.Image, e.Registry, e.Err)
}

// Unwrap returns the cause.
func (e *ECRUnreachableError) Unwrap() error { return e.Err }

// Is matches errdefs.ErrUnavailable.
func (e *ECRUnreachableError) Is(target error) bool { return target == errdefs.ErrUnavailable }

// Retry reports true: the next attempt may reach ECR.
func (e *ECRUnreachableError) Retry() bool { return true }

// refusedError marks a fetch failure as a refusal (becomes CannotPullECRContainerError).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

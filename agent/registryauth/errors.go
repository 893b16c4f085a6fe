package registryauth

import (
	"errors"
	"fmt"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrInvalidConfig is wrapped by every error New returns for engine auth settings that do not parse.
// Those errors name the setting and the registry key, never the credentials.
var ErrInvalidConfig = errors.New("invalid registry auth configuration")

// ErrInvalidReference is wrapped by the error Auth returns for an image reference it cannot read.
// Such errors are not retriable.
var ErrInvalidReference = errors.New("invalid image reference")

// CannotPullECRContainerError says ECR refused to hand out credentials for an image's registry
// (access denied or another 4xx answer, or no AWS credentials to ask with). Retrying does not help;
// the message names the image and the registry and never contains a token.
type CannotPullECRContainerError struct {
	Image    string
	Registry string
	Err      error
}

var _ errdefs.Retriable = (*CannotPullECRContainerError)(nil)

// Error names the image and the registry and gives the cause.
func (e *CannotPullECRContainerError) Error() string {
	return fmt.Sprintf("cannot pull ECR image %q: no credentials for registry %s: %v", e.Image, e.Registry, e.Err)
}

// Unwrap returns the cause.
func (e *CannotPullECRContainerError) Unwrap() error { return e.Err }

// Retry reports false: the refusal will not change by asking again.
func (e *CannotPullECRContainerError) Retry() bool { return false }

// ECRUnreachableError says ECR could not be reached (network error, timeout, throttling or a 5xx
// answer) while fetching credentials for an image's registry. It is retriable.
type ECRUnreachableError struct {
	Image    string
	Registry string
	Err      error
}

var _ errdefs.Retriable = (*ECRUnreachableError)(nil)

// Error names the image and the registry and gives the cause.
func (e *ECRUnreachableError) Error() string {
	return fmt.Sprintf("ECR credentials for image %q (registry %s): %v", e.Image, e.Registry, e.Err)
}

// Unwrap returns the cause.
func (e *ECRUnreachableError) Unwrap() error { return e.Err }

// Retry reports true: the next attempt may reach ECR.
func (e *ECRUnreachableError) Retry() bool { return true }

// invalidReference marks an ErrInvalidReference error as not retriable.
func invalidReference(err error) error { return errdefs.Permanent(err) }

// refusedError marks a fetch failure as a refusal (becomes CannotPullECRContainerError).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

package ecsclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berth-agent/berth/agent/awserr"
	"github.com/berth-agent/berth/agent/errdefs"
)

// Error classes of the ECS API, matched with errors.Is on any error this package returns. Each is
// a finer kind of an errdefs class, which errors.Is matches too; an ECS error of no finer kind
// matches only its errdefs class (errdefs.ErrUnavailable for server and transport failures).
var (
	// ErrInactiveInstance: the container instance was deregistered (or is otherwise inactive). It is
	// Berth's one notion of that, whether the ECS API or ACS said so (agent/acs matches it too). An
	// errdefs.ErrFailedPrecondition.
	ErrInactiveInstance = errdefs.New(errdefs.ErrFailedPrecondition, "container instance is inactive")
	// ErrClusterNotFound: the configured cluster does not exist. An errdefs.ErrNotFound.
	ErrClusterNotFound = errdefs.New(errdefs.ErrNotFound, "cluster not found")
	// ErrInvalidParameter: ECS rejected a parameter of the request; resending it will not help. An
	// errdefs.ErrInvalidArgument.
	ErrInvalidParameter = errdefs.New(errdefs.ErrInvalidArgument, "invalid parameter")
	// ErrAccessDenied: the credentials may not call the operation. An errdefs.ErrUnauthorized.
	ErrAccessDenied = errdefs.New(errdefs.ErrUnauthorized, "access denied")
	// ErrThrottled: ECS throttled the request; it is retriable. An errdefs.ErrResourceExhausted.
	ErrThrottled = errdefs.New(errdefs.ErrResourceExhausted, "request throttled")
	// ErrAttributesNotEchoed: a registration response lacked attributes the agent registered, so the
	// control plane cannot place tasks on this instance as registered. An
	// errdefs.ErrFailedPrecondition; not retried.
	ErrAttributesNotEchoed = errdefs.New(errdefs.ErrFailedPrecondition, "registration response does not echo the registered attributes")
)

// APIError is an ECS API call that failed. It implements errdefs.Retriable and unwraps to its class
// (one of the Err* sentinels, or errdefs.ErrUnavailable for a retriable failure of no finer kind)
// and to the SDK's error.
type APIError struct {
	Op        string // the ECS operation, e.g. "SubmitTaskStateChange"
	Code      string // the ECS error code, e.g. "ClientException"; empty for transport errors
	Message   string
	Status    int // HTTP status; 0 when no response was received
	Retriable bool
	class     error
	err       error
}

var _ errdefs.Retriable = (*APIError)(nil)

func (e *APIError) Error() string {
	switch {
	case e.Code != "" && e.Message != "":
		return fmt.Sprintf("ecs %s: %s: %s", e.Op, e.Code, e.Message)
	case e.Code != "":
		return fmt.Sprintf("ecs %s: %s", e.Op, e.Code)
	default:
		return fmt.Sprintf("ecs %s: %v", e.Op, e.err)
	}
}

// Retry reports whether the call may succeed when repeated.
func (e *APIError) Retry() bool { return e.Retriable }

// Unwrap returns the error's class (if any) and the SDK error.
func (e *APIError) Unwrap() []error {
	if e.class == nil {
		return []error{e.err}
	}
	return []error{e.class, e.err}
}

// translate turns an SDK error into an *APIError; it is the one place that looks at ECS error
// codes and messages. The class of what is not ECS's own (throttling, server and transport
// failures) comes from awserr. Context errors are returned wrapped but not classified.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("ecs %s: %w", op, err)
	}
	e := &APIError{Op: op, Status: awserr.Status(err), err: err}
	e.Code, e.Message = awserr.Code(err)
	switch class := awserr.Class(err); {
	case e.Code == "InactiveInstanceException",
		e.Code == "ClientException" && strings.Contains(strings.ToLower(e.Message), "inactive"):
		e.class = ErrInactiveInstance
	case e.Code == "ClusterNotFoundException":
		e.class = ErrClusterNotFound
	case e.Code == "InvalidParameterException":
		e.class = ErrInvalidParameter
	case e.Code == "AccessDeniedException":
		e.class = ErrAccessDenied
	case errors.Is(class, errdefs.ErrResourceExhausted):
		e.class, e.Retriable = ErrThrottled, true
	case errors.Is(class, errdefs.ErrUnavailable):
		e.class, e.Retriable = errdefs.ErrUnavailable, true
	}
	return e
}

package ecsclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/set"
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

var throttleCodes = set.Of(
	"ThrottlingException",
	"Throttling",
	"ThrottledException",
	"RequestThrottledException",
	"TooManyRequestsException",
	"RequestLimitExceeded",
	"ProvisionedThroughputExceededException",
	"SlowDown",
)

// translate turns an SDK error into an *APIError; it is the one place that looks at ECS error
// codes and messages. Context errors are returned wrapped but not classified.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("ecs %s: %w", op, err)
	}
	e := &APIError{Op: op, err: err}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.Status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		// No response we understand: a transport failure or an unparseable reply.
		switch {
		case e.Status == http.StatusTooManyRequests:
			e.class, e.Retriable = ErrThrottled, true
		case e.Status == 0 || e.Status >= http.StatusInternalServerError:
			e.class, e.Retriable = errdefs.ErrUnavailable, true
		}
		return e
	}
	e.Code, e.Message = ae.ErrorCode(), ae.ErrorMessage()
	switch {
	case e.Code == "InactiveInstanceException",
		e.Code == "ClientException" && strings.Contains(strings.ToLower(e.Message), "inactive"):
		e.class = ErrInactiveInstance
	case e.Code == "ClusterNotFoundException":
		e.class = ErrClusterNotFound
	case e.Code == "InvalidParameterException":
		e.class = ErrInvalidParameter
	case e.Code == "AccessDeniedException":
		e.class = ErrAccessDenied
	case throttleCodes.Has(e.Code) || e.Status == http.StatusTooManyRequests:
		e.class = ErrThrottled
		e.Retriable = true
	case e.Code == "ServerException", ae.ErrorFault() == smithy.FaultServer, e.Status >= http.StatusInternalServerError:
		e.class, e.Retriable = errdefs.ErrUnavailable, true
	}
	return e
}

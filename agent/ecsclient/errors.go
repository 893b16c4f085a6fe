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
)

// Error classes of the ECS API, matched with errors.Is on any error this package returns.
var (
	// ErrInactiveInstance: the container instance was deregistered (or is otherwise inactive).
	ErrInactiveInstance = errors.New("container instance is inactive")
	// ErrClusterNotFound: the configured cluster does not exist.
	ErrClusterNotFound = errors.New("cluster not found")
	// ErrInvalidParameter: ECS rejected a parameter of the request; resending it will not help.
	ErrInvalidParameter = errors.New("invalid parameter")
	// ErrAccessDenied: the credentials may not call the operation.
	ErrAccessDenied = errors.New("access denied")
	// ErrThrottled: ECS throttled the request; it is retriable.
	ErrThrottled = errors.New("request throttled")
	// ErrAttributesNotEchoed: a registration response lacked attributes the agent registered.
	ErrAttributesNotEchoed = errors.New("registration response does not echo the registered attributes")
)

// APIError is an ECS API call that failed. It implements errdefs.Retriable and unwraps to its class
// (one of the Err* sentinels, when one applies) and to the SDK's error.
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

var throttleCodes = map[string]bool{
	"ThrottlingException":                    true,
	"Throttling":                             true,
	"ThrottledException":                     true,
	"RequestThrottledException":              true,
	"TooManyRequestsException":               true,
	"RequestLimitExceeded":                   true,
	"ProvisionedThroughputExceededException": true,
	"SlowDown":                               true,
}

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
		e.Retriable = e.Status == 0 || e.Status >= http.StatusInternalServerError || e.Status == http.StatusTooManyRequests
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
	case throttleCodes[e.Code] || e.Status == http.StatusTooManyRequests:
		e.class = ErrThrottled
		e.Retriable = true
	case e.Code == "ServerException", ae.ErrorFault() == smithy.FaultServer, e.Status >= http.StatusInternalServerError:
		e.Retriable = true
	}
	return e
}

// permanent marks err as not retriable for the retry loops.
func permanent(err error) error { return errdefs.Permanent(err) }

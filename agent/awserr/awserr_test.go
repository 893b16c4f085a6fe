package awserr_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/assert"

	"github.com/berth-agent/berth/agent/awserr"
	"github.com/berth-agent/berth/agent/errdefs"
)

// answered is an SDK error as a client returns it for an AWS answer: an operation error around the
// response error (with its HTTP status) around the API error (with its code), or, for code "", an
// answer without a parseable error.
func answered(status int, code string) error {
	var inner error = errors.New("unparseable answer")
	if code != "" {
		inner = &smithy.GenericAPIError{Code: code, Message: "said " + code}
	}
	resp := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: inner}
	return &smithy.OperationError{ServiceID: "STS", OperationName: "AssumeRole",
		Err: &awshttp.ResponseError{ResponseError: resp, RequestID: "req-1"}}
}

// unanswered is an SDK error for a request that got no answer.
func unanswered(err error) error {
	return &smithy.OperationError{ServiceID: "SSM", OperationName: "GetParameters", Err: &smithyhttp.RequestSendError{Err: err}}
}

func TestClass(t *testing.T) {
	for _, tt := range []struct {
		name               string
		err                error
		class              error // nil: none
		refused, transient bool
	}{
		{"nil", nil, nil, false, false},
		{"throttling code", answered(400, "ThrottlingException"), errdefs.ErrResourceExhausted, false, true},
		{"ECS's throttle list: RequestLimitExceeded", answered(400, "RequestLimitExceeded"), errdefs.ErrResourceExhausted, false, true},
		{"ECS's throttle list: SlowDown", answered(503, "SlowDown"), errdefs.ErrResourceExhausted, false, true},
		{"ECS's throttle list: TooManyRequestsException", answered(400, "TooManyRequestsException"), errdefs.ErrResourceExhausted, false, true},
		{"ECS's throttle list: ProvisionedThroughputExceededException", answered(400, "ProvisionedThroughputExceededException"), errdefs.ErrResourceExhausted, false, true},
		{"bare 429", answered(429, ""), errdefs.ErrResourceExhausted, false, true},
		{"429 with a code", answered(429, "Whatever"), errdefs.ErrResourceExhausted, false, true},
		{"access denied", answered(403, "AccessDenied"), errdefs.ErrUnauthorized, true, false},
		{"access denied exception at 400", answered(400, "AccessDeniedException"), errdefs.ErrUnauthorized, true, false},
		{"expired token", answered(400, "ExpiredToken"), errdefs.ErrUnauthorized, true, false},
		{"expired token exception", answered(400, "ExpiredTokenException"), errdefs.ErrUnauthorized, true, false},
		{"bad signature", answered(403, "SignatureDoesNotMatch"), errdefs.ErrUnauthorized, true, false},
		{"parameter not found", answered(400, "ParameterNotFound"), errdefs.ErrNotFound, true, false},
		{"secret not found", answered(400, "ResourceNotFoundException"), errdefs.ErrNotFound, true, false},
		{"no such key", answered(404, "NoSuchKey"), errdefs.ErrNotFound, true, false},
		{"validation", answered(400, "ValidationException"), errdefs.ErrInvalidArgument, true, false},
		{"unknown code at 400", answered(400, "ClientException"), errdefs.ErrInvalidArgument, true, false},
		{"unknown code at 403", answered(403, "Nope"), errdefs.ErrUnauthorized, true, false},
		{"bare 404", answered(404, ""), errdefs.ErrNotFound, true, false},
		{"bare 409", answered(409, ""), errdefs.ErrConflict, true, false},
		{"bare 412", answered(412, ""), errdefs.ErrFailedPrecondition, true, false},
		{"server exception", answered(500, "InternalFailure"), errdefs.ErrUnavailable, false, true},
		{"ECS server exception at 400", answered(400, "ServerException"), errdefs.ErrUnavailable, false, true},
		{"bare 503", answered(503, ""), errdefs.ErrUnavailable, false, true},
		{"API error without a status", &smithy.GenericAPIError{Code: "AccessDenied"}, errdefs.ErrUnauthorized, true, false},
		{"unknown API error without a status", &smithy.GenericAPIError{Code: "Odd"}, errdefs.ErrInvalidArgument, true, false},
		{"server fault without a status", &smithy.GenericAPIError{Code: "Odd", Fault: smithy.FaultServer}, errdefs.ErrUnavailable, false, true},
		{"connection refused", unanswered(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), errdefs.ErrUnavailable, false, true},
		{"DNS", unanswered(&net.DNSError{Err: "no such host", Name: "sts.example", IsNotFound: true}), errdefs.ErrUnavailable, false, true},
		{"timeout", unanswered(&net.OpError{Op: "read", Net: "tcp", Err: context.DeadlineExceeded}), errdefs.ErrUnavailable, false, true},
		{"the caller's deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), errdefs.ErrUnavailable, false, true},
		{"the caller's cancellation", unanswered(context.Canceled), nil, false, false},
		{"no answer at all", errors.New("EOF"), errdefs.ErrUnavailable, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.class, awserr.Class(tt.err))
			assert.Equal(t, tt.refused, awserr.Refused(tt.err), "Refused")
			assert.Equal(t, tt.transient, awserr.Transient(tt.err), "Transient")
			got := awserr.Classify(tt.err)
			if tt.err == nil {
				assert.NoError(t, got)
				return
			}
			assert.ErrorIs(t, got, tt.err, "the SDK's error stays in the chain")
			assert.Equal(t, tt.err.Error(), got.Error(), "the text is the SDK's")
			if tt.class != nil {
				assert.ErrorIs(t, got, tt.class)
				assert.Equal(t, tt.transient, errdefs.IsRetriable(got))
			}
			var op *smithy.OperationError
			assert.Equal(t, errors.As(tt.err, &op), errors.As(got, &op), "the SDK's types are found with errors.As")
		})
	}
}

func TestStatusAndCode(t *testing.T) {
	err := answered(403, "AccessDenied")
	assert.Equal(t, 403, awserr.Status(err))
	code, msg := awserr.Code(err)
	assert.Equal(t, "AccessDenied", code)
	assert.Equal(t, "said AccessDenied", msg)

	err = unanswered(syscall.ECONNRESET)
	assert.Zero(t, awserr.Status(err))
	code, msg = awserr.Code(err)
	assert.Empty(t, code)
	assert.Empty(t, msg)
}

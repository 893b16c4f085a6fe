// Package awserr is the one place where an error of an AWS SDK call is given its errdefs class. The
// clients of AWS services (STS, ECR, SSM, Secrets Manager, S3, ECS) ask Class or Classify and keep
// only what is their own: the service's finer codes and the shape of their errors.
//
//	the caller's cancellation (context.Canceled)             no class
//	throttling (the SDK's throttle codes, HTTP 429)            errdefs.ErrResourceExhausted
//	access denied, bad or expired credentials                  errdefs.ErrUnauthorized
//	no such parameter, secret, key, bucket, repository, …     errdefs.ErrNotFound
//	a request AWS rejects (validation, other 4xx answers)      errdefs.ErrInvalidArgument
//	5xx answers, server faults and exceptions, transport      errdefs.ErrUnavailable
//	errors, timeouts
//
// The codes of the table are read first, then the HTTP status (401 and 403 unauthorized, 404 not
// found, 409 conflict, 412 failed precondition, other 4xx invalid argument, 5xx unavailable), then,
// for an API error without a status, its fault. An error that got no answer at all (connection
// refused or reset, DNS, a timeout, the deadline of the caller's context) is unavailable.
//
// awserr imports only errdefs of Berth's.
package awserr

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/berth-agent/berth/agent/errdefs"
)

// codes are the AWS error codes whose class does not depend on the HTTP status they came with.
var codes = map[string]error{
	"AccessDenied":                errdefs.ErrUnauthorized,
	"AccessDeniedException":       errdefs.ErrUnauthorized,
	"UnauthorizedOperation":       errdefs.ErrUnauthorized,
	"UnrecognizedClientException": errdefs.ErrUnauthorized,
	"InvalidClientTokenId":        errdefs.ErrUnauthorized,
	"InvalidAccessKeyId":          errdefs.ErrUnauthorized,
	"SignatureDoesNotMatch":       errdefs.ErrUnauthorized,
	"MissingAuthenticationToken":  errdefs.ErrUnauthorized,
	"AuthFailure":                 errdefs.ErrUnauthorized,
	"ExpiredToken":                errdefs.ErrUnauthorized,
	"ExpiredTokenException":       errdefs.ErrUnauthorized,
	"RequestExpired":              errdefs.ErrUnauthorized,
	"ParameterNotFound":           errdefs.ErrNotFound,
	"ParameterVersionNotFound":    errdefs.ErrNotFound,
	"ResourceNotFoundException":   errdefs.ErrNotFound,
	"RepositoryNotFoundException": errdefs.ErrNotFound,
	"NoSuchKey":                   errdefs.ErrNotFound,
	"NoSuchBucket":                errdefs.ErrNotFound,
	"NotFound":                    errdefs.ErrNotFound,
	"ValidationException":         errdefs.ErrInvalidArgument,
	"ValidationError":             errdefs.ErrInvalidArgument,
	"InvalidParameterException":   errdefs.ErrInvalidArgument,
	"InvalidParameterValue":       errdefs.ErrInvalidArgument,
	"MalformedPolicyDocument":     errdefs.ErrInvalidArgument,
	"ServerException":             errdefs.ErrUnavailable,
	"ServiceUnavailable":          errdefs.ErrUnavailable,
	"InternalFailure":             errdefs.ErrUnavailable,
}

// throttles are the SDK's own throttle checks: its throttle codes, errors that say they are a
// throttle, and unmodeled 429 answers.
var throttles = awsretry.IsErrorThrottles(awsretry.DefaultThrottles)

// Class returns the errdefs class of an error of an AWS SDK call (see the package's table), or nil
// for nil and for the caller's own cancellation, which is no class.
func Class(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	status := Status(err)
	if status == http.StatusTooManyRequests || throttles.IsErrorThrottle(err) == aws.TrueTernary {
		return errdefs.ErrResourceExhausted
	}
	var apiErr smithy.APIError
	isAPI := errors.As(err, &apiErr)
	if isAPI {
		if class, ok := codes[apiErr.ErrorCode()]; ok {
			return class
		}
	}
	switch {
	case status >= http.StatusInternalServerError:
		return errdefs.ErrUnavailable
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return errdefs.ErrUnauthorized
	case status == http.StatusNotFound:
		return errdefs.ErrNotFound
	case status == http.StatusConflict:
		return errdefs.ErrConflict
	case status == http.StatusPreconditionFailed:
		return errdefs.ErrFailedPrecondition
	case status >= http.StatusBadRequest:
		return errdefs.ErrInvalidArgument
	case isAPI && apiErr.ErrorFault() != smithy.FaultServer:
		return errdefs.ErrInvalidArgument
	}
	return errdefs.ErrUnavailable
}

// Classify returns err with its class (see Class) in its chain: errors.Is matches the class and
// everything err matches, and the text is err's. nil, and an error of no class, are returned as
// they are.
func Classify(err error) error {
	class := Class(err)
	if class == nil {
		return err
	}
	return &classified{class: class, err: err}
}

// Refused reports whether AWS answered the call with a refusal that asking again will not change:
// an error whose class is not retriable (access denied, not found, invalid, expired credentials).
// Throttling, unavailability and the caller's cancellation are not refusals.
func Refused(err error) bool {
	class := Class(err)
	return class != nil && !errdefs.IsRetriable(class)
}

// Transient reports whether asking again may succeed: throttling, 5xx answers, and calls that got
// no answer other than through the caller's cancellation.
func Transient(err error) bool {
	class := Class(err)
	return class != nil && errdefs.IsRetriable(class)
}

// Status returns the HTTP status of the answer the error came with, 0 when there was none.
func Status(err error) int {
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		return respErr.HTTPStatusCode()
	}
	return 0
}

// Code returns AWS's error code and message, both "" when AWS gave none.
func Code(err error) (code, message string) {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode(), apiErr.ErrorMessage()
	}
	return "", ""
}

// classified is an SDK error with its class.
type classified struct {
	class error
	err   error
}

// Error returns the SDK error's text.
func (e *classified) Error() string { return e.err.Error() }

// Unwrap returns the class and the SDK error.
func (e *classified) Unwrap() []error { return []error{e.class, e.err} }

package secrets

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Codes of the failures found here rather than by AWS. AWS's own codes (ParameterNotFound,
// ResourceNotFoundException, AccessDeniedException, NoSuchKey, …) are passed on as AWS sent them.
const (
	// CodeInvalidReference: a name, valueFrom, ARN or provider does not parse or is too long.
	CodeInvalidReference = "InvalidReference"
	// CodeDuplicateName: two refs of one Resolve call become the same variable.
	CodeDuplicateName = "DuplicateName"
	// CodeParameterNotFound: SSM listed the parameter in InvalidParameters (it does not exist, or
	// the version or label asked for does not).
	CodeParameterNotFound = "ParameterNotFound"
	// CodeMissingFromResponse: SSM answered without the parameter and without saying it is invalid.
	CodeMissingFromResponse = "MissingFromResponse"
	// CodeNoSecretString: the Secrets Manager secret holds SecretBinary, not SecretString.
	CodeNoSecretString = "NoSecretString"
	// CodeNotJSONObject: a json-key was asked for, or the secret holds registry credentials, and the
	// SecretString is not a JSON object.
	CodeNotJSONObject = "NotJSONObject"
	// CodeJSONKeyNotFound: the SecretString has no member named by the json-key.
	CodeJSONKeyNotFound = "JSONKeyNotFound"
	// CodeJSONKeyNotString: the member named by the json-key is not a JSON string.
	CodeJSONKeyNotString = "JSONKeyNotString"
	// CodeInvalidRegistryCredentials: the secret lacks a non-empty string username or password.
	CodeInvalidRegistryCredentials = "InvalidRegistryCredentials"
	// CodeMalformedEnvFile: a line of an environment file is not VAR=VALUE.
	CodeMalformedEnvFile = "MalformedEnvFile"
	// CodeEnvFileTooLarge: an environment file is larger than MaxEnvFileSize.
	CodeEnvFileTooLarge = "EnvFileTooLarge"
	// CodeRequestFailed: the request got no answer from AWS (connection refused or reset, DNS,
	// timeout, cancellation).
	CodeRequestFailed = "RequestFailed"
)

// Error is every failure of Resolve, EnvFiles and RegistryCredentials: which secret, environment
// file or credentials parameter could not be had, and why. It never holds a secret value.
type Error struct {
	// Secret names what failed: `secret DB_PASS (valueFrom /app/db)`, `environment file
	// arn:aws:s3:::bucket/app.env` or `repository credentials arn:aws:secretsmanager:…`.
	Secret string
	// Code is AWS's error code (from smithy.APIError) or one of the Code constants.
	Code string
	// Err is the cause: the SDK's error, or a description of the local problem.
	Err error

	transient bool
}

var _ errdefs.Retriable = (*Error)(nil)

// Error returns "<Secret>: <Code>: <Err>".
func (e *Error) Error() string {
	if e.Err == nil {
		return e.Secret + ": " + e.Code
	}
	return e.Secret + ": " + e.Code + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Retry reports whether asking again may succeed: true for throttling, 5xx answers, and requests
// that got no answer (other than the caller's cancellation); false for refusals (4xx: access denied,
// not found, validation) and for every problem found locally. The SDK has already made three
// attempts when Retry is true.
func (e *Error) Retry() bool { return e.transient }

// localError returns an *Error for a problem found without asking AWS; it is never retriable.
func localError(secret, code string, err error) *Error {
	return &Error{Secret: secret, Code: code, Err: err}
}

// awsError classifies an error of an SDK call.
func awsError(secret string, err error) *Error {
	e := &Error{Secret: secret, Code: CodeRequestFailed, Err: err}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		e.Code = apiErr.ErrorCode()
	}
	status := 0 // 0: no answer
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		status = respErr.HTTPStatusCode()
	}
	switch {
	case errors.Is(err, context.Canceled):
		e.transient = false
	case awsretry.IsErrorThrottles(awsretry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary:
		e.transient = true
	case status != 0:
		e.transient = status >= 500 || status == 429
	default:
		// An API error without a status is a refusal; anything else got no answer.
		e.transient = apiErr == nil
	}
	return e
}

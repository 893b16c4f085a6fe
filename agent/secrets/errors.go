package secrets

import (
	"github.com/berth-agent/berth/agent/awserr"
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
	// CodeFileTooLarge: a file fetched with File is larger than MaxFileSize.
	CodeFileTooLarge = "FileTooLarge"
	// CodeRequestFailed: the request got no answer from AWS (connection refused or reset, DNS,
	// timeout, cancellation).
	CodeRequestFailed = "RequestFailed"
)

// Error is every failure of Resolve, EnvFiles, File and RegistryCredentials: which secret, environment
// file or credentials parameter could not be had, and why. It never holds a secret value.
type Error struct {
	// Secret names what failed: `secret DB_PASS (valueFrom /app/db)`, `environment file
	// arn:aws:s3:::bucket/app.env` or `repository credentials arn:aws:secretsmanager:…`.
	Secret string
	// Code is AWS's error code (from smithy.APIError) or one of the Code constants.
	Code string
	// Err is the cause: the SDK's error with its errdefs class (awserr.Classify), or a description
	// of the local problem.
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

// awsError is the *Error of a failed SDK call: AWS's code, and the class (errdefs.ErrNotFound for
// ParameterNotFound, errdefs.ErrUnauthorized for AccessDeniedException, …) and retry decision
// awserr gives it.
func awsError(secret string, err error) *Error {
	e := &Error{Secret: secret, Code: CodeRequestFailed, Err: awserr.Classify(err), transient: awserr.Transient(err)}
	if code, _ := awserr.Code(err); code != "" {
		e.Code = code
	}
	return e
}

package taskendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// ProtectionAPI calls ECS's task scale-in protection operations for one task, in the agent's cluster
// (*ecsclient.Client behind the agent's adapter, against ECS or the embedded control plane). It must
// be safe for concurrent use. Its errors tell the container what went wrong: the AWS SDK's API error
// (ErrorCode, ErrorMessage) and HTTP answer (HTTPStatusCode, ServiceRequestID) when an error wraps
// them, context.Canceled or context.DeadlineExceeded when the call was cut short, and otherwise its
// text, which must hold no secret.
type ProtectionAPI interface {
	// GetTaskProtection returns the task's protection, asked with its task role's credentials.
	GetTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string) (ProtectionAnswer, error)
	// UpdateTaskProtection turns the task's protection on or off, for expiresInMinutes when not nil,
	// with its task role's credentials.
	UpdateTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string, enabled bool, expiresInMinutes *int32) (ProtectionAnswer, error)
}

// ProtectionAnswer is ECS's answer to either call: its protectedTasks and its failures.
type ProtectionAnswer struct {
	Tasks    []ProtectedTask
	Failures []ProtectionFailure
}

// ProtectedTask is one task's protection, as the endpoint shows it (the AWS SDK's ProtectedTask, which
// the ECS agent encodes as it is); nil fields are null.
type ProtectedTask struct {
	ExpirationDate    *time.Time `json:"ExpirationDate"`
	ProtectionEnabled bool       `json:"ProtectionEnabled"`
	TaskArn           *string    `json:"TaskArn"`
}

// ProtectionFailure is one failure ECS reported (the AWS SDK's Failure, encoded as it is); nil
// fields are null.
type ProtectionFailure struct {
	Arn    *string `json:"Arn"`
	Detail *string `json:"Detail"`
	Reason *string `json:"Reason"`
}

// protectionResponse is every answer of the task protection endpoint (the ECS agent's
// TaskProtectionResponse): the protection, ECS's failure, or an error with ECS's request ID when it
// answered.
type protectionResponse struct {
	RequestID  *string            `json:"requestID,omitempty"`
	Protection *ProtectedTask     `json:"protection,omitempty"`
	Failure    *ProtectionFailure `json:"failure,omitempty"`
	Error      *protectionError   `json:"error,omitempty"`
}

// protectionError is the error of a protectionResponse; Arn is the task's, when it was found.
type protectionError struct {
	Arn     string `json:"Arn,omitempty"`
	Code    string `json:"Code"`
	Message string `json:"Message"`
}

// The error codes and messages of the task protection endpoint, as the ECS agent's are.
const (
	codeInvalidParameter  = "InvalidParameterException"
	codeResourceNotFound  = "ResourceNotFoundException"
	codeServerException   = "ServerException"
	codeAccessDenied      = "AccessDeniedException"
	codeRequestCanceled   = "RequestCanceled"
	messageDecodeFailed   = "UpdateTaskProtection: failed to decode request"
	messageNoTask         = "Failed to find a task for the request"
	messageNoEnabledField = "Invalid request: does not contain 'ProtectionEnabled' field"
	messageNoCredentials  = "Invalid Request: no task IAM role credentials available for task"
	messageTimedOut       = "Timed out calling ECS Task Protection API"
	messageUnexpected     = "Unexpected error occurred"
)

// protectionTimeout bounds the ECS call of one request: the ECS agent's ecsCallTimeout, under its task
// server's 5 s write timeout.
const protectionTimeout = 4 * time.Second

// maxProtectionBody bounds a PUT body; the request is two small fields.
const maxProtectionBody = 4 << 10

// protectionRequest is a PUT body: fields matched without regard to case, as encoding/json does
// (the ECS agent's TaskProtectionRequest); any other field refuses the request.
type protectionRequest struct {
	ProtectionEnabled *bool
	ExpiresInMinutes  *int64
}

// protectionRoute is /api/TOKEN/task-protection/v1/state.
var protectionRoute = agentAPIRoute{name: "task_protection", methods: []string{http.MethodGet, http.MethodPut},
	serve: (*Handler).serveProtection}

// serveProtection answers GET (GetTaskProtection) and PUT (UpdateTaskProtection) of the task whose
// token the path names, as the ECS agent does: a PUT body that does not decode is a 400 before
// anything is looked up; a token no task holds is a 404; a PUT without protectionEnabled a 400; a
// task without task role credentials a 403; then ECS is called with them and its answer, failure or
// error passed on.
func (h *Handler) serveProtection(w http.ResponseWriter, r *http.Request, req apiRequest) {
	op := "GetTaskProtection"
	var body protectionRequest
	if r.Method == http.MethodPut {
		op = "UpdateTaskProtection"
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxProtectionBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			h.log.Debug("task protection request does not decode", "token", taskcreds.ShortID(req.token), "error", err)
			writeJSON(w, http.StatusBadRequest, protectionResponse{Error: &protectionError{Code: codeInvalidParameter, Message: messageDecodeFailed}})
			return
		}
	}
	t := req.task
	if t == nil {
		h.log.Debug("task protection: no task holds the token", "token", taskcreds.ShortID(req.token))
		writeJSON(w, http.StatusNotFound, protectionResponse{Error: &protectionError{Code: codeResourceNotFound, Message: messageNoTask}})
		return
	}
	fail := func(status int, code, msg string, requestID *string) {
		writeJSON(w, status, protectionResponse{RequestID: requestID, Error: &protectionError{Arn: t.Arn, Code: code, Message: msg}})
	}
	if r.Method == http.MethodPut && body.ProtectionEnabled == nil {
		fail(http.StatusBadRequest, codeInvalidParameter, messageNoEnabledField, nil)
		return
	}
	creds, err := h.roleCredentials(r.Context(), t)
	if err != nil {
		h.log.Debug("task protection: the task has no task role credentials", "task_arn", t.Arn, "error", err)
		fail(http.StatusForbidden, codeAccessDenied, messageNoCredentials, nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), protectionTimeout)
	defer cancel()
	var answer ProtectionAnswer
	if r.Method == http.MethodPut {
		answer, err = h.protect.UpdateTaskProtection(ctx, creds, t.Arn, *body.ProtectionEnabled, minutes(body.ExpiresInMinutes))
	} else {
		answer, err = h.protect.GetTaskProtection(ctx, creds, t.Arn)
	}
	if err != nil {
		status, code, msg, requestID := protectionFailure(err)
		h.log.Debug("task protection: ECS call failed", "op", op, "task_arn", t.Arn, "status", status, "code", code, "error", err)
		fail(status, code, msg, requestID)
		return
	}
	switch {
	case len(answer.Failures) == 1:
		h.log.Debug("task protection: ECS reports a failure", "op", op, "task_arn", t.Arn, "reason", deref(answer.Failures[0].Reason))
		writeJSON(w, http.StatusOK, protectionResponse{Failure: &answer.Failures[0]})
		return
	case len(answer.Failures) > 1 || len(answer.Tasks) != 1:
		h.log.Debug("task protection: ECS answered for more or fewer tasks than asked", "op", op, "task_arn", t.Arn,
			"tasks", len(answer.Tasks), "failures", len(answer.Failures))
		fail(http.StatusInternalServerError, codeServerException, messageUnexpected, nil)
		return
	}
	p := answer.Tasks[0]
	if p.ExpirationDate != nil {
		utc := p.ExpirationDate.UTC()
		p.ExpirationDate = &utc
	}
	if r.Method == http.MethodPut {
		h.log.Info("task scale-in protection updated", "task_arn", t.Arn, "container", req.container, "enabled", p.ProtectionEnabled,
			"expires", p.ExpirationDate)
	} else {
		h.log.Debug("task scale-in protection read", "task_arn", t.Arn, "container", req.container, "enabled", p.ProtectionEnabled)
	}
	writeJSON(w, http.StatusOK, protectionResponse{Protection: &p})
}

// roleCredentials returns the task role credentials of t: an error when it has none (no task role,
// task roles off, or none received or assumed yet).
func (h *Handler) roleCredentials(ctx context.Context, t *task.Task) (taskcreds.Credentials, error) {
	if t.CredentialsID == "" {
		return taskcreds.Credentials{}, errors.New("the task has no task role")
	}
	return h.lookupCredentials(ctx, t.CredentialsID)
}

// minutes is expiresInMinutes as ECS takes it, an int32; a value beyond that range is sent as its
// bound, which ECS refuses as out of range (the ECS agent truncates it to 32 bits instead).
func minutes(m *int64) *int32 {
	if m == nil {
		return nil
	}
	v := int32(max(math.MinInt32, min(math.MaxInt32, *m)))
	return &v
}

// protectionFailure maps a failed ECS call onto the endpoint's answer, as the ECS agent does: a call
// cut short is a 504 RequestCanceled; an API error ECS answered carries its HTTP status, code,
// message and request ID; an API error without an answer is a 500 with its code; anything else a 500
// ServerException with the error's text.
func protectionFailure(err error) (status int, code, msg string, requestID *string) {
	var canceled interface{ CanceledError() bool }
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &canceled) {
		return http.StatusGatewayTimeout, codeRequestCanceled, messageTimedOut, nil
	}
	var api interface {
		ErrorCode() string
		ErrorMessage() string
	}
	if !errors.As(err, &api) {
		return http.StatusInternalServerError, codeServerException, err.Error(), nil
	}
	var answered interface {
		HTTPStatusCode() int
		ServiceRequestID() string
	}
	if errors.As(err, &answered) && answered.HTTPStatusCode() != 0 {
		id := answered.ServiceRequestID()
		return answered.HTTPStatusCode(), api.ErrorCode(), api.ErrorMessage(), &id
	}
	return http.StatusInternalServerError, api.ErrorCode(), api.ErrorMessage(), nil
}

// deref is *s, or "" when s is nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

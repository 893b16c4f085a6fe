package taskendpoint_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// protectionCall is one call the fake ProtectionAPI received.
type protectionCall struct {
	op          string
	accessKeyID string
	taskArn     string
	enabled     bool
	minutes     *int32
	deadline    time.Duration // how far off the call's deadline was
}

// fakeProtection is a ProtectionAPI answering answer, or err, to every call, and recording them.
type fakeProtection struct {
	mu     sync.Mutex
	calls  []protectionCall
	answer func(taskArn string) taskendpoint.ProtectionAnswer
	err    error
}

var _ taskendpoint.ProtectionAPI = (*fakeProtection)(nil)

func (f *fakeProtection) record(ctx context.Context, c protectionCall, creds taskcreds.Credentials) (taskendpoint.ProtectionAnswer, error) {
	c.accessKeyID = creds.AccessKeyID
	if d, ok := ctx.Deadline(); ok {
		c.deadline = time.Until(d)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if f.err != nil {
		return taskendpoint.ProtectionAnswer{}, f.err
	}
	return f.answer(c.taskArn), nil
}

func (f *fakeProtection) GetTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string) (taskendpoint.ProtectionAnswer, error) {
	return f.record(ctx, protectionCall{op: "get", taskArn: taskArn}, creds)
}

func (f *fakeProtection) UpdateTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string, enabled bool,
	minutes *int32) (taskendpoint.ProtectionAnswer, error) {
	return f.record(ctx, protectionCall{op: "update", taskArn: taskArn, enabled: enabled, minutes: minutes}, creds)
}

func (f *fakeProtection) taken() []protectionCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protectionCall(nil), f.calls...)
}

const (
	apiCredsID     = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"
	apiAccessKeyID = "ASIAEXAMPLEKEYID0002"
	noRoleARN      = "arn:aws:ecs:us-west-2:012345678901:task/prod/3c2b1a0f9e8d4c7b6a5f4e3d2c1b0a9f"
	pendingARN     = "arn:aws:ecs:us-west-2:012345678901:task/prod/4d3c2b1a0f9e4d8c7b6a5f4e3d2c1b0a"
	protectionPath = "/task-protection/v1/state"
)

// protectionEnv is the handler with four tasks: web (bridge) and api (awsvpc), each with a task role
// and its credentials; norole, without a task role; and pending, whose role credentials have not
// arrived. ECS protects a task until 14:00:00 UTC unless told otherwise.
func protectionEnv(t *testing.T) (*env, *fakeProtection) {
	t.Helper()
	fake := &fakeProtection{answer: func(arn string) taskendpoint.ProtectionAnswer {
		until := at(0)
		return taskendpoint.ProtectionAnswer{Tasks: []taskendpoint.ProtectedTask{{TaskArn: &arn, ProtectionEnabled: true, ExpirationDate: &until}}}
	}}
	e := newEnv(t, func(cfg *taskendpoint.Config) {
		cfg.Protection = fake
		creds := cfg.Credentials.(*fakeCredentials)
		creds.creds[apiCredsID] = taskcreds.Credentials{RoleArn: "arn:aws:iam::012345678901:role/api", AccessKeyID: apiAccessKeyID,
			SecretAccessKey: "api-secret", SessionToken: "api-session"}
		tasks := cfg.Tasks.(*fakeTasks)
		web, api := tasks.tokens["tok-web"].task, tasks.tokens["tok-api"].task
		web.CredentialsID, api.CredentialsID = credsID, apiCredsID
		norole := &task.Task{Arn: noRoleARN, Family: "batch", Revision: 1, DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
			Containers: []*task.Container{{Name: "batch"}}}
		pending := &task.Task{Arn: pendingARN, Family: "batch", Revision: 1, CredentialsID: "not-arrived-yet",
			Containers: []*task.Container{{Name: "batch"}}}
		tasks.tokens["tok-norole"] = held{norole, "batch"}
		tasks.tokens["tok-pending"] = held{pending, "batch"}
		tasks.tasks = append(tasks.tasks, norole, pending)
	})
	return e, fake
}

// send sends a request with a body from the web container's address.
func (e *env) send(method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://169.254.170.2"+path, strings.NewReader(body))
	req.RemoteAddr = fromWeb
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// The ECS agent's bodies (ecs-agent/tmds/handlers/taskprotection/v1/handlers/handlers_test.go).
const (
	bodyDecodeFailed = `{"error":{"Code":"InvalidParameterException","Message":"UpdateTaskProtection: failed to decode request"}}`
	bodyNoTask       = `{"error":{"Code":"ResourceNotFoundException","Message":"Failed to find a task for the request"}}`
)

func bodyNoCredentials(arn string) string {
	return `{"error":{"Arn":"` + arn + `","Code":"AccessDeniedException","Message":"Invalid Request: no task IAM role credentials available for task"}}`
}

// TestTaskProtectionAnswers: GET and PUT call ECS with the task role's credentials for the task the
// token names, and answer its protection as the ECS agent encodes the SDK's ProtectedTask, the
// expiration in UTC.
func TestTaskProtectionAnswers(t *testing.T) {
	e, fake := protectionEnv(t)
	want := `{"protection":{"ExpirationDate":"2026-11-30T14:00:00.123456789Z","ProtectionEnabled":true,"TaskArn":"` + bridgeARN + `"}}`

	rec := e.get("/api/tok-web"+protectionPath, fromWeb)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, want, rec.Body.String())
	assert.Equal(t, want, rec.Body.String(), "field for field, in the ECS agent's order")

	for _, body := range []string{`{"ProtectionEnabled":true,"ExpiresInMinutes":5}`, `{"protectionEnabled":false,"expiresInMinutes":60}`,
		`{"ProtectionEnabled":true}`, `{"ProtectionEnabled":true} trailing`} {
		rec = e.send(http.MethodPut, "/api/tok-job"+protectionPath, body)
		assert.Equal(t, http.StatusOK, rec.Code, body)
		assert.Equal(t, want, rec.Body.String(), body)
	}
	five, sixty := int32(5), int32(60)
	calls := fake.taken()
	require.Len(t, calls, 5)
	for _, c := range calls {
		assert.Equal(t, bridgeARN, c.taskArn)
		assert.Equal(t, accessKeyID, c.accessKeyID, "signed with the task role's credentials")
		assert.Positive(t, c.deadline)
		assert.LessOrEqual(t, c.deadline, 4*time.Second, "the ECS agent's 4 s ECS call timeout")
	}
	assert.Equal(t, "get", calls[0].op)
	assert.Equal(t, []protectionCall{
		{op: "update", enabled: true, minutes: &five}, {op: "update", enabled: false, minutes: &sixty},
		{op: "update", enabled: true}, {op: "update", enabled: true},
	}, stripped(calls[1:]))

	fake.answer = func(arn string) taskendpoint.ProtectionAnswer {
		return taskendpoint.ProtectionAnswer{Tasks: []taskendpoint.ProtectedTask{{TaskArn: &arn}}}
	}
	rec = e.get("/api/tok-api"+protectionPath, fromAWSVPC)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, `{"protection":{"ExpirationDate":null,"ProtectionEnabled":false,"TaskArn":"`+awsvpcARN+`"}}`, rec.Body.String())
	last := fake.taken()[5]
	assert.Equal(t, awsvpcARN, last.taskArn, "another task's token reaches only its own task")
	assert.Equal(t, apiAccessKeyID, last.accessKeyID, "with its own role's credentials")

	assert.Equal(t, "update", stripped(fake.taken())[1].op)
	for _, secret := range []string{secretKey, sessionToken, accessKeyID, "api-secret", "api-session"} {
		assert.NotContains(t, e.log.String(), secret)
	}
	assert.Contains(t, e.log.String(), "task scale-in protection updated")
}

// stripped keeps what a test compares of calls: the operation and its arguments.
func stripped(calls []protectionCall) []protectionCall {
	out := make([]protectionCall, len(calls))
	for i, c := range calls {
		out[i] = protectionCall{op: c.op, enabled: c.enabled, minutes: c.minutes}
	}
	return out
}

// TestTaskProtectionValidation: a PUT body that does not decode is a 400 before the token is looked
// at; one without ProtectionEnabled a 400 naming the task; expiresInMinutes is ECS's to check, and
// goes to it as given (bounded to 32 bits); nothing reaches ECS otherwise.
func TestTaskProtectionValidation(t *testing.T) {
	e, fake := protectionEnv(t)
	for name, body := range map[string]string{
		"not JSON":                 `protect me`,
		"empty":                    ``,
		"protectionEnabled string": `{"ProtectionEnabled":"bad"}`,
		"expiresInMinutes string":  `{"ProtectionEnabled":true,"ExpiresInMinutes":"5"}`,
		"expiresInMinutes float":   `{"ProtectionEnabled":true,"ExpiresInMinutes":1.5}`,
		"unknown field":            `{"ProtectionEnabled":true,"Cluster":"other"}`,
		"an array":                 `[true]`,
		"over the limit":           `{"ProtectionEnabled":true` + strings.Repeat(" ", 4<<10) + `}`,
	} {
		t.Run(name, func(t *testing.T) {
			for _, token := range []string{"tok-web", "no-such-token"} {
				rec := e.send(http.MethodPut, "/api/"+token+protectionPath, body)
				assert.Equal(t, http.StatusBadRequest, rec.Code, token)
				assert.Equal(t, bodyDecodeFailed, rec.Body.String(), token)
			}
		})
	}
	for _, body := range []string{`{"ExpiresInMinutes":5}`, `{}`, `null`} {
		rec := e.send(http.MethodPut, "/api/tok-web"+protectionPath, body)
		assert.Equal(t, http.StatusBadRequest, rec.Code, body)
		assert.Equal(t, `{"error":{"Arn":"`+bridgeARN+`","Code":"InvalidParameterException","Message":"Invalid request: does not contain 'ProtectionEnabled' field"}}`,
			rec.Body.String(), body)
	}
	assert.Empty(t, fake.taken(), "no bad request reaches ECS")

	for _, minutes := range []int64{0, 2881, -1, math.MaxInt32 + 2, math.MinInt64} {
		rec := e.send(http.MethodPut, "/api/tok-web"+protectionPath, fmt.Sprintf(`{"ProtectionEnabled":true,"ExpiresInMinutes":%d}`, minutes))
		assert.Equal(t, http.StatusOK, rec.Code, "the fake ECS takes %d", minutes)
	}
	var sent []int32
	for _, c := range fake.taken() {
		sent = append(sent, *c.minutes)
	}
	assert.Equal(t, []int32{0, 2881, -1, math.MaxInt32, math.MinInt32}, sent, "ECS gets the minutes given, never wrapped around")
}

// TestTaskProtectionStrangers: a token no task holds is a 404, a task without a role (or whose role
// credentials have not arrived) a 403; neither reaches ECS. Other methods are 405.
func TestTaskProtectionStrangers(t *testing.T) {
	e, fake := protectionEnv(t)
	assert.Equal(t, http.StatusMovedPermanently, e.get("/api/"+protectionPath, fromWeb).Code, "no token: an unclean path, as mux cleans it")
	for _, token := range []string{"no-such-token", credsID, "tok-web-"} {
		rec := e.get("/api/"+token+protectionPath, fromWeb)
		assert.Equal(t, http.StatusNotFound, rec.Code, token)
		assert.Equal(t, bodyNoTask, rec.Body.String(), token)
		rec = e.send(http.MethodPut, "/api/"+token+protectionPath, `{"ProtectionEnabled":true}`)
		assert.Equal(t, http.StatusNotFound, rec.Code, token)
		assert.Equal(t, bodyNoTask, rec.Body.String(), token)
	}
	for token, arn := range map[string]string{"tok-norole": noRoleARN, "tok-pending": pendingARN} {
		rec := e.get("/api/"+token+protectionPath, fromWeb)
		assert.Equal(t, http.StatusForbidden, rec.Code, token)
		assert.Equal(t, bodyNoCredentials(arn), rec.Body.String(), token)
		rec = e.send(http.MethodPut, "/api/"+token+protectionPath, `{"ProtectionEnabled":true}`)
		assert.Equal(t, http.StatusForbidden, rec.Code, token)
		assert.Equal(t, bodyNoCredentials(arn), rec.Body.String(), token)
	}
	assert.Empty(t, fake.taken())

	for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPatch, http.MethodHead} {
		rec := e.send(m, "/api/tok-web"+protectionPath, `{"ProtectionEnabled":true}`)
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, m)
		assert.Equal(t, "GET, PUT", rec.Header().Get("Allow"), m)
		assert.Empty(t, rec.Body.String(), "%s: the ECS agent's router answers 405 without a body", m)
	}
	rec := e.send(http.MethodPost, "/api/tok-web/task-protection/v1/other", `{}`)
	assert.Equal(t, http.StatusNotFound, rec.Code, "a path the agent API has no route for is 404 whatever the method")
	for _, p := range []string{"/api/tok-web", "/api/tok-web/", "/api/tok-web/task-protection/v1", "/api/tok-web/task-protection/v1/state/x",
		"/api/tok-web/task-protection/v2/state"} {
		assert.Equal(t, http.StatusNotFound, e.get(p, fromWeb).Code, p)
	}
	assert.Empty(t, fake.taken())

	off := newEnv(t) // no ProtectionAPI: the route is not served
	assert.Equal(t, http.StatusNotFound, off.get("/api/tok-web"+protectionPath, fromWeb).Code)
}

// TestTaskProtectionECSErrors: ECS's answer is passed on as the ECS agent passes it: one failure as a
// 200 with it; more failures, or other than one task, a 500; an API error with ECS's status, code,
// message and request ID; a call cut short a 504; any other error a 500 with its text.
func TestTaskProtectionECSErrors(t *testing.T) {
	answered := func(status int, code, msg string) error {
		return fmt.Errorf("ecs UpdateTaskProtection: %w", &smithy.OperationError{ServiceID: "ECS", OperationName: "UpdateTaskProtection",
			Err: &awshttp.ResponseError{RequestID: "8d4d6a4e-request", ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: &smithy.GenericAPIError{Code: code, Message: msg}}}})
	}
	reason, other := "TASK_NOT_VALID", "arn:other"
	failure := taskendpoint.ProtectionFailure{Arn: strPtr(bridgeARN), Reason: &reason}
	serverError := `{"error":{"Arn":"` + bridgeARN + `","Code":"ServerException","Message":"Unexpected error occurred"}}`
	tests := []struct {
		name   string
		answer taskendpoint.ProtectionAnswer
		err    error
		status int
		body   string
	}{
		{name: "one failure", answer: taskendpoint.ProtectionAnswer{Failures: []taskendpoint.ProtectionFailure{failure}},
			status: http.StatusOK, body: `{"failure":{"Arn":"` + bridgeARN + `","Detail":null,"Reason":"TASK_NOT_VALID"}}`},
		{name: "two failures", answer: taskendpoint.ProtectionAnswer{Failures: []taskendpoint.ProtectionFailure{failure, failure}},
			status: http.StatusInternalServerError, body: serverError},
		{name: "two tasks", answer: taskendpoint.ProtectionAnswer{Tasks: []taskendpoint.ProtectedTask{{TaskArn: strPtr(bridgeARN)}, {TaskArn: &other}}},
			status: http.StatusInternalServerError, body: serverError},
		{name: "nothing", status: http.StatusInternalServerError, body: serverError},
		{name: "access denied", err: answered(http.StatusBadRequest, "AccessDeniedException", "User is not authorized to perform: ecs:UpdateTaskProtection"),
			status: http.StatusBadRequest,
			body: `{"requestID":"8d4d6a4e-request","error":{"Arn":"` + bridgeARN +
				`","Code":"AccessDeniedException","Message":"User is not authorized to perform: ecs:UpdateTaskProtection"}}`},
		{name: "expiresInMinutes out of range", err: answered(http.StatusBadRequest, "InvalidParameterException", "expiresInMinutes must be between 1 and 2880."),
			status: http.StatusBadRequest,
			body: `{"requestID":"8d4d6a4e-request","error":{"Arn":"` + bridgeARN +
				`","Code":"InvalidParameterException","Message":"expiresInMinutes must be between 1 and 2880."}}`},
		{name: "throttled", err: answered(http.StatusTooManyRequests, "ThrottlingException", "Rate exceeded"), status: http.StatusTooManyRequests,
			body: `{"requestID":"8d4d6a4e-request","error":{"Arn":"` + bridgeARN + `","Code":"ThrottlingException","Message":"Rate exceeded"}}`},
		{name: "API error without an answer", err: &smithy.GenericAPIError{Code: "InvalidParameterException", Message: "ecs error"},
			status: http.StatusInternalServerError, body: `{"error":{"Arn":"` + bridgeARN + `","Code":"InvalidParameterException","Message":"ecs error"}}`},
		{name: "timed out", err: fmt.Errorf("ecs UpdateTaskProtection: %w", &smithy.CanceledError{Err: context.DeadlineExceeded}),
			status: http.StatusGatewayTimeout,
			body:   `{"error":{"Arn":"` + bridgeARN + `","Code":"RequestCanceled","Message":"Timed out calling ECS Task Protection API"}}`},
		{name: "canceled", err: fmt.Errorf("ecs UpdateTaskProtection: %w", context.Canceled), status: http.StatusGatewayTimeout,
			body: `{"error":{"Arn":"` + bridgeARN + `","Code":"RequestCanceled","Message":"Timed out calling ECS Task Protection API"}}`},
		{name: "not an AWS error", err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), status: http.StatusInternalServerError,
			body: `{"error":{"Arn":"` + bridgeARN + `","Code":"ServerException","Message":"dial tcp 127.0.0.1:1: connect: connection refused"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, fake := protectionEnv(t)
			fake.answer = func(string) taskendpoint.ProtectionAnswer { return tt.answer }
			fake.err = tt.err
			for _, rec := range []*httptest.ResponseRecorder{e.get("/api/tok-web"+protectionPath, fromWeb),
				e.send(http.MethodPut, "/api/tok-web"+protectionPath, `{"ProtectionEnabled":true}`)} {
				assert.Equal(t, tt.status, rec.Code)
				assert.Equal(t, tt.body, rec.Body.String())
			}
		})
	}
}

// TestTaskProtectionRateLimit: the agent API is counted per metadata token, like v3 and v4.
func TestTaskProtectionRateLimit(t *testing.T) {
	e, _ := protectionEnv(t)
	for range 60 {
		require.Equal(t, http.StatusOK, e.get("/api/tok-web"+protectionPath, fromWeb).Code)
	}
	rec := e.get("/api/tok-web"+protectionPath, fromWeb)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "You have reached maximum request limit.", rec.Body.String())
	assert.Equal(t, http.StatusOK, e.get("/v4/tok-job", fromWeb).Code, "another token of the same address has its own budget")
	assert.Equal(t, http.StatusOK, e.get("/api/tok-api"+protectionPath, fromWeb).Code)
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v4/tok-web", fromWeb).Code, "the token's budget is one for v4 and the agent API")
}

func strPtr(s string) *string { return &s }

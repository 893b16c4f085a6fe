package ecsclient

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

const protectedArn = "arn:aws:ecs:us-west-2:123456789012:task/test/0123456789abcdef0123456789abcdef"

// TestTaskProtectionCalls: both calls name the client's cluster and the task, carry the User-Agent,
// are signed with the task role's credentials when given (the client's own otherwise), and return
// ECS's answer field by field.
func TestTaskProtectionCalls(t *testing.T) {
	f := newFakeECS(t)
	answer := func(map[string]any) (int, any) {
		return http.StatusOK, map[string]any{
			"protectedTasks": []any{map[string]any{"taskArn": protectedArn, "protectionEnabled": true, "expirationDate": 1740830400.5}},
			"failures":       []any{map[string]any{"arn": "arn:x", "reason": "TASK_NOT_VALID", "detail": "standalone"}},
		}
	}
	f.handle("GetTaskProtection", answer)
	f.handle("UpdateTaskProtection", answer)
	c := newTestClient(t, f, func(cfg *Config) { cfg.UserAgent = "agent-ua" })
	role := credentials.NewStaticCredentialsProvider("ASIATASKROLE", "task-secret", "task-session")
	want := TaskProtection{
		Tasks:    []ProtectedTask{{TaskArn: aws.String(protectedArn), ProtectionEnabled: true, ExpirationDate: aws.Time(time.Unix(1740830400, 500e6))}},
		Failures: []Failure{{Arn: aws.String("arn:x"), Reason: aws.String("TASK_NOT_VALID"), Detail: aws.String("standalone")}},
	}

	got, err := c.GetTaskProtection(context.Background(), role, protectedArn)
	require.NoError(t, err)
	require.Len(t, got.Tasks, 1)
	assert.True(t, want.Tasks[0].ExpirationDate.Equal(*got.Tasks[0].ExpirationDate), "%v", got.Tasks[0].ExpirationDate)
	got.Tasks[0].ExpirationDate = want.Tasks[0].ExpirationDate
	assert.Equal(t, want, got)

	got, err = c.UpdateTaskProtection(context.Background(), role, protectedArn, true, aws.Int32(60))
	require.NoError(t, err)
	assert.Equal(t, want.Failures, got.Failures)
	_, err = c.UpdateTaskProtection(context.Background(), nil, protectedArn, false, nil)
	require.NoError(t, err)

	gets, updates := f.callsOf("GetTaskProtection", false), f.callsOf("UpdateTaskProtection", false)
	require.Len(t, gets, 1)
	require.Len(t, updates, 2)
	assert.Equal(t, map[string]any{"cluster": "test", "tasks": []any{protectedArn}}, gets[0].Body)
	assert.Equal(t, map[string]any{"cluster": "test", "tasks": []any{protectedArn}, "protectionEnabled": true, "expiresInMinutes": float64(60)},
		updates[0].Body)
	assert.Equal(t, map[string]any{"cluster": "test", "tasks": []any{protectedArn}, "protectionEnabled": false}, updates[1].Body,
		"no expiresInMinutes when none is given")
	for _, call := range []call{gets[0], updates[0]} {
		assert.Contains(t, call.Auth, "Credential=ASIATASKROLE/", "%s is signed with the task role's keys", call.Op)
		assert.Equal(t, "task-session", call.Token)
		assert.Equal(t, "agent-ua", call.UserAgent)
	}
	assert.Contains(t, updates[1].Auth, "Credential=AKIDTEST/", "without credentials, the client's own sign")
	assert.Empty(t, updates[1].Token)
}

// TestTaskProtectionErrors: an ECS error is an *APIError of its class that still tells the API's
// code and message, the HTTP status and the request ID; one attempt is made, even for a 500.
func TestTaskProtectionErrors(t *testing.T) {
	f := newFakeECS(t)
	f.handle("UpdateTaskProtection", apiError(http.StatusBadRequest, "AccessDeniedException", "not allowed"))
	f.handle("GetTaskProtection", apiError(http.StatusInternalServerError, "ServerException", "oops"))
	c := newTestClient(t, f, nil)

	_, err := c.UpdateTaskProtection(context.Background(), nil, protectedArn, true, nil)
	require.ErrorIs(t, err, ErrAccessDenied)
	var api interface {
		ErrorCode() string
		ErrorMessage() string
	}
	require.True(t, errors.As(err, &api), "%v", err)
	assert.Equal(t, "AccessDeniedException", api.ErrorCode())
	assert.Equal(t, "not allowed", api.ErrorMessage())
	var answered interface {
		HTTPStatusCode() int
		ServiceRequestID() string
	}
	require.True(t, errors.As(err, &answered), "%v", err)
	assert.Equal(t, http.StatusBadRequest, answered.HTTPStatusCode())

	_, err = c.GetTaskProtection(context.Background(), nil, protectedArn)
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Len(t, f.callsOf("GetTaskProtection", false), 1, "no retry")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.GetTaskProtection(ctx, nil, protectedArn)
	assert.ErrorIs(t, err, context.Canceled)
}

package ecsclient

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// TaskProtection is ECS's answer to GetTaskProtection or UpdateTaskProtection, as it sent it: the
// tasks' scale-in protection and the failures.
type TaskProtection struct {
	Tasks    []ProtectedTask
	Failures []Failure
}

// ProtectedTask is one task's scale-in protection; a field ECS left out is nil.
type ProtectedTask struct {
	TaskArn           *string
	ProtectionEnabled bool
	ExpirationDate    *time.Time
}

// Failure is one failure ECS reported for a resource of a call; a field ECS left out is nil.
type Failure struct {
	Arn    *string
	Reason *string
	Detail *string
}

// GetTaskProtection asks ECS for the scale-in protection of the task (its ARN) in the client's
// cluster, with the task's role credentials creds, or the client's own when creds is nil. It makes
// one attempt: the container asking retries as it sees fit. Errors are *APIError, which unwrap to the
// SDK's error and so to the API's error code and message, the HTTP status and the request ID, or
// ctx's error wrapped.
func (c *Client) GetTaskProtection(ctx context.Context, creds aws.CredentialsProvider, taskArn string) (TaskProtection, error) {
	out, err := c.api.GetTaskProtection(ctx, &ecs.GetTaskProtectionInput{Cluster: aws.String(c.cluster), Tasks: []string{taskArn}},
		signedWith(creds))
	if err != nil {
		return TaskProtection{}, translate("GetTaskProtection", err)
	}
	return taskProtection(out.ProtectedTasks, out.Failures), nil
}

// UpdateTaskProtection turns the scale-in protection of the task (its ARN) in the client's cluster on
// or off, for expiresInMinutes when given (ECS's default otherwise), signed as GetTaskProtection's
// call is. It makes one attempt; its errors are GetTaskProtection's.
func (c *Client) UpdateTaskProtection(ctx context.Context, creds aws.CredentialsProvider, taskArn string, enabled bool,
	expiresInMinutes *int32) (TaskProtection, error) {
	out, err := c.api.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String(c.cluster), Tasks: []string{taskArn},
		ProtectionEnabled: enabled, ExpiresInMinutes: expiresInMinutes}, signedWith(creds))
	if err != nil {
		return TaskProtection{}, translate("UpdateTaskProtection", err)
	}
	return taskProtection(out.ProtectedTasks, out.Failures), nil
}

// signedWith has one call signed with creds; nil keeps the client's credentials.
func signedWith(creds aws.CredentialsProvider) func(*ecs.Options) {
	return func(o *ecs.Options) {
		if creds != nil {
			o.Credentials = creds
		}
	}
}

// taskProtection copies ECS's answer out of the SDK's types.
func taskProtection(tasks []types.ProtectedTask, failures []types.Failure) TaskProtection {
	var p TaskProtection
	for _, t := range tasks {
		p.Tasks = append(p.Tasks, ProtectedTask{TaskArn: t.TaskArn, ProtectionEnabled: t.ProtectionEnabled, ExpirationDate: t.ExpirationDate})
	}
	for _, f := range failures {
		p.Failures = append(p.Failures, Failure{Arn: f.Arn, Reason: f.Reason, Detail: f.Detail})
	}
	return p
}

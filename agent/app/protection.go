package app

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// taskProtection is the task endpoint's ProtectionAPI: the agent's ECS client, each call signed with
// the task role's credentials, or, when agentSigns (modePlan.agentSignsTaskCalls), with the client's
// own.
type taskProtection struct {
	ecs        *ecsclient.Client
	agentSigns bool
}

var _ taskendpoint.ProtectionAPI = taskProtection{}

// GetTaskProtection calls ECS's GetTaskProtection for the task.
func (p taskProtection) GetTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string) (taskendpoint.ProtectionAnswer, error) {
	a, err := p.ecs.GetTaskProtection(ctx, p.signer(creds), taskArn)
	return protectionAnswer(a), err
}

// UpdateTaskProtection calls ECS's UpdateTaskProtection for the task.
func (p taskProtection) UpdateTaskProtection(ctx context.Context, creds taskcreds.Credentials, taskArn string, enabled bool,
	expiresInMinutes *int32) (taskendpoint.ProtectionAnswer, error) {
	a, err := p.ecs.UpdateTaskProtection(ctx, p.signer(creds), taskArn, enabled, expiresInMinutes)
	return protectionAnswer(a), err
}

// signer is what signs a call made for a task with these role credentials: nil (the client's own
// credentials) when the agent signs.
func (p taskProtection) signer(c taskcreds.Credentials) aws.CredentialsProvider {
	if p.agentSigns {
		return nil
	}
	return credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
}

// protectionAnswer is ECS's answer as the task endpoint takes it.
func protectionAnswer(a ecsclient.TaskProtection) taskendpoint.ProtectionAnswer {
	var out taskendpoint.ProtectionAnswer
	for _, t := range a.Tasks {
		out.Tasks = append(out.Tasks, taskendpoint.ProtectedTask{TaskArn: t.TaskArn, ProtectionEnabled: t.ProtectionEnabled, ExpirationDate: t.ExpirationDate})
	}
	for _, f := range a.Failures {
		out.Failures = append(out.Failures, taskendpoint.ProtectionFailure{Arn: f.Arn, Reason: f.Reason, Detail: f.Detail})
	}
	return out
}

// Package taskcreds is the one home of task role credentials: the Credentials of one role, the
// Source interface that finds them by credentials ID, the Store of the credentials the control
// plane sends, the Chain the agent asks (the Store, then in local mode the roles the agent assumes
// itself), the rule of which credentials a task's secrets are fetched with (Chain.ForSecrets), and
// the rule of what part of a credentials ID may be logged (ShortID).
//
// A task has up to two roles, told apart by their role type: the task role (taskRoleArn,
// RoleTypeTaskApplication), whose credentials are served to the task's containers, and the
// execution role (executionRoleArn, RoleTypeTaskExecution), whose credentials are the agent's own,
// used on the task's behalf (pulls from ECR, secrets, environment files, the awslogs driver) and
// never served to containers.
//
// No secret is ever logged or put in an error: Credentials print without their secret parts, and a
// credentials ID, which is what a container shows to get its credentials, is shown only by ShortID.
package taskcreds

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Role types, the same strings ACS uses for the two roles of a task.
const (
	RoleTypeTaskApplication = "TaskApplication" // the task definition's taskRoleArn
	RoleTypeTaskExecution   = "TaskExecution"   // the task definition's executionRoleArn
)

// Credentials are one role's temporary credentials.
type Credentials struct {
	RoleArn         string
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Expiration      time.Time // zero: they do not say when they expire
}

// String hides the secret parts, so credentials printed by accident leak nothing.
func (c Credentials) String() string {
	exp := "none"
	if !c.Expiration.IsZero() {
		exp = c.Expiration.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("{RoleArn:%s AccessKeyID:%s Expiration:%s}", c.RoleArn, c.AccessKeyID, exp)
}

// GoString is String, so that %#v hides the secret parts too.
func (c Credentials) GoString() string { return c.String() }

// AWS returns the credentials as the AWS SDK signs with them; they can expire when Expiration is
// set.
func (c Credentials) AWS() aws.Credentials {
	return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken,
		Source: "berth task role credentials", CanExpire: !c.Expiration.IsZero(), Expires: c.Expiration}
}

// Source finds the credentials of tasks' roles by credentials ID. Implementations are safe for
// concurrent use, and their errors never contain a secret.
type Source interface {
	// TaskCredentials returns the current credentials of the task role kept under id, which the
	// task's containers are served. An ID the source does not know, or that names an execution
	// role, matches errdefs.ErrNotFound; credentials that cannot be had now match another class (for
	// example errdefs.ErrUnavailable while they are being fetched).
	TaskCredentials(ctx context.Context, id string) (Credentials, error)
	// ExecutionRoleCredentials returns the current credentials of the execution role kept under id,
	// which the agent uses on the task's behalf. An ID the source does not know, or that names a
	// task role, matches errdefs.ErrNotFound; credentials that cannot be had now match another
	// class.
	ExecutionRoleCredentials(ctx context.Context, id string) (Credentials, error)
}

// ShortID returns the part of a credentials ID that may be logged or shown: its first 8
// characters. The whole ID is what a container shows to get its credentials.
func ShortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

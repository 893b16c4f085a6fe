package engine

import (
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/registryauth"
	"github.com/berth-agent/berth/agent/task"
)

// ExecutionRoleAuth supplies the credentials of pulls made with a task's execution role;
// *registryauth.ExecutionRoles satisfies it.
type ExecutionRoleAuth interface {
	// For returns the credentials source of a container's pulls with role. It does no I/O; the
	// source's errors name the image and the role.
	For(role registryauth.ExecutionRole) registryauth.AuthSource
	// TaskRemoved forgets whatever was cached for the task; it is called once the task is cleaned up.
	TaskRemoved(taskArn string)
}

var _ ExecutionRoleAuth = (*registryauth.ExecutionRoles)(nil)

// pullAuth returns the credentials source of c's image: its repositoryCredentials' secret; the
// task's execution role's ECR token when the container asks for it (and the engine has
// ExecutionRoleAuth); else the agent's own.
func (e *Engine) pullAuth(t *task.Task, c *task.Container) dockerclient.AuthSource {
	if c.RepositoryCredentials != nil {
		if e.cfg.Secrets == nil {
			return noRepositoryAuth{}
		}
		return e.cfg.Secrets.RepositoryAuth(t, c)
	}
	a := c.ECRAuth
	if a == nil || !a.UseExecutionRole || e.cfg.ExecutionRoleAuth == nil {
		return e.auth
	}
	return e.cfg.ExecutionRoleAuth.For(registryauth.ExecutionRole{TaskArn: t.Arn, RoleArn: t.ExecutionRoleArn,
		CredentialsID: t.ExecutionCredentialsID, Region: a.Region, RegistryID: a.RegistryID, EndpointOverride: a.EndpointOverride})
}

package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// TaskEndpointConfig tells containers where the task endpoint (credentials, metadata and the agent API) is.
type TaskEndpointConfig struct {
	// URL is where containers reach the task endpoint, e.g. http://169.254.170.2. Empty: no variable is
	// injected.
	URL string
	// Credentials injects AWS_CONTAINER_CREDENTIALS_RELATIVE_URI into the containers of a task with a
	// role (ECS_ENABLE_TASK_IAM_ROLE); HostNetwork extends it to host-network tasks
	// (ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST), whose requests reach the endpoint only when the host's
	// own redirect is installed.
	Credentials, HostNetwork bool
	// Region goes into AWS_REGION and AWS_DEFAULT_REGION of those containers, unless their definition
	// sets them.
	Region string
	// Roles, when set, provides the credentials of roles whose control plane sent no keys (local mode
	// and static tasks).
	Roles RoleCredentials
	// Route, when set, tells whether containers' requests reach the task endpoint (the host's NAT,
	// *hostnat.Keeper). A task whose containers get role credentials from the endpoint does not start
	// them while they would not: their requests would leave by the default route.
	Route EndpointRoute
}

// EndpointRoute tells whether containers' requests reach the task endpoint.
type EndpointRoute interface {
	// Missing returns why they do not now ("" when they do) and a channel closed once that has
	// changed. It must not block.
	Missing() (reason string, changed <-chan struct{})
}

// RoleCredentials provides a task role's credentials under an ID the engine chose (*rolecreds.Provider).
type RoleCredentials interface {
	// Provide starts providing the credentials of roleArn under id for the task. It is called when
	// the task reaches the engine, again after an agent restart unless the task had stopped, and
	// must not block.
	Provide(taskArn, roleType, roleArn, id string) error
	// Stop stops refreshing the task's credentials, keeping what it has until Remove; it is called
	// once every container of the task has stopped (not when the agent shuts down).
	Stop(taskArn string)
	// Remove stops providing every credentials of the task; it is called once the task is cleaned up.
	Remove(taskArn string)
}

// newEndpointID returns 128 random bits in hex: a credentials ID or metadata token nobody can guess.
func newEndpointID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// assignEndpointIDs gives every container a metadata token and every role a credentials ID, where
// they have none yet; the task is saved with them, so they never change. Without task role
// credentials (ECS_ENABLE_TASK_IAM_ROLE=false) a task role gets no ID: nothing will serve it.
func assignEndpointIDs(t *task.Task, taskRoles bool) {
	for _, c := range t.Containers {
		if c.MetadataToken == "" && !c.Pause {
			c.MetadataToken = newEndpointID()
		}
	}
	if taskRoles && t.RoleArn != "" && t.CredentialsID == "" {
		t.CredentialsID = newEndpointID()
	}
	if t.ExecutionRoleArn != "" && t.ExecutionCredentialsID == "" {
		t.ExecutionCredentialsID = newEndpointID()
	}
}

// endpointFeature tells containers where the task endpoint is and has the agent's role provider, if
// any, keep their task's role credentials (see hooks.go).
type endpointFeature struct {
	cfg TaskEndpointConfig
	// awslogsExecutionRole is Config.AWSLogsExecutionRole.
	awslogsExecutionRole bool
}

var (
	_ Preparer    = endpointFeature{}
	_ Holder      = endpointFeature{}
	_ CreateHook  = endpointFeature{}
	_ StopHook    = endpointFeature{}
	_ CleanupHook = endpointFeature{}
)

func (endpointFeature) Name() string { return "task endpoint" }

// TaskHook returns the feature itself: it keeps no state of its own per task.
func (f endpointFeature) TaskHook(*task.Task) TaskHook { return f }

// Prepare asks the role credentials provider, if any, for the task's roles, unless the task had
// stopped before an agent restart. A role that gets no credentials is logged; the task runs.
func (f endpointFeature) Prepare(r *Run) error {
	roles, t := f.cfg.Roles, r.Task()
	if roles == nil || t.KnownStatus == task.TaskStopped {
		return nil
	}
	for _, role := range []struct{ roleType, arn, id string }{
		{taskcreds.RoleTypeTaskApplication, t.RoleArn, t.CredentialsID}, {taskcreds.RoleTypeTaskExecution, t.ExecutionRoleArn, t.ExecutionCredentialsID}} {
		if role.arn == "" {
			continue
		}
		if role.id == "" { // a task role with task role credentials off (assignEndpointIDs)
			r.Log().Info("the task's role gets no credentials: task role credentials are off (ECS_ENABLE_TASK_IAM_ROLE=false)",
				"role_arn", role.arn)
			continue
		}
		if err := roles.Provide(t.Arn, role.roleType, role.arn, role.id); err != nil {
			r.Log().Error("the task's role gets no credentials", "role_type", role.roleType, "role_arn", role.arn, "error", err)
		}
	}
	return nil
}

// Hold holds a task whose containers get role credentials from the task endpoint (the task role's,
// or the execution role's for an awslogs driver) while Route says the endpoint is out of reach.
func (f endpointFeature) Hold(r *Run) (string, <-chan struct{}) {
	t := r.Task()
	if f.cfg.Route == nil {
		return "", nil
	}
	awslogs := t.ExecutionCredentialsID != "" &&
		slices.ContainsFunc(t.Containers, func(c *task.Container) bool { return awslogsWithExecutionRole(f.awslogsExecutionRole, c) })
	if !injectsCredentials(t, f.cfg) && !awslogs {
		return "", nil
	}
	return f.cfg.Route.Missing()
}

// BeforeCreate adds the task endpoint's variables to c's environment and, when c's awslogs driver
// uses the task's execution role, the endpoint Docker asks for its credentials.
func (f endpointFeature) BeforeCreate(_ context.Context, r *Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	t := r.Task()
	opts.Config.Env = endpointEnv(t, c, f.cfg, opts.Config.Env)
	if awslogsWithExecutionRole(f.awslogsExecutionRole, c) && t.ExecutionCredentialsID != "" {
		// Docker's awslogs driver asks the task endpoint (169.254.170.2) for the role's credentials.
		setLogOptions(opts.HostConfig, map[string]string{"awslogs-credentials-endpoint": "/v2/credentials/" + t.ExecutionCredentialsID})
	}
	return nil
}

// BeforeStop does nothing: the containers still run, and may still need their credentials.
func (endpointFeature) BeforeStop(context.Context, *Run, []*task.Container) {}

// Stopped has the role provider stop refreshing the task's credentials: nothing of the task runs to
// use new ones.
func (f endpointFeature) Stopped(_ context.Context, r *Run) {
	if f.cfg.Roles != nil {
		f.cfg.Roles.Stop(r.Task().Arn)
	}
}

// Cleanup stops the role provider's keeping of the task's credentials.
func (f endpointFeature) Cleanup(_ context.Context, r *Run) {
	if f.cfg.Roles != nil {
		f.cfg.Roles.Remove(r.Task().Arn)
	}
}

// awslogsWithExecutionRole reports whether c's awslogs driver gets the task's execution-role
// credentials: the container asks for them (LogsAuthExecutionRole) and the operator allowed it
// (allowed: Config.AWSLogsExecutionRole).
func awslogsWithExecutionRole(allowed bool, c *task.Container) bool {
	return allowed && c.LogsAuthExecutionRole && c.LogConfiguration != nil && c.LogConfiguration.LogDriver == "awslogs"
}

// LogDriverRole returns the execution role of the task whose execution-role credentials have this
// ID, when the task is not stopped and one of its containers' awslogs driver uses them
// (awslogsWithExecutionRole).
func (e *Engine) LogDriverRole(credentialsID string) (roleArn string, ok bool) {
	if credentialsID == "" {
		return "", false
	}
	for _, t := range e.Tasks() {
		if t.ExecutionCredentialsID != credentialsID || t.KnownStatus == task.TaskStopped {
			continue
		}
		for _, c := range t.Containers {
			if awslogsWithExecutionRole(e.cfg.AWSLogsExecutionRole, c) {
				return t.ExecutionRoleArn, true
			}
		}
	}
	return "", false
}

// ByCredentialsID returns a copy of the task, restored from the saved state or added since and not
// yet removed, whose task role or execution role credentials ID is id. The task endpoint asks it to
// tell credentials that have not arrived yet (after a restart, until the control plane sends them
// again) from an ID no task holds.
func (e *Engine) ByCredentialsID(id string) (*task.Task, bool) {
	if id == "" {
		return nil, false
	}
	for w, t := range e.snaps() {
		if t.CredentialsID == id || t.ExecutionCredentialsID == id {
			return w.snapshot(), true
		}
	}
	return nil, false
}

// ByToken returns a copy of the task, and the name of its container, whose metadata token is token.
func (e *Engine) ByToken(token string) (*task.Task, string, bool) {
	if token == "" {
		return nil, "", false
	}
	e.mu.Lock()
	w, ok := e.tokens[token]
	ok = ok && w.listed
	e.mu.Unlock()
	if !ok {
		return nil, "", false
	}
	t := w.snapshot()
	for _, c := range t.Containers {
		if c.MetadataToken == token {
			return t, c.Name, true
		}
	}
	return nil, "", false
}

// endpointEnv returns the variables that tell a container where the task endpoint is, merged into
// the definition's environment env: the metadata URIs and the agent API's (ECS_AGENT_URI) for every
// container and, for a task with a role, the credentials URI and region. The endpoint's variables replace the definition's of the same
// name; the region only fills in.
func endpointEnv(t *task.Task, c *task.Container, cfg TaskEndpointConfig, env []string) []string {
	if cfg.URL == "" || c.Pause {
		return env
	}
	set := func(name, value string) {
		for i, kv := range env {
			if len(kv) > len(name) && kv[len(name)] == '=' && kv[:len(name)] == name {
				env[i] = name + "=" + value
				return
			}
		}
		env = append(env, name+"="+value)
	}
	has := func(name string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return len(kv) > len(name) && kv[len(name)] == '=' && kv[:len(name)] == name })
	}
	if c.MetadataToken != "" {
		set("ECS_CONTAINER_METADATA_URI", cfg.URL+"/v3/"+c.MetadataToken)
		set("ECS_CONTAINER_METADATA_URI_V4", cfg.URL+"/v4/"+c.MetadataToken)
		// The agent API (task scale-in protection), under the same token, as the ECS agent gives
		// every task's containers (task.go, initializeContainersV1AgentAPIEndpoint).
		set("ECS_AGENT_URI", cfg.URL+"/api/"+c.MetadataToken)
	}
	if !injectsCredentials(t, cfg) {
		return env
	}
	set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/"+t.CredentialsID)
	if cfg.Region != "" {
		for _, name := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
			if !has(name) {
				env = append(env, name+"="+cfg.Region)
			}
		}
	}
	return env
}

// injectsCredentials reports whether t's containers get AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: t has
// a task role, task roles are enabled, and t is not a host-network task unless those are enabled too.
func injectsCredentials(t *task.Task, cfg TaskEndpointConfig) bool {
	return cfg.Credentials && t.CredentialsID != "" && (t.NetworkMode != task.NetworkHost || cfg.HostNetwork)
}

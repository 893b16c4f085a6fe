package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/registryauth"
	"github.com/berth-agent/berth/agent/task"
)

// namedAuth is an AuthSource that says who it is, and refuses when err is set.
type namedAuth struct {
	name string
	err  error
}

var _ dockerclient.AuthSource = namedAuth{}

func (a namedAuth) Auth(context.Context, string) (docker.AuthConfiguration, error) {
	return docker.AuthConfiguration{Username: a.name}, a.err
}

func (namedAuth) Invalidate(string) {}

// fakeExecutionRoleAuth records the roles asked for and the tasks forgotten.
type fakeExecutionRoleAuth struct {
	refuse bool // sources refuse, as when the role's credentials are missing

	mu      sync.Mutex
	roles   []registryauth.ExecutionRole
	removed []string
}

var _ ExecutionRoleAuth = (*fakeExecutionRoleAuth)(nil)

func (f *fakeExecutionRoleAuth) For(role registryauth.ExecutionRole) registryauth.AuthSource {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roles = append(f.roles, role)
	a := namedAuth{name: "execution-role " + role.RoleArn}
	if f.refuse {
		a.err = errdefs.New(errdefs.ErrUnauthorized, fmt.Sprintf("cannot pull ECR image with execution role %s: credentials not found", role.RoleArn))
	}
	return a
}

func (f *fakeExecutionRoleAuth) TaskRemoved(taskArn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, taskArn)
}

func (f *fakeExecutionRoleAuth) state() ([]registryauth.ExecutionRole, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.roles), slices.Clone(f.removed)
}

const (
	ecrImage = "012345678901.dkr.ecr.us-west-2.amazonaws.com/app:1"
	execRole = "arn:aws:iam::012345678901:role/exec"
)

// execTask is a task with an execution role whose "app" container asks for it and whose "side"
// container does not.
func execTask(arn string) *task.Task {
	tk := newTask(arn, ctr("app", func(c *task.Container) {
		c.Image = ecrImage
		c.ECRAuth = &task.ECRAuth{UseExecutionRole: true, Region: "us-west-2", RegistryID: "012345678901", EndpointOverride: "https://ecr.example"}
	}), ctr("side"))
	tk.ExecutionRoleArn = execRole
	tk.ExecutionCredentialsID = "0123456789abcdef0123456789abcdef"
	return tk
}

// TestPullWithExecutionRole: the container that asks for the execution role is pulled with the
// role's credentials source, the other with the agent's own, and the role's tokens are forgotten
// when the task is cleaned up.
func TestPullWithExecutionRole(t *testing.T) {
	roles := &fakeExecutionRoleAuth{}
	cfg := testConfig()
	cfg.CleanupWait = 0
	cfg.ExecutionRoleAuth = roles
	h := newHarness(t, cfg, func(h *harness) { h.auth = namedAuth{name: "host"} })

	tk := execTask("arn:aws:ecs:r:1:task/c/exec")
	h.add(tk)
	h.waitStatus(tk.Arn, task.TaskRunning)

	assert.Equal(t, namedAuth{name: "execution-role " + execRole}, h.puller.authOf(ecrImage))
	assert.Equal(t, namedAuth{name: "host"}, h.puller.authOf(ctr("side").Image))
	asked, _ := roles.state()
	assert.Equal(t, []registryauth.ExecutionRole{{TaskArn: tk.Arn, RoleArn: execRole, CredentialsID: tk.ExecutionCredentialsID,
		Region: "us-west-2", RegistryID: "012345678901", EndpointOverride: "https://ecr.example"}}, asked)

	require.NoError(t, h.engine.StopTask(context.Background(), tk.Arn, "done"))
	require.True(t, pollUntil(func() bool { _, removed := roles.state(); return slices.Contains(removed, tk.Arn) }),
		"the role's tokens are forgotten at cleanup")
}

// Without ExecutionRoleAuth (berth pull, tests) every pull uses the agent's own credentials.
func TestPullWithoutExecutionRoleAuth(t *testing.T) {
	h := newHarness(t, testConfig(), func(h *harness) { h.auth = namedAuth{name: "host"} })
	tk := execTask("arn:aws:ecs:r:1:task/c/noexec")
	h.add(tk)
	h.waitStatus(tk.Arn, task.TaskRunning)
	assert.Equal(t, namedAuth{name: "host"}, h.puller.authOf(ecrImage))
}

// A pull whose execution role credentials are refused stops the task with a reason naming the
// container, the image and the role.
func TestPullWithExecutionRoleRefused(t *testing.T) {
	cfg := testConfig()
	cfg.ExecutionRoleAuth = &fakeExecutionRoleAuth{refuse: true}
	h := newHarness(t, cfg, func(h *harness) { h.auth = namedAuth{name: "host"} })
	tk := execTask("arn:aws:ecs:r:1:task/c/refused")
	h.add(tk)
	stopped := h.waitStatus(tk.Arn, task.TaskStopped)
	for _, want := range []string{"container app", "CannotPullContainerError", ecrImage, execRole} {
		assert.Contains(t, stopped.StoppedReason, want)
	}
	assert.True(t, strings.Contains(stopped.Container("app").Reason, execRole), stopped.Container("app").Reason)
	assert.Empty(t, h.creates(), "nothing is created")
}

package taskendpoint_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// fakeHolders is a CredentialsTasks over fixed tasks, by credentials ID.
type fakeHolders map[string]*task.Task

var _ taskendpoint.CredentialsTasks = fakeHolders(nil)

func (f fakeHolders) ByCredentialsID(id string) (*task.Task, bool) {
	t, ok := f[id]
	if !ok {
		return nil, false
	}
	return t.Clone(), true
}

const (
	pendingID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0" // a restored task's, not sent again yet
	stoppedID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d" // a stopped task's task role
	execID    = "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a" // a restored task's execution role
	// pendingExecOther is the execution role of a task no log driver uses the role of.
	pendingExecOther = "7e6d5c4b-3a29-4817-9605-f4e3d2c1b0a9"
	hostAddr         = "10.0.0.1:40000" // the host's own address, as the Docker daemon asks
)

// Hand-written from the ECS agent's answers (ecs-agent/tmds/handlers/credentials_handler_test.go).
const (
	bodyOK = `{"RoleArn":"arn:aws:iam::012345678901:role/web","AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` +
		secretKey + `","Token":"` + sessionToken + `","Expiration":"2026-12-01T01:32:25Z"}`
	bodyV1NoID          = `{"code":"NoIdInRequest","message":"CredentialsV1Request: No Credential ID in the request","HTTPErrorCode":400}`
	bodyV2NoID          = `{"code":"NoIdInRequest","message":"CredentialsV2Request: No Credential ID in the request","HTTPErrorCode":400}`
	bodyV1NotFound      = `{"code":"InvalidIdInRequest","message":"CredentialsV1Request: Credentials not found","HTTPErrorCode":400}`
	bodyV2NotFound      = `{"code":"InvalidIdInRequest","message":"CredentialsV2Request: Credentials not found","HTTPErrorCode":400}`
	bodyV1Uninitialized = `{"code":"CredentialsUninitialized","message":"CredentialsV1Request: Credentials uninitialized for ID","HTTPErrorCode":503}`
	bodyV2Uninitialized = `{"code":"CredentialsUninitialized","message":"CredentialsV2Request: Credentials uninitialized for ID","HTTPErrorCode":503}`
	bodyInternal        = `{"code":"InternalServerError","message":"Internal server error","HTTPErrorCode":500}`
)

// holders are the tasks the handler is told hold credentials IDs: a restored running task whose
// credentials have not arrived, and a stopped one whose have.
func holders() fakeHolders {
	restored := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/restored", KnownStatus: task.TaskRunning,
		CredentialsID: pendingID, ExecutionCredentialsID: execID}
	stopped := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/stopped", KnownStatus: task.TaskStopped,
		CredentialsID: stoppedID}
	other := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/other", KnownStatus: task.TaskRunning,
		ExecutionCredentialsID: pendingExecOther}
	return fakeHolders{pendingID: restored, execID: restored, stoppedID: stopped, pendingExecOther: other}
}

// credentialsEnv is newEnv with the holders, a stopped task's credentials still in the source, a
// role being assumed, a role STS refuses, and the host's log driver credentials; then mutate.
func credentialsEnv(t *testing.T, mutate ...func(*taskendpoint.Config)) *env {
	return newEnv(t, append([]func(*taskendpoint.Config){func(c *taskendpoint.Config) {
		src := c.Credentials.(*fakeCredentials)
		src.creds[stoppedID] = taskcreds.Credentials{AccessKeyID: "ASIASTOPPED"}
		src.errs = map[string]error{
			"assuming-id": fmt.Errorf("task role credentials are not ready: %w", errdefs.ErrUnavailable),
			"refused-id":  fmt.Errorf("STS refused to assume the role: AccessDenied: %w", errdefs.ErrUnauthorized),
		}
		c.CredentialsTasks = holders()
		c.LogDriverCredentials = &fakeCredentials{creds: map[string]taskcreds.Credentials{"exec-id": {AccessKeyID: "exec-key"}},
			errs: map[string]error{execID: fmt.Errorf("not arrived: %w", errdefs.ErrUnavailable)}}
		c.HostAddress = func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.0.0.1") }
	}}, mutate...)...)
}

// TestCredentials holds every answer of the two credentials endpoints to the byte.
func TestCredentials(t *testing.T) {
	tests := []struct {
		name, path, from string
		wantStatus       int
		wantBody         string
	}{
		{"v2", "/v2/credentials/" + credsID, fromWeb, http.StatusOK, bodyOK},
		{"v1", "/v1/credentials?id=" + credsID, fromWeb, http.StatusOK, bodyOK},
		{"v1 first id", "/v1/credentials?id=" + credsID + "&id=other", fromWeb, http.StatusOK, bodyOK},
		{"v2 unknown", "/v2/credentials/nope", fromWeb, http.StatusBadRequest, bodyV2NotFound},
		{"v1 unknown", "/v1/credentials?id=nope", fromWeb, http.StatusBadRequest, bodyV1NotFound},
		{"v2 ID with a slash", "/v2/credentials/" + credsID + "/x", fromWeb, http.StatusBadRequest, bodyV2NotFound},
		{"v2 without an ID", "/v2/credentials/", fromWeb, http.StatusBadRequest, bodyV2NoID},
		{"v1 without an ID", "/v1/credentials", fromWeb, http.StatusBadRequest, bodyV1NoID},
		{"v1 with an empty ID", "/v1/credentials?id=", fromWeb, http.StatusBadRequest, bodyV1NoID},
		{"v2 pending", "/v2/credentials/" + pendingID, fromWeb, http.StatusServiceUnavailable, bodyV2Uninitialized},
		{"v1 pending", "/v1/credentials?id=" + pendingID, fromWeb, http.StatusServiceUnavailable, bodyV1Uninitialized},
		{"v2 being assumed", "/v2/credentials/assuming-id", fromWeb, http.StatusServiceUnavailable, bodyV2Uninitialized},
		{"v1 being assumed", "/v1/credentials?id=assuming-id", fromWeb, http.StatusServiceUnavailable, bodyV1Uninitialized},
		{"v2 refused", "/v2/credentials/refused-id", fromWeb, http.StatusInternalServerError, bodyInternal},
		{"v1 refused", "/v1/credentials?id=refused-id", fromWeb, http.StatusInternalServerError, bodyInternal},
		{"v2 stopped task's task role", "/v2/credentials/" + stoppedID, fromWeb, http.StatusBadRequest, bodyV2NotFound},
		{"v1 stopped task's task role", "/v1/credentials?id=" + stoppedID, fromWeb, http.StatusBadRequest, bodyV1NotFound},
		{"v2 execution role pending, the host asks", "/v2/credentials/" + execID, hostAddr, http.StatusServiceUnavailable, bodyV2Uninitialized},
		{"v2 execution role pending, a container asks", "/v2/credentials/" + execID, fromWeb, http.StatusBadRequest, bodyV2NotFound},
		// A task's execution role the host's log driver does not use: the credentials are the agent's.
		{"v2 execution role of no log driver, the host asks", "/v2/credentials/" + pendingExecOther, hostAddr, http.StatusBadRequest, bodyV2NotFound},
	}
	e := credentialsEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := e.get(tt.path, tt.from)
			assert.Equal(t, tt.wantStatus, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, tt.wantBody, rec.Body.String())
		})
	}
}

// TestCredentialsV2WithoutSlash: /v2/credentials is no route of the ECS agent's (its v2 route is
// /v2/credentials/{id:.*}), so it is Go's 404.
func TestCredentialsV2WithoutSlash(t *testing.T) {
	rec := credentialsEnv(t).get("/v2/credentials", fromWeb)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "404 page not found\n", rec.Body.String())
}

func TestCredentialsWithoutSources(t *testing.T) {
	e := newEnv(t, func(c *taskendpoint.Config) { c.Credentials = nil })
	rec := e.get("/v2/credentials/"+credsID, fromWeb)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, bodyV2NotFound, rec.Body.String(), "no credentials source: every ID is unknown")
	rec = e.get("/v2/credentials/"+pendingID, fromWeb)
	assert.Equal(t, bodyV2NotFound, rec.Body.String(), "no CredentialsTasks: no ID is pending")
}

func TestCredentialsForTheLogDriver(t *testing.T) {
	e := credentialsEnv(t)
	rec := e.get("/v2/credentials/exec-id", hostAddr)
	assert.Equal(t, http.StatusOK, rec.Code, "the Docker daemon, from the host, gets them")
	assert.Equal(t, `{"RoleArn":"","AccessKeyId":"exec-key","SecretAccessKey":"","Token":""}`, rec.Body.String())
	for _, from := range []string{fromWeb, fromAWSVPC} {
		rec = e.get("/v2/credentials/exec-id", from)
		assert.Equal(t, http.StatusBadRequest, rec.Code, "a container at %s does not", from)
		assert.Equal(t, bodyV2NotFound, rec.Body.String())
	}
}

// TestCredentialsWithoutExpiration: the field is left out rather than sent empty, which the AWS SDK
// for Go v2 could not parse as a time.
func TestCredentialsWithoutExpiration(t *testing.T) {
	e := newEnv(t, func(c *taskendpoint.Config) {
		c.Credentials = &fakeCredentials{creds: map[string]taskcreds.Credentials{"x": {AccessKeyID: "a"}}}
	})
	rec := e.get("/v2/credentials/x", fromWeb)
	assert.Equal(t, `{"RoleArn":"","AccessKeyId":"a","SecretAccessKey":"","Token":""}`, rec.Body.String())
}

// TestCredentialsAfterRestart runs the agent's own store and chain behind the handler: a restored
// task's ID is 503 until the control plane sends its credentials, they are then served (past their
// expiration too) until replaced, and the ID is unknown once the task is removed.
func TestCredentialsAfterRestart(t *testing.T) {
	const arn = "arn:aws:ecs:us-west-2:012345678901:task/prod/restored"
	store := taskcreds.NewStore()
	tasks := holders()
	e := newEnv(t, func(c *taskendpoint.Config) {
		c.Credentials = taskcreds.NewChain(taskcreds.ChainConfig{Store: store})
		c.CredentialsTasks = tasks
	})
	path := "/v2/credentials/" + pendingID
	rec := e.get(path, fromWeb)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, bodyV2Uninitialized, rec.Body.String())

	expired := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, store.Put(arn, taskcreds.RoleTypeTaskApplication, pendingID, taskcreds.Credentials{
		RoleArn: "arn:aws:iam::012345678901:role/web", AccessKeyID: "ASIAOLD", SecretAccessKey: "old-secret",
		SessionToken: "old-token", Expiration: expired}))
	rec = e.get(path, fromWeb)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, `{"RoleArn":"arn:aws:iam::012345678901:role/web","AccessKeyId":"ASIAOLD","SecretAccessKey":"old-secret",`+
		`"Token":"old-token","Expiration":"2020-01-02T03:04:05Z"}`, rec.Body.String(), "served past their expiration")

	require.NoError(t, store.Put(arn, taskcreds.RoleTypeTaskApplication, pendingID, taskcreds.Credentials{
		RoleArn: "arn:aws:iam::012345678901:role/web", AccessKeyID: "ASIANEW", SecretAccessKey: "new-secret",
		SessionToken: "new-token", Expiration: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}))
	rec = e.get("/v1/credentials?id="+pendingID, fromWeb)
	assert.Equal(t, `{"RoleArn":"arn:aws:iam::012345678901:role/web","AccessKeyId":"ASIANEW","SecretAccessKey":"new-secret",`+
		`"Token":"new-token","Expiration":"2030-01-02T03:04:05Z"}`, rec.Body.String(), "until the control plane replaces them")

	store.TaskRemoved(arn)
	delete(tasks, pendingID)
	rec = e.get(path, fromWeb)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, bodyV2NotFound, rec.Body.String(), "gone with the task")
}

// TestCredentialsMethods: the credentials routes are read with GET only; any other method is 405.
func TestCredentialsMethods(t *testing.T) {
	e := credentialsEnv(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead} {
		for _, p := range []string{"/v2/credentials/" + credsID, "/v1/credentials?id=" + credsID} {
			rec := e.do(m, p, fromWeb)
			assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, "%s %s", m, p)
			assert.Equal(t, "GET", rec.Header().Get("Allow"))
			assert.NotContains(t, rec.Body.String(), secretKey)
		}
	}
}

// TestRateLimitPerCredentialsID: credentials requests are counted per credentials ID of a task the
// agent holds, so a local process that floods the endpoint from the host's address (with unknown
// IDs, unknown tokens or v2) spends its own budget, not a host-network task's credentials nor the
// Docker awslogs driver's; an ID nobody holds counts against its source address.
func TestRateLimitPerCredentialsID(t *testing.T) {
	hostTask := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/host", NetworkMode: task.NetworkHost,
		KnownStatus: task.TaskRunning, CredentialsID: credsID}
	e := credentialsEnv(t, func(c *taskendpoint.Config) {
		c.RateLimit = taskendpoint.RateLimit{Steady: 1, Burst: 2}
		hs := holders()
		hs[credsID] = hostTask
		hs["exec-id"] = &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/logs", KnownStatus: task.TaskRunning,
			ExecutionCredentialsID: "exec-id"}
		c.CredentialsTasks = hs
	})
	for _, p := range []string{"/v2/credentials/unknown-1", "/v1/credentials?id=unknown-2", "/v4/no-such-token", "/v2/metadata"} {
		e.get(p, hostAddr)
	}
	rec := e.get("/v2/credentials/unknown-3", hostAddr)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the flooder's own budget is spent")
	assert.Equal(t, "You have reached maximum request limit.", rec.Body.String())
	assert.Equal(t, "1.00", rec.Header().Get("X-Rate-Limit-Limit"))
	assert.Equal(t, "1", rec.Header().Get("X-Rate-Limit-Duration"))

	for _, p := range []string{"/v2/credentials/" + credsID, "/v1/credentials?id=" + credsID} {
		assert.Equal(t, http.StatusOK, e.get(p, hostAddr).Code, "the host-network task still gets its credentials: %s", p)
	}
	assert.Equal(t, http.StatusOK, e.get("/v2/credentials/exec-id", hostAddr).Code, "and the awslogs driver its own")

	// The ID's budget is its own: spent, it is 429 whoever asks, until it refills.
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v2/credentials/"+credsID, hostAddr).Code)
	e.clock.Advance(time.Second)
	assert.Equal(t, http.StatusOK, e.get("/v2/credentials/"+credsID, hostAddr).Code)
}

// Credentials IDs of the binding tests' tasks, each with credentials in the source unless said.
const (
	awsvpcCredsID   = "1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b"
	hostCredsID     = "2c3d4e5f-6071-4829-9bac-1d2e3f4a5b6c"
	startingCredsID = "3d4e5f60-7182-493a-acbd-2e3f4a5b6c7d"
	orphanCredsID   = "4e5f6071-8293-4a4b-bdce-3f4a5b6c7d8e" // in the source, held by no task
	bindPendingID   = "5f607182-93a4-4b5c-8edf-4a5b6c7d8e9f" // held by a running task, not arrived
	fromSecond      = "172.17.0.4:41234"                     // a running container of another task
	fromInheritor   = "172.17.0.3:41234"                     // the bridge task's stopped job had it
)

// bindEnv is newEnv with credentials bound to their task (bind) and the tasks that hold the IDs: the
// bridge and awsvpc fixtures, a host-network task, a task starting its container, a task whose
// credentials have not arrived, and a second bridge task whose container is at 172.17.0.4; then mutate.
func bindEnv(t *testing.T, bind bool, mutate ...func(*taskendpoint.Config)) *env {
	running := func(name, addr string) *task.Container {
		return &task.Container{Name: name, DockerID: name + "-id", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning,
			Networks: []task.Network{{Mode: "bridge", IPv4Addresses: []string{addr}}}}
	}
	bridge, awsvpc := bridgeTask(), awsvpcTask()
	bridge.CredentialsID, awsvpc.CredentialsID = credsID, awsvpcCredsID
	host := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/host", NetworkMode: task.NetworkHost,
		KnownStatus: task.TaskRunning, CredentialsID: hostCredsID,
		Containers: []*task.Container{{Name: "agent", DockerID: "host-id", KnownStatus: task.ContainerRunning, Networks: []task.Network{{Mode: "host"}}}}}
	starting := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/starting", NetworkMode: task.NetworkBridge,
		KnownStatus: task.TaskCreated, CredentialsID: startingCredsID,
		Containers: []*task.Container{{Name: "app", DockerID: "starting-id", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerCreated}}}
	pending := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/pending", NetworkMode: task.NetworkBridge,
		KnownStatus: task.TaskRunning, CredentialsID: bindPendingID, Containers: []*task.Container{running("app", "172.17.0.5")}}
	second := &task.Task{Arn: "arn:aws:ecs:us-west-2:012345678901:task/prod/second", NetworkMode: task.NetworkBridge,
		KnownStatus: task.TaskRunning, CredentialsID: "6071", Containers: []*task.Container{running("probe", "172.17.0.4")}}
	return credentialsEnv(t, func(c *taskendpoint.Config) {
		src := c.Credentials.(*fakeCredentials)
		for _, id := range []string{awsvpcCredsID, hostCredsID, startingCredsID, orphanCredsID} {
			src.creds[id] = src.creds[credsID]
		}
		c.Tasks.(*fakeTasks).tasks = append(c.Tasks.(*fakeTasks).tasks, second)
		hs := c.CredentialsTasks.(fakeHolders)
		for _, tk := range []*task.Task{bridge, awsvpc, host, starting, pending, second} {
			hs[tk.CredentialsID] = tk
		}
		c.BindCredentials = bind
	}, func(c *taskendpoint.Config) {
		for _, m := range mutate {
			m(c)
		}
	})
}

// TestCredentialsBoundToTheirTask: with ECS_TASK_CREDENTIALS_BIND_TO_TASK, a bridge or awsvpc task's
// credentials are answered to its own containers and to the host; a container of another task (or
// one that inherited a stopped container's address) that has the ID is told exactly what the ECS
// agent tells an ID nobody holds, and the operator is told once a minute. Host-network tasks' are
// answered as the ECS agent does.
func TestCredentialsBoundToTheirTask(t *testing.T) {
	tests := []struct {
		name, path, from string
		wantStatus       int
		wantBody         string
	}{
		{"the owner, v2", "/v2/credentials/" + credsID, fromWeb, http.StatusOK, bodyOK},
		{"the owner, v1", "/v1/credentials?id=" + credsID, fromWeb, http.StatusOK, bodyOK},
		{"the awsvpc owner, from its task-bridge address", "/v2/credentials/" + awsvpcCredsID, fromAWSVPC, http.StatusOK, bodyOK},
		{"the awsvpc owner, from its ENI address", "/v2/credentials/" + awsvpcCredsID, "10.0.2.61:50000", http.StatusOK, bodyOK},
		{"another task's container, v2", "/v2/credentials/" + credsID, fromSecond, http.StatusBadRequest, bodyV2NotFound},
		{"another task's container, v1", "/v1/credentials?id=" + credsID, fromSecond, http.StatusBadRequest, bodyV1NotFound},
		{"the heir of a stopped container's address", "/v2/credentials/" + credsID, fromInheritor, http.StatusBadRequest, bodyV2NotFound},
		{"an awsvpc task's ID from a bridge container", "/v2/credentials/" + awsvpcCredsID, fromWeb, http.StatusBadRequest, bodyV2NotFound},
		{"an address no task has", "/v2/credentials/" + credsID, fromNobody, http.StatusBadRequest, bodyV2NotFound},
		{"the host", "/v2/credentials/" + credsID, hostAddr, http.StatusOK, bodyOK},
		{"the host, an awsvpc task's ID", "/v1/credentials?id=" + awsvpcCredsID, hostAddr, http.StatusOK, bodyOK},
		{"a host-network task, from the host", "/v2/credentials/" + hostCredsID, hostAddr, http.StatusOK, bodyOK},
		{"a host-network task's ID, from a container", "/v2/credentials/" + hostCredsID, fromSecond, http.StatusOK, bodyOK},
		{"not arrived, the owner", "/v2/credentials/" + bindPendingID, "172.17.0.5:41234", http.StatusServiceUnavailable, bodyV2Uninitialized},
		{"not arrived, another task's container", "/v2/credentials/" + bindPendingID, fromSecond, http.StatusBadRequest, bodyV2NotFound},
		{"held by no task, a container", "/v2/credentials/" + orphanCredsID, fromWeb, http.StatusBadRequest, bodyV2NotFound},
		{"held by no task, the host", "/v2/credentials/" + orphanCredsID, hostAddr, http.StatusOK, bodyOK},
		{"a container Docker is starting, its address not read yet", "/v2/credentials/" + startingCredsID, "172.17.0.6:41234", http.StatusServiceUnavailable, bodyV2Uninitialized},
		{"an ID nobody holds", "/v2/credentials/nope", fromWeb, http.StatusBadRequest, bodyV2NotFound},
	}
	e := bindEnv(t, true)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := e.get(tt.path, tt.from)
			assert.Equal(t, tt.wantStatus, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, tt.wantBody, rec.Body.String())
		})
	}
	logged := e.log.String()
	assert.Regexp(t, `level=warn time=\S+ msg="task endpoint request refused`, logged)
	assert.Contains(t, logged, "reason=credentials_not_the_tasks_address credentials_id="+credsID[:8]+" task_arn="+bridgeARN+" source=172.17.0.4")
	assert.NotContains(t, logged, credsID, "the ID is logged by its first characters only")
}

// TestCredentialsBindingOff: ECS_TASK_CREDENTIALS_BIND_TO_TASK=false answers anyone with the ID, as
// the ECS agent does.
func TestCredentialsBindingOff(t *testing.T) {
	e := bindEnv(t, false)
	for _, from := range []string{fromWeb, fromSecond, fromInheritor, fromNobody, hostAddr} {
		rec := e.get("/v2/credentials/"+credsID, from)
		assert.Equal(t, http.StatusOK, rec.Code, from)
		assert.Equal(t, bodyOK, rec.Body.String(), from)
	}
	assert.Equal(t, bodyOK, e.get("/v2/credentials/"+orphanCredsID, fromWeb).Body.String())
	assert.Equal(t, bodyV2Uninitialized, e.get("/v2/credentials/"+bindPendingID, fromSecond).Body.String())
}

// TestRefusedStrangersSpendTheirOwnBudget: a container refused another task's credentials counts
// against its own address, so it cannot throttle the owner by asking with the owner's ID.
func TestRefusedStrangersSpendTheirOwnBudget(t *testing.T) {
	e := bindEnv(t, true, func(c *taskendpoint.Config) { c.RateLimit = taskendpoint.RateLimit{Steady: 1, Burst: 2} })
	for range 5 {
		e.get("/v2/credentials/"+credsID, fromSecond)
	}
	assert.Equal(t, http.StatusTooManyRequests, e.get("/v2/credentials/"+credsID, fromSecond).Code)
	assert.Equal(t, http.StatusOK, e.get("/v2/credentials/"+credsID, fromWeb).Code, "the owner's budget is untouched")
	assert.Equal(t, http.StatusOK, e.get("/v2/credentials/"+credsID, fromWeb).Code)
}

// TestCredentialsWhileAContainerRestarts: a container restarted in place may come back with a new
// address the engine has not read yet; until it has, a request from an address not the task's is
// answered 503, which SDKs retry, and once it has, the new address is the task's.
func TestCredentialsWhileAContainerRestarts(t *testing.T) {
	restarted := bridgeTask()
	restarted.CredentialsID = credsID
	web := restarted.Containers[0]
	web.RestartCount, web.RestartedAt = 1, web.StartedAt.Add(time.Minute)
	e := credentialsEnv(t, func(c *taskendpoint.Config) {
		c.CredentialsTasks.(fakeHolders)[credsID] = restarted
		c.BindCredentials = true
	})
	rec := e.get("/v2/credentials/"+credsID, "172.17.0.8:41234")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, bodyV2Uninitialized, rec.Body.String())

	web.StartedAt, web.Networks = web.RestartedAt.Add(time.Second), []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.8"}}}
	assert.Equal(t, bodyOK, e.get("/v2/credentials/"+credsID, "172.17.0.8:41234").Body.String(), "read back: the new address is the task's")
	assert.Equal(t, bodyV2NotFound, e.get("/v2/credentials/"+credsID, fromWeb).Body.String(), "and the old one no longer is")
}

// TestCredentialsBeforeTheAddressIsReadBack: Docker starts a container's process before the engine
// has read its address back from Docker; a running bridge container without a recorded address
// makes its task's credentials due (503, which SDKs retry), not refused — the SDK of a container
// asking at once must not get a final 400.
func TestCredentialsBeforeTheAddressIsReadBack(t *testing.T) {
	fresh := bridgeTask()
	fresh.CredentialsID = credsID
	web := fresh.Containers[0]
	web.Networks = nil
	e := credentialsEnv(t, func(c *taskendpoint.Config) {
		c.CredentialsTasks.(fakeHolders)[credsID] = fresh
		c.BindCredentials = true
	})
	rec := e.get("/v2/credentials/"+credsID, "172.17.0.9:41234")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, bodyV2Uninitialized, rec.Body.String())

	web.Networks = []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.9"}}}
	assert.Equal(t, bodyOK, e.get("/v2/credentials/"+credsID, "172.17.0.9:41234").Body.String(), "read back: the owner is answered")
	assert.Equal(t, bodyV2NotFound, e.get("/v2/credentials/"+credsID, fromWeb).Body.String(), "and a stranger refused")
}

// TestCredentialsBeforeTheContainerIsPublished: the engine publishes a container it created and
// started only once it has read it back, so its process may ask while the model still says it has
// not been created; its task's credentials are due then (503), not refused.
func TestCredentialsBeforeTheContainerIsPublished(t *testing.T) {
	fresh := bridgeTask()
	fresh.CredentialsID = credsID
	probe := &task.Container{Name: "probe", DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerPulled}
	fresh.Containers = append(fresh.Containers, probe)
	e := credentialsEnv(t, func(c *taskendpoint.Config) {
		c.CredentialsTasks.(fakeHolders)[credsID] = fresh
		c.BindCredentials = true
	})
	rec := e.get("/v2/credentials/"+credsID, "172.17.0.10:41234")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, bodyV2Uninitialized, rec.Body.String())
}

//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/introspection"
)

// scriptedACS stands in for Amazon ECS: the embedded control plane answers the ECS API, and the ACS
// websocket is the test's: it sends what the test puts on out, to the connection of the moment, and
// records every message ID the agent acknowledges.
type scriptedACS struct {
	cp       http.Handler
	out      chan acswire.Message
	upgrader websocket.Upgrader

	mu          sync.Mutex
	acks        []string
	connections []url.Values // each connection's query
}

func (s *scriptedACS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ws" {
		s.cp.ServeHTTP(w, r)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	s.mu.Lock()
	s.connections = append(s.connections, r.URL.Query())
	s.mu.Unlock()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			m, err := acswire.Decode(data)
			if err != nil {
				continue
			}
			s.mu.Lock()
			switch m := m.(type) {
			case *acswire.AckRequest:
				s.acks = append(s.acks, m.MessageID)
			case *acswire.IAMRoleCredentialsAckRequest:
				s.acks = append(s.acks, m.MessageID)
			}
			s.mu.Unlock()
		}
	}()
	for {
		select {
		case <-readDone: // the agent is gone: leave what comes next to its next connection
			return
		case m, ok := <-s.out:
			if !ok {
				return
			}
			frame, err := acswire.Encode(m)
			if err != nil || ws.WriteMessage(websocket.TextMessage, frame) != nil {
				return
			}
		}
	}
}

// lastConnection returns how many ACS connections the agent opened, and the last one's query.
func (s *scriptedACS) lastConnection() (int, url.Values) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.connections) == 0 {
		return 0, nil
	}
	return len(s.connections), s.connections[len(s.connections)-1]
}

func (s *scriptedACS) acked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.acks {
		if a == id {
			return true
		}
	}
	return false
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// endpointGet asks the task endpoint from the host, on its loopback address.
func endpointGet(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:51679" + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(body, &v), "%s", body)
	out, _ := v.(map[string]any) // error answers of the metadata endpoints are JSON strings
	return resp.StatusCode, out
}

// dockerInspect is what Docker says of a container.
func dockerInspect(t *testing.T, id string) *docker.Container {
	t.Helper()
	dc, err := docker.NewClientFromEnv()
	require.NoError(t, err)
	c, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: id})
	require.NoError(t, err)
	return c
}

// runContainer runs a throwaway container of the test image on the default bridge and returns its
// output and whether it exited 0.
func runContainer(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "--label", "berth-it=taskendpoint", testappImage}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err == nil
}

// TestIntegrationTaskRoleCredentialsECSMode runs a task whose ACS payload carries role credentials:
// the container is told where they are, a container on the bridge fetches them through
// 169.254.170.2, a refresh replaces them, execution-role credentials and unknown IDs are refused, the
// credentials are gone once the task is cleaned up, and no secret reaches the log or berth.db.
func TestIntegrationTaskRoleCredentialsECSMode(t *testing.T) {
	srv := standInECS(t, "us-east-1")
	standIn := &scriptedACS{cp: srv.Handler(), out: make(chan acswire.Message, 8)}
	t.Cleanup(func() { close(standIn.out) })
	addr := serveLoopback(t, standIn)

	arn := "arn:aws:ecs:us-east-1:000000000000:task/creds/" + randomHex(t, 16)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	first := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::000000000000:role/app",
		AccessKeyID: "ASIAFIRST" + randomHex(t, 4), SecretAccessKey: "secret-first-" + randomHex(t, 8), SessionToken: "token-first-" + randomHex(t, 8),
		Expiration: expires.Format(time.RFC3339)}
	execution := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::000000000000:role/exec",
		AccessKeyID: "ASIAEXEC" + randomHex(t, 4), SecretAccessKey: "secret-exec-" + randomHex(t, 8), SessionToken: "token-exec-" + randomHex(t, 8),
		Expiration: expires.Format(time.RFC3339)}
	standIn.out <- &acswire.PayloadMessage{MessageID: "payload-1", SeqNum: 1, Tasks: []*acswire.Task{{Arn: arn, Family: "creds", Version: "1",
		DesiredStatus: "RUNNING", Containers: []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16, Command: []string{"sleep"}}},
		RoleCredentials: &first, ExecutionRoleCredentials: &execution}}}

	env := newRecoveryEnv(t, buildBerth(t))
	logFile := filepath.Join(t.TempDir(), "berth.log")
	ecsMode := []string{"AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://" + addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "ECS_LOGFILE=" + logFile, "ECS_LOGLEVEL=debug",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1m"}
	agent := env.start(ecsMode...)
	tasks := agent.waitTasks(90*time.Second, "the task runs", familyRunning("creds", 1))
	require.True(t, standIn.acked("payload-1"), "the payload is acknowledged once its credentials are stored")

	// The container is told where its credentials are.
	var dockerID string
	for _, tk := range tasks {
		if tk.Family == "creds" {
			dockerID = tk.Containers[0].DockerID
		}
	}
	out, err := exec.Command("docker", "inspect", "--format", "{{json .Config.Env}}", dockerID).Output()
	require.NoError(t, err)
	var containerEnv []string
	require.NoError(t, json.Unmarshal(out, &containerEnv))
	assert.Contains(t, containerEnv, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/v2/credentials/"+first.CredentialsID)
	assert.Contains(t, containerEnv, "AWS_REGION=us-east-1")
	assert.Contains(t, containerEnv, "AWS_DEFAULT_REGION=us-east-1")

	// Containers reach the endpoint only through the redirect: it must be in place before one asks.
	require.NoError(t, hostnat.Check(context.Background(), hostnat.Config{HostNetwork: true}), "the NAT redirect is installed")
	// A container of no task reaches the endpoint there, and, the credentials being bound to their
	// task (ECS_TASK_CREDENTIALS_BIND_TO_TASK), gets the ECS agent's answer to an unknown ID.
	body, ok := runContainer(t, "health", "-url", "http://169.254.170.2/v2/credentials/"+first.CredentialsID)
	assert.False(t, ok, "a container of no task is refused the task's credentials: %s", body)
	assert.Contains(t, body, "answered 400 Bad Request", "an answer through 169.254.170.2, not a timeout")

	status, got := endpointGet(t, "/v2/credentials/"+first.CredentialsID)
	require.Equal(t, http.StatusOK, status, "%v", got)
	assert.Equal(t, map[string]any{"RoleArn": first.RoleArn, "AccessKeyId": first.AccessKeyID, "SecretAccessKey": first.SecretAccessKey,
		"Token": first.SessionToken, "Expiration": first.Expiration}, got)
	status, got = endpointGet(t, "/v1/credentials?id="+first.CredentialsID)
	require.Equal(t, http.StatusOK, status, "%v", got)
	assert.Equal(t, first.AccessKeyID, got["AccessKeyId"])

	status, got = endpointGet(t, "/v2/credentials/"+execution.CredentialsID)
	assert.Equal(t, http.StatusBadRequest, status, "execution-role credentials are the agent's own")
	assert.Equal(t, "InvalidIdInRequest", got["code"])
	status, got = endpointGet(t, "/v2/credentials/"+randomHex(t, 16))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, map[string]any{"code": "InvalidIdInRequest", "message": "CredentialsV2Request: Credentials not found", "HTTPErrorCode": float64(400)}, got)

	// A refresh replaces the credentials under the same ID.
	second := first
	second.AccessKeyID, second.SecretAccessKey, second.SessionToken = "ASIASECOND"+randomHex(t, 4), "secret-second-"+randomHex(t, 8), "token-second-"+randomHex(t, 8)
	standIn.out <- &acswire.IAMRoleCredentialsMessage{MessageID: "creds-2", TaskArn: arn, RoleType: acswire.RoleTypeTaskApplication, RoleCredentials: second}
	require.Eventually(t, func() bool {
		_, got := endpointGet(t, "/v2/credentials/"+first.CredentialsID)
		return got["AccessKeyId"] == second.AccessKeyID && standIn.acked("creds-2")
	}, 30*time.Second, 100*time.Millisecond, "the refresh is served and acknowledged")

	// An agent restart: the task keeps its credentials ID; as with the ECS agent, the credentials
	// themselves are in memory only: the endpoint answers 503 until ACS sends them, which the agent
	// asks for on its first connection (sendCredentials=true), and then serves them.
	agent.stop()
	connections, _ := standIn.lastConnection()
	agent = env.start(ecsMode...)
	require.Eventually(t, func() bool {
		n, q := standIn.lastConnection()
		return n > connections && q.Get("sendCredentials") == "true"
	}, 60*time.Second, 100*time.Millisecond, "the restarted agent asks ACS for credentials")
	status, got = endpointGet(t, "/v2/credentials/"+first.CredentialsID)
	assert.Equal(t, http.StatusServiceUnavailable, status, "not before ACS sent them")
	assert.Equal(t, map[string]any{"code": "CredentialsUninitialized", "message": "CredentialsV2Request: Credentials uninitialized for ID",
		"HTTPErrorCode": float64(503)}, got, "the ECS agent's answer while the credentials are due")
	third := first
	third.AccessKeyID, third.SecretAccessKey, third.SessionToken = "ASIATHIRD"+randomHex(t, 4), "secret-third-"+randomHex(t, 8), "token-third-"+randomHex(t, 8)
	standIn.out <- &acswire.IAMRoleCredentialsMessage{MessageID: "creds-3", TaskArn: arn, RoleType: acswire.RoleTypeTaskApplication, RoleCredentials: third}
	require.Eventually(t, func() bool {
		_, got := endpointGet(t, "/v2/credentials/"+first.CredentialsID)
		return got["AccessKeyId"] == third.AccessKeyID
	}, 30*time.Second, 100*time.Millisecond, "the restarted agent serves the credentials under the same ID")
	out, err = exec.Command("docker", "inspect", "--format", "{{.Id}} {{json .Config.Env}}", dockerID).Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/v2/credentials/"+first.CredentialsID, "the container was not recreated")

	// Stopped and cleaned up: the credentials are gone.
	standIn.out <- &acswire.PayloadMessage{MessageID: "payload-2", SeqNum: 2, Tasks: []*acswire.Task{{Arn: arn, Family: "creds", Version: "1",
		DesiredStatus: "STOPPED", Containers: []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16, Command: []string{"sleep"}}}}}}
	agent.waitTasks(60*time.Second, "the task stops", familyStopped("creds"))
	agent.waitTasks(3*time.Minute, "the task is cleaned up", func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Family == "creds" {
				return false
			}
		}
		return true
	})
	status, _ = endpointGet(t, "/v2/credentials/"+first.CredentialsID)
	assert.Equal(t, http.StatusBadRequest, status, "a cleaned-up task's credentials are gone")
	agent.stop()

	// No secret in the log or the state file.
	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	stateFile, err := os.ReadFile(filepath.Join(env.dataDir, "berth.db"))
	require.NoError(t, err)
	for _, secret := range []string{first.SecretAccessKey, first.SessionToken, second.SecretAccessKey, second.SessionToken,
		third.SecretAccessKey, third.SessionToken,
		execution.SecretAccessKey, execution.SessionToken, second.AccessKeyID} {
		assert.NotContains(t, string(logged), secret, "the log holds a secret")
		assert.NotContains(t, agent.out.String(), secret, "the console holds a secret")
		assert.False(t, bytes.Contains(stateFile, []byte(secret)), "berth.db holds a secret")
	}
	assert.True(t, strings.Contains(string(logged), "task endpoint"), "the log is the agent's")
}

// stsStandIn answers sts:AssumeRole in STS's query protocol: credentials for any role but the one it
// refuses (AccessDenied), each AccessKeyId it issued recorded.
type stsStandIn struct {
	refused string

	mu     sync.Mutex
	issued map[string]string // AccessKeyId → RoleArn
}

func (s *stsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "AssumeRole" {
		http.Error(w, "want AssumeRole", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	role := r.Form.Get("RoleArn")
	if role == s.refused || !strings.Contains(r.Header.Get("Authorization"), "Credential=AKIAHOSTHOSTHOST0000/") {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>`+
			`<Code>AccessDenied</Code><Message>User: host is not authorized to perform: sts:AssumeRole on resource: `+role+`</Message></Error>`+
			`<RequestId>denied</RequestId></ErrorResponse>`)
		return
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	key := "ASIALOCAL" + strings.ToUpper(hex.EncodeToString(b[:]))
	s.mu.Lock()
	s.issued[key] = role
	s.mu.Unlock()
	_, _ = io.WriteString(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult><Credentials>`+
		`<AccessKeyId>`+key+`</AccessKeyId><SecretAccessKey>local-secret-`+key+`</SecretAccessKey><SessionToken>local-token-`+key+`</SessionToken>`+
		`<Expiration>`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`</Expiration></Credentials>`+
		`<AssumedRoleUser><AssumedRoleId>AROA:`+r.Form.Get("RoleSessionName")+`</AssumedRoleId><Arn>arn:aws:sts::000000000000:assumed-role/app/x</Arn></AssumedRoleUser>`+
		`</AssumeRoleResult><ResponseMetadata><RequestId>ok</RequestId></ResponseMetadata></AssumeRoleResponse>`)
}

func (s *stsStandIn) roleOf(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[key]
}

// stopFamiliesAtEnd returns a func that removes the static task files of families and waits until
// their tasks have stopped, so that the agent tears their awsvpc networking down instead of leaving
// it on the host; it also runs at the test's end, while the agent still lives, if the test did not.
func stopFamiliesAtEnd(t *testing.T, agent *agentRun, dir string, families ...string) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, f := range families {
				_ = os.Remove(filepath.Join(dir, f+".json"))
			}
			agent.waitTasks(2*time.Minute, "the tasks stop", func(ts []introspection.TaskResponse) bool {
				for _, tk := range ts {
					if slices.Contains(families, tk.Family) && tk.KnownStatus != "STOPPED" {
						return false
					}
				}
				return true
			})
		})
	}
	t.Cleanup(stop)
	return stop
}

// probeTask is a static task whose essential container sleeps while a non-essential one, a real AWS
// SDK, resolves its credentials through the container credentials provider and prints the key ID.
func probeTask(t *testing.T, dir, family, networkMode, role string) {
	t.Helper()
	def := map[string]any{"family": family, "networkMode": networkMode, "taskRoleArn": role, "containerDefinitions": []map[string]any{
		{"name": "app", "image": testappImage, "memory": 16, "command": []string{"sleep"}},
		{"name": "probe", "image": testappImage, "memory": 32, "essential": false, "command": []string{"aws-identity", "-creds-only", "-timeout", "30s"}},
	}}
	data, err := json.Marshal(def)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, family+".json"), data, 0o600))
}

// probeDone returns the probe container of family once it has exited.
func probeDone(ts []introspection.TaskResponse, family string) (introspection.ContainerResponse, bool) {
	for _, tk := range ts {
		if tk.Family != family {
			continue
		}
		for _, c := range tk.Containers {
			if c.Name == "probe" && c.KnownStatus == "STOPPED" && c.ExitCode != nil {
				return c, true
			}
		}
	}
	return introspection.ContainerResponse{}, false
}

// TestIntegrationTaskRoleCredentialsLocalMode: in local mode the agent assumes each task's role with
// the host's credentials (an STS stand-in reached through AWS_ENDPOINT_URL_STS), and a real SDK in a
// bridge, a host-network and an awsvpc task gets them through 169.254.170.2. A role STS refuses
// leaves its task running, the endpoint says why, and the log says it once.
func TestIntegrationTaskRoleCredentialsLocalMode(t *testing.T) {
	const allowed, refused = "arn:aws:iam::000000000000:role/app", "arn:aws:iam::000000000000:role/denied"
	sts := &stsStandIn{refused: refused, issued: map[string]string{}}
	stsServer := &http.Server{Handler: sts}
	stsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stsServer.Serve(stsLn) }()
	t.Cleanup(func() { _ = stsServer.Close() })

	env := newRecoveryEnv(t, buildBerth(t))
	logFile := filepath.Join(t.TempDir(), "berth.log")
	agent := env.start("AWS_ENDPOINT_URL_STS=http://"+stsLn.Addr().String(), "AWS_ACCESS_KEY_ID=AKIAHOSTHOSTHOST0000",
		"AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "ECS_LOGFILE="+logFile,
		"ECS_ENABLE_TASK_ENI=true", "ECS_CNI_PLUGINS_PATH="+cniPlugins(t), "ECS_PAUSE_IMAGE_TARBALL="+os.Getenv("BERTH_PAUSE_TARBALL"),
		"ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))
	// Containers reach 169.254.170.2 only through the redirect: no task is written before it is in.
	require.Eventually(t, func() bool {
		return hostnat.Check(context.Background(), hostnat.Config{HostNetwork: true}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent installs the NAT redirect; log:\n%s", agent.out.String())

	families := map[string]string{"role-bridge": "bridge", "role-host": "host", "role-awsvpc": "awsvpc"}
	for family, mode := range families {
		probeTask(t, env.tasksDir, family, mode, allowed)
	}
	probeTask(t, env.tasksDir, "role-denied", "bridge", refused)
	stopTasks := stopFamiliesAtEnd(t, agent, env.tasksDir, "role-bridge", "role-host", "role-awsvpc", "role-denied")

	ts := agent.waitTasks(3*time.Minute, "every probe has run", func(ts []introspection.TaskResponse) bool {
		for _, f := range []string{"role-bridge", "role-host", "role-awsvpc", "role-denied"} {
			if _, ok := probeDone(ts, f); !ok {
				return false
			}
		}
		return true
	})
	for family := range families {
		probe, _ := probeDone(ts, family)
		logs, err := exec.Command("docker", "logs", probe.DockerID).CombinedOutput()
		require.NoError(t, err)
		require.Equal(t, 0, *probe.ExitCode, "%s: the SDK got credentials: %s", family, logs)
		key := ""
		for line := range strings.SplitSeq(string(logs), "\n") {
			if v, ok := strings.CutPrefix(line, "AccessKeyId="); ok {
				key = v
			}
		}
		assert.Equal(t, allowed, sts.roleOf(key), "%s: the key (%q) is one STS issued for the task's role", family, key)
		assert.Contains(t, string(logs), "CredentialsSource=", family)
	}

	// The refused role: the task runs on, the endpoint answers as the ECS agent does, the log says
	// why once.
	denied, _ := probeDone(ts, "role-denied")
	assert.NotEqual(t, 0, *denied.ExitCode, "no credentials for a refused role")
	var deniedApp string
	for _, tk := range ts {
		if tk.Family == "role-denied" {
			assert.Equal(t, "RUNNING", tk.KnownStatus, "the task still runs")
			deniedApp = tk.Containers[0].DockerID
		}
	}
	out, err := exec.Command("docker", "inspect", "--format", "{{json .Config.Env}}", deniedApp).Output()
	require.NoError(t, err)
	var envVars []string
	require.NoError(t, json.Unmarshal(out, &envVars))
	var uri string
	for _, kv := range envVars {
		if v, ok := strings.CutPrefix(kv, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI="); ok {
			uri = v
		}
	}
	require.NotEmpty(t, uri)
	resp, err := http.Get("http://127.0.0.1:51679" + uri)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, `{"code":"InternalServerError","message":"Internal server error","HTTPErrorCode":500}`, strings.TrimSpace(string(body)),
		"the ECS agent's answer; the log says why")
	stopTasks()
	agent.stop()
	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	var refusals []string
	for line := range strings.SplitSeq(string(logged), "\n") {
		if strings.Contains(line, "AccessDenied") {
			refusals = append(refusals, line)
		}
	}
	assert.Len(t, refusals, 1, "the refusal is logged once:\n%s", strings.Join(refusals, "\n"))
	for key := range sts.issued {
		assert.NotContains(t, string(logged), "local-secret-"+key, "no secret in the log")
		assert.NotContains(t, string(logged), "local-token-"+key, "no session token in the log")
	}
}

// TestIntegrationTaskMetadata checks the metadata endpoints field by field against Docker, for a
// bridge and an awsvpc task: v4 and v3 by each container's token (from inside the containers and
// from the host), v2 by the awsvpc task's address, and stats from one shared Docker stream.
func TestIntegrationTaskMetadata(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	agent := env.start("AWS_EC2_METADATA_DISABLED=true", "ECS_ENABLE_TASK_ENI=true", "ECS_CNI_PLUGINS_PATH="+cniPlugins(t),
		"ECS_PAUSE_IMAGE_TARBALL="+os.Getenv("BERTH_PAUSE_TARBALL"), "ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))
	require.Eventually(t, func() bool {
		return hostnat.Check(context.Background(), hostnat.Config{HostNetwork: true}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent installs the NAT redirect; log:\n%s", agent.out.String())

	for family, mode := range map[string]string{"md-bridge": "bridge", "md-awsvpc": "awsvpc"} {
		containers := []map[string]any{
			{"name": "app", "image": testappImage, "memory": 16, "cpu": 64, "command": []string{"sleep"}},
			{"name": "probe", "image": testappImage, "memory": 16, "essential": false, "command": []string{"metadata", "-path", "task"},
				"dependsOn": []map[string]string{{"containerName": "app", "condition": "START"}}},
		}
		if mode == "awsvpc" {
			containers = append(containers, map[string]any{"name": "v2", "image": testappImage, "memory": 16, "essential": false,
				"command": []string{"health", "-url", "http://169.254.170.2/v2/metadata"}, "dependsOn": []map[string]string{{"containerName": "app", "condition": "START"}}})
		}
		data, err := json.Marshal(map[string]any{"family": family, "networkMode": mode, "containerDefinitions": containers})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, family+".json"), data, 0o600))
	}
	stopFamiliesAtEnd(t, agent, env.tasksDir, "md-bridge", "md-awsvpc")
	v2Probe := func(ts []introspection.TaskResponse) (introspection.ContainerResponse, bool) {
		for _, tk := range ts {
			for _, c := range tk.Containers {
				if tk.Family == "md-awsvpc" && c.Name == "v2" && c.KnownStatus == "STOPPED" && c.ExitCode != nil {
					return c, true
				}
			}
		}
		return introspection.ContainerResponse{}, false
	}
	ts := agent.waitTasks(3*time.Minute, "the probes have run", func(ts []introspection.TaskResponse) bool {
		_, a := probeDone(ts, "md-bridge")
		_, b := probeDone(ts, "md-awsvpc")
		_, c := v2Probe(ts)
		return a && b && c
	})

	for _, family := range []string{"md-bridge", "md-awsvpc"} {
		var tk introspection.TaskResponse
		for _, x := range ts {
			if x.Family == family {
				tk = x
			}
		}
		mode := strings.TrimPrefix(family, "md-")
		var app introspection.ContainerResponse
		for _, c := range tk.Containers {
			if c.Name == "app" {
				app = c
			}
		}
		require.NotEmpty(t, app.DockerID, "%s: the app container runs", family)
		inspect := dockerInspect(t, app.DockerID)
		token := ""
		for _, kv := range inspect.Config.Env {
			if v, ok := strings.CutPrefix(kv, "ECS_CONTAINER_METADATA_URI_V4=http://169.254.170.2/v4/"); ok {
				token = v
			}
		}
		require.Len(t, token, 32, "%s: the container has its metadata URI", family)
		assert.Contains(t, inspect.Config.Env, "ECS_CONTAINER_METADATA_URI=http://169.254.170.2/v3/"+token)

		// From inside: the probe printed its task.
		probe, _ := probeDone(ts, family)
		logs, err := exec.Command("docker", "logs", probe.DockerID).Output()
		require.NoError(t, err)
		require.Equal(t, 0, *probe.ExitCode, "%s: %s", family, logs)
		var fromInside map[string]any
		require.NoError(t, json.Unmarshal(logs, &fromInside), "%s", logs)
		assert.Equal(t, tk.Arn, fromInside["TaskARN"], family)

		// From the host, field by field.
		status, c := endpointGet(t, "/v4/"+token)
		require.Equal(t, http.StatusOK, status, "%v", c)
		assert.Equal(t, app.DockerID, c["DockerId"])
		assert.Equal(t, "app", c["Name"])
		assert.Equal(t, strings.TrimPrefix(inspect.Name, "/"), c["DockerName"])
		assert.Equal(t, testappImage, c["Image"])
		assert.Equal(t, inspect.Image, c["ImageID"])
		assert.Equal(t, tk.Arn, c["Labels"].(map[string]any)["com.amazonaws.ecs.task-arn"])
		assert.Equal(t, "RUNNING", c["DesiredStatus"])
		assert.Equal(t, "RUNNING", c["KnownStatus"])
		assert.Equal(t, map[string]any{"CPU": float64(64), "Memory": float64(16)}, c["Limits"])
		started, err := time.Parse(time.RFC3339Nano, c["StartedAt"].(string))
		require.NoError(t, err)
		assert.WithinDuration(t, inspect.State.StartedAt, started, time.Second)
		created, err := time.Parse(time.RFC3339Nano, c["CreatedAt"].(string))
		require.NoError(t, err)
		assert.WithinDuration(t, inspect.Created, created, time.Second)
		assert.Equal(t, "NORMAL", c["Type"])
		networks := c["Networks"].([]any)
		require.Len(t, networks, 1)
		network := networks[0].(map[string]any)
		assert.Equal(t, mode, network["NetworkMode"])
		addrs := network["IPv4Addresses"].([]any)
		require.Len(t, addrs, 1)
		if mode == "bridge" {
			assert.Equal(t, inspect.NetworkSettings.IPAddress, addrs[0])
		} else {
			assert.NotEmpty(t, addrs[0])
		}

		status, task := endpointGet(t, "/v4/"+token+"/task")
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, env.cluster, task["Cluster"])
		assert.Equal(t, tk.Arn, task["TaskARN"])
		assert.Equal(t, family, task["Family"])
		assert.Equal(t, "1", task["Revision"])
		assert.Equal(t, "RUNNING", task["DesiredStatus"])
		assert.Equal(t, "RUNNING", task["KnownStatus"])
		assert.NotContains(t, task, "LaunchType", "a static task: no control plane gave it a launch type")
		assert.NotContains(t, c, "ContainerARN", "a static task's container: no control plane gave it an ARN")
		assert.Equal(t, false, task["FaultInjectionEnabled"])
		pullStarted, err1 := time.Parse(time.RFC3339Nano, task["PullStartedAt"].(string))
		pullStopped, err2 := time.Parse(time.RFC3339Nano, task["PullStoppedAt"].(string))
		require.NoError(t, errors.Join(err1, err2))
		assert.False(t, pullStopped.Before(pullStarted), "the pull stopped after it started")
		assert.False(t, started.Before(pullStopped), "the container started after the pull")
		assert.NotEmpty(t, task["Containers"])

		status, v3 := endpointGet(t, "/v3/"+token)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, app.DockerID, v3["DockerId"])
		assert.NotContains(t, v3, "LogDriver", "v3 has v3's shape")

		// Stats: the first answer waits for Docker's first sample; later ones come from the shared stream.
		for i, bound := range []time.Duration{2 * time.Second, time.Second, time.Second} {
			start := time.Now()
			status, stats := endpointGet(t, "/v4/"+token+"/stats")
			took := time.Since(start)
			require.Equal(t, http.StatusOK, status)
			t.Logf("%s: /stats answer %d took %s", family, i+1, took.Round(time.Millisecond))
			assert.Less(t, took, bound)
			for _, k := range []string{"read", "preread", "pids_stats", "blkio_stats", "num_procs", "storage_stats", "cpu_stats", "precpu_stats", "memory_stats", "name", "id"} {
				assert.Contains(t, stats, k)
			}
		}
		status, taskStats := endpointGet(t, "/v4/"+token+"/task/stats")
		require.Equal(t, http.StatusOK, status)
		assert.Contains(t, taskStats, app.DockerID)

		// Networks: a bridge container's are Docker's; an awsvpc container's are its task
		// namespace's interfaces (the ENI's eth0, not the loopback nor the task bridge), which Docker
		// does not see. Either has network_rate_stats once two samples were read (v4 only).
		var stats map[string]any
		require.Eventually(t, func() bool {
			status, stats = endpointGet(t, "/v4/"+token+"/stats")
			return status == http.StatusOK && stats["network_rate_stats"] != nil
		}, 10*time.Second, 200*time.Millisecond, "%s: network_rate_stats; last answer %v", family, stats)
		nets, ok := stats["networks"].(map[string]any)
		require.True(t, ok, "%s: networks in %v", family, stats)
		require.Contains(t, nets, "eth0", family)
		assert.NotContains(t, nets, "lo", family)
		assert.NotContains(t, nets, "ecs-eth0", family)
		rate := stats["network_rate_stats"].(map[string]any)
		assert.Contains(t, rate, "rx_bytes_per_sec")
		assert.Contains(t, rate, "tx_bytes_per_sec")
		status, v3Stats := endpointGet(t, "/v3/"+token+"/stats")
		require.Equal(t, http.StatusOK, status)
		assert.Contains(t, v3Stats, "networks", family)
		assert.NotContains(t, v3Stats, "network_rate_stats", "%s: v3 serves Docker's object", family)

		// Tags: the embedded control plane knows no static task; the instance registered without tags.
		status, withTags := endpointGet(t, "/v4/"+token+"/taskWithTags")
		require.Equal(t, http.StatusOK, status)
		assert.NotContains(t, withTags, "TaskTags", family)
		assert.NotContains(t, withTags, "Errors", "%s: %v", family, withTags["Errors"])
	}

	// v2 answered the awsvpc task's own container, found by its address.
	v2, ok := v2Probe(ts)
	if assert.True(t, ok, "the v2 probe ran") {
		logs, _ := exec.Command("docker", "logs", v2.DockerID).CombinedOutput()
		assert.Equal(t, 0, *v2.ExitCode, "v2 metadata from the awsvpc task: %s", logs)
	}
	status, _ := endpointGet(t, "/v4/"+randomHex(t, 16))
	assert.Equal(t, http.StatusNotFound, status, "an unknown token")
}

// credentialsURI is the AWS_CONTAINER_CREDENTIALS_RELATIVE_URI the agent gave a container.
func credentialsURI(t *testing.T, dockerID string) string {
	t.Helper()
	for _, kv := range dockerInspect(t, dockerID).Config.Env {
		if v, ok := strings.CutPrefix(kv, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI="); ok {
			return v
		}
	}
	t.Fatalf("container %s has no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", dockerID)
	return ""
}

// dockerExec runs the test image's binary with args inside a running container (in its network
// namespace, so from its address) and returns its output and whether it exited 0.
func dockerExec(t *testing.T, dockerID string, env []string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmdArgs := []string{"exec"}
	for _, kv := range env {
		cmdArgs = append(cmdArgs, "-e", kv)
	}
	cmdArgs = append(cmdArgs, dockerID, "/testapp")
	out, err := exec.CommandContext(ctx, "docker", append(cmdArgs, args...)...).CombinedOutput()
	return string(out), err == nil
}

// TestIntegrationCredentialsBoundToTheirTask: with ECS_TASK_CREDENTIALS_BIND_TO_TASK at its default,
// two bridge tasks with roles run in local mode; a container of the second, and a container of no
// task, asking through 169.254.170.2 with the first task's credentials ID get the ECS agent's 400
// InvalidIdInRequest, while the first task's containers (the AWS SDK among them) get them, and so
// does the host; the refusal is logged, the ID only by its first characters.
func TestIntegrationCredentialsBoundToTheirTask(t *testing.T) {
	const role = "arn:aws:iam::000000000000:role/app"
	sts := &stsStandIn{issued: map[string]string{}}
	stsServer := &http.Server{Handler: sts}
	stsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stsServer.Serve(stsLn) }()
	t.Cleanup(func() { _ = stsServer.Close() })

	env := newRecoveryEnv(t, buildBerth(t))
	logFile := filepath.Join(t.TempDir(), "berth.log")
	agent := env.start("AWS_ENDPOINT_URL_STS=http://"+stsLn.Addr().String(), "AWS_ACCESS_KEY_ID=AKIAHOSTHOSTHOST0000",
		"AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "ECS_LOGFILE="+logFile,
		"ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))
	require.Eventually(t, func() bool {
		return hostnat.Check(context.Background(), hostnat.Config{HostNetwork: true}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent installs the NAT redirect; log:\n%s", agent.out.String())

	probeTask(t, env.tasksDir, "bound-owner", "bridge", role)
	probeTask(t, env.tasksDir, "bound-other", "bridge", role)
	stopTasks := stopFamiliesAtEnd(t, agent, env.tasksDir, "bound-owner", "bound-other")
	ts := agent.waitTasks(3*time.Minute, "both probes have run", func(ts []introspection.TaskResponse) bool {
		_, owner := probeDone(ts, "bound-owner")
		_, other := probeDone(ts, "bound-other")
		return owner && other
	})
	apps := map[string]string{}
	for _, tk := range ts {
		for _, c := range tk.Containers {
			if c.Name == "app" {
				apps[tk.Family] = c.DockerID
			}
		}
	}
	require.Len(t, apps, 2, "%+v", ts)

	// The owner's SDK got its credentials.
	probe, _ := probeDone(ts, "bound-owner")
	logs, err := exec.Command("docker", "logs", probe.DockerID).CombinedOutput()
	require.NoError(t, err)
	require.Equal(t, 0, *probe.ExitCode, "the owner's SDK gets its credentials: %s", logs)
	assert.Contains(t, string(logs), "AccessKeyId=ASIALOCAL")

	uri := credentialsURI(t, apps["bound-owner"])
	require.NotEqual(t, uri, credentialsURI(t, apps["bound-other"]), "each task has its own ID")
	endpoint := "http://169.254.170.2" + uri

	// The owner's other container asks with the ID: answered.
	out, ok := dockerExec(t, apps["bound-owner"], nil, "health", "-url", endpoint, "-timeout", "10s")
	assert.True(t, ok, "the owner's container gets its credentials: %s", out)
	// The second task's container: refused, with the ECS agent's answer to an unknown ID.
	out, ok = dockerExec(t, apps["bound-other"], nil, "health", "-url", endpoint, "-timeout", "10s")
	assert.False(t, ok, "another task's container is refused: %s", out)
	out, ok = dockerExec(t, apps["bound-other"], []string{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=" + uri}, "aws-identity", "-creds-only", "-timeout", "20s")
	assert.False(t, ok, "the SDK in another task's container gets nothing with the first task's ID: %s", out)
	assert.Contains(t, out, "InvalidIdInRequest: CredentialsV2Request: Credentials not found", "the ECS agent's answer to an unknown ID")
	assert.NotContains(t, out, "AccessKeyId=")
	// A container of no task on the default bridge: refused too.
	out, ok = runContainer(t, "health", "-url", endpoint, "-timeout", "10s")
	assert.False(t, ok, "a container of no task is refused: %s", out)

	// The host is answered as the ECS agent answers it.
	status, body := endpointGet(t, uri)
	assert.Equal(t, http.StatusOK, status, "%v", body)
	assert.Equal(t, role, body["RoleArn"])

	stopTasks()
	agent.stop()
	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	id := strings.TrimPrefix(uri, "/v2/credentials/")
	assert.Contains(t, string(logged), "reason=credentials_not_the_tasks_address credentials_id="+id[:8], "the refusal is logged")
	assert.NotContains(t, string(logged), id, "the full ID never is")
}

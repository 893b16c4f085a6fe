//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/handlers"
	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
)

// scriptedACS stands in for Amazon ECS: the embedded control plane answers the ECS API, and the ACS
// websocket is the test's: it sends what the test puts on out, to the connection of the moment, and
// records every message ID the agent acknowledges.
type scriptedACS struct {
	cp       http.Handler
	out      chan acs.Message
	upgrader websocket.Upgrader

	mu   sync.Mutex
	acks []string
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
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			m, err := acs.Decode(data)
			if err != nil {
				continue
			}
			s.mu.Lock()
			switch m := m.(type) {
			case *acs.AckRequest:
				s.acks = append(s.acks, m.MessageID)
			case *acs.IAMRoleCredentialsAckRequest:
				s.acks = append(s.acks, m.MessageID)
			}
			s.mu.Unlock()
		}
	}()
	for m := range s.out {
		frame, err := acs.Encode(m)
		if err != nil || ws.WriteMessage(websocket.TextMessage, frame) != nil {
			return
		}
	}
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
	out := map[string]any{}
	require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	return resp.StatusCode, out
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
	srv, err := localcp.New(localcp.Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Region: "us-east-1",
		Keys: localauth.Keys{AccessKeyID: "berth-test", SecretAccessKey: "berth-test"}}, logger.Nop())
	require.NoError(t, err)
	standIn := &scriptedACS{cp: srv.Handler(), out: make(chan acs.Message, 8)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: standIn}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		close(standIn.out)
		_ = hs.Close()
		_ = srv.Close()
	})

	arn := "arn:aws:ecs:us-east-1:000000000000:task/creds/" + randomHex(t, 16)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	first := acs.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::000000000000:role/app",
		AccessKeyID: "ASIAFIRST" + randomHex(t, 4), SecretAccessKey: "secret-first-" + randomHex(t, 8), SessionToken: "token-first-" + randomHex(t, 8),
		Expiration: expires.Format(time.RFC3339)}
	execution := acs.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::000000000000:role/exec",
		AccessKeyID: "ASIAEXEC" + randomHex(t, 4), SecretAccessKey: "secret-exec-" + randomHex(t, 8), SessionToken: "token-exec-" + randomHex(t, 8),
		Expiration: expires.Format(time.RFC3339)}
	standIn.out <- &acs.PayloadMessage{MessageID: "payload-1", SeqNum: 1, Tasks: []*acs.Task{{Arn: arn, Family: "creds", Version: "1",
		DesiredStatus: "RUNNING", Containers: []*acs.Container{{Name: "app", Image: testappImage, Memory: 16, Command: []string{"sleep"}}},
		RoleCredentials: &first, ExecutionRoleCredentials: &execution}}}

	env := newRecoveryEnv(t, buildBerth(t))
	logFile := filepath.Join(t.TempDir(), "berth.log")
	agent := env.start("AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://"+ln.Addr().String(),
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "ECS_LOGFILE="+logFile, "ECS_LOGLEVEL=debug",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1m")
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
	body, ok := runContainer(t, "health", "-url", "http://169.254.170.2/v2/credentials/"+first.CredentialsID)
	assert.True(t, ok, "a bridge container gets its credentials at 169.254.170.2: %s", body)

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
	standIn.out <- &acs.IAMRoleCredentialsMessage{MessageID: "creds-2", TaskArn: arn, RoleType: acs.RoleTypeTaskApplication, RoleCredentials: second}
	require.Eventually(t, func() bool {
		_, got := endpointGet(t, "/v2/credentials/"+first.CredentialsID)
		return got["AccessKeyId"] == second.AccessKeyID && standIn.acked("creds-2")
	}, 30*time.Second, 100*time.Millisecond, "the refresh is served and acknowledged")

	// Stopped and cleaned up: the credentials are gone.
	standIn.out <- &acs.PayloadMessage{MessageID: "payload-2", SeqNum: 2, Tasks: []*acs.Task{{Arn: arn, Family: "creds", Version: "1",
		DesiredStatus: "STOPPED", Containers: []*acs.Container{{Name: "app", Image: testappImage, Memory: 16, Command: []string{"sleep"}}}}}}
	agent.waitTasks(60*time.Second, "the task stops", familyStopped("creds"))
	agent.waitTasks(3*time.Minute, "the task is cleaned up", func(ts []handlers.TaskResponse) bool {
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
		execution.SecretAccessKey, execution.SessionToken, second.AccessKeyID} {
		assert.NotContains(t, string(logged), secret, "the log holds a secret")
		assert.NotContains(t, agent.out.String(), secret, "the console holds a secret")
		assert.False(t, bytes.Contains(stateFile, []byte(secret)), "berth.db holds a secret")
	}
	assert.True(t, strings.Contains(string(logged), "task endpoint"), "the log is the agent's")
}

//go:build integration

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
)

// logsStandIn is a CloudWatch Logs endpoint for the Docker daemon's awslogs driver: it answers
// CreateLogGroup, CreateLogStream and PutLogEvents (JSON 1.1) and records each PutLogEvents' messages
// and the access key that signed it.
type logsStandIn struct {
	mu       sync.Mutex
	messages []string
	keys     []string
}

func (s *logsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	key, _, _ := strings.Cut(cred, "/")
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	switch target := r.Header.Get("X-Amz-Target"); {
	case key == "":
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"MissingAuthenticationTokenException","message":"unsigned"}`))
	case strings.HasSuffix(target, ".PutLogEvents"):
		var in struct {
			LogEvents []struct {
				Message string `json:"message"`
			} `json:"logEvents"`
		}
		_ = json.Unmarshal(body, &in)
		s.mu.Lock()
		for _, e := range in.LogEvents {
			s.messages = append(s.messages, e.Message)
		}
		s.keys = append(s.keys, key)
		s.mu.Unlock()
		_, _ = w.Write([]byte(`{"nextSequenceToken":"1"}`))
	default: // CreateLogGroup, CreateLogStream
		s.mu.Lock()
		s.keys = append(s.keys, key)
		s.mu.Unlock()
		_, _ = w.Write([]byte(`{}`))
	}
}

func (s *logsStandIn) seen() (messages, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.messages...), append([]string(nil), s.keys...)
}

// TestIntegrationAWSLogsWithExecutionRole runs, in ecs mode, a container logging with the awslogs
// driver whose task's logsAuthStrategy is ExecutionRole, on an agent with
// ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE=true: the Docker daemon gets the execution role's
// credentials from the task endpoint and ships the container's output, signed with that role's key,
// to a CloudWatch Logs stand-in.
func TestIntegrationAWSLogsWithExecutionRole(t *testing.T) {
	logs := &logsStandIn{}
	ls := httptest.NewServer(logs)
	t.Cleanup(ls.Close)
	exec := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::012345678901:role/exec",
		AccessKeyID: "ASIALOGS" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "logs-secret-" + randomHex(t, 8),
		SessionToken: "logs-session-" + randomHex(t, 8), Expiration: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	options, err := json.Marshal(map[string]any{"LogConfig": map[string]any{"Type": "awslogs", "Config": map[string]string{
		"awslogs-region": "us-east-1", "awslogs-group": "berth", "awslogs-stream": "app-" + randomHex(t, 4),
		"awslogs-endpoint": ls.URL}}})
	require.NoError(t, err)
	standIn, addr := startScriptedACS(t)
	standIn.out <- &acswire.PayloadMessage{MessageID: "awslogs-1", SeqNum: 1, Tasks: []*acswire.Task{{
		Arn: "arn:aws:ecs:us-east-1:000000000000:task/awslogs/" + randomHex(t, 16), Family: "awslogs", Version: "1",
		DesiredStatus: "RUNNING", ExecutionRoleCredentials: &exec,
		Containers: []*acswire.Container{{Name: "app", Image: testappImage, Memory: 16, Command: []string{"sleep"},
			LogsAuthStrategy: "ExecutionRole", DockerConfig: &acswire.DockerConfig{HostConfig: string(options)}}}}}}

	env := newRecoveryEnv(t, buildBerth(t))
	agent := env.start(ecsModeEnv(addr, `ECS_AVAILABLE_LOGGING_DRIVERS=["json-file","awslogs"]`,
		"ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE=true")...)
	agent.waitTasks(time.Minute, "the task runs", familyRunning("awslogs", 1))
	require.Eventually(t, func() bool {
		messages, _ := logs.seen()
		return len(messages) > 0
	}, time.Minute, 200*time.Millisecond, "the container's output reaches CloudWatch Logs; agent log:\n%s", agent.out.String())
	messages, keys := logs.seen()
	assert.Contains(t, strings.Join(messages, "\n"), "testapp: sleeping")
	for _, k := range keys {
		assert.Equal(t, exec.AccessKeyID, k, "every call is signed with the execution role's key")
	}
	agent.stop()
}

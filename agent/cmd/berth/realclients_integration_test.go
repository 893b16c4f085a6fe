//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
)

// The clients nobody at Berth wrote that these tests run, from the host, against a real task's
// endpoints on 127.0.0.1:51679: the AWS SDK for Go v2 (testapp aws-identity), OpenTelemetry's ECS
// resource detector for Go (testapp otel-ecs), and from misc/jsclients (make jsclients) the AWS SDK
// for JavaScript v3's container credential provider and OpenTelemetry's ECS detector for JavaScript.

// buildTestapp builds the testapp binary for the host.
func buildTestapp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testapp")
	cmd := exec.Command("go", "build", "-o", bin, "../../../misc/testapp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// runClient runs a client with extra environment; it returns its stdout, and its stderr in the
// error when it fails.
func runClient(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = &clientError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), err
}

type clientError struct {
	err    error
	stderr string
}

func (e *clientError) Error() string { return e.err.Error() + ": " + e.stderr }

// jsClient is the path of one of misc/jsclients' scripts; node_modules must be installed.
func jsClient(t *testing.T, script string) string {
	t.Helper()
	dir, err := filepath.Abs("../../../misc/jsclients")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "node_modules", "@aws-sdk", "credential-provider-http"))
	require.NoError(t, err, "misc/jsclients needs its packages: make jsclients")
	return filepath.Join(dir, script)
}

// firstThrough is a proxy to the task endpoint that lets each client's first request through and
// holds its later ones until release is closed; clients are told apart by User-Agent. It records the
// status of each first answer.
type firstThrough struct {
	proxy   *httputil.ReverseProxy
	release chan struct{}

	mu    sync.Mutex
	first map[string]int // client (its User-Agent's first word) → status of its first answer
}

func newFirstThrough(t *testing.T) (*firstThrough, string) {
	t.Helper()
	target, err := url.Parse("http://127.0.0.1:51679")
	require.NoError(t, err)
	p := &firstThrough{proxy: httputil.NewSingleHostReverseProxy(target), release: make(chan struct{}), first: map[string]int{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *firstThrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client, _, _ := strings.Cut(r.UserAgent(), " ")
	p.mu.Lock()
	_, seen := p.first[client]
	if !seen {
		p.first[client] = 0
	}
	p.mu.Unlock()
	if seen {
		<-p.release
		p.proxy.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.proxy.ServeHTTP(rec, r)
	p.mu.Lock()
	p.first[client] = rec.Code
	p.mu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// answered returns the status of each client's first answer, once it has one.
func (p *firstThrough) answered() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.first {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestIntegrationRealClients runs, in ecs mode, a task whose ACS payload carries container ARNs and
// task role credentials, its container logging with awslogs, and asks its endpoints with the real
// clients: both OpenTelemetry detectors extract the ECS attributes observability agents report
// (container ARN, cluster ARN, launch type, task, account, region, and the log group and stream of
// an awslogs container); both SDKs get the task role's credentials; and after an agent restart,
// before ACS has sent the credentials again, both SDKs wait through the endpoint's 503 and get the
// new credentials once ACS sent them.
func TestIntegrationRealClients(t *testing.T) {
	testapp := buildTestapp(t)
	detectJS, credsJS := jsClient(t, "detect-ecs.mjs"), jsClient(t, "container-credentials.mjs")
	logs := &logsStandIn{}
	ls := httptest.NewServer(logs)
	t.Cleanup(ls.Close)

	env := newRecoveryEnv(t, buildBerth(t))
	const account, region = "111122223333", "us-east-1"
	taskID := randomHex(t, 16)
	taskArn := "arn:aws:ecs:" + region + ":" + account + ":task/" + env.cluster + "/" + taskID
	containerArn := "arn:aws:ecs:" + region + ":" + account + ":container/" + env.cluster + "/" + taskID + "/" + randomHex(t, 8)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	role := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::" + account + ":role/app",
		AccessKeyID: "ASIAFIRST" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "secret-" + randomHex(t, 8),
		SessionToken: "token-" + randomHex(t, 8), Expiration: expires}
	execRole := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::" + account + ":role/exec",
		AccessKeyID: "ASIAEXEC" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "secret-" + randomHex(t, 8),
		SessionToken: "token-" + randomHex(t, 8), Expiration: expires}
	stream := "app-" + randomHex(t, 4)
	options, err := json.Marshal(map[string]any{"LogConfig": map[string]any{"Type": "awslogs", "Config": map[string]string{
		"awslogs-region": region, "awslogs-group": "berth-clients", "awslogs-stream": stream, "awslogs-endpoint": ls.URL}}})
	require.NoError(t, err)
	standIn, addr := startScriptedACS(t)
	standIn.out <- &acswire.PayloadMessage{MessageID: "clients-1", SeqNum: 1, Tasks: []*acswire.Task{{
		Arn: taskArn, Family: "clients", Version: "7", DesiredStatus: "RUNNING", LaunchType: "EC2",
		RoleCredentials: &role, ExecutionRoleCredentials: &execRole,
		Containers: []*acswire.Container{{Name: "app", ContainerArn: containerArn, Image: testappImage, Memory: 16, Command: []string{"sleep"},
			LogsAuthStrategy: "ExecutionRole", DockerConfig: &acswire.DockerConfig{HostConfig: string(options)}}}}}}

	ecsMode := ecsModeEnv(addr, `ECS_AVAILABLE_LOGGING_DRIVERS=["json-file","awslogs"]`, "ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE=true")
	agent := env.start(ecsMode...)
	tasks := agent.waitTasks(90*time.Second, "the task runs", familyRunning("clients", 1))
	var dockerID string
	for _, tk := range tasks {
		if tk.Family == "clients" {
			dockerID = tk.Containers[0].DockerID
		}
	}
	token := ""
	for _, kv := range dockerInspect(t, dockerID).Config.Env {
		if v, ok := strings.CutPrefix(kv, "ECS_CONTAINER_METADATA_URI_V4=http://169.254.170.2/v4/"); ok {
			token = v
		}
	}
	require.NotEmpty(t, token, "the container has its metadata URI")
	metadataEnv := []string{"ECS_CONTAINER_METADATA_URI_V4=http://127.0.0.1:51679/v4/" + token}

	// What both detectors must extract, written out from the payload above.
	want := map[string]any{
		"cloud.provider":        "aws",
		"cloud.platform":        "aws_ecs",
		"cloud.account.id":      account,
		"cloud.region":          region,
		"cloud.resource_id":     containerArn,
		"aws.ecs.container.arn": containerArn,
		"aws.ecs.cluster.arn":   "arn:aws:ecs:" + region + ":" + account + ":cluster/" + env.cluster,
		"aws.ecs.launchtype":    "ec2",
		"aws.ecs.task.arn":      taskArn,
		"aws.ecs.task.family":   "clients",
		"aws.ecs.task.revision": "7",
		"aws.log.group.names":   []any{"berth-clients"},
		"aws.log.stream.names":  []any{stream},
		"aws.log.stream.arns":   []any{"arn:aws:logs:" + region + ":" + account + ":log-group:berth-clients:log-stream:" + stream},
	} // and aws.log.group.arns, which each detector writes its own way: checked below

	t.Run("OpenTelemetry ECS detector, Go", func(t *testing.T) {
		out, err := runClient(t, metadataEnv, testapp, "otel-ecs")
		require.NoError(t, err)
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(line, "=")
			got[k] = v
		}
		for k, v := range want {
			if list, ok := v.([]any); ok {
				b, _ := json.Marshal(list)
				v = string(b)
			}
			assert.Equal(t, v, got[k], "%s in\n%s", k, out)
		}
		assert.Equal(t, `["arn:aws:logs:`+region+":"+account+`:log-group:berth-clients:*"]`, got["aws.log.group.arns"])
	})
	t.Run("OpenTelemetry ECS detector, JavaScript", func(t *testing.T) {
		out, err := runClient(t, metadataEnv, "node", detectJS)
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		for k, v := range want {
			assert.Equal(t, v, got[k], "%s in %s", k, out)
		}
		assert.Equal(t, []any{"arn:aws:logs:" + region + ":" + account + ":log-group:berth-clients"}, got["aws.log.group.arns"])
	})

	fullURI := "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:51679/v2/credentials/" + role.CredentialsID
	t.Run("AWS SDK for Go v2, container credentials", func(t *testing.T) {
		out, err := runClient(t, []string{fullURI}, testapp, "aws-identity", "-creds-only")
		require.NoError(t, err)
		assert.Contains(t, out, "AccessKeyId="+role.AccessKeyID+"\n")
	})
	t.Run("AWS SDK for JavaScript v3, container credentials", func(t *testing.T) {
		out, err := runClient(t, []string{fullURI}, "node", credsJS)
		require.NoError(t, err)
		assert.Equal(t, "AccessKeyId="+role.AccessKeyID+"\nExpiration="+strings.TrimSuffix(expires, "Z")+".000Z\n", out)
	})

	// After a restart the task is known again at once, its credentials only once ACS resends them:
	// until then the endpoint answers 503 CredentialsUninitialized, which both SDKs retry.
	agent.stop()
	connections, _ := standIn.lastConnection()
	agent = env.start(ecsMode...)
	require.Eventually(t, func() bool {
		n, q := standIn.lastConnection()
		return n > connections && q.Get("sendCredentials") == "true"
	}, 60*time.Second, 100*time.Millisecond, "the restarted agent connects to ACS")
	status, body := endpointGet(t, "/v2/credentials/"+role.CredentialsID)
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	assert.Equal(t, "CredentialsUninitialized", body["code"])

	proxy, proxyURL := newFirstThrough(t)
	viaProxy := []string{"AWS_CONTAINER_CREDENTIALS_FULL_URI=" + proxyURL + "/v2/credentials/" + role.CredentialsID}
	type result struct {
		out string
		err error
	}
	goSDK, jsSDK := make(chan result, 1), make(chan result, 1)
	go func() {
		out, err := runClient(t, viaProxy, testapp, "aws-identity", "-creds-only", "-timeout", "60s")
		goSDK <- result{out, err}
	}()
	go func() {
		out, err := runClient(t, viaProxy, "node", credsJS)
		jsSDK <- result{out, err}
	}()
	require.Eventually(t, func() bool { return len(proxy.answered()) == 2 }, 30*time.Second, 20*time.Millisecond,
		"both clients asked once")
	for client, status := range proxy.answered() {
		assert.Equal(t, http.StatusServiceUnavailable, status, "%s's first answer", client)
	}
	refreshed := role
	refreshed.AccessKeyID = "ASIAAGAIN" + strings.ToUpper(randomHex(t, 4))
	standIn.out <- &acswire.IAMRoleCredentialsMessage{MessageID: "creds-again", TaskArn: taskArn, RoleType: acswire.RoleTypeTaskApplication, RoleCredentials: refreshed}
	require.Eventually(t, func() bool {
		_, got := endpointGet(t, "/v2/credentials/"+role.CredentialsID)
		return got["AccessKeyId"] == refreshed.AccessKeyID
	}, 30*time.Second, 100*time.Millisecond, "ACS's credentials are served")
	close(proxy.release)
	r := <-goSDK
	require.NoError(t, r.err, "the AWS SDK for Go v2 retried the 503")
	assert.Contains(t, r.out, "AccessKeyId="+refreshed.AccessKeyID+"\n")
	r = <-jsSDK
	require.NoError(t, r.err, "the AWS SDK for JavaScript v3 retried the 503")
	assert.Contains(t, r.out, "AccessKeyId="+refreshed.AccessKeyID+"\n")
	agent.stop()
}

//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// built is the real binary, compiled by the first buildBerth of the test process into builtDir,
// which TestMain removes.
var (
	buildOnce sync.Once
	builtDir  string
	built     string
	buildErr  error
)

// buildBerth returns the real binary, compiled once for every test of the package (linking it
// anew for each of some forty tests cost minutes of make test). Tests must not change the file.
func buildBerth(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if builtDir, buildErr = os.MkdirTemp("", "berth-it-bin-"); buildErr != nil {
			return
		}
		bin := filepath.Join(builtDir, "berth")
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built = bin
	})
	require.NoError(t, buildErr)
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// TestIntegrationHostPrerequisites checks what `make test` provisions for the later integration tests:
// a Docker Engine, the local registry, iproute2 and the AWS CLI. A missing one fails here.
func TestIntegrationHostPrerequisites(t *testing.T) {
	dockerClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", "/var/run/docker.sock")
		},
	}}
	resp, err := dockerClient.Get("http://docker/_ping")
	require.NoError(t, err, "Docker Engine must answer on /var/run/docker.sock (make test starts it)")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = (&http.Client{Timeout: 10 * time.Second}).Get("http://127.0.0.1:5000/v2/")
	require.NoError(t, err, "a registry must answer on 127.0.0.1:5000 (make test starts it)")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	for _, tool := range []string{"ip", "aws", "docker"} {
		_, err := exec.LookPath(tool)
		assert.NoError(t, err, "%s must be installed (make test installs it)", tool)
	}
}

// TestIntegrationAgentLifecycle runs the real binary: it serves /v1/metadata, `berth healthcheck`
// passes against it, it logs to a file with a stable name, and it exits 0 within 5 s of SIGTERM.
func TestIntegrationAgentLifecycle(t *testing.T) {
	bin := buildBerth(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log", "berth.log")
	envFile := filepath.Join(dir, "ecs.config")
	require.NoError(t, os.WriteFile(envFile, []byte("ECS_LOGFILE="+logFile+"\nECS_LOG_ROLLOVER_TYPE=size\n"), 0o600))
	jsonFile := filepath.Join(dir, "ecs.config.json")
	require.NoError(t, os.WriteFile(jsonFile, []byte(`{"OverrideAWSVPCLocalIPv4Address": "169.254.172.10/22"}`), 0o600))
	addr := freeAddr(t)
	environ := append(os.Environ(), "ECS_ENV_FILE="+envFile, "ECS_AGENT_CONFIG_FILE_PATH="+jsonFile,
		"ECS_INTROSPECTION_ADDR="+addr, "ECS_DATADIR="+filepath.Join(dir, "data"))

	agent := exec.Command(bin, "agent")
	agent.Env = environ
	var stdout, stderr logger.Buffer
	agent.Stdout, agent.Stderr = &stdout, &stderr
	require.NoError(t, agent.Start())
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	t.Cleanup(func() { _ = agent.Process.Kill() })

	healthy := func() bool {
		hc := exec.Command(bin, "healthcheck")
		hc.Env = environ
		return hc.Run() == nil
	}
	require.Eventually(t, healthy, 10*time.Second, 50*time.Millisecond, "agent never became healthy")

	resp, err := http.Get("http://" + addr + "/v1/metadata")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, agent.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	select {
	case err := <-exited:
		require.NoError(t, err, "exit status after SIGTERM; stderr: %s", stderr.String())
		assert.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not exit within 5 s of SIGTERM")
	}
	assert.False(t, healthy(), "healthcheck must fail once the agent is gone")

	logged, err := os.ReadFile(logFile)
	require.NoError(t, err, "the log file keeps its configured name")
	assert.Contains(t, string(logged), "mode=local")
	assert.Contains(t, string(logged), "OverrideAWSVPCLocalIPv4Address=169.254.172.10/22")
	assert.Contains(t, string(logged), "berth stopped")

	// What the agent wrote is not readable by others.
	for path, want := range map[string]os.FileMode{logFile: 0o640, filepath.Dir(logFile): 0o750,
		filepath.Join(dir, "data", "berth.db"): 0o600, filepath.Join(dir, "data", "localcp.db"): 0o600,
		filepath.Join(dir, "data", "local-credentials"): 0o600} {
		info, err := os.Stat(path)
		if assert.NoError(t, err) {
			assert.Equal(t, want, info.Mode().Perm(), path)
		}
	}
}

// TestIntegrationBadConfigExits checks that the real binary exits 1 with the key named on stderr, before
// any logging is configured, and never echoes a secret.
func TestIntegrationBadConfigExits(t *testing.T) {
	bin := buildBerth(t)
	const secret = "hunter2-s3cret"
	dir := t.TempDir()
	envFile := filepath.Join(dir, "ecs.config")
	require.NoError(t, os.WriteFile(envFile, []byte("ECS_ENGINE_AUTH_TYPE=docker\nECS_ENGINE_AUTH_DATA='{\"r\": {\"password\": \""+secret+"\"\n"), 0o600))
	tests := []struct {
		name    string
		args    []string
		env     []string
		wantErr []string
	}{
		{name: "unterminated secret in env file", args: []string{"agent"}, env: []string{"ECS_ENV_FILE=" + envFile},
			wantErr: []string{"ECS_ENGINE_AUTH_DATA", "ecs.config:2"}},
		{name: "bad route in env", args: []string{"agent"}, env: []string{"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES=[\"10.1.0.0/16\",\"nope\"]"},
			wantErr: []string{"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES (env)", "nope"}},
		{name: "instance attributes not strings", args: []string{"config"}, env: []string{`ECS_INSTANCE_ATTRIBUTES={"a": 1}`},
			wantErr: []string{"ECS_INSTANCE_ATTRIBUTES (env)", "cannot unmarshal number"}},
		{name: "unknown registry vendor", args: []string{"agent", "--registry-require=gcr"}, wantErr: []string{"ECS_REGISTRY_REQUIRE (flag)", "gcr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(os.Environ(), append([]string{"ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
				"ECS_INTROSPECTION_ADDR=" + freeAddr(t)}, tt.env...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr)
			assert.Equal(t, 1, exitErr.ExitCode())
			for _, s := range tt.wantErr {
				assert.Contains(t, stderr.String(), s)
			}
			assert.NotContains(t, stderr.String(), secret)
		})
	}
}

// TestIntegrationRegistryRequireExits: with ECS_REGISTRY_REQUIRE=ecr and AWS unreachable the agent
// exits 1 within 15 s, naming the requirement.
func TestIntegrationRegistryRequireExits(t *testing.T) {
	bin := buildBerth(t)
	dir := t.TempDir()
	for _, how := range [][]string{{"agent", "--registry-require=ecr"}, {"agent"}} {
		t.Run(how[len(how)-1], func(t *testing.T) {
			cmd := exec.Command(bin, how...)
			cmd.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
				"ECS_INTROSPECTION_ADDR="+freeAddr(t), "ECS_REGISTRY_REQUIRE=ecr",
				"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://"+freeAddr(t), "AWS_EC2_METADATA_DISABLED=false",
				"AWS_CONFIG_FILE="+filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "credentials"),
				"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_REGION=", "AWS_DEFAULT_REGION=")
			var stderr logger.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr, stderr.String())
			assert.Equal(t, 1, exitErr.ExitCode())
			assert.Less(t, time.Since(start), 15*time.Second)
			assert.Contains(t, stderr.String(), `registry requirement "ecr"`)
		})
	}
}

// TestIntegrationExampleWebTask is what `make run` promises: the agent with the example static task
// directory serves `curl localhost:8080`, `berth ps` shows both containers RUNNING (the sidecar after
// web became HEALTHY), and /metrics counts them.
func TestIntegrationExampleWebTask(t *testing.T) {
	bin := buildBerth(t)
	cluster := fmt.Sprintf("it-example-%d", time.Now().UnixNano())
	addr := freeAddr(t)
	tasksDir := t.TempDir() // as make run does: the examples in a directory only root may write
	examples, err := filepath.Glob("../../../misc/examples/tasks.d/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	for _, f := range examples {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(tasksDir, filepath.Base(f)), data, 0o644))
	}
	environ := append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+addr, "ECS_CLUSTER="+cluster, "ECS_LOCAL_CONTROL_PLANE=true", "ECS_STATIC_TASKS_DIR="+tasksDir,
		"ECS_DATADIR="+t.TempDir())
	agent := exec.Command(bin, "agent")
	agent.Env = environ
	var stdout, stderr logger.Buffer
	agent.Stdout, agent.Stderr = &stdout, &stderr
	require.NoError(t, agent.Start())
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		<-exited
		removeCluster(t, cluster)
	})

	ps := func() string {
		cmd := exec.Command(bin, "ps")
		cmd.Env = environ
		out, _ := cmd.Output()
		return string(out)
	}
	running := func() bool {
		out := ps()
		return regexp.MustCompile(`(?m)^\S+\s+web:1\s+RUNNING\s+RUNNING\s+web\s+RUNNING`).MatchString(out) &&
			regexp.MustCompile(`(?m)^\s+sidecar\s+RUNNING`).MatchString(out)
	}
	if !assert.Eventually(t, running, 90*time.Second, 200*time.Millisecond, "berth ps never showed both containers RUNNING") {
		// Read now, not when Eventually was called.
		t.Fatalf("last berth ps:\n%s\nagent log:\n%s\nstderr:\n%s", ps(), stdout.String(), stderr.String())
	}

	resp, err := http.Get("http://127.0.0.1:8080/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "name=berth-example")

	resp, err = http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(metrics), `berth_containers{status="RUNNING"} 2`)
	assert.Contains(t, string(metrics), `berth_tasks{status="RUNNING"} 1`)
	assert.Regexp(t, `berth_docker_call_duration_seconds_count\{op="start_container",outcome="ok"\} 2`, string(metrics))
}

// removeCluster removes every container Berth made for the given cluster.
func removeCluster(t *testing.T, cluster string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=com.amazonaws.ecs.cluster="+cluster).Output()
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

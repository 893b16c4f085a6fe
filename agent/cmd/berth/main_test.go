package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testEnviron returns an environment that reads only the given files, never the host's /etc/ecs,
// nor its run file.
func testEnviron(t *testing.T, envFile, jsonFile string, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	if envFile == "" {
		envFile = filepath.Join(dir, "absent.config")
		require.NoError(t, os.WriteFile(envFile, nil, 0o600))
	}
	if jsonFile == "" {
		jsonFile = filepath.Join(dir, "absent.json")
		require.NoError(t, os.WriteFile(jsonFile, []byte("{}"), 0o600))
	}
	return append([]string{"ECS_ENV_FILE=" + envFile, "ECS_AGENT_CONFIG_FILE_PATH=" + jsonFile,
		"BERTH_RUN_FILE=" + filepath.Join(dir, "no-agent.json")}, extra...)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestCommands(t *testing.T) {
	const secret = "pa55-w0rd-xyz"
	tests := []struct {
		name       string
		args       []string
		environ    func(t *testing.T) []string
		wantCode   int
		wantOut    []string
		wantErr    []string
		notInOut   []string
		notInError []string
	}{
		{name: "version", args: []string{"version"}, environ: func(t *testing.T) []string { return nil },
			wantOut: []string{"berth ", "go1."}},
		{name: "unknown command", args: []string{"frobnicate"}, environ: func(t *testing.T) []string { return nil },
			wantCode: 2, wantErr: []string{`unknown command "frobnicate"`}},
		{name: "config shows sources", args: []string{"config", "--cluster", "fromflag"},
			environ: func(t *testing.T) []string {
				env := writeFile(t, "ecs.config", "ECS_LOGLEVEL=debug\nECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES=10.0.0.0/8, 172.31.0.0/16\n")
				js := writeFile(t, "c.json", `{"OverrideAWSVPCLocalIPv4Address": "169.254.172.10/22", "Cluster": "fromjson"}`)
				return testEnviron(t, env, js, "ECS_DATADIR=/tmp/d")
			},
			wantOut: []string{`"ECS_CLUSTER": {`, `"fromflag"`, `"source": "flag"`, `"env-file:2"`, `"10.0.0.0/8"`, `"172.31.0.0/16"`,
				`"169.254.172.10/22"`, `"json-file:1"`, `"ECS_DATADIR": {`}},
		{name: "config bad cidr exits 1 naming key and source", args: []string{"config"},
			environ: func(t *testing.T) []string {
				env := writeFile(t, "ecs.config", "# routes\nECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES=10.0.0.0/33\n")
				return testEnviron(t, env, "")
			},
			wantCode: 1, wantErr: []string{"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES", "ecs.config:2", "10.0.0.0/33"}},
		{name: "config secret never echoed", args: []string{"config"},
			environ: func(t *testing.T) []string {
				return testEnviron(t, "", "", "ECS_ENGINE_AUTH_TYPE=docker", `ECS_ENGINE_AUTH_DATA={"r":{"password":"`+secret+`"}}`)
			},
			wantOut: []string{`"ECS_ENGINE_AUTH_DATA": {`, `"<redacted>"`}, notInOut: []string{secret}},
		{name: "config bad secret not echoed", args: []string{"config"},
			environ: func(t *testing.T) []string {
				return testEnviron(t, "", "", "ECS_ENGINE_AUTH_TYPE=docker", `ECS_ENGINE_AUTH_DATA={"r":{"password":"`+secret+`"`)
			},
			wantCode: 1, wantErr: []string{"ECS_ENGINE_AUTH_DATA"}, notInError: []string{secret}},
		{name: "agent bad registry vendor exits 1", args: []string{"agent", "--registry-require=ecr,quay"},
			environ:  func(t *testing.T) []string { return testEnviron(t, "", "") },
			wantCode: 1, wantErr: []string{"level=crit", "ECS_REGISTRY_REQUIRE (flag)", "quay"}},
		{name: "agent bad flag exits 2", args: []string{"agent", "--no-such-flag"},
			environ:  func(t *testing.T) []string { return testEnviron(t, "", "") },
			wantCode: 2, wantErr: []string{"no-such-flag"}},
		{name: "pull of an invalid reference is classified and not retried", args: []string{"pull", "/busybox"},
			environ: func(t *testing.T) []string {
				return testEnviron(t, "", "", "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
			},
			wantCode: 1, wantErr: []string{`berth pull: pull /busybox failed after 0 attempt(s): invalid image reference, not retried: ` +
				`cannot pull image "/busybox": registry credentials: image "/busybox": invalid image reference`},
			notInError: []string{"unclassified"}},
		{name: "exec without a command is a usage error", args: []string{"exec", "web"}, environ: func(t *testing.T) []string { return nil },
			wantCode: 2, wantErr: []string{"berth exec: no command: give it after --", "usage: berth exec [flags] TASK [CONTAINER] -- COMMAND"}},
		{name: "logs without a task is a usage error", args: []string{"logs"}, environ: func(t *testing.T) []string { return nil },
			wantCode: 2, wantErr: []string{"berth logs: want TASK [CONTAINER], got 0 argument(s)", "usage: berth logs"}},
		{name: "logs with no agent fails", args: []string{"logs", "web"},
			environ:  func(t *testing.T) []string { return testEnviron(t, "", "", "ECS_INTROSPECTION_ADDR="+freeAddr(t)) },
			wantCode: 1, wantErr: []string{"berth logs: is the agent running?"}},
		{name: "help lists exec and logs", args: []string{"help"}, environ: func(t *testing.T) []string { return nil },
			wantOut: []string{"\n  exec TASK [CONTAINER] -- COMMAND [ARG...]\n", "\n  logs TASK [CONTAINER]\n"}},
		{name: "healthcheck with no agent fails", args: []string{"healthcheck"},
			environ:  func(t *testing.T) []string { return testEnviron(t, "", "", "ECS_INTROSPECTION_ADDR="+freeAddr(t)) },
			wantCode: 1, wantErr: []string{"unhealthy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, tt.environ(t), &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code, "stderr: %s", stderr.String())
			for _, s := range tt.wantOut {
				assert.Contains(t, stdout.String(), s)
			}
			for _, s := range tt.wantErr {
				assert.Contains(t, stderr.String(), s)
			}
			for _, s := range tt.notInOut {
				assert.NotContains(t, stdout.String(), s)
			}
			for _, s := range tt.notInError {
				assert.NotContains(t, stderr.String(), s)
			}
		})
	}
}

func TestConfigOutputIsJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"config"}, testEnviron(t, "", ""), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	var out struct {
		Mode string `json:"mode"`
		Keys map[string]struct {
			Value  any    `json:"value"`
			Source string `json:"source"`
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out))
	assert.Equal(t, "local", out.Mode)
	assert.Equal(t, "default", out.Keys["ECS_CLUSTER"].Value)
	assert.Equal(t, "default", out.Keys["ECS_CLUSTER"].Source)
}

func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	setGCPercent([]string{"PATH=/bin"})
	if got := debug.SetGCPercent(100); got != agentGCPercent {
		t.Errorf("without GOGC the agent's target is %d, want %d", got, agentGCPercent)
	}
	setGCPercent([]string{"GOGC=200"})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the target is left alone, got %d", got)
	}
}

// berth healthcheck reports the agent unhealthy while /v1/metadata says saving task state fails or
// the host NAT to the task endpoint is not in place.
func TestHealthcheckSaveError(t *testing.T) {
	for _, tt := range []struct {
		body     string
		wantCode int
		want     string
	}{
		{`{"Cluster":"c","ContainerInstanceArn":null,"Version":"v"}`, 0, "healthy"},
		{`{"Cluster":"c","ContainerInstanceArn":null,"Version":"v","StateSaveError":"save task: no space left on device"}`, 1, "saving task state fails: save task: no space left on device"},
		{`{"Cluster":"c","ContainerInstanceArn":null,"Version":"v","HostNATError":"check task endpoint NAT: no rule"}`, 1,
			"containers cannot reach the task endpoint at 169.254.170.2: check task endpoint NAT: no rule"},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(tt.body)) }),
			ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"healthcheck"}, testEnviron(t, "", "", "ECS_INTROSPECTION_ADDR="+ln.Addr().String()), &stdout, &stderr)
		_ = srv.Close()
		assert.Equal(t, tt.wantCode, code, stderr.String())
		assert.Contains(t, stdout.String()+stderr.String(), tt.want)
	}
}

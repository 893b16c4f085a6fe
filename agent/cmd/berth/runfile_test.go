package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
)

// requireRoot fails a test that needs root: run files are trusted only when root's, and the bad
// ones are made with chown.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test writes root's run files and chowns bad ones: run it as root (CI does)")
	}
}

// testRunInfo is a run file of this (live) process.
func testRunInfo() app.RunInfo {
	return app.RunInfo{PID: os.Getpid(), DataDir: "/srv/berth/data", Mode: config.ModeLocal, Cluster: "it",
		IntrospectionAddr: "127.0.0.1:61678", LocalControlPlaneAddr: "127.0.0.1:61677", TaskEndpointAddr: "127.0.0.1:51679"}
}

// writeRunFile writes info as the agent does (0644 in a directory of its own, 0755) and returns
// its path.
func writeRunFile(t *testing.T, info any) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "berth")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "agent.json")
	data, err := json.Marshal(info)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// locate loads the configuration from environ (as testEnviron makes it, plus runFile) and flags, and
// locates the agent.
func locate(t *testing.T, runFile string, flags map[string]string, environ ...string) (*config.Config, agentLookup, string) {
	t.Helper()
	environ = append(testEnviron(t, "", "", environ...), "BERTH_RUN_FILE="+runFile)
	res, err := config.Load(config.Sources{Environ: environ, Flags: flags})
	require.NoError(t, err)
	var stderr bytes.Buffer
	where := locateAgent(res, environ, &stderr)
	return res.Config, where, stderr.String()
}

// Without ECS_DATADIR configured, the run file gives the data directory, the addresses and the
// cluster; each address or cluster that is configured stays as configured.
func TestLocateAgentFromTheRunFile(t *testing.T) {
	requireRoot(t)
	path := writeRunFile(t, testRunInfo())

	cfg, where, notes := locate(t, path, nil)
	assert.Empty(t, notes)
	assert.Equal(t, agentLookup{path: path, pid: os.Getpid()}, where)
	assert.Equal(t, "/srv/berth/data", cfg.DataDir)
	assert.Equal(t, "127.0.0.1:61678", cfg.IntrospectionAddr)
	assert.Equal(t, "127.0.0.1:61677", cfg.LocalControlPlaneAddr)
	assert.Equal(t, "it", cfg.Cluster)
	assert.Equal(t, config.ModeLocal, cfg.Mode)
	assert.Equal(t, " (the agent with pid "+strconv.Itoa(os.Getpid())+", from "+path+")", where.hint())

	cfg, _, _ = locate(t, path, nil, "ECS_INTROSPECTION_ADDR=127.0.0.1:9", "ECS_LOCAL_CONTROL_PLANE_ADDR=127.0.0.1:8", "ECS_CLUSTER=mine")
	assert.Equal(t, "/srv/berth/data", cfg.DataDir, "the data directory still comes from the run file")
	assert.Equal(t, "127.0.0.1:9", cfg.IntrospectionAddr, "a configured address wins")
	assert.Equal(t, "127.0.0.1:8", cfg.LocalControlPlaneAddr)
	assert.Equal(t, "mine", cfg.Cluster, "a configured cluster wins, and with it the mode it makes")
	assert.Equal(t, config.ModeECS, cfg.Mode)

	// An agent in ecs mode: its mode, cluster and region, when the command's configuration names none.
	ecs := testRunInfo()
	ecs.Mode, ecs.Cluster, ecs.Region, ecs.LocalControlPlaneAddr = config.ModeECS, "prod", "eu-west-1", ""
	cfg, _, _ = locate(t, writeRunFile(t, ecs), nil)
	assert.Equal(t, config.ModeECS, cfg.Mode)
	assert.Equal(t, "prod", cfg.Cluster)
	assert.Equal(t, "eu-west-1", cfg.AWSRegion)
	assert.Equal(t, "127.0.0.1:51677", cfg.LocalControlPlaneAddr, "none in the run file: the default stays")
}

// ECS_DATADIR configured anywhere names the agent: the run file is not read at all.
func TestLocateAgentExplicitDataDirWins(t *testing.T) {
	requireRoot(t)
	path := writeRunFile(t, testRunInfo())
	envFile := writeFile(t, "ecs.config", "ECS_DATADIR=/from/env-file\n")
	for _, tt := range []struct {
		name    string
		flags   map[string]string
		environ []string
		want    string
	}{
		{name: "environment", environ: []string{"ECS_DATADIR=/from/env"}, want: "/from/env"},
		{name: "env file", environ: []string{"ECS_ENV_FILE=" + envFile}, want: "/from/env-file"},
		{name: "flag", flags: map[string]string{"ECS_DATADIR": "/from/flag"}, environ: []string{"ECS_DATADIR=/from/env"}, want: "/from/flag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, where, notes := locate(t, path, tt.flags, tt.environ...)
			assert.Equal(t, tt.want, cfg.DataDir)
			assert.Equal(t, "127.0.0.1:51678", cfg.IntrospectionAddr, "nothing comes from the run file")
			assert.Equal(t, "default", cfg.Cluster)
			assert.Equal(t, agentLookup{}, where)
			assert.Empty(t, where.hint())
			assert.Empty(t, notes)
		})
	}
}

// A run file that someone other than root could have written, or that is stale or damaged, is
// ignored with a note saying why; one that is not there, silently.
func TestLocateAgentIgnoresBadRunFiles(t *testing.T) {
	requireRoot(t)
	exited := exec.Command("true")
	require.NoError(t, exited.Run())
	stalePID := exited.Process.Pid
	for _, tt := range []struct {
		name string
		make func(t *testing.T) string // returns the run file's path
		note string                    // "" for none
	}{
		{name: "absent", make: func(t *testing.T) string { return filepath.Join(t.TempDir(), "agent.json") }},
		{name: "directory absent", make: func(t *testing.T) string { return filepath.Join(t.TempDir(), "berth", "agent.json") }},
		{name: "stale", note: "its agent (pid " + strconv.Itoa(stalePID) + ") is not running: the file is stale",
			make: func(t *testing.T) string {
				info := testRunInfo()
				info.PID = stalePID
				return writeRunFile(t, info)
			}},
		{name: "not root's", note: "it is owned by uid 1000, not root", make: func(t *testing.T) string {
			path := writeRunFile(t, testRunInfo())
			require.NoError(t, os.Chown(path, 1000, 1000))
			return path
		}},
		{name: "writable by others", note: "it is writable by group or others (mode 0666", make: func(t *testing.T) string {
			path := writeRunFile(t, testRunInfo())
			require.NoError(t, os.Chmod(path, 0o666))
			return path
		}},
		{name: "writable by group", note: "it is writable by group or others (mode 0664", make: func(t *testing.T) string {
			path := writeRunFile(t, testRunInfo())
			require.NoError(t, os.Chmod(path, 0o664))
			return path
		}},
		{name: "directory not root's", note: "is owned by uid 1000, not root", make: func(t *testing.T) string {
			path := writeRunFile(t, testRunInfo())
			require.NoError(t, os.Chown(filepath.Dir(path), 1000, 1000))
			return path
		}},
		{name: "directory writable by others", note: "is writable by group or others (mode 0777", make: func(t *testing.T) string {
			path := writeRunFile(t, testRunInfo())
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o777|os.ModeSticky))
			return path
		}},
		{name: "symbolic link", note: "it is a symbolic link", make: func(t *testing.T) string {
			target := writeRunFile(t, testRunInfo())
			link := filepath.Join(filepath.Dir(target), "link.json")
			require.NoError(t, os.Symlink(target, link))
			return link
		}},
		{name: "not a file", note: "it is not a regular file", make: func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "agent.json")
			require.NoError(t, os.Mkdir(path, 0o755))
			return path
		}},
		{name: "not JSON", note: "it does not parse", make: func(t *testing.T) string { return writeRunFile(t, "{") }},
		{name: "no pid", note: "its pid 0 is not a process ID", make: func(t *testing.T) string {
			info := testRunInfo()
			info.PID = 0
			return writeRunFile(t, info)
		}},
		{name: "relative data directory", note: `its dataDir "data" is not an absolute path`, make: func(t *testing.T) string {
			info := testRunInfo()
			info.DataDir = "data"
			return writeRunFile(t, info)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.make(t)
			cfg, where, notes := locate(t, path, nil)
			assert.Equal(t, "/var/lib/ecs/data", cfg.DataDir, "the configuration is left as it is")
			assert.Equal(t, "127.0.0.1:51678", cfg.IntrospectionAddr)
			assert.Equal(t, "default", cfg.Cluster)
			assert.Zero(t, where.pid)
			assert.Contains(t, where.hint(), "no running agent found in "+path+": ")
			if tt.note == "" {
				assert.Empty(t, notes, "no run file is nothing to note")
				assert.Equal(t, " (no running agent found in "+path+": it does not exist)", where.hint())
				return
			}
			assert.True(t, strings.HasPrefix(notes, "berth: ignoring "+path+": "), notes)
			assert.Contains(t, notes, tt.note)
			assert.Contains(t, where.hint(), tt.note)
		})
	}
}

// berth ps, run, stop and drain without a running agent say what they tried and what to do.
func TestCommandsWithoutARunFile(t *testing.T) {
	def := writeFile(t, "web.json", `{"family": "web", "containerDefinitions": [{"name": "web", "image": "busybox", "memory": 16}]}`)
	noFile := filepath.Join(t.TempDir(), "agent.json")
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", def}, []string{"berth run: no running agent found in " + noFile + " (it does not exist), nor in the default data directory /var/lib/ecs/data: ",
			"local-credentials", "; set ECS_DATADIR to the running agent's data directory (make run's is .run/data in the checkout)\n"}},
		{[]string{"stop", "0a1b"}, []string{"berth stop: no running agent found in " + noFile + " (it does not exist)", "set ECS_DATADIR"}},
		{[]string{"drain"}, []string{"berth drain: is the agent running? (no running agent found in " + noFile + ": it does not exist)"}},
		{[]string{"ps"}, []string{"berth ps: is the agent running? (no running agent found in " + noFile + ": it does not exist)"}},
		{[]string{"healthcheck"}, []string{"unhealthy", "(no running agent found in " + noFile + ": it does not exist)"}},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			// No agent answers on a free port, whatever runs on this host.
			environ := append(testEnviron(t, "", "", "ECS_INTROSPECTION_ADDR="+freeAddr(t)), "BERTH_RUN_FILE="+noFile)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, environ, &stdout, &stderr)
			assert.Equal(t, 1, code, "stderr: %s", stderr.String())
			for _, s := range tt.want {
				assert.Contains(t, stderr.String(), s)
			}
		})
	}
}

// berth ps reaches the agent at the introspection address its run file names.
func TestPsFindsTheAgentThroughItsRunFile(t *testing.T) {
	requireRoot(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/tasks" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"Tasks": [{"Arn": "` + arnPrefix + `f00d", "Family": "web", "Version": "3", "KnownStatus": "RUNNING",
			"DesiredStatus": "RUNNING", "Containers": [{"Name": "app", "KnownStatus": "RUNNING", "DockerId": "0123456789abcdef"}]}]}`))
	}))
	t.Cleanup(srv.Close)
	info := testRunInfo()
	info.IntrospectionAddr = strings.TrimPrefix(srv.URL, "http://")
	path := writeRunFile(t, info)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"ps"}, append(testEnviron(t, "", ""), "BERTH_RUN_FILE="+path), &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	assert.Contains(t, stdout.String(), "f00d")
	assert.Contains(t, stdout.String(), "web:3")
	assert.Contains(t, stdout.String(), "0123456789ab")
}

// berth run with a run file whose agent has no keys in its data directory names the agent and the
// directory.
func TestRunWithTheRunFilesAgentWithoutKeys(t *testing.T) {
	requireRoot(t)
	info := testRunInfo()
	info.DataDir = t.TempDir()
	path := writeRunFile(t, info)
	def := writeFile(t, "web.json", `{"family": "web", "containerDefinitions": [{"name": "web", "image": "busybox", "memory": 16}]}`)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", def}, append(testEnviron(t, "", ""), "BERTH_RUN_FILE="+path), &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "berth run: the running agent (pid "+strconv.Itoa(os.Getpid())+", from "+path+") has its data directory in "+info.DataDir+": ")
	assert.Contains(t, stderr.String(), filepath.Join(info.DataDir, "local-credentials"))
}

// berth run with a run file of an agent in ecs mode says that it has no embedded control plane.
func TestRunWithTheRunFilesAgentInECSMode(t *testing.T) {
	requireRoot(t)
	info := testRunInfo()
	info.Mode, info.Cluster, info.Region, info.LocalControlPlaneAddr, info.DataDir = config.ModeECS, "prod", "eu-west-1", "", t.TempDir()
	path := writeRunFile(t, info)
	def := writeFile(t, "web.json", `{"family": "web", "containerDefinitions": [{"name": "web", "image": "busybox", "memory": 16}]}`)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", def}, append(testEnviron(t, "", ""), "BERTH_RUN_FILE="+path), &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "berth run: the agent runs in ecs mode (the running agent's mode, from "+path+
		"), with no embedded control plane: run tasks through Amazon ECS (aws ecs run-task) (the agent with pid "+strconv.Itoa(os.Getpid()))
}

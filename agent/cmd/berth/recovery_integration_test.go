//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/logger"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/introspection"
)

const testappImage = "127.0.0.1:5000/berth/testapp:latest"

// agentRun is one run of the real binary against one data directory and static task directory.
type agentRun struct {
	t       *testing.T
	bin     string
	environ []string
	addr    string
	cmd     *exec.Cmd
	exited  chan error
	out     *logger.Buffer
}

// recoveryEnv is a data directory, static task directory and cluster shared by the runs of one test.
type recoveryEnv struct {
	t        *testing.T
	bin      string
	dataDir  string
	tasksDir string
	cluster  string
}

func newRecoveryEnv(t *testing.T, bin string) *recoveryEnv {
	env := &recoveryEnv{t: t, bin: bin, dataDir: t.TempDir(), tasksDir: t.TempDir(),
		cluster: fmt.Sprintf("it-recovery-%d", time.Now().UnixNano())}
	t.Cleanup(func() { removeCluster(t, env.cluster) })
	return env
}

// start runs the agent; extra adds environment variables (such as the crash point). The agent runs
// the embedded control plane (local mode, named cluster) unless extra names a backend
// (ECS_BACKEND_HOST), which makes it an ecs-mode agent.
func (e *recoveryEnv) start(extra ...string) *agentRun {
	e.t.Helper()
	addr := freeAddr(e.t)
	environ := append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+addr, "ECS_CLUSTER="+e.cluster, "ECS_STATIC_TASKS_DIR="+e.tasksDir,
		"ECS_DATADIR="+e.dataDir, "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT=2s")
	if !slices.ContainsFunc(extra, func(kv string) bool { return strings.HasPrefix(kv, "ECS_BACKEND_HOST=") }) {
		environ = append(environ, "ECS_LOCAL_CONTROL_PLANE=true")
	}
	environ = append(environ, extra...)
	r := &agentRun{t: e.t, bin: e.bin, environ: environ, addr: addr, exited: make(chan error, 1), out: &logger.Buffer{}}
	r.cmd = exec.Command(e.bin, "agent")
	r.cmd.Env = environ
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	require.NoError(e.t, r.cmd.Start())
	go func() { r.exited <- r.cmd.Wait() }()
	e.t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.exited
	})
	return r
}

// runAndStop runs the agent with one static task of family until its two containers run, then stops
// the agent with SIGTERM, which leaves them running for the next agent.
func (e *recoveryEnv) runAndStop(family string) {
	e.t.Helper()
	writeStaticTask(e.t, e.tasksDir, family)
	r := e.start()
	r.waitTasks(60*time.Second, "the task runs", familyRunning(family, 2))
	r.stop()
}

// waitKilled waits for the agent to kill itself at its crash point.
func (r *agentRun) waitKilled(timeout time.Duration) {
	r.t.Helper()
	select {
	case err := <-r.exited:
		r.exited <- err
		var exitErr *exec.ExitError
		require.ErrorAs(r.t, err, &exitErr, "log:\n%s", r.out.String())
		status, ok := exitErr.Sys().(syscall.WaitStatus)
		require.True(r.t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL, "the agent died by SIGKILL: %v\nlog:\n%s", err, r.out.String())
	case <-time.After(timeout):
		r.t.Fatalf("the agent never reached its crash point; log:\n%s", r.out.String())
	}
}

// stop sends SIGTERM and waits for exit 0.
func (r *agentRun) stop() {
	r.t.Helper()
	require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-r.exited:
		r.exited <- err
		require.NoError(r.t, err, "log:\n%s", r.out.String())
	case <-time.After(10 * time.Second):
		r.t.Fatal("the agent did not exit within 10 s of SIGTERM")
	}
}

func (r *agentRun) tasks() ([]introspection.TaskResponse, error) {
	resp, err := http.Get("http://" + r.addr + "/v1/tasks")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body introspection.TasksResponse
	err = json.NewDecoder(resp.Body).Decode(&body)
	return body.Tasks, err
}

// waitTasks polls /v1/tasks until cond holds.
func (r *agentRun) waitTasks(timeout time.Duration, what string, cond func([]introspection.TaskResponse) bool) []introspection.TaskResponse {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ts, err := r.tasks()
		if err == nil && cond(ts) {
			return ts
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not happen within %s (last error %v); tasks: %+v\nlog:\n%s", what, timeout, err, ts, r.out.String())
		}
		<-tick.C
	}
}

// dockerState is what Docker holds for a cluster: container ID → start time, and which run.
type dockerState map[string]struct {
	running bool
	started time.Time
}

func clusterContainers(t *testing.T, cluster string) dockerState {
	t.Helper()
	dc, err := docker.NewClientFromEnv()
	require.NoError(t, err)
	list, err := dc.ListContainers(docker.ListContainersOptions{All: true,
		Filters: map[string][]string{"label": {engine.LabelCluster + "=" + cluster}}})
	require.NoError(t, err)
	out := dockerState{}
	for _, c := range list {
		ci, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: c.ID})
		require.NoError(t, err)
		out[c.ID] = struct {
			running bool
			started time.Time
		}{ci.State.Running, ci.State.StartedAt}
	}
	return out
}

func writeStaticTask(t *testing.T, dir, family string) {
	t.Helper()
	def := fmt.Sprintf(`{"family": %q, "containerDefinitions": [
		{"name": "web", "image": %q, "memory": 16, "command": ["sleep"]},
		{"name": "side", "image": %q, "memory": 16, "command": ["sleep"], "dependsOn": [{"containerName": "web", "condition": "START"}]}]}`,
		family, testappImage, testappImage)
	require.NoError(t, os.WriteFile(filepath.Join(dir, family+".json"), []byte(def), 0o600))
}

func familyRunning(family string, containers int) func([]introspection.TaskResponse) bool {
	return func(ts []introspection.TaskResponse) bool {
		for _, tk := range ts {
			if tk.Family != family || tk.KnownStatus != "RUNNING" || tk.DesiredStatus != "RUNNING" || len(tk.Containers) != containers {
				continue
			}
			all := true
			for _, c := range tk.Containers {
				all = all && c.KnownStatus == "RUNNING"
			}
			if all {
				return true
			}
		}
		return false
	}
}

func familyStopped(family string) func([]introspection.TaskResponse) bool {
	return func(ts []introspection.TaskResponse) bool {
		found := false
		for _, tk := range ts {
			if tk.Family != family {
				continue
			}
			found = true
			if tk.KnownStatus != "STOPPED" {
				return false
			}
		}
		return found
	}
}

// TestIntegrationCrashRecoveryKillPoints kills the real agent with SIGKILL at each step of a task's
// launch and stop, restarts it, and checks that the task converges to its desired state with no
// container duplicated or orphaned, and the ones already running kept as they were.
func TestIntegrationCrashRecoveryKillPoints(t *testing.T) {
	bin := buildBerth(t)
	tests := []struct {
		name  string
		crash string // BERTH_TEST_CRASH_AT without the family
		stop  bool   // remove the task's file once it runs, so the crash hits the stop path
	}{
		{name: "accepted", crash: "saved:NONE"},
		{name: "after pull", crash: "saved:PULLED"},
		{name: "name saved, before create", crash: "before-create"},
		{name: "after create, ID not saved", crash: "after-create"},
		{name: "created, before start", crash: "before-start"},
		{name: "after start, RUNNING not saved", crash: "after-start"},
		{name: "RUNNING saved, not reported", crash: "saved:RUNNING"},
		{name: "stop saved, containers not stopped", crash: "before-stop", stop: true},
		{name: "containers stopped, STOPPED not saved", crash: "after-stop", stop: true},
	}
	survived := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newRecoveryEnv(t, bin)
			family := "kill"
			writeStaticTask(t, env.tasksDir, family)
			var first *agentRun
			if tt.stop {
				first = env.start("BERTH_TEST_CRASH_AT=" + tt.crash + "@" + family)
				first.waitTasks(60*time.Second, "the task runs", familyRunning(family, 2))
				require.NoError(t, os.Remove(filepath.Join(env.tasksDir, family+".json")))
			} else {
				first = env.start("BERTH_TEST_CRASH_AT=" + tt.crash + "@" + family)
			}
			first.waitKilled(60 * time.Second)
			before := clusterContainers(t, env.cluster)

			second := env.start()
			if tt.stop {
				second.waitTasks(60*time.Second, "the task stops", familyStopped(family))
			} else {
				second.waitTasks(60*time.Second, "the task runs", familyRunning(family, 2))
			}
			after := clusterContainers(t, env.cluster)
			assert.Len(t, after, 2, "exactly the task's two containers exist: none duplicated, none orphaned")
			for id, c := range before {
				if c.running && !tt.stop {
					got, ok := after[id]
					if assert.True(t, ok, "container %s that ran before the crash still exists", id) {
						assert.True(t, got.running)
						assert.Equal(t, c.started, got.started, "container %s was not restarted", id)
					}
				}
			}
			for id, c := range after {
				assert.Equal(t, !tt.stop, c.running, "container %s", id)
			}
			second.stop()
			if !t.Failed() {
				survived++
			}
		})
	}
	t.Logf("kill points survived: %d of %d", survived, len(tests))
}

// TestIntegrationHundredTasksAdopted kills the agent with 100 running tasks and restarts it: every
// task is adopted with the same containers, none restarted, and recovery takes under 2 s.
func TestIntegrationHundredTasksAdopted(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	for i := range 100 {
		def := fmt.Sprintf(`{"family": "hundred%d", "containerDefinitions": [{"name": "c", "image": %q, "memory": 8, "command": ["sleep"]}]}`, i, testappImage)
		require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, fmt.Sprintf("t%03d.json", i)), []byte(def), 0o600))
	}
	allRunning := func(ts []introspection.TaskResponse) bool {
		n := 0
		for _, tk := range ts {
			if tk.KnownStatus == "RUNNING" {
				n++
			}
		}
		return n == 100
	}
	first := env.start()
	first.waitTasks(3*time.Minute, "100 tasks run", allRunning)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	first.exited <- nil
	before := clusterContainers(t, env.cluster)
	require.Len(t, before, 100)

	second := env.start()
	second.waitTasks(time.Minute, "100 tasks adopted", allRunning)
	after := clusterContainers(t, env.cluster)
	assert.Len(t, after, 100)
	for id, c := range before {
		got, ok := after[id]
		if assert.True(t, ok, "container %s adopted", id) {
			assert.Equal(t, c.started, got.started, "container %s not restarted", id)
		}
	}
	m := regexp.MustCompile(`msg="recovery finished" tasks=100 running=100 .* took=(\S+)`).FindStringSubmatch(second.out.String())
	require.NotNil(t, m, "log:\n%s", second.out.String())
	took, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	t.Logf("recovery of 100 tasks took %s", took)
	assert.Less(t, took, 2*time.Second)
	second.stop()
}

// restartDocker stops the Docker Engine and starts it again the way make test provisions it.
func restartDocker(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		out, err := exec.Command("systemctl", "restart", "docker").CombinedOutput()
		require.NoError(t, err, string(out))
		return
	}
	pid, err := exec.Command("pidof", "dockerd").Output()
	require.NoError(t, err, "dockerd must be running")
	require.NoError(t, exec.Command("kill", "-TERM", strings.TrimSpace(string(pid))).Run())
	require.Eventually(t, func() bool { return exec.Command("pidof", "dockerd").Run() != nil }, time.Minute, 100*time.Millisecond, "dockerd exits")
	out, err := exec.Command("bash", "../../../scripts/provision.sh").CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestIntegrationDockerRestart restarts the Docker Engine under a running agent: the agent reconnects,
// re-inspects, and every task ends in its desired state — the static task runs again and a task the
// operator removed stays stopped.
func TestIntegrationDockerRestart(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	writeStaticTask(t, env.tasksDir, "keep")
	writeStaticTask(t, env.tasksDir, "gone")
	agent := env.start()
	agent.waitTasks(60*time.Second, "both tasks run", func(ts []introspection.TaskResponse) bool {
		return familyRunning("keep", 2)(ts) && familyRunning("gone", 2)(ts)
	})
	require.NoError(t, os.Remove(filepath.Join(env.tasksDir, "gone.json")))
	agent.waitTasks(30*time.Second, "the removed task stops", familyStopped("gone"))

	restartDocker(t)
	ts := agent.waitTasks(2*time.Minute, "the static task runs again", familyRunning("keep", 2))
	assert.True(t, familyStopped("gone")(ts), "the stopped task stays stopped")
	assert.Contains(t, agent.out.String(), "re-subscribed", "the agent says it reconnected")
	agent.stop()
}

// TestIntegrationGracefulStop: SIGTERM leaves tasks running and exits 0, and the next agent adopts
// them; with --stop-tasks-on-exit the tasks stop first.
func TestIntegrationGracefulStop(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	writeStaticTask(t, env.tasksDir, "stays")
	first := env.start()
	first.waitTasks(60*time.Second, "the task runs", familyRunning("stays", 2))
	before := clusterContainers(t, env.cluster)
	first.stop()
	for id, c := range clusterContainers(t, env.cluster) {
		assert.True(t, c.running, "container %s keeps running after the agent stopped", id)
		assert.Equal(t, before[id].started, c.started)
	}

	second := env.start()
	second.waitTasks(30*time.Second, "the task is adopted", familyRunning("stays", 2))
	for id, c := range clusterContainers(t, env.cluster) {
		assert.Equal(t, before[id].started, c.started, "container %s was adopted, not restarted", id)
	}
	second.stop()

	third := &agentRun{t: t, bin: bin, exited: make(chan error, 1), out: &logger.Buffer{}}
	third.addr = freeAddr(t)
	third.cmd = exec.Command(bin, "agent", "--stop-tasks-on-exit")
	third.cmd.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+third.addr, "ECS_CLUSTER="+env.cluster, "ECS_LOCAL_CONTROL_PLANE=true", "ECS_STATIC_TASKS_DIR="+env.tasksDir,
		"ECS_DATADIR="+env.dataDir, "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT=2s")
	third.cmd.Stdout, third.cmd.Stderr = third.out, third.out
	require.NoError(t, third.cmd.Start())
	go func() { third.exited <- third.cmd.Wait() }()
	third.waitTasks(30*time.Second, "the task is adopted", familyRunning("stays", 2))
	third.stop()
	for id, c := range clusterContainers(t, env.cluster) {
		assert.False(t, c.running, "container %s was stopped by --stop-tasks-on-exit", id)
	}
	assert.Contains(t, third.out.String(), "every task stopped")
}

// TestIntegrationCorruptRecord: one record in the state file that does not decode is reported, and
// every other task is still recovered.
func TestIntegrationCorruptRecord(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	env.runAndStop("good")

	db, err := bbolt.Open(filepath.Join(env.dataDir, "berth.db"), 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	require.NoError(t, err)
	const badKey = "arn:aws:ecs:local:000000000000:task/broken/record"
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("tasks")).Put([]byte(badKey), []byte("{this is not a task"))
	}))
	require.NoError(t, db.Close())

	second := env.start()
	second.waitTasks(30*time.Second, "the good task is recovered", familyRunning("good", 2))
	log := second.out.String()
	assert.Contains(t, log, "some saved tasks cannot be read and are skipped")
	assert.Contains(t, log, badKey, "the bad record is named")
	assert.NotContains(t, log, "this is not a task", "its contents are not logged")
	second.stop()
}

// TestIntegrationDamagedStateFile damages berth.db on disk (its pages scrambled, then truncated)
// under a running task. The agent never panics: it exits 1 naming the file and the last good copy
// written at its last clean start, and the container keeps running. Restoring that copy as the
// message says brings the agent back, adopting the container as it is.
func TestIntegrationDamagedStateFile(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	env.runAndStop("survivor")
	before := clusterContainers(t, env.cluster)
	require.Len(t, before, 2)

	path := filepath.Join(env.dataDir, "berth.db")
	lastGood := path + ".last-good"
	_, err := os.Stat(lastGood)
	require.NoError(t, err, "a clean start writes the last good copy")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for name, damaged := range map[string][]byte{
		"scrambled": scramble(data),
		"truncated": data[:2*4096+100], // the meta pages and no more
	} {
		require.NoError(t, os.WriteFile(path, damaged, 0o600), name)
		r := env.start()
		select {
		case err := <-r.exited:
			r.exited <- err
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr, "%s: log:\n%s", name, r.out.String())
			assert.Equal(t, 1, exitErr.ExitCode(), name)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the agent did not exit on a damaged state file; log:\n%s", name, r.out.String())
		}
		out := r.out.String()
		assert.NotContains(t, out, "panic:", name)
		assert.Contains(t, out, path, name)
		assert.Contains(t, out, "mv "+path+" "+path+".damaged && cp "+lastGood+" "+path, name)
		for id, c := range clusterContainers(t, env.cluster) {
			assert.True(t, c.running, "%s: container %s still runs", name, id)
		}
	}

	require.NoError(t, os.Rename(path, path+".damaged"))
	good, err := os.ReadFile(lastGood)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, good, 0o600))
	restored := env.start()
	restored.waitTasks(60*time.Second, "the task is adopted from the last good copy", familyRunning("survivor", 2))
	after := clusterContainers(t, env.cluster)
	for id, c := range before {
		if assert.Contains(t, after, id, "container %s adopted, not replaced", id) {
			assert.Equal(t, c.started, after[id].started, "container %s was not restarted", id)
		}
	}
	restored.stop()
}

// scramble returns data with every page after the two meta pages overwritten.
func scramble(data []byte) []byte {
	out := bytes.Clone(data)
	for i := 2 * 4096; i < len(out); i++ {
		out[i] = byte(i*7919 + i>>3)
	}
	return out
}

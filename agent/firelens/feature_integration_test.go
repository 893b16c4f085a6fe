//go:build integration

package firelens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// itImage is built and pushed by `make images` (scripts/build-images.sh).
const itImage = "127.0.0.1:5000/berth/testapp:latest"

// TestIntegrationRouterAndApp: on the real Docker Engine, a task with a fluentbit router (testapp
// standing in: only the engine's side is under test here) and an app container that logs with
// awsfirelens: the router is created and runs before the app is created, with its configuration
// (holding the secret option's value) and socket directory mounted where the ECS agent mounts them;
// the app has Docker's fluentd driver with the ECS agent's options and no trace of the secret; the
// task's FireLens directory is gone after cleanup.
func TestIntegrationRouterAndApp(t *testing.T) {
	const secretValue = "it-secret-7d41c9"
	eng, client, cluster, dataDir := itEngine(t, &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": secretValue}}})

	arn := "arn:aws:ecs:local:000000000000:task/" + cluster + "/fl1"
	tk := itTask(t, arn)
	require.NoError(t, eng.AddTask(context.Background(), tk))

	running := waitTask(t, eng, arn, "RUNNING", func(tk *task.Task) bool { return tk != nil && tk.KnownStatus == task.TaskRunning })
	router, err := client.InspectContainer(t.Context(), running.Container("log_router").DockerID)
	require.NoError(t, err)
	app, err := client.InspectContainer(t.Context(), running.Container("app").DockerID)
	require.NoError(t, err)

	assert.True(t, router.State.StartedAt.Before(app.Created), "the router runs before the app is created (router started %s, app created %s)",
		router.State.StartedAt, app.Created)
	taskDir := filepath.Join(dataDir, "firelens", "fl1")
	mounts := map[string]string{}
	for _, m := range router.Mounts {
		mounts[m.Destination] = m.Source
	}
	assert.Equal(t, filepath.Join(taskDir, "config", "fluent.conf"), mounts["/fluent-bit/etc/fluent-bit.conf"])
	assert.Equal(t, filepath.Join(taskDir, "socket"), strings.TrimSuffix(mounts["/var/run"], "/"))
	conf, err := os.ReadFile(filepath.Join(taskDir, "config", "fluent.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(conf), secretValue, "the secret option's value is in the router's configuration")
	assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(taskDir, "config", "fluent.conf")))

	assert.Equal(t, "fluentd", app.HostConfig.LogConfig.Type)
	assert.Equal(t, map[string]string{
		"tag":                          "app-firelens-fl1",
		"fluentd-address":              "unix://" + filepath.Join(taskDir, "socket", "fluent.sock"),
		"fluentd-sub-second-precision": "true",
		"fluentd-buffer-limit":         "1048576",
		"fluentd-async":                "true",
	}, app.HostConfig.LogConfig.Config)
	require.NotEmpty(t, router.NetworkSettings.IPAddress)
	assert.Contains(t, app.Config.Env, "FLUENT_HOST="+router.NetworkSettings.IPAddress)
	assert.Contains(t, app.Config.Env, "FLUENT_PORT=24224")
	inspected, err := json.Marshal(app)
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(inspected), secretValue), "the secret value reached Docker's view of the app")

	require.NoError(t, eng.StopTask(context.Background(), arn, "done"))
	stopped := waitTask(t, eng, arn, "STOPPED", func(tk *task.Task) bool { return tk == nil || tk.KnownStatus == task.TaskStopped })
	if stopped != nil {
		appDone, routerDone := stopped.Container("app").FinishedAt, stopped.Container("log_router").FinishedAt
		require.False(t, appDone.IsZero() || routerDone.IsZero(), "both stopped containers have their finish times")
		assert.False(t, routerDone.Before(appDone), "the router stops after the app (app %s, router %s)", appDone, routerDone)
	}
	waitTask(t, eng, arn, "removed", func(tk *task.Task) bool { return tk == nil })
	assert.NoDirExists(t, taskDir, "cleanup removes the task's FireLens directory")
}

// TestIntegrationRouterRefused: a router whose secret option AWS refuses is not created, and the
// essential router takes its task down with a reason naming the cause; nothing of the task's
// FireLens directory is left.
func TestIntegrationRouterRefused(t *testing.T) {
	eng, _, cluster, dataDir := itEngine(t, &fakeSecrets{err: errors.New("secret apikey (valueFrom /it/apikey): AccessDeniedException")})
	arn := "arn:aws:ecs:local:000000000000:task/" + cluster + "/fl2"
	require.NoError(t, eng.AddTask(context.Background(), itTask(t, arn)))
	stopped := waitTask(t, eng, arn, "STOPPED", func(tk *task.Task) bool { return tk != nil && tk.KnownStatus == task.TaskStopped })
	for _, want := range []string{"container log_router", "CannotCreateContainerError", "container app: secretOptions", "AccessDeniedException"} {
		assert.Contains(t, stopped.StoppedReason, want)
	}
	assert.Empty(t, stopped.Container("log_router").DockerID, "the router was not created")
	assert.Empty(t, stopped.Container("app").DockerID, "the app was not created")
	assert.NoDirExists(t, filepath.Join(dataDir, "firelens", "fl2"))
}

// TestIntegrationRouterDies: an essential router that exits takes its task down as any essential
// container does.
func TestIntegrationRouterDies(t *testing.T) {
	eng, client, cluster, _ := itEngine(t, &fakeSecrets{options: map[string]map[string]string{"app": {"apikey": "v"}}})
	arn := "arn:aws:ecs:local:000000000000:task/" + cluster + "/fl3"
	require.NoError(t, eng.AddTask(context.Background(), itTask(t, arn)))
	running := waitTask(t, eng, arn, "RUNNING", func(tk *task.Task) bool { return tk != nil && tk.KnownStatus == task.TaskRunning })
	require.NoError(t, client.StopContainer(t.Context(), running.Container("log_router").DockerID, time.Second))
	stopped := waitTask(t, eng, arn, "STOPPED", func(tk *task.Task) bool { return tk != nil && tk.KnownStatus == task.TaskStopped })
	assert.Equal(t, task.StopReasonEssentialExited, stopped.StoppedReason)
}

// itEngine runs a real engine with the feature against the real Docker Engine; every container it
// makes carries a cluster label unique to the test and is removed at the end, with the data
// directory.
func itEngine(t *testing.T, secrets Secrets) (*engine.Engine, *dockerclient.Client, string, string) {
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: os.Getenv("DOCKER_HOST"),
		Pull: dockerclient.PullConfig{Behavior: dockerclient.BehaviorPreferCached}})
	require.NoError(t, err)
	_, err = client.PullImage(t.Context(), itImage, nil)
	require.NoError(t, err, "the test image must be in the local registry (make images pushes it)")
	// A short data directory: the router's socket path must fit in a unix socket address.
	dataDir, err := os.MkdirTemp("", "ffeat-")
	require.NoError(t, err)
	cluster := fmt.Sprintf("ffeat-it-%d", time.Now().UnixNano())
	feature := New(Config{DataDir: dataDir, Cluster: cluster, Secrets: secrets}, logger.Nop())
	eng := engine.New(engine.Config{Cluster: cluster, StopTimeout: 2 * time.Second, StartTimeout: 30 * time.Second, CleanupWait: time.Second,
		ReconcileInterval: time.Second, Resources: engine.Resources{CPU: 64 * 1024, MemoryMiB: 64 * 1024}, Features: []engine.Feature{feature}},
		client, client.Puller(), nil, state.NewMemory(), logger.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, eng.Start(ctx))
	t.Cleanup(func() {
		cancel()
		eng.Wait()
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		list, _ := client.ListContainersByLabel(cctx, map[string]string{engine.LabelCluster: cluster})
		for _, c := range list {
			_ = client.RemoveContainer(cctx, docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
		}
		client.Close()
		_ = os.RemoveAll(dataDir)
	})
	return eng, client, cluster, dataDir
}

// itTask is a bridge task with a fluentbit router (testapp sleeping) and an essential app that logs
// through it with a secret option; the app comes first in the definition, so only the router
// dependency orders them.
func itTask(t *testing.T, arn string) *task.Task {
	def, err := taskdef.Parse([]byte(fmt.Sprintf(`{"family":"firelens-it","networkMode":"bridge","containerDefinitions":[
		{"name":"app","image":%[1]q,"memory":32,"essential":true,"command":["print","-out","hello router","-stay"]},
		{"name":"log_router","image":%[1]q,"memory":32,"essential":true,"command":["sleep"]}]}`, itImage)))
	require.NoError(t, err)
	tk := def.NewTask(arn)
	tk.Revision = 1
	tk.Container("log_router").Firelens = &task.FirelensConfiguration{Type: task.FirelensFluentbit}
	tk.Container("app").LogConfiguration = &task.LogConfiguration{LogDriver: task.LogDriverFirelens,
		Options:       map[string]string{"Name": "stdout", "log-driver-buffer-limit": "1048576"},
		SecretOptions: []task.Secret{{Name: "apikey", ValueFrom: "/it/apikey"}}}
	return tk
}

// waitTask polls the engine's copy of the task (nil once removed) until cond holds.
func waitTask(t *testing.T, eng *engine.Engine, arn, what string, cond func(*task.Task) bool) *task.Task {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tk := eng.Task(arn)
		if cond(tk) {
			return tk
		}
		if tk != nil && tk.KnownStatus == task.TaskStopped && what == "RUNNING" {
			t.Fatalf("the task stopped: %s", tk.StoppedReason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the task %s; task %+v", what, tk)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

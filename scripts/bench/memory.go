package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/scripts/internal/agentproc"
)

// agentMemory runs the real berth binary and reads its resident memory idle, then with 100 running
// static tasks.
func (b *bench) agentMemory(ctx context.Context) {
	dir, err := os.MkdirTemp("", "berth-bench-memory")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "berth")
	if err := agentproc.Build(context.Background(), bin); err != nil {
		fail("%v", err)
	}
	tasksDir := filepath.Join(dir, "tasks.d")
	if err := os.Mkdir(tasksDir, 0o755); err != nil {
		fail("%v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	agent := exec.CommandContext(ctx, bin, "agent")
	agent.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+addr, "ECS_CLUSTER="+benchCluster, "ECS_LOCAL_CONTROL_PLANE=true", "ECS_STATIC_TASKS_DIR="+tasksDir,
		"ECS_DATADIR="+filepath.Join(dir, "data"), "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_LOGLEVEL=warn")
	var out logger.Buffer // what the agent says, shown when it does not do what is waited for
	agent.Stdout, agent.Stderr = &out, &out
	if err := agent.Start(); err != nil {
		fail("start berth: %v", err)
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
		b.removeBenchContainers()
	}()
	tasks := func() ([]introspection.TaskResponse, error) {
		resp, err := http.Get("http://" + addr + "/v1/tasks")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var body introspection.TasksResponse
		err = json.NewDecoder(resp.Body).Decode(&body)
		return body.Tasks, err
	}
	waitUntil := func(what string, cond func([]introspection.TaskResponse) bool) {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			ts, err := tasks()
			if err == nil && cond(ts) {
				return
			}
			if time.Now().After(deadline) {
				fail("agent: %s did not happen within 5 minutes (last error: %v); the agent said:\n%s", what, err, out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitUntil("start", func([]introspection.TaskResponse) bool { return true })
	time.Sleep(2 * time.Second) // let start-up allocations settle before reading idle memory
	idle := rssMiB(agent.Process.Pid)

	for i := range 100 {
		def := fmt.Sprintf(`{"family": "mem%d", "containerDefinitions": [{"name": "c", "image": %q, "memory": 8, "command": ["sleep"]}]}`, i, testImage)
		if err := os.WriteFile(filepath.Join(tasksDir, fmt.Sprintf("t%03d.json", i)), []byte(def), 0o600); err != nil {
			fail("%v", err)
		}
	}
	started := time.Now()
	waitUntil("100 tasks RUNNING", func(ts []introspection.TaskResponse) bool {
		running := 0
		for _, t := range ts {
			if t.KnownStatus == "RUNNING" {
				running++
			}
		}
		return running == 100
	})
	loaded := rssMiB(agent.Process.Pid)
	fmt.Printf("memory: berth resident set, idle %.1f MiB (goal <= 30), with 100 running tasks %.1f MiB (goal <= 60); 100 tasks reached RUNNING in %s\n",
		idle, loaded, time.Since(started).Round(100*time.Millisecond))
}

// rssMiB reads VmRSS of a process, or ends the bench.
func rssMiB(pid int) float64 {
	mib, err := agentproc.ResidentMiB(pid)
	if err != nil {
		fail("read memory of berth: %v", err)
	}
	return mib
}

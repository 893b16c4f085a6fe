package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-agent/berth/agent/controlplane"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/scripts/internal/agentproc"
	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// ecsCall sends one ECS JSON 1.1 operation to a control plane and decodes the answer.
func ecsCall(endpoint string, keys localauth.Keys, op string, in, out any) error {
	return ecsstandin.Call(context.Background(), endpoint, keys, op, in, out)
}

// controlPlane measures the control plane's overhead: the real agent in local mode, a task run with
// RunTask, timed from RunTask returning until DescribeTasks says RUNNING, against the engine alone on
// the same one-container task in the same run; then the state changes per second the reporter
// delivers to the embedded control plane.
func (b *bench) controlPlane(ctx context.Context, rounds int) {
	engineOnly := median(b.berthRoundSequential(ctx, rounds))

	dir, err := os.MkdirTemp("", "berth-bench-cp")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "berth")
	if err := agentproc.Build(context.Background(), bin); err != nil {
		fail("%v", err)
	}
	cpAddr, introAddr := freeLoopback(), freeLoopback()
	agent := exec.Command(bin, "agent")
	agent.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_INTROSPECTION_ADDR="+introAddr, "ECS_LOCAL_CONTROL_PLANE_ADDR="+cpAddr, "ECS_CLUSTER="+benchCluster, "ECS_LOCAL_CONTROL_PLANE=true",
		"ECS_DATADIR="+filepath.Join(dir, "data"), "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_LOGLEVEL=warn")
	if err := agent.Start(); err != nil {
		fail("start berth: %v", err)
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
		b.removeBenchContainers()
	}()
	endpoint := "http://" + cpAddr
	deadline := time.Now().Add(30 * time.Second)
	var keys localauth.Keys
	for {
		var list struct {
			ContainerInstanceArns []string `json:"containerInstanceArns"`
		}
		keys, err = localauth.Load(localauth.Path(filepath.Join(dir, "data")))
		if err == nil && ecsCall(endpoint, keys, "ListContainerInstances", map[string]any{"cluster": benchCluster}, &list) == nil && len(list.ContainerInstanceArns) > 0 {
			break
		}
		if time.Now().After(deadline) {
			fail("the agent did not register with its control plane")
		}
		time.Sleep(50 * time.Millisecond)
	}
	def := map[string]any{"family": "cpbench", "containerDefinitions": []map[string]any{{"name": "c", "image": testImage, "memory": 16, "command": []string{"sleep"}}}}
	if err := ecsCall(endpoint, keys, "RegisterTaskDefinition", def, nil); err != nil {
		fail("%v", err)
	}
	var viaCP []time.Duration
	for range rounds {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
		}
		if err := ecsCall(endpoint, keys, "RunTask", map[string]any{"cluster": benchCluster, "taskDefinition": "cpbench"}, &ran); err != nil || len(ran.Tasks) != 1 {
			fail("run task: %v", err)
		}
		start := time.Now()
		arn := ran.Tasks[0].TaskArn
		for {
			var d struct {
				Tasks []struct {
					LastStatus string `json:"lastStatus"`
				} `json:"tasks"`
			}
			if err := ecsCall(endpoint, keys, "DescribeTasks", map[string]any{"cluster": benchCluster, "tasks": []string{arn}}, &d); err != nil {
				fail("%v", err)
			}
			if len(d.Tasks) == 1 && d.Tasks[0].LastStatus == "RUNNING" {
				break
			}
			if time.Since(start) > time.Minute {
				fail("task %s did not run within a minute", arn)
			}
			time.Sleep(5 * time.Millisecond)
		}
		viaCP = append(viaCP, time.Since(start))
		_ = ecsCall(endpoint, keys, "StopTask", map[string]any{"cluster": benchCluster, "task": arn}, nil)
	}
	cp := median(viaCP)
	fmt.Printf("control plane: %d one-container tasks, one at a time\n", rounds)
	fmt.Printf("  engine alone (accepted -> RUNNING)              median %8s\n", engineOnly.Round(time.Millisecond))
	fmt.Printf("  RunTask returned -> DescribeTasks RUNNING       median %8s   (payload over ACS, engine, report back)\n", cp.Round(time.Millisecond))
	fmt.Printf("  control-plane overhead %s (ratio %.2f)\n", (cp - engineOnly).Round(time.Millisecond), float64(cp)/float64(engineOnly))
	b.stateChangeRate(ctx)
}

// berthRoundSequential is the engine-only time to RUNNING of one task at a time.
func (b *bench) berthRoundSequential(ctx context.Context, rounds int) []time.Duration {
	client := newPrefersCached()
	defer client.Close()
	var out []time.Duration
	for range rounds {
		out = append(out, b.berthRound(ctx, client, 1)...)
	}
	return out
}

// stateChangeRate measures how many task state changes per second the reporter delivers to the
// embedded control plane.
func (b *bench) stateChangeRate(ctx context.Context) {
	const tasks = 200
	dir, err := os.MkdirTemp("", "berth-bench-rate")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	srv, err := ecsstandin.NewControlPlane(filepath.Join(dir, "cp.db"))
	if err != nil {
		fail("%v", err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	endpoint := "http://" + ln.Addr().String()
	client, err := ecsclient.New(ctx, ecsclient.Config{Region: ecsstandin.Region, Endpoint: endpoint,
		Credentials: ecsstandin.Keys.Provider(), Cluster: benchCluster})
	if err != nil {
		fail("%v", err)
	}
	if _, err := client.RegisterContainerInstance(ctx, ecsclient.Registration{CPU: 2048, MemoryMiB: 4096, AgentVersion: "bench", DockerAPIVersion: "1.41"}); err != nil {
		fail("register: %v", err)
	}
	def := map[string]any{"family": "ratebench", "containerDefinitions": []map[string]any{{"name": "c", "image": testImage, "memory": 16}}}
	if err := ecsCall(endpoint, ecsstandin.Keys, "RegisterTaskDefinition", def, nil); err != nil {
		fail("%v", err)
	}
	var arns []string
	for len(arns) < tasks {
		var ran struct {
			Tasks []struct {
				TaskArn string `json:"taskArn"`
			} `json:"tasks"`
		}
		if err := ecsCall(endpoint, ecsstandin.Keys, "RunTask", map[string]any{"cluster": benchCluster, "taskDefinition": "ratebench", "count": 10}, &ran); err != nil {
			fail("%v", err)
		}
		for _, t := range ran.Tasks {
			arns = append(arns, t.TaskArn)
		}
	}
	allSent := make(chan struct{})
	reporter := controlplane.NewReporter(client, &countingSentStore{want: tasks, done: allSent}, controlplane.ReporterConfig{}, logger.Nop())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reporter.Run(rctx)
	}()
	start := time.Now()
	for _, status := range []task.TaskStatus{task.TaskRunning, task.TaskStopped} {
		cs := task.ContainerRunning
		if status == task.TaskStopped {
			cs = task.ContainerStopped
		}
		for _, arn := range arns {
			code := 0
			c := &task.Container{Name: "c", KnownStatus: cs, DockerID: "bench"}
			if status == task.TaskStopped {
				c.ExitCode = &code
			}
			reporter.Report(&task.Task{Arn: arn, Family: "ratebench", Revision: 1, KnownStatus: status, DesiredStatus: task.TaskRunning, Containers: []*task.Container{c}})
		}
	}
	select {
	case <-allSent:
	case <-time.After(2 * time.Minute):
		fail("the reporter did not deliver every STOPPED within 2 minutes")
	}
	took := time.Since(start)
	cancel()
	<-done
	fmt.Printf("state changes: %d tasks reported RUNNING then STOPPED; %d submissions (a newer state supersedes an undelivered one) in %s = %.0f per second\n",
		tasks, reporter.Delivered(), took.Round(time.Millisecond), float64(reporter.Delivered())/took.Seconds())
}

// countingSentStore stands in for the agent's state: the rate bench measures delivery, not
// persistence. It closes done once want tasks have their STOPPED recorded as sent.
type countingSentStore struct {
	want    int
	stopped atomic.Int64
	done    chan struct{}
}

func (s *countingSentStore) SaveSent(_ context.Context, r state.SentRecord) error {
	if r.Task == task.TaskStopped && s.stopped.Add(1) == int64(s.want) {
		close(s.done)
	}
	return nil
}

func (s *countingSentStore) DeleteSent(context.Context, string) error { return nil }

func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

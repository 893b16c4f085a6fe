package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/scripts/internal/agentproc"
)

// latencySamples is how many requests (or berth ps runs) each latency row takes, one at a time.
const latencySamples = 200

// taskClient asks the task endpoint from inside one container's network namespace, as a process in
// the container does: to the address in its ECS_CONTAINER_METADATA_URI_V4, a new connection each time.
type taskClient struct {
	container string
	uri       string // the container's ECS_CONTAINER_METADATA_URI_V4
	http      *http.Client
}

func newTaskClient(c *docker.Container) (taskClient, error) {
	tc := taskClient{container: c.ID}
	for _, kv := range c.Config.Env {
		if v, ok := strings.CutPrefix(kv, "ECS_CONTAINER_METADATA_URI_V4="); ok {
			tc.uri = v
		}
	}
	if tc.uri == "" {
		return tc, fmt.Errorf("container %.12s has no ECS_CONTAINER_METADATA_URI_V4", c.ID)
	}
	if c.State.Pid <= 0 {
		return tc, fmt.Errorf("container %.12s has no process", c.ID)
	}
	netns := fmt.Sprintf("/proc/%d/ns/net", c.State.Pid)
	tc.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			// The socket is made on a thread inside the container's namespace; once connected it
			// is used from any thread.
			err = ns.WithNetNSPath(netns, func(ns.NetNS) error {
				var d net.Dialer
				conn, err = d.DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	return tc, nil
}

// get asks path below the container's metadata URI and returns how long the answer took.
func (tc taskClient) get(ctx context.Context, path string) (time.Duration, error) {
	return timedGet(ctx, tc.http, tc.uri+path)
}

// timedGet GETs url, reads the whole answer and returns how long that took; anything but 200 is an
// error.
func timedGet(ctx context.Context, client *http.Client, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return took, nil
}

// latency samples, with n tasks of this run running, the introspection API's /v1/tasks, the task
// metadata endpoint's /task and /task/stats asked from inside the tasks' containers, and the whole
// `berth ps` command run as a process: latencySamples each, one at a time.
func (r *ecsRun) latency(ctx context.Context, n int) error {
	ids, err := r.runningContainers(ctx)
	if err != nil {
		return err
	}
	if len(ids) != n {
		return fmt.Errorf("%d containers of this run are running, not %d", len(ids), n)
	}
	clients := make([]taskClient, 0, n)
	for _, id := range ids {
		c, err := r.dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: id, Context: ctx})
		if err != nil {
			return fmt.Errorf("inspect %.12s: %w", id, err)
		}
		tc, err := newTaskClient(c)
		if err != nil {
			return err
		}
		clients = append(clients, tc)
	}
	inContainer, err := r.testappMetadata(ctx, clients[0].container)
	if err != nil {
		return err
	}
	rss, err := agentproc.ResidentMiB(r.agent.pid())
	if err != nil {
		return err
	}

	intro := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	introURL := "http://" + envValue(r.env, "ECS_INTROSPECTION_ADDR") + "/v1/tasks"
	listed, running, err := introspectionCount(ctx, intro, introURL)
	if err != nil {
		return err
	}
	if running < n {
		return fmt.Errorf("/v1/tasks lists %d RUNNING tasks, not %d", running, n)
	}
	var tasksAPI, taskMeta, taskStats, ps []time.Duration
	for i := range latencySamples {
		d, err := timedGet(ctx, intro, introURL)
		if err != nil {
			return fmt.Errorf("introspection: %w", err)
		}
		tasksAPI = append(tasksAPI, d)
		tc := clients[i%len(clients)]
		if d, err = tc.get(ctx, "/task"); err != nil {
			return fmt.Errorf("task metadata from container %.12s: %w", tc.container, err)
		}
		taskMeta = append(taskMeta, d)
		if d, err = tc.get(ctx, "/task/stats"); err != nil {
			return fmt.Errorf("task stats from container %.12s: %w", tc.container, err)
		}
		taskStats = append(taskStats, d)
		if d, err = r.timedPs(ctx, n); err != nil {
			return err
		}
		ps = append(ps, d)
	}
	r.note("latency tasks=%d samples=%d done", n, latencySamples)
	fmt.Printf("ecs latency: %d tasks running (/v1/tasks lists %d); %d samples each, one request at a time, a new connection each\n",
		n, listed, latencySamples)
	row := func(what string, ds []time.Duration) {
		fmt.Printf("  %-62s p50 %7.2f ms  p99 %7.2f ms   goal p99 <= 20 ms\n", what, ms(percentile(ds, 50)), ms(percentile(ds, 99)))
	}
	row("introspection GET /v1/tasks", tasksAPI)
	row("task metadata GET /v4/<token>/task, from the task's container", taskMeta)
	row("task metadata GET /v4/<token>/task/stats, likewise", taskStats)
	row("berth ps, the whole command run as a process", ps)
	fmt.Printf("  (the metadata requests go from each container's network namespace to its ECS_CONTAINER_METADATA_URI_V4, through\n")
	fmt.Printf("  the agent's NAT, in turn over the %d containers; in one of them `testapp metadata -path task` answered %d bytes:\n", n, inContainer)
	fmt.Printf("  testapp asks once per process and has no mode that repeats and times its requests)\n")
	fmt.Printf("  berth resident memory with %d tasks running %.1f MiB (VmRSS)\n", n, rss)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// introspectionCount returns how many tasks /v1/tasks lists and how many of them are RUNNING.
func introspectionCount(ctx context.Context, client *http.Client, url string) (listed, running int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("introspection: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("introspection %s: %s", url, resp.Status)
	}
	var body introspection.TasksResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, 0, fmt.Errorf("introspection %s: %w", url, err)
	}
	for _, t := range body.Tasks {
		if t.KnownStatus == "RUNNING" {
			running++
		}
	}
	return len(body.Tasks), running, nil
}

// timedPs runs `berth ps` with the agent's environment and returns how long the whole command took;
// it must exit 0 and print a line per task at least.
func (r *ecsRun) timedPs(ctx context.Context, tasks int) (time.Duration, error) {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.bin, "ps")
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = &out, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("berth ps: %w\n%s", err, stderr.Bytes())
	}
	if lines := bytes.Count(out.Bytes(), []byte("\n")); lines <= tasks {
		return 0, fmt.Errorf("berth ps printed %d lines with %d tasks running", lines, tasks)
	}
	return took, nil
}

// testappMetadata runs `testapp metadata -path task` in the container, the client a task would
// run, and returns the size of the answer it printed; it must exit 0.
func (r *ecsRun) testappMetadata(ctx context.Context, container string) (int, error) {
	exe, err := r.dc.CreateExec(docker.CreateExecOptions{Context: ctx, Container: container,
		Cmd: []string{"/testapp", "metadata", "-path", "task"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, fmt.Errorf("exec in %.12s: %w", container, err)
	}
	var out, stderr bytes.Buffer
	if err := r.dc.StartExec(exe.ID, docker.StartExecOptions{Context: ctx, OutputStream: &out, ErrorStream: &stderr}); err != nil {
		return 0, fmt.Errorf("exec in %.12s: %w", container, err)
	}
	st, err := r.dc.InspectExec(exe.ID)
	if err != nil {
		return 0, fmt.Errorf("exec in %.12s: %w", container, err)
	}
	if st.Running || st.ExitCode != 0 {
		return 0, fmt.Errorf("testapp metadata in %.12s: exit %d (running %v): %s", container, st.ExitCode, st.Running, stderr.Bytes())
	}
	return out.Len(), nil
}

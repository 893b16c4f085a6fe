package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
)

// The documented labels of the agent's containers (README), written out rather than imported.
const (
	labelTaskARN   = "com.amazonaws.ecs.task-arn"
	labelContainer = "com.amazonaws.ecs.container-name"
	labelCluster   = "com.amazonaws.ecs.cluster"
)

// repoRoot is the directory of the module's go.mod.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the berth module")
	}
	return filepath.Dir(mod), nil
}

// restartDocker stops the Docker Engine and starts it again the way make test provisions it (as
// agent/cmd/berth's TestIntegrationDockerRestart does), then waits until it answers.
func restartDocker(ctx context.Context, dc *docker.Client, root string) error {
	if err := stopDocker(ctx); err != nil {
		return err
	}
	return startDocker(ctx, dc, root)
}

// stopDocker stops the Docker Engine (systemd's unit, or the dockerd make provision started) and
// waits until it has exited.
func stopDocker(ctx context.Context) error {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		if out, err := exec.CommandContext(ctx, "systemctl", "stop", "docker").CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl stop docker: %w: %s", err, out)
		}
		return nil
	}
	pid, err := exec.CommandContext(ctx, "pidof", "dockerd").Output()
	if err != nil {
		return fmt.Errorf("dockerd must be running: pidof: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "kill", "-TERM", strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
		return fmt.Errorf("kill -TERM dockerd: %w: %s", err, out)
	}
	return poll(ctx, time.Minute, 100*time.Millisecond, "dockerd exits", func() bool {
		return exec.CommandContext(ctx, "pidof", "dockerd").Run() != nil
	})
}

// startDocker starts the Docker Engine stopDocker stopped and waits until it answers.
func startDocker(ctx context.Context, dc *docker.Client, root string) error {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		if out, err := exec.CommandContext(ctx, "systemctl", "start", "docker").CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl start docker: %w: %s", err, out)
		}
	} else {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "provision.sh"))
		cmd.Env = append(os.Environ(), "BERTH_RUN_DIR="+filepath.Join(root, ".run"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("provision.sh: %w: %s", err, out)
		}
	}
	return poll(ctx, time.Minute, 100*time.Millisecond, "dockerd answers", func() bool { return dc.PingWithContext(ctx) == nil })
}

// poll calls cond every interval until it holds, for at most limit.
func poll(ctx context.Context, limit, interval time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s: %w", what, limit, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}

// taskContainer names one container of one task: what must have exactly one Docker container.
type taskContainer struct{ task, name string }

// seenContainer is what the soak last saw of one Docker container.
type seenContainer struct {
	id          string
	tc          taskContainer
	running     bool
	everRunning bool // seen running at least once
	exitCode    *int // when seen exited
	gone        bool // absent from the last listing
}

// dockerWatch lists the run's containers (by the cluster label) every second and remembers every
// container it ever saw, so a container created twice for one task container is caught even after
// the agent removed one of them.
type dockerWatch struct {
	dc      *docker.Client
	cluster string

	mu   sync.Mutex
	seen map[string]*seenContainer // by Docker ID
	errs int                       // listings that failed (dockerd restarting)
}

var exitedRE = regexp.MustCompile(`^Exited \((-?\d+)\)`)

// list lists the run's containers once and records them; it returns the listing's error.
func (w *dockerWatch) list(ctx context.Context) ([]docker.APIContainers, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := w.dc.ListContainers(docker.ListContainersOptions{All: true, Context: ctx,
		Filters: map[string][]string{"label": {labelCluster + "=" + w.cluster}}})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.errs++
		return nil, err
	}
	present := map[string]bool{}
	for _, c := range list {
		present[c.ID] = true
		s := w.seen[c.ID]
		if s == nil {
			s = &seenContainer{id: c.ID, tc: taskContainer{c.Labels[labelTaskARN], c.Labels[labelContainer]}}
			w.seen[c.ID] = s
		}
		s.gone = false
		s.running = c.State == "running"
		s.everRunning = s.everRunning || s.running
		if m := exitedRE.FindStringSubmatch(c.Status); m != nil {
			code, _ := strconv.Atoi(m[1])
			s.exitCode = &code
		}
	}
	for id, s := range w.seen {
		if !present[id] {
			s.gone = true
		}
	}
	return list, nil
}

// run lists every second until ctx ends.
func (w *dockerWatch) run(ctx context.Context) {
	for {
		_, _ = w.list(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// snapshot returns a copy of every container seen.
func (w *dockerWatch) snapshot() []seenContainer {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]seenContainer, 0, len(w.seen))
	for _, s := range w.seen {
		out = append(out, *s)
	}
	return out
}

// runningCount returns how many containers of the run the last listing saw running.
func (w *dockerWatch) runningCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.seen {
		if s.running && !s.gone {
			n++
		}
	}
	return n
}

// removeAll removes every container of the run (and only those), bounded in time.
func (w *dockerWatch) removeAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list, err := w.dc.ListContainers(docker.ListContainersOptions{All: true, Context: ctx,
			Filters: map[string][]string{"label": {labelCluster + "=" + w.cluster}}})
		if err != nil {
			return fmt.Errorf("list the soak's containers: %w", err)
		}
		if len(list) == 0 {
			return nil
		}
		var wg sync.WaitGroup
		for _, c := range list {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = w.dc.RemoveContainer(docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true, Context: ctx})
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return fmt.Errorf("%d containers of the soak not removed: %w", len(list), ctx.Err())
		}
	}
}

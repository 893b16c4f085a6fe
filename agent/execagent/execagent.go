// Package execagent is ECS Exec's managed agent as an engine feature: a container whose definition
// carries the ExecuteCommandAgent managed agent gets the SSM agent (the newest complete version under
// the dependencies directory) bind-mounted read-only with its generated configuration, the CA bundle
// and a log directory, and the agent is started inside it with a detached Docker exec as root once
// the container runs, watched, and restarted when its process ends, with backoff and a bound on
// attempts in a row. Its state is the container's ManagedAgent, changed on the task's worker and so
// saved and reported like any other change:
//
//	PENDING ──exec started──▶ RUNNING ──process ended──▶ PENDING (restart after backoff) ──▶ RUNNING …
//	   │                         │
//	   │ files missing,          │ attempts in a row spent, container stopped, task stopped
//	   │ start attempts spent    ▼
//	   └────────────────────▶ STOPPED (final, with the reason)
//
// The container and its task run on whatever happens to the managed agent.
package execagent

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
)

// The ECS agent's host directories (agent/engine/execcmd): DefaultDepsDir holds bin/<version>/,
// certs/ and config/; DefaultLogDir the agents' logs by task and container.
const (
	DefaultDepsDir = "/var/lib/ecs/deps/execute-command"
	DefaultLogDir  = "/var/log/ecs/exec"
)

// Defaults of Config, the ECS agent's where it has them (agent/engine/execcmd/manager.go): at most 5
// start attempts in a row, 1 s → 30 s between them, ×1.5, 20 % jitter. The ECS agent looks at its
// managed agents every 15 minutes; Berth every 30 seconds.
const (
	defaultCheckInterval = 30 * time.Second
	defaultMaxAttempts   = 5
)

// Docker is the part of the Docker Engine client the feature calls.
type Docker interface {
	ExecDetached(ctx context.Context, id, user string, cmd []string) (string, error)
	ExecStatus(ctx context.Context, id string) (dockerclient.ExecState, error)
}

var _ Docker = (*dockerclient.Client)(nil)

// Config configures the feature. Zero values take the defaults above.
type Config struct {
	DepsDir string // the SSM agent's binaries, CA bundle and generated configuration (DefaultDepsDir)
	LogDir  string // the agents' log directories (DefaultLogDir)
	// CheckInterval is how often a running agent's process is looked at.
	CheckInterval time.Duration
	// MaxAttempts bounds the start attempts in a row (a start that fails, or a process found ended
	// before a check found it running) before the agent is STOPPED.
	MaxAttempts int
	// NewBackoff returns the wait between attempts of one container's agent.
	NewBackoff func() retry.Backoff
	Clock      clockwork.Clock
}

func (c Config) withDefaults() Config {
	if c.DepsDir == "" {
		c.DepsDir = DefaultDepsDir
	}
	if c.LogDir == "" {
		c.LogDir = DefaultLogDir
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = defaultCheckInterval
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.NewBackoff == nil {
		c.NewBackoff = func() retry.Backoff { return retry.NewExponentialBackoff(time.Second, 30*time.Second, 0.2, 1.5) }
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Feature runs ECS Exec's managed agent in the containers that ask for it (an engine.Feature and
// engine.Recoverer).
type Feature struct {
	cfg    Config
	docker Docker
	log    *logger.Logger
}

var (
	_ engine.Feature   = (*Feature)(nil)
	_ engine.Recoverer = (*Feature)(nil)
)

// New returns the feature.
func New(cfg Config, d Docker, log *logger.Logger) *Feature {
	return &Feature{cfg: cfg.withDefaults(), docker: d, log: log}
}

// Name names the feature in logs.
func (f *Feature) Name() string { return "execute-command" }

// Available reports whether a complete SSM agent is present: nil, or an error wrapping
// ErrIncomplete that names the file missing. ecs.capability.execute-command is advertised only
// when it is nil.
func (f *Feature) Available() error {
	_, err := Discover(f.cfg.DepsDir)
	return err
}

// TaskHook returns the hook of a task with a container that carries the ExecuteCommandAgent, else nil.
func (f *Feature) TaskHook(t *task.Task) engine.TaskHook {
	for _, c := range t.Containers {
		if c.ManagedAgent(task.ExecuteCommandAgent) != nil {
			return &hook{f: f, taskID: engine.CNITaskID(t.Arn), watched: map[string]chan struct{}{}}
		}
	}
	return nil
}

// RemoveLeftovers removes the configuration and log directories of tasks the engine does not hold.
func (f *Feature) RemoveLeftovers(_ context.Context, known []string) {
	var ids set.Set[string]
	for _, arn := range known {
		ids.Add(engine.CNITaskID(arn))
	}
	for _, root := range []string{f.configRoot(), f.cfg.LogDir} {
		entries, err := os.ReadDir(root)
		if err != nil {
			if !os.IsNotExist(err) {
				f.log.Warn("cannot list ECS Exec leftovers", "dir", root, "error", err)
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || ids.Has(e.Name()) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				f.log.Warn("removing ECS Exec leftovers failed", "dir", filepath.Join(root, e.Name()), "error", err)
				continue
			}
			f.log.Info("removed ECS Exec files of a task no longer held", "dir", filepath.Join(root, e.Name()))
		}
	}
}

func (f *Feature) configRoot() string { return filepath.Join(f.cfg.DepsDir, "config") }

// files returns where a container's files go.
func (f *Feature) files(taskID string, c *task.Container, id string) containerFiles {
	name := fsName(c.Name)
	if name == "" {
		name = "nameless-container-" + id
	}
	return containerFiles{configDir: filepath.Join(f.configRoot(), taskID, name), logDir: filepath.Join(f.cfg.LogDir, taskID, name)}
}

// initialize prepares c's managed agent before c is created: its ID, its files and its bind mounts
// in hc. When the SSM agent is incomplete or its files cannot be written, the agent is STOPPED with
// the reason and c is created without them.
func (f *Feature) initialize(taskID string, c *task.Container, hc *docker.HostConfig, log *logger.Logger) {
	ma := c.ManagedAgent(task.ExecuteCommandAgent)
	if ma == nil || ma.Status == task.ManagedAgentStopped {
		return
	}
	fail := func(err error) {
		ma.Status, ma.Reason = task.ManagedAgentStopped, "ExecuteCommandAgent Initialization failed - "+err.Error()
		log.Warn("ECS Exec's managed agent cannot run; the container starts without it", "container", c.Name, "error", err)
	}
	b, err := Discover(f.cfg.DepsDir)
	if err != nil {
		fail(err)
		return
	}
	if ma.ID == "" {
		ma.ID = rand.Text()
	}
	files := f.files(taskID, c, ma.ID)
	if err := files.write(sessionLimit(ma.Properties)); err != nil {
		fail(fmt.Errorf("could not write its configuration: %w", err))
		return
	}
	hc.Binds = append(hc.Binds, binds(b, files, ma.ID)...)
	ma.Status, ma.Reason = task.ManagedAgentPending, ""
}

// hook is the feature's hook for one task; its methods run on the task's worker goroutine.
type hook struct {
	f      *Feature
	taskID string
	// watched holds, by container name, the channel that stops the container's watcher (closed once
	// the container has stopped).
	watched map[string]chan struct{}
}

// BeforeCreate prepares c's managed agent; it never fails the container.
func (h *hook) BeforeCreate(_ context.Context, r *engine.Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	if opts.HostConfig == nil {
		opts.HostConfig = &docker.HostConfig{}
	}
	h.f.initialize(h.taskID, c, opts.HostConfig, r.Log())
	return nil
}

// AfterCommit starts the watcher of each running container whose agent is prepared (after an agent
// restart too), and stops the agent of a container that has stopped.
func (h *hook) AfterCommit(r *engine.Run) {
	for _, c := range r.Task().Containers {
		ma := c.ManagedAgent(task.ExecuteCommandAgent)
		if ma == nil || ma.ID == "" {
			continue
		}
		stop, watched := h.watched[c.Name]
		switch {
		case c.KnownStatus == task.ContainerRunning && c.DockerID != "" && ma.Status != task.ManagedAgentStopped && !watched:
			stop = make(chan struct{})
			tg := target{container: c.Name, dockerID: c.DockerID, id: ma.ID, execID: ma.ExecID, restarts: ma.Restarts}
			log := r.Log().With("container", c.Name)
			if r.Go(func(ctx context.Context, post func(func(*engine.Run)) bool) {
				h.f.watch(ctx, stop, taskPoster(post), tg, log)
			}) {
				h.watched[c.Name] = stop
			}
		case c.KnownStatus == task.ContainerStopped && ma.Status != task.ManagedAgentStopped:
			if watched && stop != nil {
				close(stop)
				h.watched[c.Name] = nil
			}
			name := c.Name
			r.Go(func(_ context.Context, post func(func(*engine.Run)) bool) {
				post(func(r *engine.Run) {
					stopAgent(r.Task().Container(name), "ExecuteCommandAgent stopped: its container stopped")
				})
			})
		}
	}
}

// BeforeStop does nothing: the watchers end with the stop's context.
func (h *hook) BeforeStop(context.Context, *engine.Run, []*task.Container) {}

// Stopped marks every managed agent of the stopped task STOPPED.
func (h *hook) Stopped(_ context.Context, r *engine.Run) {
	for _, c := range r.Task().Containers {
		stopAgent(c, "ExecuteCommandAgent stopped: the task stopped")
	}
}

// Cleanup removes the task's configuration and log directories.
func (h *hook) Cleanup(_ context.Context, r *engine.Run) {
	for _, root := range []string{h.f.configRoot(), h.f.cfg.LogDir} {
		if err := os.RemoveAll(filepath.Join(root, h.taskID)); err != nil {
			r.Log().Warn("removing ECS Exec files failed", "dir", filepath.Join(root, h.taskID), "error", err)
		}
	}
}

// stopAgent marks c's managed agent STOPPED with reason, unless it is STOPPED already.
func stopAgent(c *task.Container, reason string) {
	if c == nil {
		return
	}
	if ma := c.ManagedAgent(task.ExecuteCommandAgent); ma != nil && ma.Status != task.ManagedAgentStopped {
		ma.Status, ma.Reason = task.ManagedAgentStopped, reason
	}
}

// taskPoster adapts the engine's post to functions of the task.
func taskPoster(post func(func(*engine.Run)) bool) func(func(*task.Task)) bool {
	return func(fn func(*task.Task)) bool { return post(func(r *engine.Run) { fn(r.Task()) }) }
}

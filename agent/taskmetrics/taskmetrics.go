// Package taskmetrics is what the agent publishes to TCS and shows locally: it samples, about once a
// second, the stats of every running container of every running task through agent/dockerstats
// (which reads them from the kernel), feeds each container's tcswire.Window, and answers the TCS
// client's Metrics and Health. It also keeps each container's latest figures (CPU percent and
// memory) for berth ps and /metrics.
//
// It samples only while someone wants the figures: the TCS client (Metrics, called at every
// publication while a session is up) or a local reader (Container, Containers) within the last
// DemandWindow. An agent with metrics off, or whose TCS session is down, and that nobody asks,
// reads nothing; the first local read after a quiet spell starts sampling and finds the figures of
// the next tick.
//
//	ticker ──wanted?──▶ Tasks() ──running containers──▶ Sample(dockerID) ──new?──▶ Window.Add
//	                                                                         └──▶ latest figures
//	TCS client ──Metrics(now)──▶ Window.Take per container, grouped by task (static tasks left out)
//	TCS client ──Health(now)───▶ the task model's container health, with the time it last changed
//	TCS client ──InstanceStatuses(now)──▶ the latest check of the Docker Engine (every 20 s)
//
// A container that stops running is forgotten once its last samples were taken by Metrics, or after
// forgetAfter when nobody takes them, so memory is bounded by the containers that run.
package taskmetrics

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/dockerstats"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/tcs"
	"github.com/berth-agent/berth/agent/tcswire"
)

// Tasks lists the tasks the agent holds; it must be safe for concurrent use. Tasks returns copies;
// VisitRunning shows each running task without copying it, for the once-a-second sampling, and the
// visitor must neither change nor keep it.
type Tasks interface {
	Tasks() []*task.Task
	VisitRunning(visit func(t *task.Task))
}

// Stats gives the latest Docker stats sample of a container from its shared stream, its counters
// already decoded; the same sample (the same Read time) is returned until a new one arrives.
type Stats interface {
	// Sample is the container's latest stats sample; netns, when set, is its awsvpc task's network
	// namespace, whose interfaces are its networks (Docker's stats of it have none).
	Sample(ctx context.Context, dockerID, netns string) (dockerclient.StatsSample, error)
}

var _ Stats = (*dockerstats.Cache)(nil)

// DefaultSampleInterval is how often Run samples when Config leaves SampleInterval zero: Docker
// collects stats once a second.
const DefaultSampleInterval = time.Second

// forgetAfter is how long a container that stopped running is kept for a Metrics call to take its
// last samples.
const forgetAfter = 2 * time.Minute

// DemandWindow is how long sampling goes on after the last Metrics, Container or Containers call: it
// spans two TCS publications (tcs.DefaultPublishInterval), so a session that is up keeps it going.
const DemandWindow = time.Minute

// RuntimeCheckInterval spaces the checks of the container runtime behind InstanceStatuses, as the
// ECS agent checks it once per publication; runtimeCheckTimeout bounds one.
const (
	RuntimeCheckInterval = 20 * time.Second
	runtimeCheckTimeout  = 5 * time.Second
)

// Config configures a Source; zero fields take defaults.
type Config struct {
	// SampleInterval spaces the samples of each container (DefaultSampleInterval).
	SampleInterval time.Duration
	// Runtime checks that the Docker Engine answers (the ContainerRuntime instance status); nil
	// reports the runtime OK from the first check on.
	Runtime func(ctx context.Context) error
	// Clock times sampling and health changes; nil is the wall clock.
	Clock clockwork.Clock
	// Logger receives the source's records; nil discards them.
	Logger *logger.Logger
}

// Figures are a container's latest resource use.
type Figures struct {
	// CPUPercent is the CPU used between Docker's last two readings, in percent of one vCPU (as
	// docker stats shows it: a container busy on two cores is at 200).
	CPUPercent float64
	// MemoryBytes is memory usage less the page cache, as ECS counts it.
	MemoryBytes uint64
}

// ContainerFigures are the latest figures of one running container.
type ContainerFigures struct {
	TaskArn       string
	ContainerName string
	DockerID      string
	Figures
}

// Source samples container stats and answers the TCS client; see the package doc. Its methods are
// safe for concurrent use.
type Source struct {
	tasks    Tasks
	stats    Stats
	interval time.Duration
	clock    clockwork.Clock
	log      *logger.Logger

	runtime func(ctx context.Context) error

	mu         sync.Mutex
	wanted     time.Time              // the last Metrics, Container or Containers call
	containers map[string]*container  // by Docker ID
	health     map[string]healthSince // by task ARN + "/" + container name
	runtimeSt  runtimeStatus
}

// runtimeStatus is the container runtime's instance status: INITIALIZING until the first check.
type runtimeStatus struct {
	status           string
	changed, checked time.Time // the last change of status, the last check
}

var (
	_ tcs.Source               = (*Source)(nil)
	_ tcs.InstanceStatusSource = (*Source)(nil)
)

// container is one sampled container.
type container struct {
	taskArn, family, version, name string
	static                         bool
	window                         *tcswire.Window // nil for a static task's: no control plane hears of it
	last                           time.Time       // Read time of the latest sample counted
	figures                        Figures
	known                          bool      // figures holds a sample
	goneAt                         time.Time // when it was last found not running; zero while it runs
	// restartPolicy: the container restarts under an enabled restart policy, and its metrics carry
	// the restarts of each interval, as the ECS agent's (agent/stats/queue.go, GetRestartStatsSet).
	restartPolicy          bool
	restarts, restartsSent int // the latest restart count seen, and the one at the last Metrics
}

type healthSince struct {
	status string
	since  time.Time
}

// New returns a Source over the engine's tasks and the shared stats streams; sampling starts with
// Run.
func New(tasks Tasks, stats Stats, cfg Config) *Source {
	s := &Source{tasks: tasks, stats: stats, interval: cmp.Or(cfg.SampleInterval, DefaultSampleInterval), clock: cfg.Clock,
		log: cfg.Logger, containers: map[string]*container{}, health: map[string]healthSince{}, runtime: cfg.Runtime}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	if s.runtime == nil {
		s.runtime = func(context.Context) error { return nil }
	}
	s.runtimeSt = runtimeStatus{status: tcswire.InstanceStatusInitializing, changed: s.clock.Now()}
	if s.log == nil {
		s.log = logger.Nop()
	}
	return s
}

// WatchRuntime checks the container runtime at once and then every RuntimeCheckInterval until ctx
// ends. It runs apart from Run, so a hung engine does not hold up sampling, and runs when metrics are
// off too: the instance status is published without them.
func (s *Source) WatchRuntime(ctx context.Context) {
	s.CheckRuntime(ctx)
	s.every(ctx, RuntimeCheckInterval, func() { s.CheckRuntime(ctx) })
}

// Run samples every running container each SampleInterval while the figures are wanted (see the
// package doc), until ctx ends. Once nobody wants them for DemandWindow, the figures and windows
// held are dropped: they would only grow stale.
func (s *Source) Run(ctx context.Context) {
	s.every(ctx, s.interval, func() { s.tick(ctx) })
}

// tick is one of Run's ticks: a Sample when the figures are wanted.
func (s *Source) tick(ctx context.Context) {
	if s.isWanted() {
		s.Sample(ctx)
	}
}

// want records that someone reads the figures now; the caller holds s.mu.
func (s *Source) want() { s.wanted = s.clock.Now() }

// isWanted reports whether someone read the figures within DemandWindow, and drops what is held
// when nobody did.
func (s *Source) isWanted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wanted.IsZero() && s.clock.Since(s.wanted) < DemandWindow {
		return true
	}
	clear(s.containers)
	return false
}

// every calls fn each d on the source's clock until ctx ends.
func (s *Source) every(ctx context.Context, d time.Duration, fn func()) {
	t := s.clock.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			fn()
		}
	}
}

// CheckRuntime checks the container runtime once: OK when it answers within runtimeCheckTimeout,
// IMPAIRED otherwise. A change is logged. WatchRuntime calls it; tests call it directly.
func (s *Source) CheckRuntime(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, runtimeCheckTimeout)
	err := s.runtime(cctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the runtime's fault
	}
	status := tcswire.InstanceStatusOK
	if err != nil {
		status = tcswire.InstanceStatusImpaired
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.runtimeSt
	st.checked = now
	if st.status == status {
		return
	}
	switch {
	case err != nil:
		s.log.Warn("container runtime impaired: the Docker Engine does not answer", "error", err)
	case st.status == tcswire.InstanceStatusImpaired:
		s.log.Info("container runtime OK again")
	}
	st.status, st.changed = status, now
}

// Sample reads the latest stats sample of every running container of every running task once, and
// forgets containers stopped long ago. Run calls it; tests call it directly.
func (s *Source) Sample(ctx context.Context) {
	now := s.clock.Now()
	var running set.Set[string]
	s.tasks.VisitRunning(func(t *task.Task) {
		for _, c := range t.Containers {
			if c.Pause || c.KnownStatus != task.ContainerRunning || c.DockerID == "" {
				continue
			}
			running.Add(c.DockerID)
			sample, err := s.stats.Sample(ctx, c.DockerID, t.NetworkNamespace())
			if err != nil {
				s.log.Debug("no stats sample", "task", t.Arn, "container", c.Name, "error", err)
				continue
			}
			s.add(t, c, sample)
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.containers {
		switch {
		case running.Has(id):
			c.goneAt = time.Time{}
		case c.goneAt.IsZero():
			c.goneAt = now
		case now.Sub(c.goneAt) >= forgetAfter:
			delete(s.containers, id)
		}
	}
}

// add counts one sample of c, unless it is the one counted last.
func (s *Source) add(t *task.Task, c *task.Container, sample dockerclient.StatsSample) {
	if sample.Read.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.containers[c.DockerID]
	if e == nil {
		e = &container{taskArn: t.Arn, family: t.Family, version: strconv.Itoa(t.Revision), name: c.Name, static: t.Static,
			restartsSent: c.RestartCount} // restarts before it was first sampled are no interval's
		if !t.Static {
			e.window = tcswire.NewWindow(int64(cmp.Or(t.CPU, c.CPU)))
		}
		s.containers[c.DockerID] = e
	}
	e.restartPolicy = c.RestartPolicy != nil && c.RestartPolicy.Enabled
	e.restarts = c.RestartCount
	if sample.Read.Equal(e.last) {
		return
	}
	counted, figures := Convert(sample)
	if e.window != nil {
		e.window.Add(counted)
	}
	e.last, e.figures, e.known = sample.Read, figures, true
}

// Metrics returns the stats sets of each running (or recently stopped) container of the tasks a
// control plane knows, since the last call, grouped by task; static tasks are left out. It keeps
// sampling going (see DemandWindow).
func (s *Source) Metrics(time.Time) []tcswire.TaskMetric {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want()
	byTask := map[string]*tcswire.TaskMetric{}
	for id, c := range s.containers {
		if c.window == nil {
			continue
		}
		m, ok := c.window.Take(c.name)
		if !c.goneAt.IsZero() {
			delete(s.containers, id) // its last samples are taken now
		}
		if !ok {
			continue
		}
		if c.restartPolicy {
			n := int64(max(c.restarts-c.restartsSent, 0))
			m.RestartStatsSet = &tcswire.RestartStatsSet{RestartCount: &n}
			c.restartsSent = c.restarts
		}
		tm := byTask[c.taskArn]
		if tm == nil {
			tm = &tcswire.TaskMetric{TaskArn: c.taskArn, TaskDefinitionFamily: c.family, TaskDefinitionVersion: c.version}
			byTask[c.taskArn] = tm
		}
		tm.ContainerMetrics = append(tm.ContainerMetrics, m)
	}
	out := make([]tcswire.TaskMetric, 0, len(byTask))
	for _, tm := range byTask {
		slices.SortFunc(tm.ContainerMetrics, func(a, b tcswire.ContainerMetric) int { return strings.Compare(a.ContainerName, b.ContainerName) })
		out = append(out, *tm)
	}
	slices.SortFunc(out, func(a, b tcswire.TaskMetric) int { return strings.Compare(a.TaskArn, b.TaskArn) })
	return out
}

// Health returns the health of the containers with a health check of each running task a control
// plane knows, with when each last changed as this source saw it.
func (s *Source) Health(now time.Time) []tcswire.TaskHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	var seen set.Set[string]
	var out []tcswire.TaskHealth
	for _, t := range s.tasks.Tasks() {
		if t.Static || t.KnownStatus != task.TaskRunning {
			continue
		}
		th := tcswire.TaskHealth{TaskArn: t.Arn, TaskDefinitionFamily: t.Family, TaskDefinitionVersion: strconv.Itoa(t.Revision)}
		for _, c := range t.Containers {
			if c.HealthCheck == nil {
				continue
			}
			status := string(c.Health)
			switch c.Health {
			case task.HealthHealthy, task.HealthUnhealthy:
			default:
				status = tcswire.HealthStatusUnknown
			}
			key := t.Arn + "/" + c.Name
			seen.Add(key)
			h, ok := s.health[key]
			if !ok || h.status != status {
				h = healthSince{status: status, since: now}
				s.health[key] = h
			}
			th.Containers = append(th.Containers, tcswire.ContainerHealth{ContainerName: c.Name, HealthStatus: status, StatusSince: tcswire.At(h.since)})
		}
		if len(th.Containers) > 0 {
			out = append(out, th)
		}
	}
	for key := range s.health {
		if !seen.Has(key) {
			delete(s.health, key)
		}
	}
	slices.SortFunc(out, func(a, b tcswire.TaskHealth) int { return strings.Compare(a.TaskArn, b.TaskArn) })
	return out
}

// InstanceStatuses reports the container runtime's status as the latest check found it, with when it
// last changed and when it was last checked (now, before the first check).
func (s *Source) InstanceStatuses(now time.Time) []tcswire.InstanceStatus {
	s.mu.Lock()
	st := s.runtimeSt
	s.mu.Unlock()
	if st.checked.IsZero() {
		st.checked = now
	}
	return []tcswire.InstanceStatus{{Type: tcswire.InstanceStatusTypeRuntime, Status: st.status,
		LastStatusChange: tcswire.At(st.changed), LastUpdated: tcswire.At(st.checked)}}
}

// Container returns the latest figures of the running container dockerID; ok is false when there
// are none yet. It keeps sampling going (see DemandWindow).
func (s *Source) Container(dockerID string) (f Figures, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want()
	c := s.containers[dockerID]
	if c == nil || !c.known || !c.goneAt.IsZero() {
		return Figures{}, false
	}
	return c.figures, true
}

// Containers returns the latest figures of every running container that has some, by task ARN and
// container name. It keeps sampling going (see DemandWindow).
func (s *Source) Containers() []ContainerFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want()
	out := make([]ContainerFigures, 0, len(s.containers))
	for id, c := range s.containers {
		if c.known && c.goneAt.IsZero() {
			out = append(out, ContainerFigures{TaskArn: c.taskArn, ContainerName: c.name, DockerID: id, Figures: c.figures})
		}
	}
	slices.SortFunc(out, func(a, b ContainerFigures) int {
		return cmp.Or(strings.Compare(a.TaskArn, b.TaskArn), strings.Compare(a.ContainerName, b.ContainerName))
	})
	return out
}

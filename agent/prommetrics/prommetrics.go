// Package prommetrics exposes the agent's Prometheus metrics: tasks and containers by status, running
// containers of no known task, image pulls and their retries, and the latency of Docker Engine calls.
// It keeps its own registry (nothing is registered globally) and measures through decorators around
// the engine's small interfaces.
package prommetrics

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/task"
)

// Metrics holds the agent's collectors.
type Metrics struct {
	registry     *prometheus.Registry
	pulls        *prometheus.CounterVec
	pullAttempts prometheus.Counter
	pullRetries  prometheus.Counter
	dockerCalls  *prometheus.HistogramVec
	tasks        atomic.Pointer[func() []*task.Task]
	unknown      atomic.Pointer[func() []task.UnknownContainer]
	usage        atomic.Pointer[func() []ContainerUsage]
}

// ContainerUsage is a running container's latest resource use.
type ContainerUsage struct {
	TaskArn, ContainerName string
	CPUPercent             float64 // percent of one vCPU
	MemoryBytes            uint64
}

// ReportUsage makes every scrape report what usage returns as berth_container_cpu_percent and
// berth_container_memory_bytes, labelled by task ARN and container name. It is safe to call while
// metrics are served.
func (m *Metrics) ReportUsage(usage func() []ContainerUsage) { m.usage.Store(&usage) }

// CountTasks makes every scrape count the tasks tasks returns by known status. It is safe to call
// while metrics are served.
func (m *Metrics) CountTasks(tasks func() []*task.Task) { m.tasks.Store(&tasks) }

// CountUnknownContainers makes every scrape report how many containers unknown returns as
// berth_unknown_running_containers. It is safe to call while metrics are served.
func (m *Metrics) CountUnknownContainers(unknown func() []task.UnknownContainer) {
	m.unknown.Store(&unknown)
}

// New returns the agent's metrics. Task and container statuses are reported once CountTasks says
// where the tasks are, and berth_unknown_running_containers is 0 until CountUnknownContainers says
// where those are.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_image_pulls_total", Help: "Image pulls by outcome: pulled, cached (a local copy was used) or failed.",
		}, []string{"outcome"}),
		pullAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_image_pull_attempts_total", Help: "Attempts made by image pulls, first attempts included.",
		}),
		pullRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_image_pull_retries_total", Help: "Image pull attempts that failed and were retried.",
		}),
		dockerCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "berth_docker_call_duration_seconds", Help: "Latency of Docker Engine calls by operation and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op", "outcome"}),
	}
	unknown := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "berth_unknown_running_containers",
		Help: "Running containers labelled as Berth's that belong to no task the agent knows; left running, not managed.",
	}, func() float64 {
		if unknown := m.unknown.Load(); unknown != nil {
			return float64(len((*unknown)()))
		}
		return 0
	})
	m.registry.MustRegister(m.pulls, m.pullAttempts, m.pullRetries, m.dockerCalls, statusCollector{m: m}, usageCollector{m: m}, unknown,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

var (
	taskDesc      = prometheus.NewDesc("berth_tasks", "Tasks by known status.", []string{"status"}, nil)
	containerDesc = prometheus.NewDesc("berth_containers", "Containers by known status.", []string{"status"}, nil)
)

// statusCollector counts tasks and containers by known status at scrape time.
type statusCollector struct {
	m *Metrics
}

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- taskDesc
	ch <- containerDesc
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	tasks := map[string]int{}
	containers := map[string]int{}
	for s := task.TaskNone; s <= task.TaskStopped; s++ {
		tasks[s.String()] = 0
	}
	for s := task.ContainerNone; s <= task.ContainerStopped; s++ {
		containers[s.String()] = 0
	}
	var list []*task.Task
	if tasks := c.m.tasks.Load(); tasks != nil {
		list = (*tasks)()
	}
	for _, t := range list {
		tasks[t.KnownStatus.String()]++
		for _, ct := range t.Containers {
			containers[ct.KnownStatus.String()]++
		}
	}
	for s, n := range tasks {
		ch <- prometheus.MustNewConstMetric(taskDesc, prometheus.GaugeValue, float64(n), s)
	}
	for s, n := range containers {
		ch <- prometheus.MustNewConstMetric(containerDesc, prometheus.GaugeValue, float64(n), s)
	}
}

var (
	cpuDesc = prometheus.NewDesc("berth_container_cpu_percent",
		"CPU used by a running container between Docker's last two readings, in percent of one vCPU.", []string{"task_arn", "container"}, nil)
	memoryDesc = prometheus.NewDesc("berth_container_memory_bytes",
		"Memory used by a running container, less the page cache, as ECS counts it.", []string{"task_arn", "container"}, nil)
)

// usageCollector reports the containers' latest resource use at scrape time.
type usageCollector struct {
	m *Metrics
}

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cpuDesc
	ch <- memoryDesc
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	usage := c.m.usage.Load()
	if usage == nil {
		return
	}
	for _, u := range (*usage)() {
		ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.GaugeValue, u.CPUPercent, u.TaskArn, u.ContainerName)
		ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(u.MemoryBytes), u.TaskArn, u.ContainerName)
	}
}

// Puller counts the pulls and attempts of p.
func (m *Metrics) Puller(p engine.Puller) engine.Puller { return puller{m: m, next: p} }

type puller struct {
	m    *Metrics
	next engine.Puller
}

func (p puller) Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error) {
	res, err := p.next.Pull(ctx, image, auth)
	if !res.Shared && len(res.Attempts) > 0 {
		p.m.pullAttempts.Add(float64(len(res.Attempts)))
		p.m.pullRetries.Add(float64(len(res.Attempts) - 1)) // every attempt but the last was retried
	}
	switch {
	case err != nil:
		p.m.pulls.WithLabelValues("failed").Inc()
	case res.Cached && !res.Pulled:
		p.m.pulls.WithLabelValues("cached").Inc()
	default:
		p.m.pulls.WithLabelValues("pulled").Inc()
	}
	return res, err
}

// Docker times every call of d.
func (m *Metrics) Docker(d engine.Docker) engine.Docker { return timedDocker{m: m, next: d} }

type timedDocker struct {
	m    *Metrics
	next engine.Docker
}

var _ engine.Docker = timedDocker{}

// observe records one call's latency with its outcome: ok, not_found or error.
func (d timedDocker) observe(op string, start time.Time, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, dockerclient.ErrNotFound):
		outcome = "not_found"
	case err != nil:
		outcome = "error"
	}
	d.m.dockerCalls.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
}

func (d timedDocker) CreateContainer(ctx context.Context, opts docker.CreateContainerOptions) (c *docker.Container, err error) {
	defer func(start time.Time) { d.observe("create_container", start, err) }(time.Now())
	return d.next.CreateContainer(ctx, opts)
}

func (d timedDocker) StartContainer(ctx context.Context, id string) (err error) {
	defer func(start time.Time) { d.observe("start_container", start, err) }(time.Now())
	return d.next.StartContainer(ctx, id)
}

func (d timedDocker) StopContainer(ctx context.Context, id string, timeout time.Duration) (err error) {
	defer func(start time.Time) { d.observe("stop_container", start, err) }(time.Now())
	return d.next.StopContainer(ctx, id, timeout)
}

func (d timedDocker) RemoveContainer(ctx context.Context, opts docker.RemoveContainerOptions) (err error) {
	defer func(start time.Time) { d.observe("remove_container", start, err) }(time.Now())
	return d.next.RemoveContainer(ctx, opts)
}

func (d timedDocker) InspectContainer(ctx context.Context, id string) (c *docker.Container, err error) {
	defer func(start time.Time) { d.observe("inspect_container", start, err) }(time.Now())
	return d.next.InspectContainer(ctx, id)
}

func (d timedDocker) ListContainersByLabel(ctx context.Context, labels map[string]string) (list []docker.APIContainers, err error) {
	defer func(start time.Time) { d.observe("list_containers", start, err) }(time.Now())
	return d.next.ListContainersByLabel(ctx, labels)
}

func (d timedDocker) RemoveVolume(ctx context.Context, name string) (err error) {
	defer func(start time.Time) { d.observe("remove_volume", start, err) }(time.Now())
	return d.next.RemoveVolume(ctx, name)
}

func (d timedDocker) Events(ctx context.Context, filters map[string][]string) (<-chan dockerclient.Event, error) {
	return d.next.Events(ctx, filters)
}

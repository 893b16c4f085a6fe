package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// recordingFeature is a Feature added through Config.Features, as the next features are: it records
// every point it is called at and fails the points it is told to.
type recordingFeature struct {
	name string
	// failPrepare, failCreate and failStart are returned from those points.
	failPrepare, failCreate, failStart error

	mu  *sync.Mutex
	log *[]string // "<name> <point> [<container>...]", in call order, shared by the features of a test
}

func (f *recordingFeature) Name() string { return f.name }

func (f *recordingFeature) TaskHook(*task.Task) TaskHook { return f }

func (f *recordingFeature) record(point string, more ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.log = append(*f.log, f.name+" "+point+joinNames(more))
}

func joinNames(names []string) string {
	s := ""
	for _, n := range names {
		s += " " + n
	}
	return s
}

func (f *recordingFeature) Prepare(*Run) error {
	f.record("prepare")
	return f.failPrepare
}

func (f *recordingFeature) BeforeCreate(_ context.Context, _ *Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	f.record("before-create", c.Name)
	opts.Config.Env = append(opts.Config.Env, "SET_BY="+f.name)
	return f.failCreate
}

func (f *recordingFeature) AfterStart(_ context.Context, _ *Run, c *task.Container) error {
	f.record("after-start", c.Name)
	return f.failStart
}

func (f *recordingFeature) AfterCommit(*Run) {}

func (f *recordingFeature) BeforeStop(_ context.Context, _ *Run, batch []*task.Container) {
	names := make([]string, 0, len(batch))
	for _, c := range batch {
		names = append(names, c.Name)
	}
	f.record("before-stop", names...)
}

func (f *recordingFeature) Stopped(context.Context, *Run) { f.record("stopped") }

func (f *recordingFeature) Cleanup(context.Context, *Run) { f.record("cleanup") }

// recorded returns what every feature sharing log recorded.
func (f *recordingFeature) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(*f.log)
}

func recordingFeatures(names ...string) []*recordingFeature {
	var (
		mu  sync.Mutex
		log []string
	)
	out := make([]*recordingFeature, 0, len(names))
	for _, n := range names {
		out = append(out, &recordingFeature{name: n, mu: &mu, log: &log})
	}
	return out
}

func asFeatures(fs []*recordingFeature) []Feature {
	out := make([]Feature, 0, len(fs))
	for _, f := range fs {
		out = append(out, f)
	}
	return out
}

// TestHookPointsInOrder: a feature given in Config.Features is called at every point of a task's
// life, features in their order at each point, after the built-ins (its create options already hold
// the task endpoint's variables), and a task that is cleaned up has been through every point once.
func TestHookPointsInOrder(t *testing.T) {
	fs := recordingFeatures("first", "second")
	cfg := testConfig()
	cfg.CleanupWait = 0
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2"}
	cfg.Features = asFeatures(fs)
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/hooks"
	h.add(newTask(arn, ctr("app")))
	h.waitStatus(arn, task.TaskRunning)
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "test"))
	require.True(t, pollUntil(func() bool { return h.engine.Task(arn) == nil }), "the task is cleaned up")

	assert.Equal(t, []string{
		"first prepare", "second prepare",
		"first before-create app", "second before-create app",
		"first after-start app", "second after-start app",
		"first before-stop app", "second before-stop app",
		"first stopped", "second stopped",
		"first cleanup", "second cleanup",
	}, fs[0].recorded())
	env := h.docker.createCalls()[0].Config.Env
	first, second := slices.Index(env, "SET_BY=first"), slices.Index(env, "SET_BY=second")
	endpoint := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ECS_CONTAINER_METADATA_URI_V4=") })
	require.True(t, first >= 0 && second >= 0 && endpoint >= 0, "env: %v", env)
	assert.Less(t, first, second, "the features change the options in their order")
	assert.Less(t, endpoint, first, "after the built-ins")
}

// TestHookFailureRules: each point's failure rule. A refusal at prepare stops the task with the error
// as its reason before anything is pulled or created, and no later hook of the same point runs; an
// error before create leaves the container uncreated with CannotCreateContainerError; an error after
// start stops the container with the error.
func TestHookFailureRules(t *testing.T) {
	for _, tt := range []struct {
		name       string
		fail       func(f *recordingFeature)
		wantReason string
		created    bool
	}{
		{"prepare", func(f *recordingFeature) { f.failPrepare = errors.New("no fault injection here") }, "no fault injection here", false},
		{"before create", func(f *recordingFeature) { f.failCreate = errors.New("no managed agent") }, "CannotCreateContainerError: no managed agent", false},
		{"after start", func(f *recordingFeature) { f.failStart = errors.New("router did not come up") }, "router did not come up", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := recordingFeatures("failing", "after")
			tt.fail(fs[0])
			cfg := testConfig()
			cfg.Features = asFeatures(fs)
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/failing"
			h.add(newTask(arn, ctr("app")))
			stopped := h.waitStatus(arn, task.TaskStopped)
			assert.Contains(t, stopped.StoppedReason, tt.wantReason)
			assert.Contains(t, stopped.Container("app").Reason, tt.wantReason)
			assert.Equal(t, tt.created, len(h.creates()) == 1, "created: %v", h.creates())
			if tt.name == "prepare" {
				assert.Zero(t, h.puller.pulls("img-app"), "nothing is pulled for a refused task")
				assert.NotContains(t, fs[0].recorded(), "after prepare", "a refusal ends the point")
			}
		})
	}
}

// goFeature starts, after its container starts, a goroutine with Run.Go that posts a change of the
// task (the container's reason) and then waits for its context to end.
type goFeature struct{ ended chan struct{} }

func (f *goFeature) Name() string                 { return "go" }
func (f *goFeature) TaskHook(*task.Task) TaskHook { return f }

func (f *goFeature) AfterStart(_ context.Context, r *Run, c *task.Container) error {
	name := c.Name
	r.Go(func(ctx context.Context, post func(func(*Run)) bool) {
		post(func(r *Run) { r.Task().Container(name).HealthOutput = "posted" })
		<-ctx.Done()
		close(f.ended)
	})
	return nil
}

// TestRunGoPostsAreCommitted: what a hook's goroutine posts runs on the worker and is saved; the
// goroutine's context ends when the task's stop is wanted; once the task's worker has finished a
// post is refused.
func TestRunGoPostsAreCommitted(t *testing.T) {
	f := &goFeature{ended: make(chan struct{})}
	cfg := testConfig()
	cfg.Features = []Feature{f}
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/go"
	h.add(newTask(arn, ctr("app")))
	h.waitTask(arn, "the posted change saved", func(tk *task.Task) bool {
		return tk.Container("app") != nil && tk.Container("app").HealthOutput == "posted"
	})
	select {
	case <-f.ended:
		t.Fatal("the goroutine's context ended while the task runs")
	default:
	}
	require.NoError(t, h.engine.StopTask(context.Background(), arn, "test"))
	<-f.ended
	h.waitStatus(arn, task.TaskStopped)
	h.engine.mu.Lock()
	w := h.engine.workers[arn]
	h.engine.mu.Unlock()
	require.True(t, pollUntil(func() bool { return w == nil || !w.post(func(*Run) {}) }), "a post once the worker has finished is refused")
}

package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/registryauth"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcgroup"
)

// heapGrowthBound is how much more live heap (HeapAlloc after a collection) the engine and its
// fakes may hold after 500 more tasks came and went than after the first 50: about 0.75 KiB a task.
// Keeping one copy of each forgotten task would cost about 2.7 KiB a task, 1.3 MiB in all; the runtime's
// own growth (its threads' structures) is well under 0.1 MiB. HeapInuse, which counts whole spans,
// is logged but not bounded: a few hundred long-lived objects allocated during the run pin 1-2 MiB
// of spans with no leak at all (8 MiB with one task copy kept).
const heapGrowthBound = 384 << 10

// TestForgottenTasksLeaveNothingBehind runs tasks of every kind the engine knows (bridge with a
// host port and a dependsOn, awsvpc, task roles with a task cgroup and an execution-role ECR pull,
// a containerPortRange) through start, stop, the cleanup wait (on the fake clock) and cleanup, 50
// then 500 more, and checks that what the engine and its collaborators hold, the goroutines, the
// fake clock's timers and the metadata files come back to what they were before any task, and the
// live heap to what it was after the first 50: nothing grows with the number of tasks forgotten.
func TestForgottenTasksLeaveNothingBehind(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLedger()
	cfg := testConfig()
	cfg.Clock = clock
	cfg.CleanupWait = time.Minute
	cfg.Resources = Resources{CPU: 16384, MemoryMiB: 32768} // a batch runs at once
	cfg.AWSVPC = AWSVPCConfig{Network: ledgerNetwork{l}, PauseImage: "berth/pause"}
	cfg.TaskEndpoint = TaskEndpointConfig{URL: "http://169.254.170.2", Credentials: true, Roles: ledgerRoles{l}}
	cfg.ExecutionRoleAuth = ledgerPulls{l}
	cfg.TaskCgroups = ledgerCgroups{l}
	metadataDir := t.TempDir()
	cfg.ContainerMetadata = ContainerMetadataConfig{Enabled: true, Dir: metadataDir}
	watchers := &watcherFeature{}
	cfg.Features = []Feature{watchers}
	h := newHarness(t, cfg)
	goroutines, waiters := runtime.NumGoroutine(), clockWaiters(t, clock) // the engine's own, before any task

	const batch = 50
	next := 0
	runBatch := func() {
		t.Helper()
		arns := make([]string, batch)
		for i := range batch {
			arns[i] = fmt.Sprintf("arn:aws:ecs:us-west-2:012345678901:task/test-cluster/forget-%04d", next)
			h.add(forgettable(arns[i], next, i))
			next++
		}
		for _, arn := range arns {
			h.waitStatus(arn, task.TaskRunning)
		}
		require.True(t, pollUntil(func() bool { return watchers.running.Load() == batch }),
			"every task's watcher runs: %d", watchers.running.Load())
		for _, arn := range arns {
			require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
		}
		for _, arn := range arns {
			h.waitStatus(arn, task.TaskStopped)
		}
		require.True(t, pollUntil(func() bool { return h.engine.cleanupsScheduled() == batch }),
			"every stopped task waits for its cleanup: %d of %d", h.engine.cleanupsScheduled(), batch)
		clock.Advance(cfg.CleanupWait)
		require.True(t, pollUntil(func() bool { return h.engine.heldState() == (engineHeld{}) && l.size() == (ledgerSize{}) }),
			"every task is forgotten: the engine holds %+v, its collaborators %+v", h.engine.heldState(), l.size())
		for _, arn := range arns {
			require.Nil(t, h.engine.Task(arn))
		}
	}

	runBatch() // the first 50: whatever is made once (maps' buckets, pools) is made by now
	require.True(t, pollUntil(func() bool { return runtime.NumGoroutine() <= goroutines }),
		"the goroutines of the first tasks end: %d, %d before them", runtime.NumGoroutine(), goroutines)
	assert.Equal(t, waiters, clockWaiters(t, clock), "no timer of a forgotten task is left on the clock")
	heap := heapStats(h)
	assert.Zero(t, watchers.running.Load(), "the watchers end with their tasks")
	assert.Empty(t, metadataEntries(t, metadataDir), "every task's metadata files are removed")

	for range 10 {
		runBatch()
	}
	require.Equal(t, 11*batch, next)
	assert.Zero(t, watchers.running.Load(), "the watchers end with their tasks")
	assert.Empty(t, metadataEntries(t, metadataDir), "every task's metadata files are removed")
	assert.Empty(t, h.store.snapshot(), "every task's record is deleted")
	h.docker.mu.Lock()
	assert.Empty(t, h.docker.containers, "every task's containers are removed")
	h.docker.mu.Unlock()
	assert.Empty(t, h.engine.UnknownContainers())
	assert.True(t, pollUntil(func() bool { return runtime.NumGoroutine() <= goroutines }),
		"the goroutine count comes back to the engine's own: %d, %d before any task", runtime.NumGoroutine(), goroutines)
	assert.Equal(t, waiters, clockWaiters(t, clock), "no timer of a forgotten task is left on the clock")
	after := heapStats(h)
	grown := int64(after.HeapAlloc) - int64(heap.HeapAlloc)
	assert.Less(t, grown, int64(heapGrowthBound), "the live heap grew by %d bytes over 500 forgotten tasks", grown)
	t.Logf("live heap after 50 tasks: %d bytes, after 550: %+d; heap spans in use: %d, %+d", heap.HeapAlloc, grown,
		heap.HeapInuse, int64(after.HeapInuse)-int64(heap.HeapInuse))
}

// forgettable returns the task of kind n%4 at position slot of its batch (which picks its host port).
func forgettable(arn string, n, slot int) *task.Task {
	switch n % 4 {
	case 0: // bridge, a static host port, a dependsOn
		web := ctr("web", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: uint16(20000 + slot), Protocol: "tcp"}}
		})
		return newTask(arn, web, ctr("sidecar", nonEssential, dependsOn("web", task.ConditionStart)))
	case 1: // awsvpc: a pause container and a task network
		tk := newTask(arn, ctr("app"))
		tk.NetworkMode = task.NetworkAWSVPC
		return tk
	case 2: // task and execution roles, a task cgroup, an ECR pull with the execution role
		tk := newTask(arn, ctr("app", func(c *task.Container) { c.ECRAuth = &task.ECRAuth{UseExecutionRole: true} }))
		tk.RoleArn, tk.ExecutionRoleArn = "arn:aws:iam::012345678901:role/app", "arn:aws:iam::012345678901:role/exec"
		tk.CPU, tk.Memory = 256, 512
		return tk
	default: // host ports picked from the dynamic range
		return newTask(arn, ctr("ranged", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPortRange: "9000-9002", Protocol: "tcp"}}
		}))
	}
}

// clockWaiters returns how many timers and tickers wait on the fake clock, up to 16 (16: at least
// that many). n-1 wait once waiting a moment for n finds fewer.
func clockWaiters(t *testing.T, clock *clockwork.FakeClock) int {
	t.Helper()
	const most = 16
	for n := 1; n < most; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := clock.BlockUntilContext(ctx, n)
		cancel()
		if err != nil {
			return n - 1
		}
	}
	return most
}

// heapStats returns the memory statistics after a collection, with the fakes' call logs, which grow
// by design, emptied first.
func heapStats(h *harness) runtime.MemStats {
	h.docker.mu.Lock()
	h.docker.calls, h.docker.creates, h.docker.stops, h.docker.removed, h.docker.removedVolumes = nil, nil, nil, nil, nil
	h.docker.mu.Unlock()
	h.store.mu.Lock()
	h.store.deleted = nil
	h.store.mu.Unlock()
	h.journal.mu.Lock()
	h.journal.entries = nil
	h.journal.mu.Unlock()
	runtime.GC()
	runtime.GC() // the first may leave what finalizers freed
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// metadataEntries lists what is left under the cluster's metadata directory.
func metadataEntries(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "test-cluster"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// engineHeld is what the engine holds that is keyed by a task, a container or a resource of one.
type engineHeld struct {
	workers, byID, tokens, unknown      int
	heldTasks, ports, exclusive, queued int
	usedCPU, usedMem                    int
}

// heldState returns the sizes of the engine's maps and the resources it has handed out.
func (e *Engine) heldState() engineHeld {
	e.mu.Lock()
	s := engineHeld{workers: len(e.workers), byID: len(e.byID), tokens: len(e.tokens), unknown: len(e.unknown)}
	e.mu.Unlock()
	q := e.resources
	q.mu.Lock()
	defer q.mu.Unlock()
	s.heldTasks, s.ports, s.exclusive, s.queued = len(q.held), len(q.ports), len(q.sole), len(q.queue)
	s.usedCPU, s.usedMem = q.usedCPU, q.usedMem
	return s
}

// cleanupsScheduled counts the stopped tasks waiting for their cleanup timer.
func (e *Engine) cleanupsScheduled() int {
	e.mu.Lock()
	workers := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		workers = append(workers, w)
	}
	e.mu.Unlock()
	n := 0
	for _, w := range workers {
		w.mu.Lock()
		if w.cleanScheduled {
			n++
		}
		w.mu.Unlock()
	}
	return n
}

// ledger keeps what the engine's collaborators are given per task and not yet told to drop; a leak
// in the engine is a ledger that does not empty. Each collaborator is a view of it.
type ledger struct {
	mu        sync.Mutex
	networks  set.Set[string] // CNI task IDs set up and not torn down
	roles     set.Set[string] // task ARNs with role credentials provided and not removed
	pullRoles set.Set[string] // task ARNs whose execution role pulled, not yet removed
	cgroups   set.Set[string] // CNI task IDs with a cgroup not removed
}

// ledgerSize is what the ledger holds.
type ledgerSize struct{ networks, roles, pullRoles, cgroups int }

func newLedger() *ledger { return &ledger{} }

func (l *ledger) size() ledgerSize {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ledgerSize{l.networks.Len(), l.roles.Len(), l.pullRoles.Len(), l.cgroups.Len()}
}

// change runs fn on the ledger under its lock.
func (l *ledger) change(fn func(l *ledger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(l)
}

type (
	ledgerNetwork struct{ *ledger }
	ledgerRoles   struct{ *ledger }
	ledgerPulls   struct{ *ledger }
	ledgerCgroups struct{ *ledger }
)

var (
	_ Network           = ledgerNetwork{}
	_ RoleCredentials   = ledgerRoles{}
	_ ExecutionRoleAuth = ledgerPulls{}
	_ TaskCgroups       = ledgerCgroups{}
)

func (l ledgerNetwork) Setup(_ context.Context, tn ecscni.TaskNetwork) (ecscni.Result, error) {
	l.change(func(l *ledger) { l.networks.Add(tn.TaskID) })
	return ecscni.Result{ENIIPv4: "10.0.0.2", BridgeIPv4: "169.254.172.3"}, nil
}

func (l ledgerNetwork) Teardown(_ context.Context, tn ecscni.TaskNetwork) error {
	l.change(func(l *ledger) { l.networks.Remove(tn.TaskID) })
	return nil
}

func (l ledgerRoles) Provide(taskArn, _, _, _ string) error {
	l.change(func(l *ledger) { l.roles.Add(taskArn) })
	return nil
}

func (ledgerRoles) Stop(string) {}

func (l ledgerRoles) Remove(taskArn string) { l.change(func(l *ledger) { l.roles.Remove(taskArn) }) }

func (l ledgerPulls) For(role registryauth.ExecutionRole) registryauth.AuthSource {
	l.change(func(l *ledger) { l.pullRoles.Add(role.TaskArn) })
	return namedAuth{name: "execution-role " + role.RoleArn}
}

func (l ledgerPulls) TaskRemoved(taskArn string) {
	l.change(func(l *ledger) { l.pullRoles.Remove(taskArn) })
}

func (l ledgerCgroups) Create(taskID string, _ taskcgroup.Limits) (string, error) {
	l.change(func(l *ledger) { l.cgroups.Add(taskID) })
	return "/ecs/" + taskID, nil
}

func (l ledgerCgroups) Remove(taskID string) error {
	l.change(func(l *ledger) { l.cgroups.Remove(taskID) })
	return nil
}

func (l ledgerCgroups) TaskIDs() ([]string, error) {
	var ids []string
	l.change(func(l *ledger) { ids = l.cgroups.Values() })
	return ids, nil
}

func (ledgerCgroups) EveryTask() bool { return false }

// watcherFeature starts, for every running task, a goroutine with Run.Go that lasts until the task's
// stop is wanted (ECS Exec's watchers do so): its goroutines must end with their tasks.
type watcherFeature struct{ running atomic.Int64 }

func (*watcherFeature) Name() string { return "watcher" }

func (f *watcherFeature) TaskHook(*task.Task) TaskHook { return &watcherHook{f: f} }

type watcherHook struct {
	f       *watcherFeature
	started bool
}

var _ CommitHook = (*watcherHook)(nil)

func (h *watcherHook) AfterCommit(r *Run) {
	if h.started || r.Task().KnownStatus != task.TaskRunning {
		return
	}
	h.started = r.Go(func(ctx context.Context, post func(func(*Run)) bool) {
		h.f.running.Add(1)
		defer h.f.running.Add(-1)
		<-ctx.Done()
		post(func(*Run) {}) // dropped once the worker has finished
	})
}

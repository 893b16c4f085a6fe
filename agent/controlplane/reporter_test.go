package controlplane

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

const taskArn = "arn:aws:ecs:us-west-2:123456789012:task/test/t1"

func intp(v int) *int { return &v }

// newTask returns a task with an app container, a sidecar and (awsvpc) a pause container, all NONE.
func newTask(arn string) *task.Task {
	return &task.Task{
		Arn:         arn,
		Family:      "web",
		Revision:    3,
		NetworkMode: task.NetworkBridge,
		Containers: []*task.Container{
			{Name: "app", Image: "nginx@sha256:aaaa", Essential: true},
			{Name: "sidecar", Image: "busybox"},
			{Name: "~internal~ecs~pause", Image: "pause", Pause: true},
		},
		DesiredStatus: task.TaskRunning,
	}
}

func running(t *task.Task) *task.Task {
	t = t.Clone()
	t.KnownStatus = task.TaskRunning
	for i, c := range t.Containers {
		c.KnownStatus = c.SteadyState()
		c.DockerID = fmt.Sprintf("docker%d", i)
		if !c.Pause {
			c.NetworkBindings = []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: uint16(32768 + i), Protocol: "tcp"}}
		}
	}
	return t
}

func stopped(t *task.Task) *task.Task {
	t = t.Clone()
	t.KnownStatus = task.TaskStopped
	t.DesiredStatus = task.TaskStopped
	t.StoppedReason = task.StopReasonEssentialExited
	t.StoppedAt = time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range t.Containers {
		c.KnownStatus = task.ContainerStopped
		c.ExitCode = intp(i)
		c.Reason = "exited " + c.Name
		c.FinishedAt = appStoppedAt.Add(time.Duration(i) * time.Second)
	}
	return t
}

// appStoppedAt is when stopped's first container (app, the essential one) stopped.
var appStoppedAt = time.Date(2024, 1, 1, 11, 59, 50, 0, time.UTC)

func newTestReporter(_ *testing.T, f *fakeECS, st SentStore) *Reporter {
	return NewReporter(f, st, ReporterConfig{NewBackoff: zeroBackoff}, logger.Nop())
}

// submission is a submitted task state change, its containers by name.
type submission struct {
	Task, Status, Reason string
	ExecutionStoppedAt   bool
	Containers           map[string]ecsclient.ContainerStateChange
}

func decodeSubmission(ch ecsclient.TaskStateChange) submission {
	s := submission{Task: ch.TaskArn, Status: string(ch.Status), Reason: ch.Reason,
		ExecutionStoppedAt: !ch.ExecutionStoppedAt.IsZero(), Containers: map[string]ecsclient.ContainerStateChange{}}
	for _, c := range ch.Containers {
		s.Containers[c.Name] = c
	}
	return s
}

func submissions(f *fakeECS) []submission {
	var out []submission
	for _, ch := range f.acceptedChanges() {
		out = append(out, decodeSubmission(ch))
	}
	return out
}

func checkContainer(t *testing.T, s submission, name, status string, exitCode *int) {
	t.Helper()
	c, ok := s.Containers[name]
	if !ok {
		t.Errorf("%s submission lacks container %s", s.Status, name)
		return
	}
	if string(c.Status) != status {
		t.Errorf("container %s status = %v, want %s", name, c.Status, status)
	}
	if exitCode != nil && (c.ExitCode == nil || *c.ExitCode != *exitCode) {
		t.Errorf("container %s exitCode = %v, want %d", name, c.ExitCode, *exitCode)
	}
}

func TestReporterInOrderAndBatched(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	stop := runReporter(t, r)

	base := newTask(taskArn)
	r.Report(running(base))
	saved := st.waitSaved(t, 1)[0]
	if saved.Task != task.TaskRunning || saved.Containers["app"] != task.ContainerRunning {
		t.Errorf("after RUNNING: sent %v / app %v", saved.Task, saved.Containers["app"])
	}
	r.Report(stopped(running(base)))
	saved = st.waitSaved(t, 1)[0]
	if saved.Task != task.TaskStopped || saved.Containers["sidecar"] != task.ContainerStopped {
		t.Errorf("after STOPPED: sent %v / sidecar %v", saved.Task, saved.Containers["sidecar"])
	}

	subs := submissions(f)
	if len(subs) != 2 || subs[0].Status != "RUNNING" || subs[1].Status != "STOPPED" {
		t.Fatalf("submissions = %+v, want RUNNING then STOPPED", subs)
	}
	run := subs[0]
	if len(run.Containers) != 2 {
		t.Errorf("RUNNING batch has %d containers, want 2 (pause excluded)", len(run.Containers))
	}
	checkContainer(t, run, "app", "RUNNING", nil)
	checkContainer(t, run, "sidecar", "RUNNING", nil)
	app := run.Containers["app"]
	if app.RuntimeID != "docker0" || app.ImageDigest != "sha256:aaaa" {
		t.Errorf("app = %+v", app)
	}
	if nb := fmt.Sprint(app.NetworkBindings); nb != "[{0.0.0.0 tcp 80 32768  }]" {
		t.Errorf("app networkBindings = %s", nb)
	}
	stop1 := subs[1]
	if stop1.Reason != task.StopReasonEssentialExited || !stop1.ExecutionStoppedAt {
		t.Errorf("STOPPED submission = %+v", stop1)
	}
	checkContainer(t, stop1, "app", "STOPPED", intp(0))
	checkContainer(t, stop1, "sidecar", "STOPPED", intp(1))
	stop() // waits for the worker, which counts after saving
	if r.Delivered() != 2 {
		t.Errorf("Delivered = %d, want 2", r.Delivered())
	}
}

func TestReporterContainerChangeWithoutTaskChange(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	runReporter(t, r)

	tk := running(newTask(taskArn))
	r.Report(tk)
	st.waitSaved(t, 1)
	tk.Container("sidecar").KnownStatus = task.ContainerStopped
	tk.Container("sidecar").ExitCode = intp(3)
	r.Report(tk)
	st.waitSaved(t, 1)

	subs := submissions(f)
	if len(subs) != 2 {
		t.Fatalf("%d submissions, want 2", len(subs))
	}
	if subs[1].Status != "RUNNING" || len(subs[1].Containers) != 1 {
		t.Fatalf("second submission = %+v, want RUNNING with only the sidecar", subs[1])
	}
	checkContainer(t, subs[1], "sidecar", "STOPPED", intp(3))
}

func TestReporterControlPlaneDown(t *testing.T) {
	f := newFakeECS()
	f.setDown(true)
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	runReporter(t, r)

	base := newTask(taskArn)
	r.Report(running(base))
	<-f.failed // RUNNING is being retried
	r.Report(stopped(running(base)))
	for c := range f.failed { // wait until the newer snapshot is the one being retried
		if decodeSubmission(c).Status == "STOPPED" {
			break
		}
	}
	f.setDown(false)
	saved := st.waitSaved(t, 1)[0]

	if all := f.attemptCount(); all < 3 {
		t.Errorf("%d attempts, want at least 3 (retried while down)", all)
	}
	subs := submissions(f)
	if len(subs) != 1 || subs[0].Status != "STOPPED" {
		t.Fatalf("accepted = %+v, want one STOPPED (newer snapshot supersedes)", subs)
	}
	checkContainer(t, subs[0], "app", "STOPPED", intp(0))
	checkContainer(t, subs[0], "sidecar", "STOPPED", intp(1))
	if saved.Task != task.TaskStopped {
		t.Errorf("saved sent status = %v", saved.Task)
	}
}

func TestReporterStraightToStopped(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)

	tk := newTask(taskArn)
	tk.KnownStatus, tk.DesiredStatus = task.TaskStopped, task.TaskStopped
	tk.StoppedReason = "CannotPullContainerError: pull access denied"
	tk.StoppedAt = time.Now()
	app := tk.Container("app")
	app.KnownStatus, app.Reason = task.ContainerStopped, "CannotPullContainerError: pull access denied"
	side := tk.Container("sidecar")
	side.KnownStatus, side.ExitCode, side.Reason = task.ContainerStopped, intp(137), "killed"
	tk.Container("~internal~ecs~pause").KnownStatus = task.ContainerStopped

	r.Report(tk) // before Run: queued
	runReporter(t, r)
	st.waitSaved(t, 1)

	subs := submissions(f)
	if len(subs) != 1 || subs[0].Status != "STOPPED" || subs[0].Reason != tk.StoppedReason {
		t.Fatalf("submissions = %+v", subs)
	}
	checkContainer(t, subs[0], "app", "STOPPED", nil)
	if subs[0].Containers["app"].ExitCode != nil {
		t.Errorf("app never ran but has an exit code")
	}
	if subs[0].Containers["app"].Reason != app.Reason {
		t.Errorf("app reason = %v", subs[0].Containers["app"].Reason)
	}
	checkContainer(t, subs[0], "sidecar", "STOPPED", intp(137))
	if subs[0].Containers["sidecar"].Reason != "killed" {
		t.Errorf("sidecar reason = %v", subs[0].Containers["sidecar"].Reason)
	}
	if _, ok := subs[0].Containers["~internal~ecs~pause"]; ok {
		t.Errorf("pause container reported")
	}
}

func TestReporterNothingTwiceAcrossRestart(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	base := newTask(taskArn)
	other := newTask("arn:aws:ecs:us-west-2:123456789012:task/test/t2")

	r1 := newTestReporter(t, f, st)
	stop1 := runReporter(t, r1)
	r1.Report(running(base))
	r1.Report(stopped(running(other)))
	st.waitSaved(t, 2)
	stop1()
	if n := len(submissions(f)); n != 2 {
		t.Fatalf("%d submissions by the first reporter, want 2", n)
	}

	// A new process: load the sent records, then re-Report the engine's tasks.
	live := func(string) bool { return true }
	r2 := newTestReporter(t, f, st)
	r2.Load(st.all(), live)
	r2.Report(running(base))
	r2.Report(stopped(running(other)))
	stop2 := runReporter(t, r2)
	stop2()
	if n := len(submissions(f)); n != 2 {
		t.Fatalf("%d submissions after restart, want still 2", n)
	}

	// The next change of t1 is sent, and only it.
	r3 := newTestReporter(t, f, st)
	r3.Load(st.all(), live)
	stop3 := runReporter(t, r3)
	r3.Report(stopped(running(base)))
	st.waitSaved(t, 1)
	stop3()
	subs := submissions(f)
	if len(subs) != 3 || subs[2].Status != "STOPPED" || subs[2].Task != taskArn {
		t.Fatalf("submissions = %+v, want a third, STOPPED for t1", subs)
	}
	if r2.Delivered() != 0 || r3.Delivered() != 1 {
		t.Errorf("delivered r2=%d r3=%d", r2.Delivered(), r3.Delivered())
	}
}

func TestReporterPersistsOnlyAfterAccept(t *testing.T) {
	f := newFakeECS()
	f.failures = 2
	st := newFakeSentStore()
	var mu sync.Mutex
	var violations []string
	st.onSave = func(saved state.SentRecord) {
		accepted := submissions(f)
		mu.Lock()
		defer mu.Unlock()
		if len(accepted) == 0 {
			violations = append(violations, "saved before any submission was accepted")
			return
		}
		if last := accepted[len(accepted)-1].Status; last != saved.Task.String() {
			violations = append(violations, fmt.Sprintf("saved sent status %v, last accepted %s", saved.Task, last))
		}
	}
	r := newTestReporter(t, f, st)
	runReporter(t, r)
	base := newTask(taskArn)
	r.Report(running(base))
	st.waitSaved(t, 1)
	r.Report(stopped(running(base)))
	st.waitSaved(t, 1)

	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if n := f.attemptCount(); n != 4 {
		t.Errorf("%d attempts, want 4 (2 failed, 2 accepted)", n)
	}
}

func TestReporterPerTaskOrderManyTasks(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	runReporter(t, r)

	const n = 20
	var tasks []*task.Task
	for i := range n {
		tk := newTask(fmt.Sprintf("arn:aws:ecs:us-west-2:123456789012:task/test/many-%d", i))
		tasks = append(tasks, tk)
		r.Report(running(tk))
	}
	for _, tk := range tasks {
		r.Report(stopped(running(tk)))
	}
	// Each task ends STOPPED-sent; count saves until all are.
	done := map[string]bool{}
	for len(done) < n {
		for _, s := range st.waitSaved(t, 1) {
			if s.Task == task.TaskStopped {
				done[s.TaskArn] = true
			}
		}
	}
	seen := map[string][]string{}
	for _, s := range submissions(f) {
		seen[s.Task] = append(seen[s.Task], s.Status)
	}
	for arn, statuses := range seen {
		switch fmt.Sprint(statuses) {
		case "[RUNNING STOPPED]", "[STOPPED]":
		default:
			t.Errorf("%s: submissions %v", arn, statuses)
		}
	}
}

// TestReporterInvalidParameterDroppedUnsent: a change ECS refuses as invalid is dropped without
// being recorded as sent, as the ECS agent drops it; the task's next change is sent from what ECS
// really knows, so ECS still learns the task stopped, with every container.
func TestReporterInvalidParameterDroppedUnsent(t *testing.T) {
	f := newFakeECS()
	f.setInvalid(true)
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	runReporter(t, r)
	base := newTask(taskArn)
	r.Report(running(base))
	<-f.failed
	f.setInvalid(false)
	r.Report(stopped(running(base)))
	saved := st.waitSaved(t, 1)[0]
	if saved.Task != task.TaskStopped {
		t.Errorf("first saved record: task %v, want STOPPED (nothing saved for the refused RUNNING)", saved.Task)
	}
	subs := submissions(f)
	if len(subs) != 1 || subs[0].Status != "STOPPED" {
		t.Fatalf("accepted submissions %v, want one STOPPED", subs)
	}
	checkContainer(t, subs[0], "app", "STOPPED", intp(0))
	checkContainer(t, subs[0], "sidecar", "STOPPED", intp(1))
	if n := f.attemptCount(); n != 2 {
		t.Errorf("%d attempts, want 2 (the refused one is not retried)", n)
	}
}

func TestReporterStopsWithContext(t *testing.T) {
	f := newFakeECS()
	f.setDown(true)
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	stop := runReporter(t, r)
	r.Report(running(newTask(taskArn)))
	<-f.failed
	stop() // returns once the worker has exited
	if r.Delivered() != 0 || len(st.all()) != 0 {
		t.Errorf("delivered %d, saved %d while down", r.Delivered(), len(st.all()))
	}
}

func TestChangeFor(t *testing.T) {
	emptyView := sentView{containers: map[string]task.ContainerStatus{}}
	partial := running(newTask(taskArn))
	partial.KnownStatus = task.TaskCreated
	partial.Container("sidecar").KnownStatus = task.ContainerCreated

	tests := []struct {
		name           string
		t              *task.Task
		view           sentView
		wantOK         bool
		wantStatus     ecsclient.BackendStatus
		wantContainers []string
	}{
		{"nothing yet", newTask(taskArn), emptyView, false, "", nil},
		{"container running before task: PENDING", partial, emptyView, true, ecsclient.StatusPending, []string{"app"}},
		{"running", running(newTask(taskArn)), emptyView, true, ecsclient.StatusRunning, []string{"app", "sidecar"}},
		{"running already sent", running(newTask(taskArn)), sentView{task: task.TaskRunning, containers: map[string]task.ContainerStatus{"app": task.ContainerRunning, "sidecar": task.ContainerRunning}}, false, "", nil},
		{"stopped after running sent", stopped(running(newTask(taskArn))), sentView{task: task.TaskRunning, containers: map[string]task.ContainerStatus{"app": task.ContainerRunning, "sidecar": task.ContainerRunning}}, true, ecsclient.StatusStopped, []string{"app", "sidecar"}},
		{"stopped, sidecar stop already sent", stopped(running(newTask(taskArn))), sentView{task: task.TaskRunning, containers: map[string]task.ContainerStatus{"app": task.ContainerRunning, "sidecar": task.ContainerStopped}}, true, ecsclient.StatusStopped, []string{"app"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch, _, ok := changeFor(tc.t, tc.view)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			var names []string
			for _, c := range ch.Containers {
				names = append(names, c.Name)
			}
			if ch.Status != tc.wantStatus || fmt.Sprint(names) != fmt.Sprint(tc.wantContainers) {
				t.Errorf("change = %s %v, want %s %v", ch.Status, names, tc.wantStatus, tc.wantContainers)
			}
		})
	}
}

// TestChangeCarriesPullTimes: ECS hears when the task's images were pulled.
func TestChangeCarriesPullTimes(t *testing.T) {
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := &task.Task{Arn: "arn:aws:ecs:r:1:task/c/pull", KnownStatus: task.TaskRunning, PullStartedAt: started,
		PullStoppedAt: started.Add(3 * time.Second), Containers: []*task.Container{{Name: "app", KnownStatus: task.ContainerRunning}}}
	ch, _, ok := changeFor(tk, sentView{containers: map[string]task.ContainerStatus{}})
	if !ok || !ch.PullStartedAt.Equal(started) || !ch.PullStoppedAt.Equal(started.Add(3*time.Second)) {
		t.Errorf("change %+v (send %v): want the pull times %s and %s", ch, ok, started, started.Add(3*time.Second))
	}
}

// TestExecutionStoppedAt: executionStoppedAt is when the first essential container stopped, as the
// ECS agent reports it, not when the task stopped; it is sent with every change once known, and not
// before.
func TestExecutionStoppedAt(t *testing.T) {
	first := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	tk := &task.Task{Arn: taskArn, KnownStatus: task.TaskRunning, Containers: []*task.Container{
		{Name: "web", Essential: true, KnownStatus: task.ContainerRunning},
		{Name: "log", Essential: false, KnownStatus: task.ContainerStopped, FinishedAt: first.Add(-time.Minute)},
		{Name: "api", Essential: true, KnownStatus: task.ContainerRunning},
	}}
	empty := sentView{containers: map[string]task.ContainerStatus{}}
	if ch, _, _ := changeFor(tk, empty); !ch.ExecutionStoppedAt.IsZero() {
		t.Errorf("a non-essential container's stop set executionStoppedAt %s", ch.ExecutionStoppedAt)
	}
	tk.Containers[2].KnownStatus, tk.Containers[2].FinishedAt = task.ContainerStopped, first
	ch, _, _ := changeFor(tk, empty)
	if ch.Status != ecsclient.StatusRunning || !ch.ExecutionStoppedAt.Equal(first) {
		t.Errorf("essential api stopped: %s with executionStoppedAt %s, want RUNNING with %s", ch.Status, ch.ExecutionStoppedAt, first)
	}
	tk.Containers[0].KnownStatus, tk.Containers[0].FinishedAt = task.ContainerStopped, first.Add(5*time.Second)
	tk.KnownStatus, tk.StoppedAt = task.TaskStopped, first.Add(10*time.Second)
	if ch, _, _ := changeFor(tk, empty); !ch.ExecutionStoppedAt.Equal(first) {
		t.Errorf("task stopped: executionStoppedAt %s, want the first essential stop %s", ch.ExecutionStoppedAt, first)
	}
	rejected := &task.Task{Arn: taskArn, KnownStatus: task.TaskStopped, StoppedAt: first}
	if ch, _, _ := changeFor(rejected, empty); !ch.ExecutionStoppedAt.Equal(first) {
		t.Errorf("rejected task: executionStoppedAt %s, want its stop %s", ch.ExecutionStoppedAt, first)
	}
}

// TestNetworkBindingsConsolidated: the bindings of a containerPortRange mapping are sent as one
// binding per host address and protocol with the ranges, as the ECS agent consolidates them; single
// ports stay as they are, ports outside every range too.
func TestNetworkBindingsConsolidated(t *testing.T) {
	c := &task.Container{Name: "web", PortMappings: []task.PortMapping{
		{ContainerPort: 80, Protocol: "tcp"},
		{ContainerPortRange: "9000-9002", Protocol: "udp"},
		{ContainerPortRange: "7000-7001"}, // protocol empty: tcp
	}}
	for i := range 3 {
		for _, ip := range []string{"0.0.0.0", "::"} {
			c.NetworkBindings = append(c.NetworkBindings, task.NetworkBinding{BindIP: ip, ContainerPort: uint16(9000 + i), HostPort: uint16(50010 + i), Protocol: "udp"})
		}
	}
	c.NetworkBindings = append(c.NetworkBindings,
		task.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 8080, Protocol: "tcp"},
		task.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: 7000, HostPort: 50100, Protocol: "tcp"},
		task.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: 7001, HostPort: 50101, Protocol: "tcp"},
		// tcp 9001 is not in the udp range: a single binding.
		task.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: 9001, HostPort: 40000, Protocol: "tcp"},
	)
	got, portRange := networkBindings(c)
	want := []ecsclient.NetworkBinding{
		{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPort: 80, HostPort: 8080},
		{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPort: 9001, HostPort: 40000},
		{BindIP: "0.0.0.0", Protocol: "udp", ContainerPortRange: "9000-9002", HostPortRange: "50010-50012"},
		{BindIP: "::", Protocol: "udp", ContainerPortRange: "9000-9002", HostPortRange: "50010-50012"},
		{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPortRange: "7000-7001", HostPortRange: "50100-50101"},
	}
	if !portRange || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bindings (portRange %v):\n got %v\nwant %v", portRange, got, want)
	}
	if _, pr := networkBindings(&task.Container{PortMappings: []task.PortMapping{{ContainerPort: 80}}}); pr {
		t.Error("a container without a range reported portRange")
	}
}

// TestReporterPortRangeReportedConsolidated: a 1000-port containerPortRange reaches ECS as one
// binding per host address, not 1000, so ECS accepts the task's RUNNING.
func TestReporterPortRangeReportedConsolidated(t *testing.T) {
	f := newFakeECS()
	st := newFakeSentStore()
	r := newTestReporter(t, f, st)
	runReporter(t, r)
	tk := running(newTask(taskArn))
	app := tk.Container("app")
	app.PortMappings = []task.PortMapping{{ContainerPortRange: "10000-10999", Protocol: "tcp"}}
	app.NetworkBindings = nil
	for i := range 1000 {
		app.NetworkBindings = append(app.NetworkBindings, task.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: uint16(10000 + i), HostPort: uint16(20000 + i), Protocol: "tcp"})
	}
	r.Report(tk)
	st.waitSaved(t, 1)
	got := submissions(f)[0].Containers["app"]
	want := []ecsclient.NetworkBinding{{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPortRange: "10000-10999", HostPortRange: "20000-20999"}}
	if !got.PortRange || fmt.Sprint(got.NetworkBindings) != fmt.Sprint(want) {
		t.Errorf("app bindings %v (portRange %v), want %v", got.NetworkBindings, got.PortRange, want)
	}
}

// TestImageDigestReported: the digest the engine resolved is sent; a container saved before it
// resolved one reports the digest pinned in its image reference, if any.
func TestImageDigestReported(t *testing.T) {
	tk := running(newTask(taskArn))
	tk.Container("sidecar").ImageDigest = "sha256:bbbb"
	ch, _, _ := changeFor(tk, sentView{containers: map[string]task.ContainerStatus{}})
	got := map[string]string{}
	for _, c := range ch.Containers {
		got[c.Name] = c.ImageDigest
	}
	if want := map[string]string{"app": "sha256:aaaa", "sidecar": "sha256:bbbb"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("digests %v, want %v", got, want)
	}
}

// TestChangeForManagedAgents: a managed agent's RUNNING and STOPPED are sent in the task state
// change's managedAgents, with the task's current status and no container when only the agent
// changed; PENDING is not sent; a restart (a new lastStartedAt) is sent again; what was sent is not.
func TestChangeForManagedAgents(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := &task.Task{Arn: taskArn, KnownStatus: task.TaskRunning, Containers: []*task.Container{
		{Name: "web", KnownStatus: task.ContainerRunning, ManagedAgents: []task.ManagedAgent{{Name: task.ExecuteCommandAgent, Status: task.ManagedAgentPending}}}}}
	sent := sentView{task: task.TaskRunning, containers: map[string]task.ContainerStatus{"web": task.ContainerRunning}}
	_, _, ok := changeFor(tk, sent)
	assert.False(t, ok, "PENDING is not sent")

	ma := &tk.Containers[0].ManagedAgents[0]
	ma.Status, ma.Reason, ma.LastStartedAt = task.ManagedAgentRunning, "ExecuteCommandAgent started", t0
	ch, after, ok := changeFor(tk, sent)
	require.True(t, ok)
	assert.Equal(t, ecsclient.StatusRunning, ch.Status)
	assert.Empty(t, ch.Containers)
	assert.Equal(t, []ecsclient.ManagedAgentStateChange{{ContainerName: "web", Name: "ExecuteCommandAgent",
		Status: ecsclient.StatusRunning, Reason: "ExecuteCommandAgent started"}}, ch.ManagedAgents)
	sent.mergeView(after)
	_, _, ok = changeFor(tk, sent)
	assert.False(t, ok, "sent already")

	ma.Reason, ma.LastStartedAt = "ExecuteCommandAgent restarted", t0.Add(time.Minute)
	ch, after, ok = changeFor(tk, sent)
	require.True(t, ok, "a restart is news")
	assert.Equal(t, "ExecuteCommandAgent restarted", ch.ManagedAgents[0].Reason)
	sent.mergeView(after)

	ma.Status, ma.Reason = task.ManagedAgentStopped, "ExecuteCommandAgent Initialization failed - x: missing"
	ch, _, ok = changeFor(tk, sent)
	require.True(t, ok)
	assert.Equal(t, []ecsclient.ManagedAgentStateChange{{ContainerName: "web", Name: "ExecuteCommandAgent",
		Status: ecsclient.StatusStopped, Reason: "ExecuteCommandAgent Initialization failed - x: missing"}}, ch.ManagedAgents)
}

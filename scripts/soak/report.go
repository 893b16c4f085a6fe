package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// report is what the soak found. The zero rows (finalMismatch … panics) must be 0.
type report struct {
	tasks, stoppedBySoak, stoppedByAgent int

	// Zero rows.
	finalMismatch int // a task whose control-plane status disagrees with Docker: RUNNING needs every container running, STOPPED none, PENDING is never an end state
	notDesired    int // a task the soak stopped that the control plane does not show STOPPED
	duplicates    int // Docker containers beyond the first ever seen for one task container
	orphans       int // containers of the run belonging to no launched task, or running for a STOPPED task
	lost          int // a task status the agent logged reaching but the control plane never accepted (nor a later one), or a container Docker saw run or exit whose RUNNING/STOPPED (with its exit code) the control plane does not have
	repeated      int // see ledger: regressions, runtime ID and exit-code changes
	panics        int // agent incarnations that died of a Go panic or fatal error

	// Zero rows about the tasks launched into an Engine outage during creates (engineOutages).
	outageFailed     int // stopped by the agent because a create or start failed
	outageOrphans    int // a container of theirs Docker has that the control plane does not name as the task container's
	outageDuplicates int // Docker containers beyond the first ever seen for one of their task containers
	outageTasks      int

	details []string // one line per non-zero finding, capped
	notes   []string // odd things that are not failures

	settleTook    time.Duration
	settledInTime bool
	rssEnd        float64

	// Filled by fill.
	incarnations, kills, cuts, droppedAPI, refusedACS, callErrors int
	dockerdRuns                                                   []time.Duration
	outages                                                       []time.Duration
	unexpected                                                    []string
	mem                                                           []memSample
	resendsAfterDrop, resendsOther, submissions, rejected         int
	superseded                                                    int // RUNNING never accepted because STOPPED came first
	elapsed                                                       time.Duration
}

func (r *report) detail(format string, args ...any) {
	if len(r.details) < 40 {
		r.details = append(r.details, fmt.Sprintf(format, args...))
	}
}

// settled reports whether every condition that waiting can still make hold holds: duplicates,
// repeated state changes and panics cannot be undone by waiting.
func (r *report) settled() bool {
	return r.finalMismatch == 0 && r.notDesired == 0 && r.orphans == 0 && r.lost == 0 && r.outageOrphans == 0
}

func (r *report) failed() bool {
	return r.finalMismatch+r.notDesired+r.duplicates+r.orphans+r.lost+r.repeated+r.panics+
		r.outageFailed+r.outageOrphans+r.outageDuplicates > 0
}

type describedTask struct {
	TaskArn       string `json:"taskArn"`
	StoppedReason string `json:"stoppedReason"`
	LastStatus    string `json:"lastStatus"`
	DesiredStatus string `json:"desiredStatus"`
	Containers    []struct {
		Name       string `json:"name"`
		LastStatus string `json:"lastStatus"`
		RuntimeID  string `json:"runtimeId"`
		ExitCode   *int   `json:"exitCode"`
	} `json:"containers"`
}

// describe returns the control plane's record of every task the soak launched.
func (s *soak) describe(ctx context.Context, arns []string) (map[string]describedTask, error) {
	out := map[string]describedTask{}
	for i := 0; i < len(arns); i += 100 {
		var d struct {
			Tasks []describedTask `json:"tasks"`
		}
		if err := s.cp.Call(ctx, "DescribeTasks", map[string]any{"cluster": s.cluster, "tasks": arns[i:min(i+100, len(arns))]}, &d); err != nil {
			return nil, err
		}
		for _, t := range d.Tasks {
			out[t.TaskArn] = t
		}
	}
	return out, nil
}

// check compares the control plane's record, Docker and the agent's log once.
func (s *soak) check(ctx context.Context) (*report, error) {
	s.mu.Lock()
	launched := slices.Clone(s.launched)
	stoppedBy := map[string]bool{}
	for k, v := range s.stoppedBy {
		stoppedBy[k] = v
	}
	outage := maps.Clone(s.outageTasks)
	s.mu.Unlock()
	// Docker first: a container seen here has been seen by the agent's control plane record below,
	// if the agent is keeping up.
	list, err := s.watch.list(ctx)
	if err != nil {
		return nil, err
	}
	cp, err := s.describe(ctx, launched)
	if err != nil {
		return nil, err
	}
	logData, err := os.ReadFile(filepath.Join(s.dir, "berth.log"))
	if err != nil {
		return nil, err
	}
	reached := agentReached(logData)
	r := &report{tasks: len(launched), stoppedBySoak: len(stoppedBy), outageTasks: len(outage)}

	running := map[string]int{} // task ARN → containers running now
	known := map[string]bool{}
	for _, a := range launched {
		known[a] = true
	}
	for _, c := range list {
		arn := c.Labels[labelTaskARN]
		if c.State == "running" {
			running[arn]++
		}
		switch {
		case !known[arn]:
			r.orphans++
			r.detail("orphan: container %.12s %v (task %q) belongs to no task the soak launched", c.ID, c.Names, arn)
		case c.State == "running" && cp[arn].LastStatus == "STOPPED":
			r.orphans++
			r.detail("orphan: container %.12s %v runs for task %s, which the control plane shows STOPPED", c.ID, c.Names, ecsstandin.TaskID(arn))
		}
		if outage[arn] && !namedByControlPlane(cp[arn], c.Labels[labelContainer], c.ID) {
			r.outageOrphans++
			r.detail("orphan: container %.12s %v of task %s, launched into an Engine outage, is not the one the control plane names", c.ID, c.Names, ecsstandin.TaskID(arn))
		}
	}
	for _, arn := range launched {
		t, ok := cp[arn]
		id := ecsstandin.TaskID(arn)
		if !ok {
			r.finalMismatch++
			r.detail("task %s: the control plane has no record", id)
			continue
		}
		if t.LastStatus == "STOPPED" && t.StoppedReason != stopReason {
			r.stoppedByAgent++
		}
		if outage[arn] && t.LastStatus == "STOPPED" && (strings.Contains(t.StoppedReason, "CannotCreateContainerError") || strings.Contains(t.StoppedReason, "CannotStartContainerError")) {
			r.outageFailed++
			r.detail("task %s, launched into an Engine outage, failed by it: %s", id, t.StoppedReason)
		}
		n := running[arn]
		switch {
		case t.LastStatus == "RUNNING" && n == len(containerNames):
		case t.LastStatus == "STOPPED" && n == 0:
		default:
			r.finalMismatch++
			r.detail("task %s: the control plane says %s (desired %s), Docker runs %d of its %d containers", id, t.LastStatus, t.DesiredStatus, n, len(containerNames))
		}
		if stoppedBy[arn] && t.LastStatus != "STOPPED" {
			r.notDesired++
			r.detail("task %s: stopped by the soak, the control plane says %s", id, t.LastStatus)
		}
		acc, _ := s.ledger.accepted(arn)
		if got, ok := reached[arn]; ok && got > acc && got > 0 {
			r.lost++
			r.detail("task %s: the agent logged reaching %s, the control plane accepted only %s", id, statusNames[got], statusName(acc))
		}
		if reached[arn] >= 1 && acc == 2 && !s.ledger.everAccepted(arn, 1) {
			r.superseded++
		}
	}
	// Containers: every one Docker saw run must be at least RUNNING at the control plane; every one
	// Docker saw exit must be STOPPED there with the same exit code.
	byTC := map[taskContainer][]seenContainer{}
	for _, c := range s.watch.snapshot() {
		byTC[c.tc] = append(byTC[c.tc], c)
		if !known[c.tc.task] {
			continue
		}
		var rec *struct {
			Name       string `json:"name"`
			LastStatus string `json:"lastStatus"`
			RuntimeID  string `json:"runtimeId"`
			ExitCode   *int   `json:"exitCode"`
		}
		t := cp[c.tc.task]
		for i := range t.Containers {
			if t.Containers[i].Name == c.tc.name {
				rec = &t.Containers[i]
			}
		}
		if rec == nil || (rec.RuntimeID != "" && rec.RuntimeID != c.id) {
			continue // a duplicate, counted below
		}
		id := ecsstandin.TaskID(c.tc.task)
		switch {
		case c.everRunning && rec.LastStatus == "PENDING":
			r.lost++
			r.detail("container %s of task %s: Docker ran it (%.12s), the control plane still says PENDING", c.tc.name, id, c.id)
		case !c.running && !c.gone && c.exitCode != nil && (rec.LastStatus != "STOPPED" || rec.ExitCode == nil || *rec.ExitCode != *c.exitCode):
			r.lost++
			got := "no exit code"
			if rec.ExitCode != nil {
				got = fmt.Sprintf("exit code %d", *rec.ExitCode)
			}
			r.detail("container %s of task %s: Docker shows it exited (%d), the control plane says %s with %s", c.tc.name, id, *c.exitCode, rec.LastStatus, got)
		}
	}
	for tc, cs := range byTC {
		if len(cs) > 1 {
			r.duplicates += len(cs) - 1
			if outage[tc.task] {
				r.outageDuplicates += len(cs) - 1
			}
			ids := make([]string, 0, len(cs))
			for _, c := range cs {
				ids = append(ids, c.id[:12])
			}
			r.detail("duplicate: container %s of task %s has %d Docker containers: %s", tc.name, ecsstandin.TaskID(tc.task), len(cs), strings.Join(ids, ", "))
		}
	}
	r.repeated = s.ledger.repeated()
	s.mu.Lock()
	r.panics = s.panics
	s.mu.Unlock()
	return r, nil
}

// namedByControlPlane reports whether the control plane's record of t names Docker container id as
// its container name.
func namedByControlPlane(t describedTask, name, id string) bool {
	for _, c := range t.Containers {
		if c.Name == name {
			return c.RuntimeID == id
		}
	}
	return false
}

func statusName(r int) string {
	if r < 0 {
		return "nothing"
	}
	return statusNames[r]
}

// fill adds the run's counters to r.
func (s *soak) fill(r *report) {
	s.mu.Lock()
	r.incarnations, r.kills, r.cuts, r.callErrors = s.incarnation, s.kills, s.cuts, s.callErrors
	r.dockerdRuns = slices.Clone(s.dockerdRuns)
	r.outages = slices.Clone(s.outages)
	r.unexpected = slices.Clone(s.unexpected)
	r.mem = slices.Clone(s.mem)
	r.panics = s.panics
	if s.lastErr != nil && s.callErrors > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d soak calls failed, the last: %v", s.callErrors, s.lastErr))
	}
	s.mu.Unlock()
	r.droppedAPI, r.refusedACS = s.cp.Disruptions()
	l := s.ledger
	l.mu.Lock()
	r.resendsAfterDrop, r.resendsOther, r.submissions, r.rejected = l.resendsAfterDrop, l.resendsOther, l.submissionsSeen, l.rejected
	for _, c := range l.confusing {
		r.detail("repeated: %s", c)
	}
	l.mu.Unlock()
	r.elapsed = time.Since(s.start)
}

// print writes the table.
func (r *report) print(w io.Writer) {
	row := func(name string, v any, must string) {
		mark := ""
		if must == "0" && fmt.Sprint(v) != "0" {
			mark = "  <-- FAIL"
		}
		fmt.Fprintf(w, "| %-64s | %14v | %-4s |%s\n", name, v, must, mark)
	}
	fmt.Fprintf(w, "| %-64s | %14s | %-4s |\n", "check", "value", "must")
	fmt.Fprintf(w, "|%s|%s|%s|\n", strings.Repeat("-", 66), strings.Repeat("-", 16), strings.Repeat("-", 6))
	row("tasks launched", r.tasks, "")
	row("  stopped by the soak (StopTask)", r.stoppedBySoak, "")
	row("  stopped by the agent first (e.g. dockerd restart killed them)", r.stoppedByAgent, "")
	row("agent incarnations (SIGKILLs)", fmt.Sprintf("%d (%d)", r.incarnations, r.kills), "")
	row("agent exits the soak did not cause", len(r.unexpected), "")
	row("dockerd restarts", len(r.dockerdRuns), "")
	row("control-plane cuts (API conns dropped / ACS refused)", fmt.Sprintf("%d (%d/%d)", r.cuts, r.droppedAPI, r.refusedACS), "")
	row("state-change submissions seen (refused)", fmt.Sprintf("%d (%d)", r.submissions, r.rejected), "")
	row("idempotent resends: after a dropped answer / other", fmt.Sprintf("%d / %d", r.resendsAfterDrop, r.resendsOther), "")
	row("tasks whose RUNNING was superseded by STOPPED", r.superseded, "")
	row("final state: control plane != Docker", r.finalMismatch, "0")
	row("stopped by the soak, not STOPPED at the control plane", r.notDesired, "0")
	row("duplicate containers (per task container)", r.duplicates, "0")
	row("orphan containers", r.orphans, "0")
	row("lost state changes", r.lost, "0")
	row("repeated state changes that would confuse ECS", r.repeated, "0")
	row("agent panics", r.panics, "0")
	longest := time.Duration(0)
	for _, d := range r.outages {
		longest = max(longest, d)
	}
	row("Engine outages during creates (longest, stop to answer)", fmt.Sprintf("%d (%s)", len(r.outages), longest.Round(100*time.Millisecond)), "")
	row("  tasks launched into them", r.outageTasks, "")
	row("  failed by the outage (a create or start error)", r.outageFailed, "0")
	row("  orphan containers of theirs", r.outageOrphans, "0")
	row("  duplicate containers of theirs", r.outageDuplicates, "0")
	if len(r.mem) > 0 {
		first, last := r.mem[0], r.mem[len(r.mem)-1]
		row("agent RSS at age 10 s: first incarnation (containers running)", fmt.Sprintf("%.1f MiB (%d)", first.rssMiB, first.containers), "")
		row(fmt.Sprintf("agent RSS at age 10 s: last measured, #%d (containers running)", last.incarnation), fmt.Sprintf("%.1f MiB (%d)", last.rssMiB, last.containers), "")
		hi := slices.MaxFunc(r.mem, func(a, b memSample) int { return int(a.rssMiB*1000 - b.rssMiB*1000) })
		row(fmt.Sprintf("agent RSS at age 10 s: highest, #%d", hi.incarnation), fmt.Sprintf("%.1f MiB", hi.rssMiB), "")
	}
	row("agent RSS of the last incarnation at the end", fmt.Sprintf("%.1f MiB", r.rssEnd), "")
	settled := "settled"
	if !r.settledInTime {
		settled = "NOT settled"
	}
	row("time to settle after the chaos", fmt.Sprintf("%s %s", r.settleTook.Round(100*time.Millisecond), settled), "")
	for _, d := range r.details {
		fmt.Fprintf(w, "  %s\n", d)
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, u := range r.unexpected {
		fmt.Fprintf(w, "  note: %s\n", u)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sync"

	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// rank orders the ECS statuses a task or container moves through: PENDING < RUNNING < STOPPED.
// Anything else (the task model's PULLED, CREATED) ranks with PENDING.
func rank(status string) int {
	switch status {
	case "RUNNING":
		return 1
	case "STOPPED":
		return 2
	}
	return 0
}

var statusNames = []string{"PENDING", "RUNNING", "STOPPED"}

// ledger follows every state-change submission the control plane accepted, per task and container,
// and counts what would confuse ECS.
//
// Definitions (what the soak's "repeated state changes" row counts):
//   - a task regression: an accepted submission whose task status ranks below one already accepted
//     for that task (RUNNING after STOPPED, PENDING after RUNNING);
//   - a container regression: the same for a container, in SubmitContainerStateChange or in a task
//     submission's containers;
//   - a runtime ID change: a container reported with a Docker ID other than the one already accepted
//     for it (ECS would take it for a replaced container);
//   - an exit-code change: a STOPPED container reported again with another exit code;
//   - RUNNING after an essential stop: a task first reported RUNNING when one of its containers (all
//     the soak's are essential) has been reported STOPPED, in that submission or before: ECS would
//     count a task whose essential container never ran, or already exited, as started.
//
// ECS takes an idempotent resend (the status it already has, nothing newer) without harm, so those
// are counted apart (resends), split by whether the answer to the earlier acceptance was dropped by
// the stand-in (the agent could not know it was accepted) or not.
type ledger struct {
	mu    sync.Mutex
	tasks map[string]*taskLedger // by task ARN

	rejected           int // submissions the control plane refused
	resendsAfterDrop   int
	resendsOther       int
	taskRegressions    int
	contRegressions    int
	runtimeIDChanges   int
	exitCodeChanges    int
	runningAfterStop   int
	confusing          []string // details of the above, for the report
	submissionsSeen    int
	taskSubmissions    int
	contSubmissions    int
	droppedAfterAccept int // accepted submissions whose answer the stand-in dropped
}

type taskLedger struct {
	max         int     // highest accepted task status rank; -1 before any
	ever        [3]bool // the task statuses ever accepted
	lastDropped bool    // the answer to the latest accepted submission was dropped
	containers  map[string]*containerLedger
}

type containerLedger struct {
	max       int
	runtimeID string
	exitCode  *int
}

func newLedger() *ledger { return &ledger{tasks: map[string]*taskLedger{}} }

type containerChange struct {
	ContainerName string `json:"containerName"`
	Status        string `json:"status"`
	RuntimeID     string `json:"runtimeId"`
	ExitCode      *int   `json:"exitCode"`
}

// observe is the stand-in's Observe hook.
func (l *ledger) observe(s ecsstandin.Submission) {
	var req struct {
		Task       string            `json:"task"`
		Status     string            `json:"status"`
		Containers []containerChange `json:"containers"`
		containerChange
	}
	_ = json.Unmarshal(s.Body, &req)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.submissionsSeen++
	if !s.Accepted {
		l.rejected++
		return
	}
	if s.Dropped {
		l.droppedAfterAccept++
	}
	t := l.tasks[req.Task]
	if t == nil {
		t = &taskLedger{max: -1, containers: map[string]*containerLedger{}}
		l.tasks[req.Task] = t
	}
	newer, firstRunning := false, false
	containers := req.Containers
	if s.Op == "SubmitContainerStateChange" {
		l.contSubmissions++
		containers = []containerChange{req.containerChange}
	} else {
		l.taskSubmissions++
		r := rank(req.Status)
		t.ever[r] = true
		firstRunning = r == 1 && r > t.max
		switch {
		case r < t.max:
			l.taskRegressions++
			l.note("task %s reported %s after %s was accepted", ecsstandin.TaskID(req.Task), req.Status, statusNames[t.max])
		case r > t.max:
			t.max, newer = r, true
		}
	}
	for _, cc := range containers {
		c := t.containers[cc.ContainerName]
		if c == nil {
			c = &containerLedger{max: -1}
			t.containers[cc.ContainerName] = c
		}
		r := rank(cc.Status)
		switch {
		case r < c.max:
			l.contRegressions++
			l.note("container %s of task %s reported %s after %s was accepted", cc.ContainerName, ecsstandin.TaskID(req.Task), cc.Status, statusNames[c.max])
		case r > c.max:
			c.max, newer = r, true
		}
		if cc.RuntimeID != "" {
			if c.runtimeID != "" && c.runtimeID != cc.RuntimeID {
				l.runtimeIDChanges++
				l.note("container %s of task %s reported with Docker ID %.12s after %.12s was accepted", cc.ContainerName, ecsstandin.TaskID(req.Task), cc.RuntimeID, c.runtimeID)
			}
			c.runtimeID = cc.RuntimeID
		}
		if r == 2 && cc.ExitCode != nil {
			if c.exitCode != nil && *c.exitCode != *cc.ExitCode {
				l.exitCodeChanges++
				l.note("container %s of task %s reported STOPPED with exit code %d after %d was accepted", cc.ContainerName, ecsstandin.TaskID(req.Task), *cc.ExitCode, *c.exitCode)
			}
			c.exitCode = new(*cc.ExitCode)
		}
	}
	if firstRunning {
		for name, c := range t.containers {
			if c.max == 2 {
				l.runningAfterStop++
				l.note("task %s first reported RUNNING with its essential container %s already STOPPED", ecsstandin.TaskID(req.Task), name)
				break
			}
		}
	}
	if !newer {
		if t.lastDropped {
			l.resendsAfterDrop++
		} else {
			l.resendsOther++
		}
	}
	t.lastDropped = s.Dropped
}

func (l *ledger) note(format string, args ...any) {
	if len(l.confusing) < 20 {
		l.confusing = append(l.confusing, fmt.Sprintf(format, args...))
	}
}

// accepted returns the highest task status accepted for arn (-1: none) and the container ledger.
func (l *ledger) accepted(arn string) (int, map[string]containerLedger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tasks[arn]
	if t == nil {
		return -1, nil
	}
	cs := map[string]containerLedger{}
	for k, v := range t.containers {
		cs[k] = *v
	}
	return t.max, cs
}

// everAccepted reports whether the control plane ever accepted task status rank r for arn.
func (l *ledger) everAccepted(arn string, r int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tasks[arn]
	return t != nil && t.ever[r]
}

// repeated is the sum of everything that would confuse ECS.
func (l *ledger) repeated() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taskRegressions + l.contRegressions + l.runtimeIDChanges + l.exitCodeChanges + l.runningAfterStop
}

// statusChangeRE finds the engine's "task status changed" log lines (logfmt).
var (
	statusChangeRE = regexp.MustCompile(`(?m)^.*msg="task status changed".*$`)
	taskFieldRE    = regexp.MustCompile(`\btask="?([^"\s]+)"?`)
	toFieldRE      = regexp.MustCompile(`\bto="?([A-Z_]+)"?`)
)

// agentReached reads the agent's log (every incarnation appends to it) and returns, per task ARN,
// the highest ECS status the agent logged a transition to.
func agentReached(log []byte) map[string]int {
	out := map[string]int{}
	for _, line := range statusChangeRE.FindAll(log, -1) {
		t, to := taskFieldRE.FindSubmatch(line), toFieldRE.FindSubmatch(line)
		if t == nil || to == nil {
			continue
		}
		arn, r := string(t[1]), rank(string(to[1]))
		if cur, ok := out[arn]; !ok || r > cur {
			out[arn] = r
		}
	}
	return out
}

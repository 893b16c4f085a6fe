package localcp

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/task"
)

// Static tasks (ECS_STATIC_TASKS_DIR) run on the agent's host whatever a control plane says, like
// kubelet's static pods; this control plane shows them as the API server shows a static pod's mirror
// pod: read live from the agent (Config.StaticTasks) at each request, never stored, marked, and
// refusing every change.
//
//   - ListTasks lists them, with its filters (cluster, family, startedBy, containerInstance,
//     desiredStatus), sorted by creation time with the other tasks; DescribeTasks describes them by
//     ARN or ID with their containers, statuses, health, network bindings and times as the agent
//     knows them. Each is marked: startedBy StaticStartedBy, the task attribute StaticFileAttribute
//     and, with include TAGS (and in ListTagsForResource), the tag StaticFileTag, both valued with
//     the file's name.
//   - StopTask answers a ClientException naming the file (to stop the task, remove or edit it); a
//     static task already stopping is answered as it is, as ECS answers a second stop.
//     UpdateTaskProtection and GetTaskProtection give the failure TASK_NOT_VALID, as ECS does for a
//     task it cannot protect; ExecuteCommand points at `berth exec` as for any task.
//   - They use the instance's resources, so DescribeContainerInstances counts them in
//     runningTasksCount and pendingTasksCount and takes their CPU and memory off remainingResources
//     (as kubelet counts mirror pods in a node's allocations), and DescribeClusters counts them too.
//   - One the agent no longer holds (cleaned up after it stopped) is gone from every answer.

// StaticStartedBy is the startedBy of every static task.
const StaticStartedBy = "berth-static"

// StaticFileTag is the tag key, and StaticFileAttribute the task attribute name, whose value is the
// name of a static task's file in ECS_STATIC_TASKS_DIR.
const (
	StaticFileTag       = "berth:static-task-file"
	StaticFileAttribute = "berth.static-task-file"
)

// StaticTask is one task the agent runs from a file of ECS_STATIC_TASKS_DIR, as its engine holds it.
type StaticTask struct {
	// Task is a copy of the engine's task; the control plane only reads it. Its ARN
	// (arn:aws:ecs:<region>:<account>:task/<cluster>/<id>) says its cluster.
	Task *task.Task
	// File is the name of the task's file in ECS_STATIC_TASKS_DIR; "" when none names it any more.
	File string
	// ContainerInstanceArn is the agent's container instance; "" before the agent registered.
	ContainerInstanceArn string
}

// staticTasks returns the static tasks of the named cluster that the agent runs now.
func (s *Server) staticTasks(ctx context.Context, cluster string) []StaticTask {
	return inCluster(s.allStatic(ctx), cluster)
}

// allStatic returns every static task the agent runs now; nil without a source.
func (s *Server) allStatic(ctx context.Context) []StaticTask {
	if s.static == nil {
		return nil
	}
	return s.static(ctx)
}

// inCluster returns the static tasks of the named cluster among tasks.
func inCluster(tasks []StaticTask, cluster string) []StaticTask {
	var out []StaticTask
	for _, st := range tasks {
		if st.Task != nil && taskCluster(st.Task.Arn) == cluster {
			out = append(out, st)
		}
	}
	return out
}

// load is what the tasks on an instance or in a cluster hold: how many run, how many are pending,
// and the CPU units and MiB of both.
type load struct {
	running, pending, cpu, mem int
}

// staticLoad is the load of the static tasks among tasks that have not stopped, those on the
// container instance ARN instance only when it is not "".
func staticLoad(tasks []StaticTask, instance string) load {
	var l load
	for _, st := range tasks {
		t := st.Task
		if instance != "" && st.ContainerInstanceArn != instance || t.KnownStatus.Terminal() {
			continue
		}
		cpu, mem := staticResources(t)
		l.cpu += cpu
		l.mem += mem
		if t.KnownStatus == task.TaskRunning {
			l.running++
		} else {
			l.pending++
		}
	}
	return l
}

// taskCluster returns the cluster name of a task ARN (…:task/<cluster>/<id>), or "".
func taskCluster(arn string) string {
	_, rest, ok := strings.Cut(arn, ":task/")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return name
}

// staticFinder returns findStatic over the named cluster's static tasks, asked of the source at the
// first call only: a DescribeTasks or StopTask that names only this control plane's tasks never asks.
func (s *Server) staticFinder(ctx context.Context, cluster string) func(ref string) *StaticTask {
	var static []StaticTask
	asked := false
	return func(ref string) *StaticTask {
		if !asked {
			static, asked = s.staticTasks(ctx, cluster), true
		}
		return findStatic(static, ref)
	}
}

// findStatic returns the static task ref names (an ARN, or an ID as findTask takes it), or nil.
func findStatic(tasks []StaticTask, ref string) *StaticTask {
	for i, st := range tasks {
		if st.Task.Arn == ref || !strings.HasPrefix(ref, "arn:") && lastSegment(st.Task.Arn) == lastSegment(ref) {
			return &tasks[i]
		}
	}
	return nil
}

// staticOrigin says where a static task comes from, for the answers that refuse to change it.
func (s *Server) staticOrigin(st *StaticTask) string {
	switch {
	case st.File == "" && s.staticDir == "":
		return "a file of ECS_STATIC_TASKS_DIR that is no longer there"
	case st.File == "":
		return "a file of ECS_STATIC_TASKS_DIR (" + s.staticDir + ") that is no longer there"
	case s.staticDir == "":
		return fmt.Sprintf("the file %q of ECS_STATIC_TASKS_DIR", st.File)
	}
	return "the file " + filepath.Join(s.staticDir, st.File) + " of ECS_STATIC_TASKS_DIR"
}

// staticStopRefused is StopTask's answer for a static task that runs: ClientException, ECS's answer
// to an action the resource does not allow, saying why and what to do instead.
func (s *Server) staticStopRefused(st *StaticTask) error {
	return clientError("Task %s is a static task: it runs from %s, and its host keeps it running whatever a control plane asks. "+
		"To stop it, remove or edit the file.", lastSegment(st.Task.Arn), s.staticOrigin(st))
}

// staticProtectionFailure is the failure UpdateTaskProtection and GetTaskProtection give a static
// task: TASK_NOT_VALID, what ECS answers for a task it does not protect.
func (s *Server) staticProtectionFailure(st *StaticTask) failure {
	return failure{Arn: st.Task.Arn, Reason: "TASK_NOT_VALID", Detail: fmt.Sprintf(
		"static task from %s: it has no scale-in protection; its host keeps it running until the file is removed or edited", s.staticOrigin(st))}
}

// staticTags are a static task's tags: its file's name, when a file names it.
func staticTags(st *StaticTask) []tag {
	if st.File == "" {
		return nil
	}
	return []tag{{Key: StaticFileTag, Value: st.File}}
}

// staticOut renders a static task the way describe-tasks prints it, from what the agent knows of it.
func (s *Server) staticOut(st *StaticTask) taskOut {
	t := st.Task
	cluster, id := taskCluster(t.Arn), lastSegment(t.Arn)
	out := taskOut{
		TaskArn:              t.Arn,
		ClusterArn:           s.clusterArn(cluster),
		TaskDefinitionArn:    s.taskDefArn(t.Family, t.Revision),
		ContainerInstanceArn: st.ContainerInstanceArn,
		LastStatus:           taskStatusName(t.KnownStatus),
		DesiredStatus:        taskStatusName(t.DesiredStatus),
		StartedBy:            StaticStartedBy,
		Version:              1, // nothing counts a static task's changes
		StoppedReason:        t.StoppedReason,
		PullStartedAt:        ts(t.PullStartedAt),
		PullStoppedAt:        ts(t.PullStoppedAt),
		ExecutionStoppedAt:   ts(t.StoppedAt),
		CreatedAt:            ts(t.CreatedAt),
		StartedAt:            ts(t.StartedAt),
		StoppedAt:            ts(t.StoppedAt),
		Group:                "family:" + t.Family,
		LaunchType:           launchTypeOf(t.LaunchType),
		Attachments:          []struct{}{},
		Attributes:           []attribute{{Name: StaticFileAttribute, Value: st.File}},
		Tags:                 staticTags(st),
		HealthStatus:         taskHealth(t),
	}
	if t.CPU > 0 {
		out.CPU = strconv.Itoa(t.CPU)
	}
	if t.Memory > 0 {
		out.Memory = strconv.Itoa(t.Memory)
	}
	if !t.StartedAt.IsZero() {
		out.Connectivity = "CONNECTED"
		out.ConnectivityAt = ts(t.StartedAt)
	}
	for _, c := range t.Containers {
		if c.Pause {
			continue // Berth's, not the definition's
		}
		co := containerOut{
			ContainerArn:    s.arn(fmt.Sprintf("container/%s/%s/%s", cluster, id, c.Name)),
			TaskArn:         t.Arn,
			Name:            c.Name,
			Image:           c.Image,
			ImageDigest:     c.ImageDigest,
			RuntimeID:       c.DockerID,
			LastStatus:      containerStatusName(c.KnownStatus),
			ExitCode:        c.ExitCode,
			Reason:          c.Reason,
			NetworkBindings: []networkBinding{},
			CPU:             strconv.Itoa(c.CPU),
			HealthStatus:    containerHealth(c),
		}
		for _, b := range c.NetworkBindings {
			co.NetworkBindings = append(co.NetworkBindings, networkBinding{BindIP: b.BindIP, ContainerPort: int(b.ContainerPort),
				HostPort: int(b.HostPort), Protocol: b.Protocol})
		}
		if m := cmp.Or(c.Memory, c.MemoryReservation); m > 0 {
			co.Memory = strconv.Itoa(m)
		}
		out.Containers = append(out.Containers, co)
	}
	return out
}

// containerHealth is a container's healthStatus as ECS shows it: its health check's last verdict,
// UNKNOWN without a health check or before its first verdict.
func containerHealth(c *task.Container) string {
	if c.HealthCheck == nil || c.Health == "" {
		return string(task.HealthUnknown)
	}
	return string(c.Health)
}

// taskHealth is a task's healthStatus as ECS derives it from its essential containers that have a
// health check: UNHEALTHY when one is, HEALTHY when all are, else (none has one, or one has no verdict
// yet) UNKNOWN.
func taskHealth(t *task.Task) string {
	checked, healthy := 0, 0
	for _, c := range t.Containers {
		if !c.Essential || c.Pause || c.HealthCheck == nil {
			continue
		}
		checked++
		switch containerHealth(c) {
		case string(task.HealthUnhealthy):
			return string(task.HealthUnhealthy)
		case string(task.HealthHealthy):
			healthy++
		}
	}
	if checked > 0 && healthy == checked {
		return string(task.HealthHealthy)
	}
	return string(task.HealthUnknown)
}

// staticResources are the CPU units and MiB a static task holds on its instance, counted as a task
// of RunTask is: the task's size, or the sum of its containers' when that is larger.
func staticResources(t *task.Task) (cpu, mem int) {
	for _, c := range t.Containers {
		if c.Pause {
			continue
		}
		cpu += c.CPU
		mem += cmp.Or(c.Memory, c.MemoryReservation)
	}
	return max(t.CPU, cpu), max(t.Memory, mem)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/task"
)

// runPs prints the tasks of the running agent, one line per container, from its introspection API.
func runPs(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	res, _, where, err := loadConfig(c, 0, args, environ, stdout, stderr, nil)
	if code, ok := flagExit(err); ok {
		return code
	}
	addr := res.Config.IntrospectionAddr
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, res.Config.IntrospectionURL()+"/v1/tasks", nil)
	if err != nil {
		fmt.Fprintf(stderr, "berth ps: %v\n", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "berth ps: is the agent running?%s %v\n", where.hint(), err)
		return 1
	}
	defer resp.Body.Close()
	var body introspection.TasksResponse
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "berth ps: %s answered %s\n", addr, resp.Status)
		return 1
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		fmt.Fprintf(stderr, "berth ps: bad answer from %s: %v\n", addr, err)
		return 1
	}
	printTasks(stdout, body.Tasks, body.UnknownContainers)
	return 0
}

// printTasks renders tasks as a table: one row per container, the task's columns on its first row,
// with each running container's latest CPU (percent of one vCPU) and memory when the agent knows them.
// The task's statuses are as ECS names them (PENDING, RUNNING, STOPPED); each container's STATUS is
// the agent's own (PULLED, CREATED, …), which says where a PENDING task is.
// The running containers of no known task follow in a table of their own, with what to do about
// them; nothing is printed for them when there are none.
func printTasks(w io.Writer, tasks []introspection.TaskResponse, unknown []introspection.UnknownContainerResponse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tFAMILY:REV\tDESIRED\tKNOWN\tCONTAINER\tSTATUS\tCPU %\tMEM\tDOCKER ID\tPORTS\tREASON")
	for _, t := range tasks {
		id := t.Arn[strings.LastIndexByte(t.Arn, '/')+1:]
		taskReason := t.StoppedReason
		if taskReason == "" {
			taskReason = t.PendingReason
		}
		desired := orDash(t.DesiredStatus) // the agent leaves out a desired status the task is past
		if len(t.Containers) == 0 {
			fmt.Fprintf(tw, "%s\t%s:%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t%s\n", id, t.Family, t.Version, desired, t.KnownStatus, taskReason)
		}
		for i, c := range t.Containers {
			reason := c.Reason
			if i == 0 && taskReason != "" {
				reason = taskReason
			}
			for _, ma := range c.ManagedAgents {
				if reason == "" && ma.LastStatus == string(task.ManagedAgentStopped) && ma.Reason != "" {
					reason = "ECS Exec: " + ma.Reason // why `aws ecs execute-command` cannot reach it
				}
			}
			status := containerStatus(c)
			dockerID := "-"
			if c.DockerID != "" {
				dockerID = c.DockerID[:min(12, len(c.DockerID))]
			}
			var ports []string
			for _, p := range c.Ports {
				if port := fmt.Sprintf("%d->%d/%s", p.HostPort, p.ContainerPort, p.Protocol); !slices.Contains(ports, port) {
					ports = append(ports, port) // Docker binds IPv4 and IPv6 alike: show the port once
				}
			}
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s:%s\t%s\t%s\t", id, t.Family, t.Version, desired, t.KnownStatus)
			} else {
				fmt.Fprint(tw, "\t\t\t\t")
			}
			cpu, mem := "-", "-"
			if c.CPUPercent != nil {
				cpu = fmt.Sprintf("%.1f%%", *c.CPUPercent)
			}
			if c.MemoryMiB != nil {
				mem = fmt.Sprintf("%.1fMiB", *c.MemoryMiB)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, status, cpu, mem, dockerID, strings.Join(ports, ","), reason)
		}
	}
	_ = tw.Flush()
	printUnknown(w, unknown)
}

// containerStatus is a container's STATUS cell: its known status, with its exit code once it exited,
// its restart count when it has a restart policy and its ECS Exec agent's status when it has one,
// e.g. "RUNNING (restarts 2, exec RUNNING)".
func containerStatus(c introspection.ContainerResponse) string {
	var notes []string
	if c.ExitCode != nil {
		notes = append(notes, fmt.Sprintf("exit %d", *c.ExitCode))
	}
	if c.RestartCount != nil {
		notes = append(notes, fmt.Sprintf("restarts %d", *c.RestartCount))
	}
	for _, ma := range c.ManagedAgents {
		if ma.Name == task.ExecuteCommandAgent {
			notes = append(notes, "exec "+ma.LastStatus)
		}
	}
	if len(notes) == 0 {
		return c.KnownStatus
	}
	return fmt.Sprintf("%s (%s)", c.KnownStatus, strings.Join(notes, ", "))
}

// printUnknown renders the running containers of no known task, if any, under a heading that says
// why they run and how to remove them.
func printUnknown(w io.Writer, unknown []introspection.UnknownContainerResponse) {
	if len(unknown) == 0 {
		return
	}
	fmt.Fprintf(w, "\nUNKNOWN CONTAINERS (%d): left running because the agent has no record of them (Berth's labels, no known task).\n", len(unknown))
	fmt.Fprintln(w, "The agent does not manage, stop or remove them. If one is not wanted, remove it by hand: docker rm -f <id>")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOCKER ID\tNAME\tTASK\tCONTAINER\tIMAGE\tRUNNING SINCE")
	for _, u := range unknown {
		taskID := "-"
		if u.TaskArn != "" {
			taskID = u.TaskArn[strings.LastIndexByte(u.TaskArn, '/')+1:]
		}
		since := "-"
		if !u.Since.IsZero() {
			since = u.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", u.DockerID[:min(12, len(u.DockerID))], orDash(u.DockerName), taskID,
			orDash(u.Name), orDash(u.Image), since)
	}
	_ = tw.Flush()
}

// orDash returns s, or "-" when s is empty, so that a table keeps its columns.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

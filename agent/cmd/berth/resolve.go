package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/introspection"
)

// exitFailed is the exit status of `berth exec` when berth itself could not run the command (as
// docker exec's 125), so that it differs from the command's own statuses.
const exitFailed = 125

// fetchTasks reads the running agent's tasks from its introspection API, as `berth ps` does; where
// says how the agent was found.
func fetchTasks(ctx context.Context, cfg *config.Config, where agentLookup) ([]introspection.TaskResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.IntrospectionURL()+"/v1/tasks", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("is the agent running? its introspection API at %s does not answer%s: %w", cfg.IntrospectionAddr, where.hint(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the agent's introspection API at %s answered %s", cfg.IntrospectionAddr, resp.Status)
	}
	var body introspection.TasksResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("bad answer from the introspection API at %s: %w", cfg.IntrospectionAddr, err)
	}
	return body.Tasks, nil
}

// taskID is the last part of a task ARN: its ID.
func taskID(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }

// maxListed bounds the tasks or containers an error lists.
const maxListed = 8

// describeTasks lists tasks briefly for an error: "ID (family:rev, STATUS)", at most maxListed.
func describeTasks(tasks []introspection.TaskResponse) string {
	var parts []string
	for i, t := range tasks {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("and %d more (berth ps lists them)", len(tasks)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s:%s, %s)", taskID(t.Arn), t.Family, t.Version, t.KnownStatus))
	}
	return strings.Join(parts, ", ")
}

// resolveTask finds the task ref names among tasks: by ARN, by ID, or by a prefix of one ID only.
func resolveTask(tasks []introspection.TaskResponse, ref string) (introspection.TaskResponse, error) {
	if ref == "" {
		return introspection.TaskResponse{}, errors.New("no task given")
	}
	var prefixed []introspection.TaskResponse
	for _, t := range tasks {
		if t.Arn == ref || taskID(t.Arn) == ref {
			return t, nil
		}
		if strings.HasPrefix(taskID(t.Arn), ref) {
			prefixed = append(prefixed, t)
		}
	}
	switch {
	case len(prefixed) == 1:
		return prefixed[0], nil
	case len(prefixed) > 1:
		return introspection.TaskResponse{}, fmt.Errorf("task %q is ambiguous: it begins %d task IDs: %s; give more of the ID",
			ref, len(prefixed), describeTasks(prefixed))
	case len(tasks) == 0:
		return introspection.TaskResponse{}, fmt.Errorf("no task %q: the agent has no tasks", ref)
	}
	return introspection.TaskResponse{}, fmt.Errorf("no task %q (by ARN, ID or ID prefix); the agent's tasks: %s", ref, describeTasks(tasks))
}

// internalPrefix begins the names of the containers the agent adds to a task itself (the pause
// container, "~internal~ecs~pause"), which are never a command's or a reader's.
const internalPrefix = "~internal~"

// taskContainers returns t's containers, the agent's own left out.
func taskContainers(t introspection.TaskResponse) []introspection.ContainerResponse {
	var out []introspection.ContainerResponse
	for _, c := range t.Containers {
		if !strings.HasPrefix(c.Name, internalPrefix) {
			out = append(out, c)
		}
	}
	return out
}

// containerNames lists the names of cs for an error.
func containerNames(cs []introspection.ContainerResponse) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// namedContainer returns t's container called name.
func namedContainer(t introspection.TaskResponse, name string) (introspection.ContainerResponse, error) {
	cs := taskContainers(t)
	for _, c := range cs {
		if c.Name == name {
			return c, nil
		}
	}
	if len(cs) == 0 {
		return introspection.ContainerResponse{}, fmt.Errorf("task %s has no container %q: it has no containers", taskID(t.Arn), name)
	}
	return introspection.ContainerResponse{}, fmt.Errorf("task %s has no container %q; its containers: %s", taskID(t.Arn), name, containerNames(cs))
}

// defaultContainer is the container a command runs in when none is named: the task's only one,
// else its first essential one.
func defaultContainer(t introspection.TaskResponse) (introspection.ContainerResponse, error) {
	cs := taskContainers(t)
	switch len(cs) {
	case 0:
		return introspection.ContainerResponse{}, fmt.Errorf("task %s has no containers", taskID(t.Arn))
	case 1:
		return cs[0], nil
	}
	for _, c := range cs {
		if c.Essential {
			return c, nil
		}
	}
	return introspection.ContainerResponse{}, fmt.Errorf("task %s has %d containers and none is essential: name one of: %s",
		taskID(t.Arn), len(cs), containerNames(cs))
}

// statusText is a container's status for an error: "STOPPED (exit 1)".
func statusText(c introspection.ContainerResponse) string {
	if c.ExitCode != nil {
		return fmt.Sprintf("%s (exit %d)", c.KnownStatus, *c.ExitCode)
	}
	return c.KnownStatus
}

// parseInterspersed parses args with fs, flags anywhere among the positional arguments, which it
// returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

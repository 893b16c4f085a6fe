package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// UnknownContainers returns the running containers labelled as Berth's for this cluster that belong
// to no task the engine holds, as Restore found them, ordered by task ARN, container name and Docker
// ID. The engine never stops or removes them; one leaves the list once Docker reports it stopped or
// removed (through its event, or at the next reconcile when the event was missed). It returns a copy
// and is safe for concurrent use.
func (e *Engine) UnknownContainers() []task.UnknownContainer {
	e.mu.Lock()
	out := make([]task.UnknownContainer, 0, len(e.unknown))
	for _, u := range e.unknown {
		out = append(out, u)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b task.UnknownContainer) int {
		return cmp.Or(cmp.Compare(a.TaskArn, b.TaskArn), cmp.Compare(a.Name, b.Name), cmp.Compare(a.DockerID, b.DockerID))
	})
	return out
}

// setUnknown replaces the list of running containers of no known task.
func (e *Engine) setUnknown(list []task.UnknownContainer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unknown = make(map[string]task.UnknownContainer, len(list))
	for _, u := range list {
		e.unknown[u.DockerID] = u
	}
}

// dropUnknown takes a container of no known task off the list once Docker says it is stopped or
// removed (why); dropping one that is not listed does nothing.
func (e *Engine) dropUnknown(id, why string) {
	e.mu.Lock()
	u, ok := e.unknown[id]
	delete(e.unknown, id)
	e.mu.Unlock()
	if ok { // logged outside the lock: the log may be a file
		e.log.Info("a container of no known task is no longer running", "docker_id", shortDockerID(id), "task", u.TaskArn,
			"container", u.Name, "why", why)
	}
}

// unknownGone reports whether a Docker event says that a container stopped or was removed, and which.
func unknownGone(ev dockerclient.Event) (string, bool) {
	switch ev.Action {
	case "die":
		return "stopped", true
	case "destroy":
		return "removed", true
	}
	return "", false
}

// recheckUnknown inspects every listed container of no known task and drops those that stopped or
// are gone, in case their events were missed. An inspection that fails keeps the container listed.
func (e *Engine) recheckUnknown(ctx context.Context) {
	e.mu.Lock()
	ids := make([]string, 0, len(e.unknown))
	for id := range e.unknown {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		ci, err := e.docker.InspectContainer(ctx, id)
		switch {
		case errors.Is(err, dockerclient.ErrNotFound):
			e.dropUnknown(id, "removed")
		case err != nil:
			e.log.Debug("cannot inspect a container of no known task; it stays listed", "docker_id", shortDockerID(id), "error", err)
		case !isUp(ci.State):
			e.dropUnknown(id, "stopped")
		}
	}
}

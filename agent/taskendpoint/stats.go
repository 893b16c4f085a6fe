package taskendpoint

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"sync"

	"github.com/berth-agent/berth/agent/task"
)

// serveV2 answers the v2 metadata and stats requests for the task with the request's source address.
// A container is looked for by Docker ID among that task's containers only.
func (h *Handler) serveV2(w http.ResponseWriter, r *http.Request, rt route, src netip.Addr, srcOK bool) {
	var t *task.Task
	var ok bool
	if srcOK {
		t, ok = h.tasks.ByAddress(src)
	}
	if !ok {
		who := r.RemoteAddr
		if srcOK {
			who = src.String()
		}
		h.log.Debug("task metadata v2: no task has the source address", "source", who)
		writeJSON(w, http.StatusBadRequest, "Unable to get task arn from request: unable to associate '"+who+"' with task")
		return
	}
	switch rt.kind {
	case v2Task:
		writeJSON(w, http.StatusOK, h.newTaskResponse(t, shapeV2))
	case v2Container:
		c := byDockerID(t, rt.arg)
		if c == nil {
			writeJSON(w, http.StatusBadRequest, "Unable to generate metadata for container '"+rt.arg+"'")
			return
		}
		writeJSON(w, http.StatusOK, h.newContainerResponse(t, c, shapeV2))
	case v2TaskStats:
		h.serveTaskStats(w, r, t)
	case v2ContainerStats:
		if byDockerID(t, rt.arg) == nil {
			writeJSON(w, http.StatusBadRequest, "Unable to get container stats for: "+rt.arg)
			return
		}
		h.serveContainerStats(w, r, rt.arg, http.StatusInternalServerError)
	}
}

// byDockerID returns the container of t with this Docker ID, or nil.
func byDockerID(t *task.Task, id string) *task.Container {
	if id == "" {
		return nil
	}
	for _, c := range t.Containers {
		if c.DockerID == id {
			return c
		}
	}
	return nil
}

// containerStats returns the stats of one container, or nil when they cannot be had.
func (h *Handler) containerStats(r *http.Request, dockerID string) json.RawMessage {
	if h.stats == nil || dockerID == "" {
		return nil
	}
	raw, err := h.stats.Stats(r.Context(), dockerID)
	if err != nil {
		h.log.Debug("container stats unavailable", "docker_id", dockerID, "error", err)
		return nil
	}
	if !json.Valid(raw) {
		h.log.Warn("container stats are not JSON", "docker_id", dockerID)
		return nil
	}
	return raw
}

// serveContainerStats answers with one container's stats, or failStatus and the ECS agent's message.
func (h *Handler) serveContainerStats(w http.ResponseWriter, r *http.Request, dockerID string, failStatus int) {
	raw := h.containerStats(r, dockerID)
	if raw == nil {
		writeJSON(w, failStatus, "Unable to get container stats for: "+dockerID)
		return
	}
	writeRaw(w, http.StatusOK, raw)
}

// serveTaskStats answers with the stats of every container of t that Docker knows, by Docker ID; a
// container whose stats cannot be had now maps to null. The pause container of an awsvpc task is
// left out.
func (h *Handler) serveTaskStats(w http.ResponseWriter, r *http.Request, t *task.Task) {
	if h.stats == nil {
		writeJSON(w, http.StatusInternalServerError, "Unable to get task stats for: "+t.Arn)
		return
	}
	// Each container's first sample may take Docker about a second: they are asked for together, and
	// a container that is not running is not asked (its stats are null).
	out := make(map[string]json.RawMessage, len(t.Containers))
	var running []string
	for _, c := range t.Containers {
		if c.Pause || c.DockerID == "" {
			continue
		}
		out[c.DockerID] = nil
		if c.KnownStatus == task.ContainerRunning {
			running = append(running, c.DockerID)
		}
	}
	stats := make([]json.RawMessage, len(running))
	var wg sync.WaitGroup
	for i, id := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i] = h.containerStats(r, id)
		}()
	}
	wg.Wait()
	for i, id := range running {
		out[id] = stats[i]
	}
	writeJSON(w, http.StatusOK, out)
}

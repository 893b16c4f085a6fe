package taskendpoint

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/netip"
	"sync"

	"github.com/berth-agent/berth/agent/task"
)

// serveV2 answers the v2 metadata and stats requests for the one task that has the request's source
// address as a current address (ownsAddress); none, or more than one, is the ECS agent's 400 for an
// address it cannot associate with a task. A container is looked for by Docker ID among that task's
// containers only.
func (h *Handler) serveV2(w http.ResponseWriter, r *http.Request, rt route, src netip.Addr, srcOK bool) {
	var t *task.Task
	var holders int
	if srcOK {
		t, holders = h.byAddress(src)
	}
	if t == nil {
		who := r.RemoteAddr
		if srcOK {
			who = src.String()
		}
		if holders > 1 {
			h.refused.Note(refusedAmbiguous, "source", who, "tasks", holders)
		} else {
			h.log.Debug("task metadata v2: no task has the source address", "source", who)
		}
		writeJSON(w, http.StatusBadRequest, "Unable to get task arn from request: unable to associate '"+who+"' with task")
		return
	}
	switch rt.kind {
	case v2Task:
		writeJSON(w, http.StatusOK, h.newTaskResponse(t, shapeV2))
	case v2TaskWithTags:
		resp := h.newTaskResponse(t, shapeV2)
		h.addTags(r, t, &resp, false)
		writeJSON(w, http.StatusOK, resp)
	case v2Container:
		c := byDockerID(t, rt.arg)
		if c == nil {
			writeJSON(w, http.StatusBadRequest, "Unable to generate metadata for container '"+rt.arg+"'")
			return
		}
		writeJSON(w, http.StatusOK, h.newContainerResponse(t, c, shapeV2))
	case v2TaskStats:
		h.serveTaskStats(w, r, t, shapeV2)
	case v2ContainerStats:
		c := byDockerID(t, rt.arg)
		if c == nil {
			writeJSON(w, http.StatusBadRequest, "Unable to get container stats for: "+rt.arg)
			return
		}
		h.serveContainerStats(w, r, t, c, shapeV2)
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

// containerStats returns the stats of one container of t as version s shows them, or nil when they
// cannot be had.
func (h *Handler) containerStats(r *http.Request, t *task.Task, dockerID string, s shape) json.RawMessage {
	if h.stats == nil || dockerID == "" {
		return nil
	}
	raw, err := h.stats.Stats(r.Context(), dockerID, t.NetworkNamespace())
	if err != nil {
		h.log.Debug("container stats unavailable", "docker_id", dockerID, "error", err)
		return nil
	}
	if !json.Valid(raw) {
		h.log.Warn("container stats are not JSON", "docker_id", dockerID)
		return nil
	}
	if s != shapeV4 {
		return withoutNetworkRate(raw)
	}
	return raw
}

// withoutNetworkRate returns the stats object raw without its network_rate_stats, which only v4
// serves (v2 and v3 serve Docker's object).
func withoutNetworkRate(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(`"network_rate_stats"`)) {
		return raw
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return raw
	}
	delete(obj, "network_rate_stats")
	b, err := json.Marshal(obj)
	if err != nil {
		return raw
	}
	return b
}

// serveContainerStats answers with one container's stats, or the ECS agent's message: with 400 in
// v2 and v3, 500 in v4.
func (h *Handler) serveContainerStats(w http.ResponseWriter, r *http.Request, t *task.Task, c *task.Container, s shape) {
	raw := h.containerStats(r, t, c.DockerID, s)
	if raw == nil {
		status := http.StatusBadRequest
		if s == shapeV4 {
			status = http.StatusInternalServerError
		}
		writeJSON(w, status, "Unable to get container stats for: "+c.DockerID)
		return
	}
	writeRaw(w, http.StatusOK, raw)
}

// serveTaskStats answers with the stats of every container of t that Docker has, the pause
// container of an awsvpc task included, by Docker ID. A container whose stats cannot be had now
// maps to null in v2 and v3, to {} in v4, as in the ECS agent. Without a stats source the answer is
// the ECS agent's for a task it cannot find containers of: 400 in v2 and v3, 500 in v4.
func (h *Handler) serveTaskStats(w http.ResponseWriter, r *http.Request, t *task.Task, s shape) {
	if h.stats == nil {
		status := http.StatusBadRequest
		if s == shapeV4 {
			status = http.StatusInternalServerError
		}
		writeJSON(w, status, "Unable to get task stats for: "+t.Arn)
		return
	}
	missing := json.RawMessage("null")
	if s == shapeV4 {
		missing = json.RawMessage("{}")
	}
	// Each container's first sample may take Docker about a second: they are asked for together, and
	// a container that is not running is not asked.
	out := make(map[string]json.RawMessage, len(t.Containers))
	var running []string
	for _, c := range t.Containers {
		if c.DockerID == "" {
			continue
		}
		out[c.DockerID] = missing
		if c.KnownStatus == task.ContainerRunning || c.KnownStatus == task.ContainerResourcesProvisioned {
			running = append(running, c.DockerID)
		}
	}
	stats := make([]json.RawMessage, len(running))
	var wg sync.WaitGroup
	for i, id := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i] = h.containerStats(r, t, id, s)
		}()
	}
	wg.Wait()
	for i, id := range running {
		if stats[i] != nil {
			out[id] = stats[i]
		}
	}
	writeJSON(w, http.StatusOK, out)
}

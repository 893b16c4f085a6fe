package dockerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	docker "github.com/fsouza/go-dockerclient"
)

// detachedExecTimeout bounds each call of a detached exec (create, start, inspect): the ECS agent's
// ContainerExecCreateTimeout, ContainerExecStartTimeout and ContainerExecInspectTimeout.
const detachedExecTimeout = time.Minute

// ExecState is what Docker says of an exec process.
type ExecState struct {
	Running  bool
	ExitCode int
	Pid      int
}

// ExecDetached runs cmd in the running container id as user, detached: Docker starts it and keeps
// none of its output. It returns the exec's ID. A missing container is a *NotFoundError; a container
// that does not run is an error from the Engine (409).
func (c *Client) ExecDetached(ctx context.Context, id, user string, cmd []string) (string, error) {
	ctx, cancel := withTimeout(ctx, "exec in container", detachedExecTimeout)
	defer cancel()
	var created struct{ ID string }
	err := c.sendJSON(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/exec",
		map[string]any{"User": user, "Cmd": cmd, "AttachStdin": false, "AttachStdout": false, "AttachStderr": false, "Tty": false}, &created)
	if err != nil {
		if isNoSuchContainer(err) {
			return "", &NotFoundError{Kind: "container", Name: id, Err: err}
		}
		return "", fmt.Errorf("create exec in container %q: %w", id, callErr(ctx, err))
	}
	if err := c.sendJSON(ctx, http.MethodPost, "/exec/"+url.PathEscape(created.ID)+"/start", map[string]any{"Detach": true, "Tty": false}, nil); err != nil {
		return "", fmt.Errorf("start exec %q in container %q: %w", created.ID, id, callErr(ctx, err))
	}
	return created.ID, nil
}

// ExecStatus returns the state of the exec id; an exec Docker no longer knows (its container was
// removed or the Engine restarted) is a *NotFoundError.
func (c *Client) ExecStatus(ctx context.Context, id string) (ExecState, error) {
	ctx, cancel := withTimeout(ctx, "inspect exec", detachedExecTimeout)
	defer cancel()
	var out ExecState
	if err := c.getJSON(ctx, "/exec/"+url.PathEscape(id)+"/json", &out); err != nil {
		var de *docker.Error
		if errors.As(err, &de) && de.Status == http.StatusNotFound {
			return ExecState{}, &NotFoundError{Kind: "exec", Name: id, Err: err}
		}
		return ExecState{}, fmt.Errorf("inspect exec %q: %w", id, callErr(ctx, err))
	}
	return out, nil
}

// sendJSON sends in as the JSON body of a request and decodes a JSON answer into out (nil: the body
// is discarded); a non-2xx answer is a *docker.Error, as raw's.
func (c *Client) sendJSON(ctx context.Context, method, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+c.apiPath+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.docker.HTTPClient.Do(req)
	if err != nil {
		return ctxErr(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ctxErr(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		var msg struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &msg) != nil || msg.Message == "" {
			msg.Message = string(bytes.TrimSpace(data))
		}
		return &docker.Error{Status: resp.StatusCode, Message: msg.Message}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

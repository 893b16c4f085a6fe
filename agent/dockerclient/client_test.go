package dockerclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

func status(code int, msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if msg == "" {
			w.WriteHeader(code)
			return
		}
		writeAPIError(w, code, msg)
	}
}

func TestContainerCallsTranslateDockerErrors(t *testing.T) {
	tests := []struct {
		name     string
		route    string
		handler  http.HandlerFunc
		call     func(ctx context.Context, c *Client) error
		notFound bool
		wantErr  bool
	}{
		{"stop: stopped", "POST /containers/abc/stop", status(http.StatusNotModified, ""),
			func(ctx context.Context, c *Client) error { return c.StopContainer(ctx, "abc", time.Second) }, false, false},
		{"stop: ok", "POST /containers/abc/stop", status(http.StatusNoContent, ""),
			func(ctx context.Context, c *Client) error { return c.StopContainer(ctx, "abc", time.Second) }, false, false},
		{"stop: gone", "POST /containers/abc/stop", status(http.StatusNotFound, "No such container: abc"),
			func(ctx context.Context, c *Client) error { return c.StopContainer(ctx, "abc", time.Second) }, true, true},
		{"stop: engine error", "POST /containers/abc/stop", status(http.StatusInternalServerError, "boom"),
			func(ctx context.Context, c *Client) error { return c.StopContainer(ctx, "abc", time.Second) }, false, true},
		{"start: running", "POST /containers/abc/start", status(http.StatusNotModified, ""),
			func(ctx context.Context, c *Client) error { return c.StartContainer(ctx, "abc") }, false, false},
		{"start: gone", "POST /containers/abc/start", status(http.StatusNotFound, "No such container: abc"),
			func(ctx context.Context, c *Client) error { return c.StartContainer(ctx, "abc") }, true, true},
		{"remove: gone", "DELETE /containers/abc", status(http.StatusNotFound, "No such container: abc"),
			func(ctx context.Context, c *Client) error {
				return c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: "abc"})
			}, false, false},
		{"remove: in progress", "DELETE /containers/abc", status(http.StatusConflict, "removal of container abc is already in progress"),
			func(ctx context.Context, c *Client) error {
				return c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: "abc"})
			}, false, false},
		{"remove: running", "DELETE /containers/abc", status(http.StatusConflict, "You cannot remove a running container abc. Stop the container before attempting removal or force remove"),
			func(ctx context.Context, c *Client) error {
				return c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: "abc"})
			}, false, true},
		{"inspect: gone", "GET /containers/abc/json", status(http.StatusNotFound, "No such container: abc"),
			func(ctx context.Context, c *Client) error { _, err := c.InspectContainer(ctx, "abc"); return err }, true, true},
		{"inspect image: gone", "GET /images/app:1/json", status(http.StatusNotFound, "no such image: app:1: No such image: app:1"),
			func(ctx context.Context, c *Client) error { _, err := c.InspectImage(ctx, "app:1"); return err }, true, true},
		{"remove image: gone", "DELETE /images/app:1", status(http.StatusNotFound, "No such image: app:1"),
			func(ctx context.Context, c *Client) error { return c.RemoveImage(ctx, "app:1") }, false, false},
		{"create: no image", "POST /containers/create", status(http.StatusNotFound, "No such image: app:1"),
			func(ctx context.Context, c *Client) error {
				_, err := c.CreateContainer(ctx, docker.CreateContainerOptions{Name: "x", Config: &docker.Config{Image: "app:1"}})
				return err
			}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDocker(t)
			f.handle(tt.route, tt.handler)
			c := f.client(Config{})
			err := tt.call(t.Context(), c)
			if !tt.wantErr {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.notFound, errors.Is(err, ErrNotFound), "%v", err)
			if tt.notFound {
				var nf *NotFoundError
				assert.ErrorAs(t, err, &nf)
			}
		})
	}
}

func TestCallsApplyTheirOwnTimeouts(t *testing.T) {
	f := newFakeDocker(t)
	slow := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	f.handle("GET /containers/abc/json", slow)
	f.handle("POST /containers/abc/stop", slow)
	c := f.client(Config{Timeouts: Timeouts{Inspect: 50 * time.Millisecond, StopMargin: 50 * time.Millisecond}})

	start := time.Now()
	_, err := c.InspectContainer(t.Context(), "abc")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "inspect container", te.Op)

	start = time.Now()
	err = c.StopContainer(t.Context(), "abc", 100*time.Millisecond)
	elapsed := time.Since(start)
	require.ErrorAs(t, err, &te)
	assert.Equal(t, 150*time.Millisecond, te.Limit, "stop timeout plus the margin")
	assert.GreaterOrEqual(t, elapsed, 150*time.Millisecond)
	assert.Less(t, elapsed, 2*time.Second)
}

func TestCallerContextStillRules(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("GET /containers/abc/json", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := f.client(Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.InspectContainer(ctx, "abc")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var te *TimeoutError
	assert.False(t, errors.As(err, &te), "the caller's deadline is not the call's own timeout")
}

func TestStopSendsTimeoutInSeconds(t *testing.T) {
	f := newFakeDocker(t)
	var got string
	f.handle("POST /containers/abc/stop", func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Query().Get("t")
		w.WriteHeader(http.StatusNoContent)
	})
	c := f.client(Config{})
	require.NoError(t, c.StopContainer(t.Context(), "abc", 1500*time.Millisecond))
	assert.Equal(t, "2", got)
}

func TestListContainersByLabel(t *testing.T) {
	f := newFakeDocker(t)
	var filters map[string][]string
	var all string
	f.handle("GET /containers/json", func(w http.ResponseWriter, r *http.Request) {
		all = r.URL.Query().Get("all")
		_ = json.Unmarshal([]byte(r.URL.Query().Get("filters")), &filters)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[{"Id":"abc","Labels":{"berth.task":"t1"}}]`))
	})
	c := f.client(Config{})
	list, err := c.ListContainersByLabel(t.Context(), map[string]string{"berth.task": "t1", "berth.managed": ""})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "abc", list[0].ID)
	assert.Equal(t, "1", all)
	assert.ElementsMatch(t, []string{"berth.task=t1", "berth.managed"}, filters["label"])
}

func TestInspectImageAndVersion(t *testing.T) {
	f := newFakeDocker(t)
	f.setImage("127.0.0.1:5000/app:1", true)
	f.handle("GET /version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64"}`))
	})
	c := f.client(Config{})
	img, err := c.InspectImage(t.Context(), "127.0.0.1:5000/app:1")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:5000/app:1"}, img.RepoTags)
	v, err := c.Version(t.Context())
	require.NoError(t, err)
	assert.Equal(t, VersionInfo{Version: "20.10.24", APIVersion: "1.41", MinAPIVersion: "1.12", Os: "linux", Arch: "amd64"}, v)
}

func TestAPIVersionIsPinned(t *testing.T) {
	f := newFakeDocker(t)
	c := f.client(Config{APIVersion: "1.41"})
	_, err := c.InspectImage(t.Context(), "x")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = c.InspectContainer(t.Context(), "abc")
	assert.ErrorIs(t, err, ErrNotFound)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, []string{"/v1.41/images/x/json", "/v1.41/containers/abc/json"}, f.paths)
}

func TestNewClientRejectsBadEndpoints(t *testing.T) {
	_, err := NewClient(Config{Endpoint: "ftp://host"})
	assert.Error(t, err)
	c, err := NewClient(Config{})
	require.NoError(t, err)
	assert.Equal(t, "http://unix.sock", c.baseURL)
	c.Close()
	assert.Equal(t, DefaultTimeouts(), Timeouts{}.withDefaults())
}

// TestRemoveContainerEngineUnreachable: with the Engine's socket gone (dockerd restarting) a removal
// fails with ErrConnection, which the engine retries instead of forgetting the container.
func TestRemoveContainerEngineUnreachable(t *testing.T) {
	c, err := NewClient(Config{Endpoint: "unix://" + filepath.Join(t.TempDir(), "docker.sock")})
	require.NoError(t, err)
	defer c.Close()
	err = c.RemoveContainer(t.Context(), docker.RemoveContainerOptions{ID: "abc"})
	require.ErrorIs(t, err, ErrConnection)
	require.ErrorContains(t, err, "abc")
}

// hangUp closes the connection without an answer, as a dockerd that dies mid-call does: the caller
// reads EOF and cannot tell whether the Engine did what it asked.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// TestContainerCallsClassifyTransportFaults: a container call whose answer is lost (the connection
// closed mid-call) or whose Engine cannot be dialled matches ErrConnection, so the engine retries it
// and looks the container up; an answer from the Engine, even a 500, does not.
func TestContainerCallsClassifyTransportFaults(t *testing.T) {
	calls := []struct {
		name  string
		route string
		call  func(ctx context.Context, c *Client) error
	}{
		{"create", "POST /containers/create", func(ctx context.Context, c *Client) error {
			_, err := c.CreateContainer(ctx, docker.CreateContainerOptions{Name: "x", Config: &docker.Config{Image: "app:1"}})
			return err
		}},
		{"start", "POST /containers/abc/start", func(ctx context.Context, c *Client) error { return c.StartContainer(ctx, "abc") }},
		{"stop", "POST /containers/abc/stop", func(ctx context.Context, c *Client) error { return c.StopContainer(ctx, "abc", time.Second) }},
		{"inspect", "GET /containers/abc/json", func(ctx context.Context, c *Client) error { _, err := c.InspectContainer(ctx, "abc"); return err }},
		{"list", "GET /containers/json", func(ctx context.Context, c *Client) error {
			_, err := c.ListContainersByLabel(ctx, map[string]string{"a": "b"})
			return err
		}},
		{"remove", "DELETE /containers/abc", func(ctx context.Context, c *Client) error {
			return c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: "abc"})
		}},
	}
	for _, tt := range calls {
		t.Run(tt.name+": answer lost", func(t *testing.T) {
			f := newFakeDocker(t)
			f.handle(tt.route, hangUp)
			err := tt.call(t.Context(), f.client(Config{}))
			require.ErrorIs(t, err, ErrConnection)
			assert.True(t, errdefs.IsRetriable(err), "%v", err)
		})
		t.Run(tt.name+": engine unreachable", func(t *testing.T) {
			c, err := NewClient(Config{Endpoint: "unix://" + filepath.Join(t.TempDir(), "docker.sock")})
			require.NoError(t, err)
			defer c.Close()
			require.ErrorIs(t, tt.call(t.Context(), c), ErrConnection)
		})
		t.Run(tt.name+": engine answered", func(t *testing.T) {
			f := newFakeDocker(t)
			f.handle(tt.route, status(http.StatusInternalServerError, "boom"))
			err := tt.call(t.Context(), f.client(Config{}))
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrConnection)
		})
	}
}

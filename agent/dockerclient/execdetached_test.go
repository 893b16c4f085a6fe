package dockerclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExecDetached: the exec is created with the user and command and no attached streams, then
// started detached, as the ECS agent runs its managed agent (execcmd, doStartAgent).
func TestExecDetached(t *testing.T) {
	f := newFakeDocker(t)
	var created, started map[string]any
	f.handle("POST /containers/abc/exec", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&created)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"Id":"e1"}`))
	})
	f.handle("POST /exec/e1/start", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&started)
		w.WriteHeader(http.StatusOK)
	})
	f.handle("GET /exec/e1/json", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"ID":"e1","Running":false,"ExitCode":3,"Pid":0}`))
	})
	c := f.client(Config{})
	id, err := c.ExecDetached(t.Context(), "abc", "0", []string{"/x/amazon-ssm-agent"})
	require.NoError(t, err)
	assert.Equal(t, "e1", id)
	assert.Equal(t, map[string]any{"User": "0", "Cmd": []any{"/x/amazon-ssm-agent"}, "AttachStdin": false,
		"AttachStdout": false, "AttachStderr": false, "Tty": false}, created)
	assert.Equal(t, map[string]any{"Detach": true, "Tty": false}, started)
	st, err := c.ExecStatus(t.Context(), "e1")
	require.NoError(t, err)
	assert.Equal(t, ExecState{Running: false, ExitCode: 3}, st)
}

func TestExecDetachedErrors(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("POST /containers/gone/exec", func(w http.ResponseWriter, _ *http.Request) {
		writeAPIError(w, http.StatusNotFound, "No such container: gone")
	})
	f.handle("POST /containers/stopped/exec", func(w http.ResponseWriter, _ *http.Request) {
		writeAPIError(w, http.StatusConflict, "container stopped is not running")
	})
	c := f.client(Config{})
	_, err := c.ExecDetached(t.Context(), "gone", "0", []string{"x"})
	assert.True(t, errors.Is(err, ErrNotFound), "%v", err)
	_, err = c.ExecDetached(t.Context(), "stopped", "0", []string{"x"})
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotFound))
	assert.Contains(t, err.Error(), "is not running")
	_, err = c.ExecStatus(t.Context(), "nope")
	assert.True(t, errors.Is(err, ErrNotFound), "%v", err)
}

package dockerclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// fakeExec is one exec instance of the fake Engine: what it was created with, and how it answers.
type fakeExec struct {
	mu      sync.Mutex
	created map[string]any
	started map[string]any
	resizes []string
	stdin   []byte
	// run writes the command's output to the hijacked connection, given its stdin.
	run      func(conn io.Writer, stdin []byte, tty bool)
	exitCode int
	inspects int // inspections answered Running before the exit
	// refuseResizes is how many resizes are refused before they are accepted.
	refuseResizes int
}

func (e *fakeExec) install(t *testing.T, f *fakeDocker, container string) {
	f.handle("POST /containers/"+container+"/exec", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&e.created)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"Id":"e1"}`))
	})
	f.handle("POST /exec/e1/start", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		_ = json.NewDecoder(r.Body).Decode(&e.started)
		e.mu.Unlock()
		assert.Equal(t, "Upgrade", r.Header.Get("Connection"))
		assert.Equal(t, "tcp", r.Header.Get("Upgrade"))
		conn, buf, err := w.(http.Hijacker).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		defer conn.Close()
		_, _ = conn.Write([]byte("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"))
		var stdin []byte
		if e.created["AttachStdin"] == true {
			stdin, _ = io.ReadAll(buf) // until the client closes its side
		}
		e.mu.Lock()
		e.stdin = stdin
		e.mu.Unlock()
		e.run(conn, stdin, e.started["Tty"] == true)
	})
	f.handle("POST /exec/e1/resize", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.resizes = append(e.resizes, r.URL.RawQuery)
		refuse := e.refuseResizes > 0
		e.refuseResizes--
		e.mu.Unlock()
		if refuse {
			writeAPIError(w, http.StatusConflict, "cannot resize a stopped container: unknown") // not started yet
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	f.handle("GET /exec/e1/json", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		running := e.inspects > 0
		e.inspects--
		e.mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"ID":"e1","Running":%v,"ExitCode":%d}`, running, e.exitCode)
	})
}

func TestExecWithoutTTY(t *testing.T) {
	f := newFakeDocker(t)
	e := &fakeExec{exitCode: 3, inspects: 2, run: func(conn io.Writer, stdin []byte, tty bool) {
		_, _ = conn.Write(frame(1, "out:"+string(stdin)))
		_, _ = conn.Write(frame(2, "err line\n"))
	}}
	e.install(t, f, "web1")
	var stdout, stderr bytes.Buffer
	code, err := f.client(Config{}).Exec(t.Context(), "web1", ExecConfig{Cmd: []string{"/testapp", "cat"}, User: "1000",
		WorkingDir: "/tmp", Env: []string{"A=1"}, Stdin: strings.NewReader("piped in\n"), Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err)
	assert.Equal(t, 3, code, "the exit code the Engine recorded, once it stopped running")
	assert.Equal(t, "out:piped in\n", stdout.String())
	assert.Equal(t, "err line\n", stderr.String())
	assert.Equal(t, "piped in\n", string(e.stdin))
	assert.Equal(t, map[string]any{"Cmd": []any{"/testapp", "cat"}, "User": "1000", "WorkingDir": "/tmp", "Env": []any{"A=1"},
		"Tty": false, "AttachStdin": true, "AttachStdout": true, "AttachStderr": true}, e.created)
	assert.Equal(t, map[string]any{"Detach": false, "Tty": false}, e.started)
}

func TestExecWithTTY(t *testing.T) {
	f := newFakeDocker(t)
	resized := make(chan struct{})
	e := &fakeExec{refuseResizes: 2, run: func(conn io.Writer, _ []byte, tty bool) {
		<-resized
		_, _ = conn.Write([]byte("raw\r\noutput")) // one stream, no frames
	}}
	e.install(t, f, "web1")
	sizes := make(chan WindowSize, 1)
	sizes <- WindowSize{Height: 40, Width: 120}
	go func() {
		defer close(resized)
		assert.Eventually(t, func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return len(e.resizes) == 3
		}, 5*time.Second, 5*time.Millisecond)
	}()
	var stdout bytes.Buffer
	code, err := f.client(Config{}).Exec(t.Context(), "web1", ExecConfig{Cmd: []string{"sh"}, TTY: true, Stdout: &stdout, Resize: sizes})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "raw\r\noutput", stdout.String())
	assert.Equal(t, []string{"h=40&w=120", "h=40&w=120", "h=40&w=120"}, e.resizes, "the first size tried again until the Engine takes it")
	assert.Equal(t, true, e.created["Tty"])
	assert.Equal(t, false, e.created["AttachStdin"])
	assert.Equal(t, map[string]any{"Detach": false, "Tty": true}, e.started)
}

func TestExecErrors(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("POST /containers/gone/exec", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "No such container: gone")
	})
	f.handle("POST /containers/stopped/exec", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusConflict, "Container stopped is not running")
	})
	f.handle("POST /containers/refused/exec", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"Id":"e2"}`))
	})
	f.handle("POST /exec/e2/start", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusConflict, "container refused is paused")
	})
	c := f.client(Config{})
	cmd := ExecConfig{Cmd: []string{"true"}}

	_, err := c.Exec(t.Context(), "gone", cmd)
	var nf *NotFoundError
	assert.ErrorAs(t, err, &nf)
	assert.True(t, errdefs.IsNotFound(err))

	_, err = c.Exec(t.Context(), "stopped", cmd)
	assert.ErrorIs(t, err, ErrNotRunning)

	_, err = c.Exec(t.Context(), "refused", cmd)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "container refused is paused", "the Engine's refusal of the start, as it said it")

	_, err = c.Exec(t.Context(), "web1", ExecConfig{})
	assert.ErrorContains(t, err, "no command")
}

func TestDemuxRefusesWhatTheEngineDoesNotSend(t *testing.T) {
	var got []string
	err := demux(bytes.NewReader(append(frame(1, "a"), frame(2, "b")...)), func(s byte, p []byte) error {
		got = append(got, fmt.Sprintf("%d:%s", s, p))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:a", "2:b"}, got)
	assert.Error(t, demux(bytes.NewReader(frame(7, "x")), func(byte, []byte) error { return nil }), "an unknown stream")
	assert.Error(t, demux(bytes.NewReader([]byte{1, 0, 0, 0, 0x10, 0, 0, 0}), func(byte, []byte) error { return nil }), "a frame over 1 MiB")
	assert.ErrorIs(t, demux(bytes.NewReader(frame(1, "abc")[:9]), func(byte, []byte) error { return nil }), io.ErrUnexpectedEOF, "a cut frame")
}

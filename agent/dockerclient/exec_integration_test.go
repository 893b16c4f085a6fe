//go:build integration

package dockerclient

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testappImage builds misc/testapp into a FROM-scratch image named name (/testapp its entrypoint),
// removed when the test ends.
func testappImage(t *testing.T, c *Client, name string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(dir, "testapp"), "../../misc/testapp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux") // as make images builds it, from the same compiled packages
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	bin, err := os.ReadFile(filepath.Join(dir, "testapp"))
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY testapp /testapp\nENTRYPOINT [\"/testapp\"]\n")},
		{"testapp", 0o755, bin},
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Now()}))
		_, err := tw.Write(f.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, c.docker.BuildImage(docker.BuildImageOptions{
		Context: t.Context(), Name: name, InputStream: &buf, OutputStream: io.Discard, RmTmpContainer: true,
	}))
	t.Cleanup(func() { _ = c.RemoveImage(context.Background(), name) })
}

// runTestapp creates and starts a container of image with args and the log driver, removed when
// the test ends.
func runTestapp(t *testing.T, c *Client, name, image, logDriver string, tty bool, args ...string) string {
	t.Helper()
	ctr, err := c.CreateContainer(t.Context(), docker.CreateContainerOptions{Name: name,
		Config:     &docker.Config{Image: image, Cmd: args, Tty: tty},
		HostConfig: &docker.HostConfig{LogConfig: docker.LogConfig{Type: logDriver}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: ctr.ID, Force: true})
	})
	require.NoError(t, c.StartContainer(t.Context(), ctr.ID))
	return ctr.ID
}

// TestIntegrationExecAndLogs runs commands in a real container through Exec and reads its output
// back through ContainerLogs, on the json-file and local drivers, and the errors of a container
// that stopped and of one logging to none.
func TestIntegrationExecAndLogs(t *testing.T) {
	c := engine(t, Config{})
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	image := "berth-dockerclient-it-testapp:" + run
	testappImage(t, c, image)
	ctx := t.Context()

	id := runTestapp(t, c, "berth-it-exec-"+run, image, "json-file", false, "print", "-out", "first", "-err", "second", "-out", "third", "-stay")

	var stdout, stderr bytes.Buffer
	code, err := c.Exec(ctx, id, ExecConfig{Cmd: []string{"/testapp", "cat"}, Stdin: strings.NewReader("piped\nthrough\n"),
		Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "piped\nthrough\n", stdout.String(), "stdin reaches the command, its EOF ends it")

	stdout.Reset()
	code, err = c.Exec(ctx, id, ExecConfig{Cmd: []string{"/testapp", "print", "-out", "o", "-err", "e"}, Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "o\n", stdout.String())
	assert.Equal(t, "e\n", stderr.String(), "stderr kept apart without a TTY")

	code, err = c.Exec(ctx, id, ExecConfig{Cmd: []string{"/testapp", "exit", "-code", "3"}})
	require.NoError(t, err)
	assert.Equal(t, 3, code)

	stdout.Reset()
	code, err = c.Exec(ctx, id, ExecConfig{Cmd: []string{"/testapp", "env"}, Env: []string{"BERTH_IT=" + run}, WorkingDir: "/", User: "1234",
		TTY: true, Stdout: &stdout})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout.String(), "BERTH_IT="+run+"\r\n", "a TTY's output: one stream, CRLF")

	stdout.Reset()
	code, err = c.Exec(ctx, id, ExecConfig{Cmd: []string{"/nope"}, Stdout: &stdout})
	require.NoError(t, err)
	assert.Equal(t, 126, code, "the Engine's code for a command it cannot start")
	assert.Contains(t, stdout.String(), "/nope")

	var lines []gotLine
	require.NoError(t, c.ContainerLogs(ctx, id, LogsOptions{}, collect(&lines)))
	require.Len(t, lines, 3, "%+v", lines)
	byStream := map[LogStream][]string{}
	for i, l := range lines {
		byStream[l.Stream] = append(byStream[l.Stream], l.Text)
		assert.NotEmpty(t, l.Time, "line %d has the Engine's timestamp", i)
		if i > 0 {
			assert.LessOrEqual(t, lines[i-1].Time, l.Time, "in the Engine's time order")
		}
	}
	// The Engine stamps each stream as it reads it: the order across the two is its own.
	assert.Equal(t, map[LogStream][]string{Stdout: {"first", "third"}, Stderr: {"second"}}, byStream)
	var tail []gotLine
	require.NoError(t, c.ContainerLogs(ctx, id, LogsOptions{Tail: 1}, collect(&tail)))
	assert.Equal(t, []string{lines[2].Text}, texts(tail), "the last line")
	last, err := time.Parse(time.RFC3339Nano, lines[2].Time)
	require.NoError(t, err)
	var since []gotLine
	require.NoError(t, c.ContainerLogs(ctx, id, LogsOptions{Since: last}, collect(&since)))
	assert.Equal(t, []string{lines[2].Text}, texts(since), "since the last line's time")

	// The local driver, followed: the stream ends when the container stops.
	local := runTestapp(t, c, "berth-it-exec-local-"+run, image, "local", false, "print", "-out", "local line", "-d", "1s")
	lines = nil
	require.NoError(t, c.ContainerLogs(ctx, local, LogsOptions{Follow: true}, collect(&lines)))
	assert.Equal(t, []string{"local line"}, texts(lines))

	tty := runTestapp(t, c, "berth-it-exec-tty-"+run, image, "json-file", true, "print", "-out", "tty line")
	lines = nil
	require.NoError(t, c.ContainerLogs(ctx, tty, LogsOptions{Follow: true, TTY: true}, collect(&lines)))
	assert.Equal(t, []string{"tty line"}, texts(lines), "a TTY container's raw stream, its CR gone")

	_, err = c.Exec(ctx, local, ExecConfig{Cmd: []string{"/testapp", "exit"}})
	assert.ErrorIs(t, err, ErrNotRunning, "the container stopped")

	none := runTestapp(t, c, "berth-it-exec-none-"+run, image, "none", false, "sleep")
	err = c.ContainerLogs(ctx, none, LogsOptions{}, collect(&lines))
	assert.ErrorIs(t, err, ErrLogsNotReadable)

	_, err = c.Exec(ctx, "berth-it-exec-never-"+run, ExecConfig{Cmd: []string{"x"}})
	assert.ErrorIs(t, err, ErrNotFound)
}

func texts(lines []gotLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Text)
	}
	return out
}

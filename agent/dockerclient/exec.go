package dockerclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
)

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Height, Width uint
}

// ExecConfig is a command to run in a running container, as `docker exec` runs it.
type ExecConfig struct {
	Cmd        []string // the command and its arguments (required)
	User       string   // user[:group], name or ID; empty: the container's user
	WorkingDir string   // empty: the container's working directory
	Env        []string // KEY=VALUE, added to the container's environment
	// TTY gives the command a terminal: its output is one stream, written to Stdout.
	TTY bool
	// Stdin, if not nil, is copied to the command until it ends (EOF closes the command's stdin).
	// After the command ends a read blocked in Stdin is interrupted only when Stdin has a
	// SetReadDeadline method (as an *os.File of a pipe or a terminal opened non-blocking has).
	Stdin io.Reader
	// Stdout and Stderr receive the command's output, kept apart without a TTY; nil discards it.
	Stdout, Stderr io.Writer
	// Resize, with TTY, carries the terminal's sizes to pass on, the first one as the session
	// starts. A size the Engine refuses is skipped: the command keeps its former size.
	Resize <-chan WindowSize
}

// Exec runs cfg.Cmd in container id through the Engine's exec API, attached, and returns its exit
// code once its output ended. It returns:
//   - a *NotFoundError (ErrNotFound) when the container does not exist;
//   - an error matching ErrNotRunning when the container is not running;
//   - ctx's error when ctx ends first (the command may go on running in the container);
//   - an error matching ErrConnection when the way to the Engine failed.
//
// A command that cannot be started (no such file) is the Engine's: its message on Stdout and exit
// code 126 or 127.
func (c *Client) Exec(ctx context.Context, id string, cfg ExecConfig) (int, error) {
	if len(cfg.Cmd) == 0 {
		return 0, errors.New("exec: no command")
	}
	created, err := c.createExec(ctx, id, cfg)
	if err != nil {
		return 0, err
	}
	if err := c.attachExec(ctx, created, cfg); err != nil {
		return 0, fmt.Errorf("exec in container %q: %w", id, err)
	}
	return c.execExitCode(ctx, id, created)
}

// execCreate is the body of POST /containers/{id}/exec.
type execCreate struct {
	Cmd          []string
	User         string   `json:",omitempty"`
	WorkingDir   string   `json:",omitempty"`
	Env          []string `json:",omitempty"`
	Tty          bool
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
}

// createExec sets up the exec instance and returns its ID.
func (c *Client) createExec(ctx context.Context, id string, cfg ExecConfig) (string, error) {
	ctx, cancel := withTimeout(ctx, "create exec", c.timeouts.Inspect)
	defer cancel()
	var created struct {
		ID string `json:"Id"`
	}
	err := c.postJSON(ctx, "/containers/"+url.PathEscape(id)+"/exec", execCreate{Cmd: cfg.Cmd, User: cfg.User,
		WorkingDir: cfg.WorkingDir, Env: cfg.Env, Tty: cfg.TTY, AttachStdin: cfg.Stdin != nil,
		AttachStdout: true, AttachStderr: true}, &created)
	if err != nil {
		switch {
		case isNoSuchContainer(err):
			return "", &NotFoundError{Kind: "container", Name: id, Err: err}
		case isNotRunning(err):
			return "", fmt.Errorf("exec in container %q: %w", id, ErrNotRunning)
		}
		return "", fmt.Errorf("exec in container %q: %w", id, callErr(ctx, err))
	}
	return created.ID, nil
}

// postJSON POSTs in as JSON to path and decodes the answer into out; a non-2xx answer is a
// *docker.Error with the Engine's message.
func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+c.apiPath+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.docker.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return engineError(resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
}

// engineError is the Engine's refusal in resp as a *docker.Error.
func engineError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var msg struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Message == "" {
		msg.Message = strings.TrimSpace(string(body))
	}
	return &docker.Error{Status: resp.StatusCode, Message: msg.Message}
}

// isNotRunning reports Docker's 409 "Container X is not running" (or "is paused", "is restarting").
func isNotRunning(err error) bool {
	var de *docker.Error
	return errors.As(err, &de) && de.Status == http.StatusConflict
}

// attachExec starts exec instance execID, hijacking the connection, and copies the streams until
// the command's output ends.
func (c *Client) attachExec(ctx context.Context, execID string, cfg ExecConfig) error {
	conn, br, err := c.hijack(ctx, "/exec/"+url.PathEscape(execID)+"/start", map[string]bool{"Detach": false, "Tty": cfg.TTY})
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	defer conn.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	if cfg.TTY && cfg.Resize != nil {
		resizeCtx, cancelResize := context.WithCancel(ctx)
		defer cancelResize()
		wg.Go(func() {
			first := true
			for {
				select {
				case <-resizeCtx.Done():
					return
				case size := <-cfg.Resize:
					tries := 1
					if first {
						tries, first = firstResizeTries, false
					}
					c.resizeExecRetrying(resizeCtx, execID, size, tries)
				}
			}
		})
	}
	if cfg.Stdin != nil {
		stdinDone := make(chan struct{})
		go func() {
			defer close(stdinDone)
			_, _ = io.Copy(conn, cfg.Stdin)
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}()
		defer func() {
			_ = conn.Close()
			// A reader that cannot be interrupted may stay blocked in Read: it is not waited for.
			if d, ok := cfg.Stdin.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
				<-stdinDone
			}
		}()
	}
	stdout, stderr := orDiscard(cfg.Stdout), orDiscard(cfg.Stderr)
	if cfg.TTY {
		_, err = io.Copy(stdout, br)
	} else {
		err = demux(br, func(stream byte, p []byte) error {
			w := stdout
			if stream == streamStderr {
				w = stderr
			}
			_, err := w.Write(p)
			return err
		})
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrConnection, err)
	}
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// firstResizeTries is how often the session's first size is tried: the Engine refuses a resize
// until the command has started, a moment after the attach.
const firstResizeTries = 5

// resizeExecRetrying sets the exec instance's terminal size, trying up to tries times, 10 ms more
// apart each time; a size still refused leaves the former one.
func (c *Client) resizeExecRetrying(ctx context.Context, execID string, size WindowSize, tries int) {
	for i := 1; ; i++ {
		if c.resizeExec(ctx, execID, size) == nil || i == tries {
			return
		}
		t := time.NewTimer(time.Duration(i) * 10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// resizeExec sets the exec instance's terminal size.
func (c *Client) resizeExec(ctx context.Context, execID string, size WindowSize) error {
	ctx, cancel := withTimeout(ctx, "resize exec", c.timeouts.Inspect)
	defer cancel()
	resp, err := c.raw(ctx, http.MethodPost, fmt.Sprintf("/exec/%s/resize?h=%d&w=%d", url.PathEscape(execID), size.Height, size.Width))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// execExitCode waits for the exec instance to be done and returns its exit code: the output ends a
// moment before the Engine records the exit.
func (c *Client) execExitCode(ctx context.Context, id, execID string) (int, error) {
	ctx, cancel := withTimeout(ctx, "inspect exec", c.timeouts.Inspect)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var st struct {
			Running  bool
			ExitCode int
		}
		if err := c.getJSON(ctx, "/exec/"+url.PathEscape(execID)+"/json", &st); err != nil {
			return 0, fmt.Errorf("exec in container %q: exit code: %w", id, callErr(ctx, err))
		}
		if !st.Running {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("exec in container %q: exit code: %w", id, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// hijack POSTs body as JSON to path with an upgrade to a raw stream, and returns the connection
// and the reader of what the Engine sends on it. A refusal is a *docker.Error.
func (c *Client) hijack(ctx context.Context, path string, body any) (net.Conn, *bufio.Reader, error) {
	if c.dialNetwork == "" {
		return nil, nil, fmt.Errorf("attach: the %s endpoint is not supported", c.baseURL)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, c.dialNetwork, c.dialAddress)
	if err != nil {
		return nil, nil, callErr(ctx, err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://docker"+c.apiPath+path, bytes.NewReader(b))
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	// The headers must come within the call's limit; the stream itself has none.
	_ = conn.SetDeadline(time.Now().Add(c.timeouts.Inspect))
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if err := req.Write(conn); err != nil {
		_ = conn.Close()
		return nil, nil, callErr(ctx, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		_ = conn.Close()
		return nil, nil, callErr(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		defer conn.Close()
		return nil, nil, engineError(resp)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, br, nil
}

// The stream numbers of the Engine's multiplexed stream.
const (
	streamStdout = 1
	streamStderr = 2
)

// maxFrame bounds one frame of a multiplexed stream; the Engine sends at most 32 KiB for exec and
// 16 KiB for a log line's part, so a larger header is not the Engine's.
const maxFrame = 1 << 20

// demux reads the Engine's multiplexed stream (an 8-byte header: stream, three zero bytes, the
// payload's length, big-endian) and calls fn with each frame's stream and payload, until EOF. The
// payload is reused after fn returns.
func demux(r io.Reader, fn func(stream byte, p []byte) error) error {
	var hdr [8]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > maxFrame {
			return fmt.Errorf("multiplexed stream: frame of %d bytes", n)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		p := buf[:n]
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		switch hdr[0] {
		case 0, streamStdout, streamStderr: // 0 is stdin, echoed back: written as stdout
		default:
			return fmt.Errorf("multiplexed stream: unknown stream %d", hdr[0])
		}
		if err := fn(hdr[0], p); err != nil {
			return err
		}
	}
}

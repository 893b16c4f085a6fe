package dockerclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrLogsNotReadable: the container's log driver sends its output elsewhere and the Engine cannot
// read it back (awslogs without the Engine's local cache, fluentd, splunk, syslog, none, …). An
// errdefs.ErrFailedPrecondition.
var ErrLogsNotReadable = errdefs.New(errdefs.ErrFailedPrecondition, "the log driver cannot be read back")

// LogStream says which of a container's streams a line came from.
type LogStream int

// The streams of a container's output.
const (
	Stdout LogStream = 1
	Stderr LogStream = 2
)

// LogsOptions selects what ContainerLogs reads.
type LogsOptions struct {
	// Follow keeps the stream open for new output until the container stops.
	Follow bool
	// Since, if not zero, leaves out what came before it.
	Since time.Time
	// Tail, if positive, starts with the container's last Tail lines (the Engine counts lines of
	// both streams together); zero or negative reads everything.
	Tail int
	// TTY is the container's Tty setting: its output is then one stream, all of it Stdout.
	TTY bool
}

// LogLine is one line of a container's output as the Engine recorded it.
type LogLine struct {
	Stream LogStream
	Time   time.Time // when the Engine received the line
	// Text is the line without its newline (and, from a TTY, its carriage return). A line the log
	// driver split into parts (json-file's 16 KiB) comes as one LogLine per part. It is reused after
	// the callback returns.
	Text []byte
}

// maxLogLine bounds a line read from a TTY container's raw stream; a longer one comes in parts.
const maxLogLine = 64 << 10

// ContainerLogs reads container id's output through the Engine's log API, timestamps on, and calls
// fn with each line in the order the Engine sends them (the time order of the container's
// output), on the calling goroutine. It returns nil at the end of the output (with Follow: once
// the container stopped), or:
//   - a *NotFoundError (ErrNotFound) when the container does not exist;
//   - an error matching ErrLogsNotReadable when its log driver cannot be read back;
//   - ctx's error once ctx is done, and fn's error when fn returns one;
//   - a *TimeoutError when the Engine does not answer within Timeouts.Inspect;
//   - an error matching ErrConnection when the way to the Engine failed.
func (c *Client) ContainerLogs(ctx context.Context, id string, opts LogsOptions, fn func(LogLine) error) error {
	q := url.Values{"stdout": {"1"}, "stderr": {"1"}, "timestamps": {"1"}}
	if opts.Follow {
		q.Set("follow", "1")
	}
	if !opts.Since.IsZero() {
		q.Set("since", fmt.Sprintf("%d.%09d", opts.Since.Unix(), opts.Since.Nanosecond()))
	}
	if opts.Tail > 0 {
		q.Set("tail", strconv.Itoa(opts.Tail))
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := c.timeouts.Inspect
	watchdog := time.AfterFunc(limit, func() { cancel(&TimeoutError{Op: "container logs", Limit: limit}) })
	resp, err := c.rawGet(sctx, "/containers/"+url.PathEscape(id)+"/logs?"+q.Encode())
	watchdog.Stop() // the headers came (or not): the stream itself may be silent for as long as it likes
	if err != nil {
		var de *docker.Error
		switch {
		case isNoSuchContainer(err):
			return &NotFoundError{Kind: "container", Name: id, Err: err}
		case errors.As(err, &de) && de.Status == http.StatusNotImplemented:
			return fmt.Errorf("logs of container %q: %w: %s", id, ErrLogsNotReadable, de.Message)
		}
		return fmt.Errorf("logs of container %q: %w", id, callErr(sctx, err))
	}
	defer resp.Body.Close()
	stop := context.AfterFunc(sctx, func() { _ = resp.Body.Close() })
	defer stop()
	var fnErr error
	emit := func(stream LogStream, line []byte) error {
		if fnErr = fn(parseLogLine(stream, line)); fnErr != nil {
			return fnErr
		}
		return nil
	}
	if opts.TTY {
		err = readLines(resp.Body, func(line []byte) error { return emit(Stdout, line) })
	} else {
		err = demux(resp.Body, func(stream byte, p []byte) error {
			s := Stdout
			if stream == streamStderr {
				s = Stderr
			}
			for len(p) > 0 {
				line, rest, _ := bytes.Cut(p, []byte{'\n'})
				if err := emit(s, line); err != nil {
					return err
				}
				p = rest
			}
			return nil
		})
	}
	switch {
	case fnErr != nil:
		return fnErr
	case sctx.Err() != nil:
		return fmt.Errorf("logs of container %q: %w", id, context.Cause(sctx))
	case err != nil:
		return fmt.Errorf("logs of container %q: %w: %w", id, ErrConnection, err)
	}
	return nil
}

// readLines calls fn with each line of r, without its newline; a line longer than maxLogLine comes
// in parts.
func readLines(r io.Reader, fn func([]byte) error) error {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if ferr := fn(bytes.TrimSuffix(line, []byte{'\n'})); ferr != nil {
				return ferr
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}

// parseLogLine splits the Engine's timestamp (RFC 3339 with nanoseconds, then a space) off line; a
// line without one keeps its whole text and a zero time.
func parseLogLine(stream LogStream, line []byte) LogLine {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if ts, text, ok := bytes.Cut(line, []byte{' '}); ok {
		if t, err := time.Parse(time.RFC3339Nano, string(ts)); err == nil {
			return LogLine{Stream: stream, Time: t, Text: text}
		}
	} else if t, err := time.Parse(time.RFC3339Nano, string(line)); err == nil {
		return LogLine{Stream: stream, Time: t, Text: nil} // an empty line: only the timestamp
	}
	return LogLine{Stream: stream, Text: line}
}

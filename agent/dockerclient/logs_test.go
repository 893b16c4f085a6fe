package dockerclient

import (
	"encoding/binary"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// frame is one frame of the Engine's multiplexed stream.
func frame(stream byte, payload string) []byte {
	b := make([]byte, 8, 8+len(payload))
	b[0] = stream
	binary.BigEndian.PutUint32(b[4:], uint32(len(payload)))
	return append(b, payload...)
}

type gotLine struct {
	Stream LogStream
	Time   string
	Text   string
}

func collect(lines *[]gotLine) func(LogLine) error {
	return func(l LogLine) error {
		ts := ""
		if !l.Time.IsZero() {
			ts = l.Time.UTC().Format(time.RFC3339Nano)
		}
		*lines = append(*lines, gotLine{l.Stream, ts, string(l.Text)})
		return nil
	}
}

func TestContainerLogs(t *testing.T) {
	f := newFakeDocker(t)
	var query map[string][]string
	f.handle("GET /containers/web1/logs", func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query()
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(frame(1, "2026-12-02T03:00:00.000000001Z hello\n"))
		_, _ = w.Write(frame(2, "2026-12-02T03:00:00.5Z oops\n"))
		_, _ = w.Write(frame(1, "2026-12-02T03:00:01.000000000Z \n"))
		_, _ = w.Write(frame(1, "2026-12-02T03:00:02Z a\n2026-12-02T03:00:03Z b\n"))
		_, _ = w.Write(frame(1, "2026-12-02T03:00:04Z no newline"))
	})
	c := f.client(Config{})
	var lines []gotLine
	since := time.Date(2026, 12, 2, 2, 0, 0, 250, time.UTC)
	require.NoError(t, c.ContainerLogs(t.Context(), "web1", LogsOptions{Follow: true, Since: since, Tail: 3}, collect(&lines)))
	assert.Equal(t, []gotLine{
		{Stdout, "2026-12-02T03:00:00.000000001Z", "hello"},
		{Stderr, "2026-12-02T03:00:00.5Z", "oops"},
		{Stdout, "2026-12-02T03:00:01Z", ""},
		{Stdout, "2026-12-02T03:00:02Z", "a"},
		{Stdout, "2026-12-02T03:00:03Z", "b"},
		{Stdout, "2026-12-02T03:00:04Z", "no newline"},
	}, lines)
	assert.Equal(t, map[string][]string{"stdout": {"1"}, "stderr": {"1"}, "timestamps": {"1"}, "follow": {"1"},
		"since": {"1796176800.000000250"}, "tail": {"3"}}, query)

	query = nil
	lines = nil
	require.NoError(t, c.ContainerLogs(t.Context(), "web1", LogsOptions{}, collect(&lines)))
	assert.Equal(t, map[string][]string{"stdout": {"1"}, "stderr": {"1"}, "timestamps": {"1"}}, query, "no follow, since or tail unless asked")
}

func TestContainerLogsTTY(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("GET /containers/tty/logs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("2026-12-02T03:00:00Z one\r\n2026-12-02T03:00:01Z two\r\n"))
	})
	var lines []gotLine
	require.NoError(t, f.client(Config{}).ContainerLogs(t.Context(), "tty", LogsOptions{TTY: true}, collect(&lines)))
	assert.Equal(t, []gotLine{{Stdout, "2026-12-02T03:00:00Z", "one"}, {Stdout, "2026-12-02T03:00:01Z", "two"}}, lines)
}

func TestContainerLogsErrors(t *testing.T) {
	f := newFakeDocker(t)
	f.handle("GET /containers/gone/logs", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "No such container: gone")
	})
	f.handle("GET /containers/none/logs", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotImplemented, "configured logging driver does not support reading")
	})
	f.handle("GET /containers/garbled/logs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte{9, 0, 0, 0, 0, 0, 0, 1, 'x'})
	})
	f.handle("GET /containers/huge/logs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	})
	f.handle("GET /containers/ok/logs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(frame(1, "2026-12-02T03:00:00Z a\n"))
	})
	c := f.client(Config{})
	nop := func(LogLine) error { return nil }

	err := c.ContainerLogs(t.Context(), "gone", LogsOptions{}, nop)
	var nf *NotFoundError
	assert.ErrorAs(t, err, &nf)
	assert.True(t, errdefs.IsNotFound(err))

	err = c.ContainerLogs(t.Context(), "none", LogsOptions{}, nop)
	assert.ErrorIs(t, err, ErrLogsNotReadable)
	assert.True(t, errdefs.IsFailedPrecondition(err))

	for _, id := range []string{"garbled", "huge"} {
		err = c.ContainerLogs(t.Context(), id, LogsOptions{}, nop)
		assert.ErrorIs(t, err, ErrConnection, id)
	}

	stop := errors.New("enough")
	err = c.ContainerLogs(t.Context(), "ok", LogsOptions{}, func(LogLine) error { return stop })
	assert.ErrorIs(t, err, stop, "the callback's error as it is")
}

func TestParseLogLine(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want gotLine
	}{
		{"2026-12-02T03:00:00.123Z text with  spaces", gotLine{Stdout, "2026-12-02T03:00:00.123Z", "text with  spaces"}},
		{"2026-12-02T03:00:00Z", gotLine{Stdout, "2026-12-02T03:00:00Z", ""}},
		{"not-a-time text", gotLine{Stdout, "", "not-a-time text"}},
		{"continued part", gotLine{Stdout, "", "continued part"}},
		{"", gotLine{Stdout, "", ""}},
	} {
		var got []gotLine
		_ = collect(&got)(parseLogLine(Stdout, []byte(tt.in)))
		assert.Equal(t, tt.want, got[0], tt.in)
	}
}

package logger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

var fixedTime = time.Date(2026, 11, 30, 4, 15, 45, 123456789, time.UTC)

// newTest builds a logger writing to a buffer with a fixed clock.
func newTest(t *testing.T, cfg Config) (*Logger, *Buffer) {
	t.Helper()
	var buf Buffer
	l, err := New(cfg, &buf)
	require.NoError(t, err)
	l.core.clock = clockwork.NewFakeClockAt(fixedTime)
	t.Cleanup(l.Close)
	return l, &buf
}

func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestLevelFiltering(t *testing.T) {
	tests := []struct {
		level string
		want  []string
	}{
		{"debug", []string{"debug", "info", "warn", "error", "crit"}},
		{"", []string{"info", "warn", "error", "crit"}},
		{"info", []string{"info", "warn", "error", "crit"}},
		{"WARN", []string{"warn", "error", "crit"}},
		{"error", []string{"error", "crit"}},
		{"crit", []string{"crit"}},
	}
	for _, tt := range tests {
		t.Run("level="+tt.level, func(t *testing.T) {
			l, buf := newTest(t, Config{Level: tt.level})
			l.Debug("m")
			l.Info("m")
			l.Warn("m")
			l.Error("m")
			l.Critical("m")
			l.Flush()
			var got []string
			for _, line := range lines(buf.String()) {
				lvl, _, _ := strings.Cut(strings.TrimPrefix(line, "level="), " ")
				got = append(got, lvl)
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want[0] == "debug", l.Enabled("debug"))
			assert.True(t, l.Enabled("crit"))
			assert.False(t, l.Enabled("bogus"))
		})
	}
}

func TestLogfmtLine(t *testing.T) {
	l, buf := newTest(t, Config{})
	l.Info("pull started", "image", "foo:1", "task", "arn:aws:ecs:us-west-2:1:task/c/abc")
	l.Flush()
	assert.Equal(t,
		`level=info time=2026-11-30T04:15:45.123Z msg="pull started" image=foo:1 task=arn:aws:ecs:us-west-2:1:task/c/abc`+"\n",
		buf.String())
}

type stringer struct{}

func (stringer) String() string { return "str ok" }

type secret struct{ Password string }

type nilErr struct{}

func (*nilErr) Error() string { panic("boom") }

type status string

func TestLogfmtValues(t *testing.T) {
	tests := []struct {
		name string
		kv   []any
		want string // expected suffix after msg=m
	}{
		{"plain", []any{"k", "v"}, ` k=v`},
		{"space", []any{"k", "a b"}, ` k="a b"`},
		{"empty", []any{"k", ""}, ` k=""`},
		{"equals", []any{"k", "a=b"}, ` k="a=b"`},
		{"quote", []any{"k", `say "hi"`}, ` k="say \"hi\""`},
		{"backslash bare", []any{"k", `C:\x`}, ` k=C:\x`},
		{"backslash quoted", []any{"k", `a \ b`}, ` k="a \\ b"`},
		{"newline", []any{"k", "a\nb"}, ` k="a\nb"`},
		{"tab", []any{"k", "a\tb"}, ` k="a\tb"`},
		{"invalid utf8", []any{"k", "a\xffb"}, ` k="a\xffb"`},
		{"unicode", []any{"k", "héllo"}, ` k=héllo`},
		{"int", []any{"n", 42}, ` n=42`},
		{"float", []any{"f", 1.5}, ` f=1.5`},
		{"bool", []any{"b", true}, ` b=true`},
		{"nil", []any{"x", nil}, ` x=null`},
		{"error", []any{"err", errors.New("no such image")}, ` err="no such image"`},
		{"nil pointer error", []any{"err", (*nilErr)(nil)}, ` err=<nil>`},
		{"stringer", []any{"s", stringer{}}, ` s="str ok"`},
		{"duration", []any{"d", 1500 * time.Millisecond}, ` d=1.5s`},
		{"named string", []any{"st", status("RUNNING")}, ` st=RUNNING`},
		{"struct not dumped", []any{"cfg", secret{Password: "hunter2"}}, ` cfg=<logger.secret>`},
		{"map not dumped", []any{"m", map[string]string{"p": "hunter2"}}, ` m=<map[string]string>`},
		{"non-string key", []any{7, "v"}, ` 7=v`},
		{"key with space", []any{"a b", "v"}, ` a_b=v`},
		{"odd trailing key", []any{"k", "v", "lonely"}, ` k=v lonely=(MISSING)`},
		{"reserved key", []any{"msg", "x"}, ` fields.msg=x`},
		{"duplicate key last wins", []any{"k", 1, "k", 2}, ` k=2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, buf := newTest(t, Config{})
			l.Info("m", tt.kv...)
			l.Flush()
			out := buf.String()
			require.Len(t, lines(out), 1, "one record is one line")
			prefix := "level=info time=2026-11-30T04:15:45.123Z msg=m"
			assert.Equal(t, prefix+tt.want+"\n", out)
			assert.NotContains(t, out, "hunter2")
		})
	}
}

func TestLogfmtMessageEscaping(t *testing.T) {
	l, buf := newTest(t, Config{})
	l.Warn("line1\nline2 \"q\"")
	l.Flush()
	assert.Equal(t, `level=warn time=2026-11-30T04:15:45.123Z msg="line1\nline2 \"q\""`+"\n", buf.String())
}

func TestJSON(t *testing.T) {
	l, buf := newTest(t, Config{OutputFormat: "json", Level: "debug"})
	l.With("task", "arn:1").Debug("pull \"started\"\n",
		"image", "foo:1", "n", 3, "ok", true, "err", errors.New("bad\tthing"),
		"nan", fmtNaN(), "nil", nil, "bad", "\xff\u2028", "level", "x", "odd")
	l.Flush()
	out := buf.String()
	require.Len(t, lines(out), 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, map[string]any{
		"level":        "debug",
		"time":         "2026-11-30T04:15:45.123Z",
		"msg":          "pull \"started\"\n",
		"task":         "arn:1",
		"image":        "foo:1",
		"n":            float64(3),
		"ok":           true,
		"err":          "bad\tthing",
		"nan":          "NaN",
		"nil":          nil,
		"bad":          "\ufffd\u2028",
		"fields.level": "x",
		"odd":          "(MISSING)",
	}, got)
	assert.True(t, strings.HasPrefix(out, `{"level":"debug","time":`), out)
}

func fmtNaN() float64 {
	var zero float64
	return zero / zero
}

func TestWithDoesNotMutateParent(t *testing.T) {
	l, buf := newTest(t, Config{})
	parent := l.With("a", 1)
	child := parent.With("b", 2)
	override := parent.With("a", 9)
	// Appending to a child must not leak into a sibling sharing capacity.
	sibling := parent.With("c", 3)

	parent.Info("p")
	child.Info("c")
	override.Info("o")
	sibling.Info("s")
	l.Info("root")
	l.Flush()

	want := []string{
		"msg=p a=1",
		"msg=c a=1 b=2",
		"msg=o a=9",
		"msg=s a=1 c=3",
		"msg=root",
	}
	got := lines(buf.String())
	require.Len(t, got, len(want))
	for i, w := range want {
		assert.True(t, strings.HasSuffix(got[i], w), "line %d = %q, want suffix %q", i, got[i], w)
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
		value string
	}{
		{"level", Config{Level: "verbose"}, "Level", "verbose"},
		{"rollover", Config{RolloverType: "weekly"}, "RolloverType", "weekly"},
		{"format", Config{OutputFormat: "xml"}, "OutputFormat", "xml"},
		{"size", Config{MaxFileSizeMB: -1}, "MaxFileSizeMB", "-1"},
		{"size whose bytes overflow", Config{MaxFileSizeMB: 1e300}, "MaxFileSizeMB", "1e+300"},
		{"rolls", Config{MaxRollCount: -2}, "MaxRollCount", "-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.cfg, &bytes.Buffer{})
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.True(t, errdefs.IsInvalidArgument(err))
			assert.Contains(t, err.Error(), tt.field)
			assert.Contains(t, err.Error(), tt.value)
		})
	}
}

func TestFileUnwritable(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	_, err := New(Config{File: filepath.Join(blocker, "sub", "agent.log")}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "log directory")
}

// readDir returns the names in dir.
func readDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSizeRolloverKeepsStableName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing", "dir")
	file := filepath.Join(dir, "agent.log")
	l, _ := newTest(t, Config{File: file, RolloverType: "size", MaxFileSizeMB: 0.001, MaxRollCount: 3})

	for i := range 60 {
		l.Info("filling the log to force a roll", "i", i, "pad", strings.Repeat("x", 40))
	}
	l.Info("last record", "marker", "tail-me")
	l.Flush()

	names := readDir(t, dir)
	assert.Contains(t, names, "agent.log", "current file keeps the configured name")
	var rolled []string
	for _, n := range names {
		if n != "agent.log" {
			assert.Regexp(t, `^agent\.log\.\d+$`, n)
			rolled = append(rolled, n)
		}
	}
	assert.NotEmpty(t, rolled, "a rolled sibling exists")
	assert.LessOrEqual(t, len(rolled), 3, "MaxRollCount rolled files kept")

	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), "marker=tail-me", "the current file is the one being appended to")
	assert.Less(t, len(data), 1048+200, "current file stays near the size limit")

	// Still appended to after the roll.
	l.Info("after", "marker", "again")
	l.Flush()
	data, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), "marker=again")
}

func TestDateRolloverWritesFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "logs", "agent.log")
	l, buf := newTest(t, Config{File: file, RolloverType: "date", MaxRollCount: 24})
	l.Info("hello", "k", "v")
	l.Flush()

	assert.Equal(t, []string{"agent.log"}, readDir(t, filepath.Dir(file)), "current file is exactly File, no date suffix")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, buf.String(), string(data), "console and file get the same line")
	assert.Contains(t, seelogConfig(settings{file: file, rollover: RolloverDate, maxRolls: 24}), `fullname="false"`)
}

func TestNoRolloverWritesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.log")
	require.NoError(t, os.WriteFile(file, []byte("previous\n"), 0o644))
	l, _ := newTest(t, Config{File: file, RolloverType: "none", OutputFormat: "json"})
	l.Error("boom", "err", errors.New("x"))
	l.Close()

	data, err := os.ReadFile(file)
	require.NoError(t, err)
	got := lines(string(data))
	require.Len(t, got, 2, "existing content is appended to")
	assert.Equal(t, "previous", got[0])
	assert.JSONEq(t, `{"level":"error","time":"2026-11-30T04:15:45.123Z","msg":"boom","err":"x"}`, got[1])
}

func TestCloseIdempotentAndNop(t *testing.T) {
	l, buf := newTest(t, Config{})
	child := l.With("a", 1)
	l.Close()
	l.Close()
	child.Close()
	child.Info("after close")
	l.Flush()
	assert.Empty(t, buf.String())
	assert.False(t, l.Enabled("crit"))

	for name, n := range map[string]*Logger{"nop": Nop(), "nil": nil} {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				n.With("k", "v").Critical("x")
				n.Info("x")
				n.Flush()
				n.Close()
				n.Close()
			})
			assert.False(t, n.Enabled("crit"))
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	l, buf := newTest(t, Config{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := l.With("g", g)
			for i := range 50 {
				c.Info("concurrent", "i", i)
				_ = c.With("i", i)
			}
		}()
	}
	wg.Wait()
	l.Flush()
	got := lines(buf.String())
	assert.Len(t, got, 400)
	for _, line := range got {
		assert.Regexp(t, `^level=info time=\S+ msg=concurrent g=\d i=\d+$`, line)
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	s, err := Config{Level: DefaultLevel, RolloverType: DefaultRolloverType, MaxFileSizeMB: DefaultMaxFileSizeMB,
		MaxRollCount: DefaultMaxRollCount, OutputFormat: DefaultOutputFormat}.validate()
	require.NoError(t, err)
	assert.Equal(t, infoLevel, s.min)
	assert.Equal(t, RolloverDate, s.rollover)
	assert.Equal(t, int64(10*1024*1024), s.maxBytes)
	assert.Equal(t, 24, s.maxRolls)
	assert.Equal(t, FormatLogfmt, s.format)
	assert.Equal(t, s, mustValidate(t, Config{}), "zero values take the defaults")
}

func mustValidate(t *testing.T, c Config) settings {
	t.Helper()
	s, err := c.validate()
	require.NoError(t, err, fmt.Sprint(c))
	return s
}

// The log file is created 0640, and an existing one that allows more is narrowed to it.
func TestLogFileMode(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.log")
	newTest(t, Config{File: fresh})
	wide := filepath.Join(dir, "wide.log")
	require.NoError(t, os.WriteFile(wide, []byte("old\n"), 0o666))
	require.NoError(t, os.Chmod(wide, 0o666))
	newTest(t, Config{File: wide})
	narrow := filepath.Join(dir, "narrow.log")
	require.NoError(t, os.WriteFile(narrow, nil, 0o600))
	newTest(t, Config{File: narrow})
	for path, want := range map[string]os.FileMode{fresh: 0o640, wide: 0o640, narrow: 0o600} {
		info, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, want, info.Mode().Perm(), "%s: at most 0640, never widened", filepath.Base(path))
	}
}

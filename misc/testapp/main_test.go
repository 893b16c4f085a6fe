package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args []string
		want options
	}{
		{[]string{"sleep"}, options{Mode: "sleep"}},
		{[]string{"sleep", "-d", "1.5s"}, options{Mode: "sleep", Duration: 1500 * time.Millisecond}},
		{[]string{"exit", "-code", "3", "-after", "2s"}, options{Mode: "exit", Code: 3, After: 2 * time.Second}},
		{[]string{"alloc", "-mib", "64"}, options{Mode: "alloc", MiB: 64}},
		{[]string{"exit", "--code=255"}, options{Mode: "exit", Code: 255}},
		{[]string{"http"}, options{Mode: "http", Addr: ":8080"}},
		{[]string{"http", "-addr", "127.0.0.1:0", "-healthy-after", "3s"},
			options{Mode: "http", Addr: "127.0.0.1:0", HealthyAfter: 3 * time.Second}},
		{[]string{"env"}, options{Mode: "env"}},
		{[]string{"env", "-stay"}, options{Mode: "env", Stay: true}},
		{[]string{"write", "-path", "/data/x", "-content", "hi there", "-stay"},
			options{Mode: "write", Path: "/data/x", Content: "hi there", Stay: true}},
		{[]string{"write", "-path", "/data/empty"}, options{Mode: "write", Path: "/data/empty"}},
		{[]string{"read", "-path", "/data/x"}, options{Mode: "read", Path: "/data/x", Wait: 30 * time.Second}},
		{[]string{"read", "-path", "/data/x", "-wait", "0"}, options{Mode: "read", Path: "/data/x"}},
		{[]string{"read", "-path-env", "ECS_CONTAINER_METADATA_FILE", "-until", "READY"},
			options{Mode: "read", PathEnv: "ECS_CONTAINER_METADATA_FILE", Until: "READY", Wait: 30 * time.Second}},
		{[]string{"ignore-term"}, options{Mode: "ignore-term"}},
		{[]string{"health"}, options{Mode: "health", URL: "http://127.0.0.1:8080/health", Timeout: 3 * time.Second}},
		{[]string{"health", "-url", "http://x:1/h", "-timeout", "1s"},
			options{Mode: "health", URL: "http://x:1/h", Timeout: time.Second}},
		{[]string{"connect", "-addr", "db:5432"}, options{Mode: "connect", Addr: "db:5432", Timeout: 5 * time.Second}},
		{[]string{"connect", "-addr", "db:5432", "-timeout", "250ms", "-read"},
			options{Mode: "connect", Addr: "db:5432", Timeout: 250 * time.Millisecond, Read: true}},
		{[]string{"listen"}, options{Mode: "listen", Addr: ":9000"}},
		{[]string{"listen", "-addr", ":7000", "-msg", "pong"}, options{Mode: "listen", Addr: ":7000", Msg: "pong"}},
		{[]string{"aws-identity"}, options{Mode: "aws-identity", Timeout: 10 * time.Second}},
		{[]string{"aws-identity", "-creds-only", "-timeout", "2s"},
			options{Mode: "aws-identity", CredsOnly: true, Timeout: 2 * time.Second}},
		{[]string{"metadata"}, options{Mode: "metadata", Timeout: 5 * time.Second}},
		{[]string{"cat"}, options{Mode: "cat"}},
		{[]string{"print", "-out", "one", "-err", "two", "-out", "three", "-d", "2s"}, options{Mode: "print",
			Lines: []printLine{{Text: "one"}, {Stderr: true, Text: "two"}, {Text: "three"}}, Duration: 2 * time.Second}},
		{[]string{"print", "-stay"}, options{Mode: "print", Stay: true}},
		{[]string{"metadata", "-path", "task/stats", "-timeout", "1s"},
			options{Mode: "metadata", MetaPath: "task/stats", Timeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, err := parseArgs(tt.args, io.Discard)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseArgs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseArgsRefuses(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"bogus"},
		{"-d", "1s"},
		{"sleep", "-d", "soon"},
		{"sleep", "-d", "-1s"},
		{"sleep", "extra"},
		{"sleep", "-nope"},
		{"exit", "-code", "256"},
		{"alloc"},
		{"alloc", "-mib", "0"},
		{"exit", "-code", "-1"},
		{"exit", "-code", "x"},
		{"write"},
		{"write", "-content", "x"},
		{"read"},
		{"read", "-path", "/x", "-wait", "-2s"},
		{"read", "-path", "/x", "-path-env", "X"},
		{"read", "-until", "READY"},
		{"health", "-url", ""},
		{"health", "-timeout", "0"},
		{"connect"},
		{"connect", "-addr", "a:1", "-timeout", "0s"},
		{"listen", "-addr", ""},
		{"ignore-term", "now"},
		{"aws-identity", "-timeout", "0"},
		{"aws-identity", "sts"},
		{"metadata", "-timeout", "-1s"},
		{"metadata", "task"},
		{"cat", "-n"},
		{"print", "-d", "-1s"},
		{"print", "line"},
	} {
		if _, err := parseArgs(args, io.Discard); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("parseArgs(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestMainExitUsage(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{nil, 2, "", "usage: testapp <mode>"},
		{[]string{"frobnicate"}, 2, "", `unknown mode "frobnicate"`},
		{[]string{"exit", "-code", "x"}, 2, "", "invalid value"},
		{[]string{"write"}, 2, "", "-path is required"},
		{[]string{"help"}, 0, "usage: testapp <mode>", ""},
		{[]string{"-h"}, 0, "usage: testapp <mode>", ""},
		{[]string{"sleep", "-h"}, 0, "", "how long to sleep"},
		{[]string{"exit", "-code", "7"}, 7, "exiting with code 7", ""},
	} {
		var stdout, stderr bytes.Buffer
		code := mainExit(tt.args, &stdout, &stderr)
		if code != tt.code {
			t.Errorf("mainExit(%q) = %d, want %d", tt.args, code, tt.code)
		}
		if !strings.Contains(stdout.String(), tt.wantStdout) || tt.wantStdout == "" && stdout.Len() > 0 {
			t.Errorf("mainExit(%q) stdout = %q, want it to contain %q", tt.args, stdout.String(), tt.wantStdout)
		}
		if !strings.Contains(stderr.String(), tt.wantStderr) || tt.wantStderr == "" && stderr.Len() > 0 {
			t.Errorf("mainExit(%q) stderr = %q, want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
		}
	}
}

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, rec.Body.String()
}

func TestHandlerHealthFakeClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	h := newHandler("box", "", start, 5*time.Second, func() time.Time { return now })
	for _, step := range []struct {
		at   time.Duration
		code int
	}{{0, 503}, {4999 * time.Millisecond, 503}, {5 * time.Second, 200}, {time.Hour, 200}} {
		now = start.Add(step.at)
		if code, body := get(t, h, "/health"); code != step.code {
			t.Errorf("/health at %v = %d %q, want %d", step.at, code, body, step.code)
		}
	}
}

func TestHandlerHealthRealTime(t *testing.T) {
	const after = 150 * time.Millisecond
	h := newHandler("box", "", time.Now(), after, time.Now)
	if code, _ := get(t, h, "/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("/health at start = %d, want 503", code)
	}
	start := time.Now()
	for {
		code, body := get(t, h, "/health")
		if code == http.StatusOK {
			if body != "ok\n" {
				t.Fatalf("/health body %q, want \"ok\\n\"", body)
			}
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("/health still %d 5 s after start, want 200 after %v", code, after)
		}
		time.Sleep(5 * time.Millisecond) // poll: the condition is real time passing
	}
	if waited := time.Since(start); waited < after-10*time.Millisecond {
		t.Fatalf("/health turned healthy after %v, before -healthy-after %v", waited, after)
	}
	// Healthy from the start without -healthy-after.
	if code, _ := get(t, newHandler("box", "", time.Now(), 0, time.Now), "/health"); code != http.StatusOK {
		t.Fatalf("/health with no delay = %d, want 200", code)
	}
}

func TestHandlerRoutes(t *testing.T) {
	t.Setenv("TESTAPP_ROUTE_CHECK", "yes")
	h := newHandler("box", "web-1", time.Now(), 0, time.Now)
	if code, body := get(t, h, "/"); code != 200 || body != "testapp host=box name=web-1\n" {
		t.Errorf("/ = %d %q", code, body)
	}
	if _, body := get(t, newHandler("box", "", time.Now(), 0, time.Now), "/"); body != "testapp host=box\n" {
		t.Errorf("/ without a name = %q", body)
	}
	if code, body := get(t, h, "/echo?msg=hello%20world"); code != 200 || body != "hello world\n" {
		t.Errorf("/echo = %d %q", code, body)
	}
	if code, body := get(t, h, "/env"); code != 200 || !strings.Contains(body, "TESTAPP_ROUTE_CHECK=yes\n") {
		t.Errorf("/env = %d, missing TESTAPP_ROUTE_CHECK in %q", code, body)
	}
	if code, _ := get(t, h, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}
}

func TestPrintEnvSorted(t *testing.T) {
	var b bytes.Buffer
	in := []string{"B=2", "A=1", "C=3"}
	printEnv(&b, in)
	if b.String() != "A=1\nB=2\nC=3\n" {
		t.Errorf("printEnv = %q", b.String())
	}
	if in[0] != "B=2" {
		t.Errorf("printEnv reordered its argument: %q", in)
	}
}

func TestWriteThenRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "f.txt")
	done := make(chan error, 1)
	var got []byte
	go func() {
		var err error
		got, err = readWhenPresent(context.Background(), path, "", 5*time.Second, 10*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("readWhenPresent returned before the file existed: %v", err)
	case <-time.After(30 * time.Millisecond): // it must keep waiting for the file
	}
	if err := writeFile(path, "shared\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("readWhenPresent: %v", err)
	}
	if string(got) != "shared\n" {
		t.Errorf("read %q", got)
	}
}

func TestReadTimesOutAndStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "never")
	if _, err := readWhenPresent(context.Background(), path, "", 50*time.Millisecond, 10*time.Millisecond); err == nil {
		t.Error("readWhenPresent of a missing file did not time out")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readWhenPresent(ctx, path, "", 0, 10*time.Millisecond); err == nil {
		t.Error("readWhenPresent with a cancelled context succeeded")
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), options{Mode: "read", Path: path, Wait: 30 * time.Millisecond}, &stdout, &stderr); code != 1 {
		t.Errorf("read mode on timeout exited %d, want 1 (stderr %q)", code, stderr.String())
	}
}

// TestReadPathFromEnvUntilText: read -path-env takes the path from a variable (a FROM scratch
// image has no shell to expand it) and -until waits for the text, through a rewrite of the file.
func TestReadPathFromEnvUntilText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "md.json")
	t.Setenv("TESTAPP_READ_PATH", path)
	if err := writeFile(path, `{"MetadataFileStatus": "PENDING"}`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() {
		done <- run(context.Background(), options{Mode: "read", PathEnv: "TESTAPP_READ_PATH", Until: `"READY"`, Wait: 5 * time.Second}, &stdout, &stderr)
	}()
	select {
	case code := <-done:
		t.Fatalf("read returned %d before the file held the text (stderr %q)", code, stderr.String())
	case <-time.After(300 * time.Millisecond): // it keeps polling the PENDING file
	}
	if err := writeFile(path, `{"MetadataFileStatus": "READY"}`); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("read exited %d (stderr %q)", code, stderr.String())
	}
	if stdout.String() != `{"MetadataFileStatus": "READY"}` {
		t.Errorf("read printed %q", stdout.String())
	}

	var out, errOut bytes.Buffer
	if code := run(context.Background(), options{Mode: "read", PathEnv: "TESTAPP_UNSET_VARIABLE", Wait: time.Second}, &out, &errOut); code != 1 {
		t.Errorf("read of an unset variable exited %d, want 1", code)
	}
	if code := run(context.Background(), options{Mode: "read", Path: path, Until: "NEVER", Wait: 50 * time.Millisecond}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "did not hold") {
		t.Errorf("read -until of text never written exited %d (stderr %q), want 1 saying so", code, errOut.String())
	}
}

func TestListenConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- answerLines(ctx, ln, "pong") }()
	for range 2 {
		line, err := connect(context.Background(), ln.Addr().String(), 2*time.Second, true)
		if err != nil || line != "pong" {
			t.Fatalf("connect = %q, %v; want pong", line, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("answerLines after cancel: %v", err)
	}
	// The listener is closed now: connecting fails.
	if _, err := connect(context.Background(), ln.Addr().String(), time.Second, false); err == nil {
		t.Error("connect to a closed listener succeeded")
	}
}

func TestHealthClient(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := checkHealth(context.Background(), srv.URL, time.Second); err == nil {
		t.Error("checkHealth of a 503 succeeded")
	}
	healthy.Store(true)
	if err := checkHealth(context.Background(), srv.URL, time.Second); err != nil {
		t.Errorf("checkHealth of a 200: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{"health", "-url", srv.URL}, &stdout, &stderr); code != 0 {
		t.Errorf("health mode exited %d (stderr %q)", code, stderr.String())
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []options{
		{Mode: "sleep"},
		{Mode: "env", Stay: true},
		{Mode: "write", Path: filepath.Join(dir, "w"), Content: "x", Stay: true},
		{Mode: "http", Addr: "127.0.0.1:0"},
		{Mode: "listen", Addr: "127.0.0.1:0"},
		{Mode: "exit", Code: 4, After: time.Hour},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		codec := make(chan int, 1)
		go func() { codec <- run(ctx, o, io.Discard, io.Discard) }()
		select {
		case code := <-codec:
			t.Fatalf("%s returned %d before it was cancelled", o.Mode, code)
		case <-time.After(20 * time.Millisecond): // a long-running mode keeps running until cancelled
		}
		cancel()
		select {
		case code := <-codec:
			if code != o.Code {
				t.Errorf("%s: exit code %d after cancel, want %d", o.Mode, code, o.Code)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s did not stop on cancel", o.Mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "w")); err != nil || string(b) != "x" {
		t.Errorf("write mode wrote %q, %v", b, err)
	}
}

func TestPrintInOrder(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := options{Mode: "print", Lines: []printLine{{Text: "one"}, {Stderr: true, Text: "two"}, {Text: "three"}}}
	if code := run(context.Background(), o, &stdout, &stderr); code != 0 {
		t.Fatalf("print exited %d", code)
	}
	if stdout.String() != "one\nthree\n" || stderr.String() != "two\n" {
		t.Errorf("print wrote stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

func TestCopyUntilEOF(t *testing.T) {
	var out bytes.Buffer
	if err := copyUntilEOF(context.Background(), &out, strings.NewReader("piped\nin")); err != nil || out.String() != "piped\nin" {
		t.Errorf("copyUntilEOF = %v, copied %q", err, out.String())
	}
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := copyUntilEOF(ctx, io.Discard, r); err != nil {
		t.Errorf("a signal ends cat without an error, got %v", err)
	}
}

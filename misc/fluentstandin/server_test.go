package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond every 10ms for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startServer runs the stand-in's three inputs on a temporary socket and loopback ports.
func startServer(t *testing.T) (inputs map[string]string, stdout, stderr *syncBuffer, records string) {
	t.Helper()
	dir := t.TempDir()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	records = filepath.Join(dir, "log", "records.jsonl")
	rec, err := newRecorder(stdout, records)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	cfg := serverConfig{Unix: filepath.Join(dir, "run", "fluent.sock"), TCP: "127.0.0.1:0", Health: "127.0.0.1:0", MaxFrame: 4096}
	ins, err := listen(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	inputs = map[string]string{}
	for _, in := range ins {
		inputs[in.source] = in.ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		serve(ctx, ins, cfg.Unix, stderr)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if _, err := os.Stat(cfg.Unix); !os.IsNotExist(err) {
			t.Errorf("the unix socket is left after stop: %v", err)
		}
	})
	return inputs, stdout, stderr, records
}

func dial(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func TestServerRecordsAndAcks(t *testing.T) {
	inputs, stdout, _, records := startServer(t)
	// Docker's fluentd driver: Message mode, EventTime, nil option, on the unix socket.
	unix := dial(t, "unix", inputs["unix"])
	tag := []byte{0xb0}
	tag = append(tag, "app-firelens-abc"...)
	unix.Write(cat([]byte{0x94}, tag, eventTime, recHi, []byte{0xc0}))
	// Fluent Bit's forward output with require_ack_response: Forward mode with a chunk, on TCP.
	tcp := dial(t, "tcp", inputs["tcp"])
	tcp.Write(cat([]byte{0x93}, tagApp, []byte{0x91, 0x92}, intTime, recHi, optChunk))
	ack := make([]byte, 8)
	if _, err := io.ReadFull(tcp, ack); err != nil {
		t.Fatalf("no ack: %v", err)
	}
	if want := []byte{0x81, 0xa3, 'a', 'c', 'k', 0xa2, 'c', '1'}; !bytes.Equal(ack, want) {
		t.Fatalf("ack = % x, want % x", ack, want)
	}
	health := dial(t, "tcp", inputs["healthcheck"])
	health.Write([]byte(`{"health":"check"}` + "\n"))

	want := []string{
		`{"kind":"record","source":"unix","tag":"app-firelens-abc","time":"2023-11-14T22:13:20.5Z","record":{"log":"hi"}}`,
		`{"kind":"record","source":"tcp","tag":"app","time":"2023-11-14T22:13:20Z","record":{"log":"hi"}}`,
	}
	waitFor(t, "three records", func() bool { return strings.Count(stdout.String(), "\n") == 3 })
	for _, w := range want {
		if !strings.Contains(stdout.String(), w+"\n") {
			t.Errorf("stdout lacks %s; it holds:\n%s", w, stdout)
		}
	}
	if !strings.Contains(stdout.String(), `"source":"healthcheck","tag":"firelens-healthcheck",`) ||
		!strings.Contains(stdout.String(), `"record":{"health":"check"}}`) {
		t.Errorf("no health-check record in:\n%s", stdout)
	}
	file, err := os.ReadFile(records)
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != stdout.String() {
		t.Errorf("records file:\n%s\nstdout:\n%s", file, stdout)
	}
}

func TestServerClosesOnMalformedFrame(t *testing.T) {
	inputs, stdout, stderr, _ := startServer(t)
	for _, tc := range []struct{ network, source string }{{"unix", "unix"}, {"tcp", "tcp"}} {
		c := dial(t, tc.network, inputs[tc.source])
		c.Write([]byte{0xc1, 0x00})
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: read = %d, %v; want the connection closed", tc.source, n, err)
		}
	}
	// A frame beyond -max-frame (4096 here) is refused from its header, without reading it.
	big := dial(t, "tcp", inputs["tcp"])
	big.Write(cat([]byte{0x93}, tagApp, intTime, []byte{0x81, 0xa1, 'x', 0xdb, 0x00, 0x01, 0x00, 0x00}))
	if _, err := big.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("oversized frame: read err = %v, want EOF", err)
	}
	health := dial(t, "tcp", inputs["healthcheck"])
	health.Write([]byte("[1]\n"))
	if _, err := health.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("health-check non-object: read err = %v, want EOF", err)
	}
	waitFor(t, "four reasons on stderr", func() bool { return strings.Count(stderr.String(), "closing the connection") == 4 })
	for _, w := range []string{"0xc1 is not a MessagePack type", "frame exceeds the size limit", "health-check input"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if stdout.String() != "" {
		t.Errorf("recorded from malformed input:\n%s", stdout)
	}
	// The server still serves after all that.
	c := dial(t, "unix", inputs["unix"])
	c.Write(cat([]byte{0x93}, tagApp, intTime, recHi))
	waitFor(t, "a record", func() bool { return strings.Contains(stdout.String(), `"tag":"app"`) })
}

func TestMainRecordsConfigAndIncludes(t *testing.T) {
	dir := t.TempDir()
	ext := filepath.Join(dir, "external.conf")
	extBody := "[OUTPUT]\n    Name stdout\n    Match *\n"
	os.WriteFile(ext, []byte(extBody), 0o600)
	conf := filepath.Join(dir, "fluent-bit.conf")
	confBody := "[INPUT]\n    Name forward\n@INCLUDE external.conf\n@include /nonexistent/other.conf\n"
	os.WriteFile(conf, []byte(confBody), 0o600)
	sock := filepath.Join(dir, "fluent.sock")
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- mainExit(ctx, []string{"-unix", sock, "-tcp", "", "-health", "", "-records", "",
			"-config", conf + "," + filepath.Join(dir, "absent.conf")}, stdout, stderr)
	}()
	waitFor(t, "the socket", func() bool { _, err := os.Stat(sock); return err == nil })
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, stderr:\n%s", c, stderr)
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	var got configLine
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one config line, got:\n%s", stdout)
	}
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := configLine{Kind: "config", Path: conf, Size: int64(len(confBody)), SHA256: sum(confBody), Includes: []configFile{
		{Path: ext, Size: int64(len(extBody)), SHA256: sum(extBody)},
		{Path: "/nonexistent/other.conf", SHA256: "missing"},
	}}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("config line\n got %s\nwant %s", g, w)
	}
	if strings.Contains(stdout.String(), "Name stdout") {
		t.Error("a configuration file's contents reached stdout")
	}
}

func TestMainRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-max-frame", "10"}, {"stray"}, {"-nope"}} {
		var out, errb syncBuffer
		if c := mainExit(context.Background(), args, &out, &errb); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
	var out, errb syncBuffer
	if c := mainExit(context.Background(), []string{"-unix", "", "-tcp", "", "-health", "", "-records", "", "-config", ""}, &out, &errb); c != 1 ||
		!strings.Contains(errb.String(), "no input") {
		t.Errorf("no inputs: exit %d, stderr %q", c, errb.String())
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

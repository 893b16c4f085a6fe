package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// serverConfig says where the stand-in listens; an empty address turns that input off.
type serverConfig struct {
	Unix     string // forward input, unix socket path
	TCP      string // forward input, TCP address
	Health   string // Fluent Bit health-check input (JSON over TCP)
	MaxFrame int64  // bytes one frame may hold
}

// healthTag is the tag the ECS agent gives Fluent Bit's health-check input.
const healthTag = "firelens-healthcheck"

// input is one listener and how its connections are served.
type input struct {
	ln     net.Listener
	source string
	handle func(conn net.Conn) error
}

// listen opens every input of cfg; on an error it closes those it opened.
func listen(cfg serverConfig, rec *recorder) ([]input, error) {
	var inputs []input
	fail := func(err error) ([]input, error) {
		closeInputs(inputs)
		return nil, err
	}
	forward := func(source string) func(net.Conn) error {
		return func(conn net.Conn) error { return serveForward(conn, source, cfg.MaxFrame, rec) }
	}
	if cfg.Unix != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Unix), 0o755); err != nil {
			return nil, fmt.Errorf("unix socket %s: %w", cfg.Unix, err)
		}
		// A socket left by an earlier run (the directory is the host's) would make listen fail.
		if fi, err := os.Lstat(cfg.Unix); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(cfg.Unix)
		}
		ln, err := net.Listen("unix", cfg.Unix)
		if err != nil {
			return nil, fmt.Errorf("unix socket: %w", err)
		}
		inputs = append(inputs, input{ln, "unix", forward("unix")})
	}
	if cfg.TCP != "" {
		ln, err := net.Listen("tcp", cfg.TCP)
		if err != nil {
			return fail(fmt.Errorf("tcp input: %w", err))
		}
		inputs = append(inputs, input{ln, "tcp", forward("tcp")})
	}
	if cfg.Health != "" {
		ln, err := net.Listen("tcp", cfg.Health)
		if err != nil {
			return fail(fmt.Errorf("health-check input: %w", err))
		}
		inputs = append(inputs, input{ln, "healthcheck", func(conn net.Conn) error { return serveHealth(conn, cfg.MaxFrame, rec) }})
	}
	if len(inputs) == 0 {
		return nil, errors.New("no input to listen on")
	}
	return inputs, nil
}

func closeInputs(inputs []input) {
	for _, in := range inputs {
		in.ln.Close()
	}
}

// serve serves the inputs until ctx is done, then closes them and every connection, waits for
// their goroutines and removes the unix socket (unixPath, when not empty).
func serve(ctx context.Context, inputs []input, unixPath string, stderr io.Writer) {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "fluentstandin: "+format+"\n", args...) }
	for _, in := range inputs {
		logf("listening on %s %s (%s)", in.ln.Addr().Network(), in.ln.Addr(), in.source)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	for _, in := range inputs {
		wg.Go(func() {
			for {
				conn, err := in.ln.Accept()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
						logf("%s: accept: %v", in.source, err)
					}
					return
				}
				mu.Lock()
				conns[conn] = true
				mu.Unlock()
				wg.Go(func() {
					defer func() {
						mu.Lock()
						delete(conns, conn)
						mu.Unlock()
						conn.Close()
					}()
					if err := in.handle(conn); err != nil && ctx.Err() == nil {
						logf("%s: closing the connection from %s: %v", in.source, peer(conn), err)
					}
				})
			}
		})
	}
	<-ctx.Done()
	closeInputs(inputs)
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	if unixPath != "" {
		os.Remove(unixPath)
	}
}

func peer(conn net.Conn) string {
	if a := conn.RemoteAddr(); a != nil && a.String() != "" {
		return a.String()
	}
	return "a local client"
}

// serveForward reads forward-protocol frames from conn until it ends, recording their entries and
// answering each chunk option with its ack. A malformed frame ends it with an error.
func serveForward(conn net.Conn, source string, maxFrame int64, rec *recorder) error {
	r := bufio.NewReader(conn)
	for {
		f, err := readFrame(r, maxFrame)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range f.Entries {
			rec.entry(source, e)
		}
		if chunk := f.Chunk(); chunk != "" {
			conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(ackFor(chunk)); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
	}
}

// serveHealth reads what Fluent Bit's tcp input (format json) accepts: JSON objects, one or more a
// line, each recorded with the health-check tag. A line longer than maxFrame or a line that is not
// JSON objects ends it with an error.
func serveHealth(conn net.Conn, maxFrame int64, rec *recorder) error {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 4096), int(maxFrame))
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		for {
			var obj map[string]any
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("health-check input: %w", err)
			}
			if obj == nil {
				return errors.New("health-check input: null is not a JSON object")
			}
			rec.entry("healthcheck", Entry{Tag: healthTag, Time: time.Now().UTC(), Record: obj})
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("health-check input: %w", err)
	}
	return nil
}

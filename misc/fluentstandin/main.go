// Command fluentstandin stands in for a FireLens log router (Fluent Bit or Fluentd) in Berth's
// tests and examples: the one static binary of the berth/fluentstandin image (FROM scratch).
//
// It speaks the Fluent forward protocol (Message, Forward and PackedForward modes, gzip-compressed
// PackedForward, the option map, and {"ack": chunk} when the option carries a chunk) on the unix
// socket -unix (default /var/run/fluent.sock) and on TCP -tcp (default 0.0.0.0:24224), and accepts
// the JSON messages of Fluent Bit's health-check TCP input on -health (default 127.0.0.1:8877).
// Every event it receives becomes one JSON line, written to stdout and appended to -records
// (default /var/log/fluentstandin/records.jsonl):
//
//	{"kind":"record","source":"unix|tcp|healthcheck","tag":"app-firelens-<id>","time":"<RFC 3339>","record":{...}}
//
// At start it reads each configuration file of -config that exists (default the paths a FireLens
// router is given: /fluent-bit/etc/fluent-bit.conf and /fluentd/etc/fluent.conf) and records it,
// with the files it includes (@INCLUDE, @include), by path, size and SHA-256, never the contents:
//
//	{"kind":"config","path":"/fluent-bit/etc/fluent-bit.conf","size":N,"sha256":"<hex>","includes":[...]}
//
// A malformed frame closes its connection with the reason on stderr; a frame is held to -max-frame
// bytes (twice that for a PackedForward frame: the packed bytes, then the entries decoded from them).
// SIGTERM or SIGINT stops it with exit 0; a listener that cannot be opened exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// defaultConfigs are the paths the ECS agent mounts a FireLens router's configuration on.
const defaultConfigs = "/fluent-bit/etc/fluent-bit.conf,/fluentd/etc/fluent.conf"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(mainExit(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// mainExit parses args, runs the stand-in until ctx is done and returns the exit code.
func mainExit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fluentstandin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg serverConfig
	fs.StringVar(&cfg.Unix, "unix", "/var/run/fluent.sock", "unix socket of the forward input (empty: none)")
	fs.StringVar(&cfg.TCP, "tcp", "0.0.0.0:24224", "TCP address of the forward input (empty: none)")
	fs.StringVar(&cfg.Health, "health", "127.0.0.1:8877", "TCP address of the health-check JSON input (empty: none)")
	records := fs.String("records", "/var/log/fluentstandin/records.jsonl", "file every record is appended to (empty: stdout only)")
	configs := fs.String("config", defaultConfigs, "comma-separated configuration files to record when present")
	fs.Int64Var(&cfg.MaxFrame, "max-frame", 8<<20, "largest frame accepted, in bytes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fluentstandin: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if cfg.MaxFrame < 64 {
		fmt.Fprintf(stderr, "fluentstandin: -max-frame %d is below 64\n", cfg.MaxFrame)
		return 2
	}
	rec, err := newRecorder(stdout, *records)
	if err != nil {
		fmt.Fprintf(stderr, "fluentstandin: %v\n", err)
		return 1
	}
	defer rec.Close()
	for _, path := range strings.Split(*configs, ",") {
		if path = strings.TrimSpace(path); path == "" {
			continue
		}
		if c, ok := inspectConfig(path); ok {
			rec.write(c)
		}
	}
	inputs, err := listen(cfg, rec)
	if err != nil {
		fmt.Fprintf(stderr, "fluentstandin: %v\n", err)
		return 1
	}
	serve(ctx, inputs, cfg.Unix, stderr)
	return 0
}

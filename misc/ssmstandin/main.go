// Command ssmstandin stands in for the SSM agent (amazon-ssm-agent) in Berth's ECS Exec tests. Run
// as the agent is run, /ecs-execute-command-<id>/amazon-ssm-agent in a container, it appends one
// JSON line to /var/log/amazon/ssm/ssmstandin.jsonl saying that it ran: its arguments, its user ID,
// and for each file the ECS agent mounts beside it the SHA-256 of its contents (or "missing"). Then
// it stays running until killed, unless /var/log/amazon/ssm/exit-code holds a number: then it exits
// with that code at once. Its directory and log directory can be set with -dir and -log for tests.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Record is one run of the stand-in, as it appends it to its record file.
type Record struct {
	Args  []string          `json:"args"`
	UID   int               `json:"uid"`
	PID   int               `json:"pid"`
	Files map[string]string `json:"files"` // path relative to its directory → sha256 hex, or "missing"
}

// expected are the files the ECS agent mounts beside the agent, relative to its directory.
var expected = []string{
	"amazon-ssm-agent", "ssm-agent-worker", "ssm-session-worker",
	"configuration/amazon-ssm-agent.json", "configuration/seelog.xml", "certs/amazon-ssm-agent.crt",
}

func main() { os.Exit(run(os.Args, make(chan os.Signal, 1))) }

func run(args []string, sig chan os.Signal) int {
	fs := flag.NewFlagSet("ssmstandin", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Dir(args[0]), "the agent's directory")
	logDir := fs.String("log", "/var/log/amazon/ssm", "the log directory the record goes to")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	rec := Record{Args: args, UID: os.Getuid(), PID: os.Getpid(), Files: map[string]string{}}
	for _, name := range expected {
		rec.Files[name] = digest(filepath.Join(*dir, name))
	}
	if err := appendRecord(filepath.Join(*logDir, "ssmstandin.jsonl"), rec); err != nil {
		fmt.Fprintln(os.Stderr, "ssmstandin:", err)
		return 1
	}
	if b, err := os.ReadFile(filepath.Join(*logDir, "exit-code")); err == nil {
		code, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil {
			return code
		}
	}
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

func digest(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "missing"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable"
	}
	return hex.EncodeToString(h.Sum(nil))
}

func appendRecord(path string, rec Record) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

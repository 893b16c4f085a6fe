// Command berth is the Berth host agent. It only parses arguments and wires packages together; the
// start-up sequence lives in agent/app.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/version"
)

const usage = `usage: berth [command] [flags]

commands:
  agent        run the agent (the default)
  config       print the effective configuration as JSON with each value's source; exit 1 if invalid
  healthcheck  ask the running agent's introspection API; exit 0 healthy, 1 not
  ps           list the running agent's tasks and containers
  exec TASK [CONTAINER] -- CMD...
               run a command in a task's container (a TTY when stdin is one); exit with its status
  logs TASK [CONTAINER] [-f] [--since D] [--tail N] [-t]
               print a task's container output (every container's, prefixed, without CONTAINER)
  run FILE     register a task definition with the embedded control plane, run it, follow it to RUNNING
  drain        set this host's container instance to DRAINING: the control plane places no new task
  stop TASK    stop a task (ARN or ID) through the embedded control plane, follow it to STOPPED
  pull IMAGE   pull an image through the agent's pull path and print each attempt; exit 1 on failure
  version      print version, git hash and Go version
  cleanup-task-endpoint-nat
               remove the iptables rules (and route_localnet) that send 169.254.170.2:80 to the agent

Run "berth agent -h" for the configuration flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one berth command and returns the process exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cmd := "agent"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "agent":
		return runAgent(ctx, args, environ, stdout, stderr)
	case "config":
		return runConfig(args, environ, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, environ, stdout, stderr)
	case "pull":
		return runPull(ctx, args, environ, stdout, stderr)
	case "ps":
		return runPs(ctx, args, environ, stdout, stderr)
	case "exec":
		return runExec(ctx, args, environ, os.Stdin, stdout, stderr)
	case "logs":
		return runLogs(ctx, args, environ, stdout, stderr)
	case "drain":
		res, err := loadConfig("drain", args, environ, stderr)
		if code, ok := flagExit(err); ok {
			return code
		}
		if err != nil {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", err)
			return 1
		}
		if err := drain(ctx, res.Config, stdout); err != nil {
			fmt.Fprintf(stderr, "berth drain: %v\n", err)
			return 1
		}
		return 0
	case "run":
		return runControlCommand(ctx, "run", args, environ, stdout, stderr, runTaskFile)
	case "stop":
		return runControlCommand(ctx, "stop", args, environ, stdout, stderr, stopTask)
	case "version":
		fmt.Fprintln(stdout, version.Get().String())
		return 0
	case "cleanup-task-endpoint-nat":
		if err := hostnat.Remove(ctx, hostnat.Config{}); err != nil {
			fmt.Fprintf(stderr, "berth cleanup-task-endpoint-nat: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "task endpoint NAT removed: containers no longer reach 169.254.170.2")
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "berth: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

// exitCode is returned by loadConfig when the command line itself ends the command: -h (0) or a bad
// flag (2). The flag package has already printed why.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// loadConfig parses the configuration flags in args and loads the configuration. With a configuration
// error it returns the Result too; with an exitCode error it returns no Result.
func loadConfig(name string, args, environ []string, stderr io.Writer) (*config.Result, error) {
	res, _, err := loadConfigArgs(name, 0, args, environ, stderr, nil)
	return res, err
}

// loadConfigArgs is loadConfig for a command that takes exactly nargs positional arguments after its
// flags, which it returns.
// extra, if not nil, registers the command's own flags.
func loadConfigArgs(name string, nargs int, args, environ []string, stderr io.Writer, extra func(*flag.FlagSet)) (*config.Result, []string, error) {
	fs := flag.NewFlagSet("berth "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	given := config.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, exitCode(0)
		}
		return nil, nil, exitCode(2)
	}
	if fs.NArg() != nargs {
		fmt.Fprintf(stderr, "berth %s: want %d argument(s), got %d\n", name, nargs, fs.NArg())
		return nil, nil, exitCode(2)
	}
	res, err := config.Load(config.Sources{Environ: environ, Flags: given()})
	return res, fs.Args(), err
}

// flagExit returns the exit code when err ended the command at the command line.
func flagExit(err error) (int, bool) {
	var code exitCode
	if errors.As(err, &code) {
		return int(code), true
	}
	return 0, false
}

func runAgent(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var opts app.Options
	res, _, err := loadConfigArgs("agent", 0, args, environ, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&opts.StopTasksOnExit, "stop-tasks-on-exit", false, "stop every task before exiting on SIGTERM (by default tasks keep running)")
	})
	if code, ok := flagExit(err); ok {
		return code
	}
	if err != nil {
		reportInvalid(res, err, stderr)
		return 1
	}
	opts.Probe = crashProbe(environ)
	setGCPercent(environ)
	// Files the agent creates are not readable by others: rolled log files (which the logging library
	// creates 0666) and what the CNI plugins write. State files and the log file are narrowed
	// explicitly as well.
	syscall.Umask(0o027)
	if err := app.Run(ctx, res, opts, stdout); err != nil {
		fmt.Fprintf(stderr, "berth: %v\n", err)
		return 1
	}
	return 0
}

// agentGCPercent is the agent's garbage-collection target unless GOGC says otherwise: a heap that
// grows by half its live size before a collection, not by all of it. `make bench` measured 3.4 MiB
// less resident memory with 50 tasks running, for no CPU per task it could tell apart from noise.
const agentGCPercent = 50

// setGCPercent applies agentGCPercent when the environment sets no GOGC.
func setGCPercent(environ []string) {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GOGC=") {
			return
		}
	}
	debug.SetGCPercent(agentGCPercent)
}

// reportInvalid logs each configuration error at critical level. It logs to stderr, and to the log file
// too when the logging keys themselves parsed; when they did not, it prints the errors plainly.
func reportInvalid(res *config.Result, err error, stderr io.Writer) {
	log, logErr := logger.New(res.Config.Log, stderr)
	for _, e := range splitErrors(err) {
		if logErr != nil {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
			continue
		}
		log.Critical("invalid configuration", "error", e)
	}
	if logErr == nil {
		log.Close()
	}
}

// splitErrors returns the errors joined in err, or err alone.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func runConfig(args, environ []string, stdout, stderr io.Writer) int {
	res, err := loadConfig("config", args, environ, stderr)
	if code, ok := flagExit(err); ok {
		return code
	}
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
		}
		return 1
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "berth: warning: %s\n", w)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res.Show()); err != nil {
		fmt.Fprintf(stderr, "berth: %v\n", err)
		return 1
	}
	return 0
}

func runPull(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	res, rest, err := loadConfigArgs("pull", 1, args, environ, stderr, nil)
	if code, ok := flagExit(err); ok {
		return code
	}
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
		}
		return 1
	}
	if err := pull(ctx, res, rest[0], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "berth pull: %v\n", err)
		return 1
	}
	return 0
}

// runControlCommand runs `berth run FILE` or `berth stop TASK` against the embedded control plane.
func runControlCommand(ctx context.Context, name string, args, environ []string, stdout, stderr io.Writer,
	do func(context.Context, *config.Config, string, io.Writer, time.Duration) error) int {
	wait := 5 * time.Minute
	res, rest, err := loadConfigArgs(name, 1, args, environ, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&wait, "wait", wait, "how long to follow the task")
	})
	if code, ok := flagExit(err); ok {
		return code
	}
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
		}
		return 1
	}
	if err := do(ctx, res.Config, rest[0], stdout, wait); err != nil {
		fmt.Fprintf(stderr, "berth %s: %v\n", name, err)
		return 1
	}
	return 0
}

// healthcheckTimeout bounds the whole healthcheck, so a hung agent reads as unhealthy.
const healthcheckTimeout = 5 * time.Second

func runHealthcheck(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	res, err := loadConfig("healthcheck", args, environ, stderr)
	if code, ok := flagExit(err); ok {
		return code
	}
	addr := res.Config.IntrospectionAddr
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, res.Config.IntrospectionURL()+"/v1/metadata", nil)
	if err != nil {
		fmt.Fprintf(stderr, "berth healthcheck: %v\n", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: %s answered %s\n", addr, resp.Status)
		return 1
	}
	var meta introspection.Metadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&meta); err != nil {
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: %s answered an unreadable /v1/metadata: %v\n", addr, err)
		return 1
	}
	if meta.StateSaveError != "" {
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: saving task state fails: %s\n", meta.StateSaveError)
		return 1
	}
	if meta.HostNATError != "" {
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: containers cannot reach the task endpoint at 169.254.170.2: %s\n", meta.HostNATError)
		return 1
	}
	fmt.Fprintf(stdout, "healthy: %s\n", addr)
	return 0
}

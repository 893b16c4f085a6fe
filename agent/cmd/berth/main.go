// Command berth is the Berth host agent. It only parses arguments and wires packages together; the
// start-up sequence lives in agent/app.
//
// GOMAXPROCS is set once at start from the CPUs and the cgroup's CPU limit: the runtime does not
// re-read the cgroup every second to follow a changed limit (an idle agent's wake-ups are its cost
// to the host, and an agent's limit does not change under it).
//
//go:debug updatemaxprocs=0
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

// command is one of berth's commands.
type command struct {
	name string
	// args is what its usage line names after "berth NAME [flags]", summary its line in the command
	// list, about what it does, for its usage.
	args, summary, about string
	// findsAgent: it talks to the running agent, which it finds (locateAgent) as findAgentHelp says.
	findsAgent bool
	// run runs the command c (this one) with its arguments, those after its name, and returns the
	// exit code.
	run func(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int
}

// commands are berth's commands, in the order the command list shows them.
func commands() []command {
	return []command{
		{name: "agent", summary: "run the agent (the default)", run: runAgent,
			about: `Runs the agent until SIGTERM or SIGINT: it takes tasks from its control plane (the embedded one on
loopback in local mode, Amazon ECS in ecs mode) and runs them on the Docker Engine; the tasks keep
running when it stops (unless -stop-tasks-on-exit). Its configuration comes from the flags, then the
environment (ECS_*), then the env file (/etc/ecs/ecs.config), then the JSON file
(/etc/ecs/ecs.config.json), then the defaults; "berth config" prints it. Once it serves, it writes
where it is to its run file (/run/berth/agent.json, or the file BERTH_RUN_FILE names), which it
removes when it exits.`},
		{name: "config", summary: "print the effective configuration as JSON with each value's source; exit 1 if invalid", run: runConfig,
			about: `Prints the configuration the agent would run with, as JSON: every key with its value (secrets
redacted) and its source (flag, env, env-file:LINE, json-file:LINE or default), and the control plane
mode chosen, with why. Exits 1, naming each bad key and where it was set, when it is invalid.`},
		{name: "healthcheck", summary: "ask the running agent's introspection API; exit 0 healthy, 1 not", run: runHealthcheck, findsAgent: true,
			about: `Asks the running agent's introspection API (GET /v1/metadata) how it is: exit 0 when it answers
within 5 s, saves its task state and keeps the task endpoint reachable; 1, saying why, when not.`},
		{name: "ps", summary: "list the running agent's tasks and containers", run: runPs, findsAgent: true,
			about: `Lists the running agent's tasks, one row per container: desired and known status, exit code, CPU
and memory, Docker ID, ports, and why a task waits or stopped; then the running containers of no
known task, if there are any, with how to remove one.`},
		{name: "exec", args: "TASK [CONTAINER] -- COMMAND [ARG...]", summary: "run a command in a task's container (a TTY when stdin is one); exit with its status",
			findsAgent: true, about: execAbout,
			run: func(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
				return runExec(ctx, c, args, environ, os.Stdin, stdout, stderr)
			}},
		{name: "logs", args: "TASK [CONTAINER]", summary: "print a task's container output (every container's, prefixed, without CONTAINER; -f follows)",
			run: runLogs, findsAgent: true, about: logsAbout},
		{name: "run", args: "FILE", summary: "register a task definition with the embedded control plane, run it, follow it to RUNNING",
			run: runControlCommand(runTaskFile), findsAgent: true,
			about: `Local mode: registers the task definition in FILE (the JSON "aws ecs register-task-definition"
takes, or what describe-task-definition prints) with the running agent's embedded control plane,
runs it on this host and follows it: exit 0 once it is RUNNING, 1 when it stops first (with the
reason) or -wait runs out.`},
		{name: "drain", summary: "set this host's container instance to DRAINING: the control plane places no new task", run: runDrain, findsAgent: true,
			about: `Sets the running agent's container instance to DRAINING, through the embedded control plane in
local mode or Amazon ECS in ecs mode: no new task is placed on this host.`},
		{name: "stop", args: "TASK", summary: "stop a task (ARN or ID) through the embedded control plane, follow it to STOPPED",
			run: runControlCommand(stopTask), findsAgent: true,
			about: `Local mode: asks the running agent's embedded control plane to stop TASK (its ARN or ID; "berth ps"
lists them) and follows it: exit 0 once it is STOPPED, 1 when -wait runs out first.`},
		{name: "pull", args: "IMAGE", summary: "pull an image through the agent's pull path and print each attempt; exit 1 on failure", run: runPull,
			about: `Pulls IMAGE through exactly the agent's pull path (registry credentials, retries, progress
timeouts, limits) and prints each attempt's outcome and the result: exit 0 on success, 1 with the
failure classified (for example "registry authentication refused, not retried").`},
		{name: "version", summary: "print version, git hash and Go version", run: runVersion,
			about: "Prints Berth's version, the git commit it was built from and the Go version."},
		{name: "cleanup-task-endpoint-nat", summary: "remove the iptables rules (and route_localnet) that send 169.254.170.2:80 to the agent",
			run: runCleanupNAT,
			about: `Removes the NAT that sends containers' connections to 169.254.170.2:80 to the agent's task endpoint:
the iptables chains and jumps, and route_localnet where the agent turned it on. For a host that no
longer runs the agent; a running agent puts them back.`},
		{name: "help", args: "[COMMAND]", summary: "print this list, or a command's usage", run: runHelp,
			about: `Prints the list of commands, or with COMMAND its usage (as "berth COMMAND -h" does).`},
	}
}

// findAgentHelp says how the commands that talk to the running agent find it.
const findAgentHelp = `The running agent is found through the run file it writes once it serves (/run/berth/agent.json, or
the file BERTH_RUN_FILE names): its data directory, and its addresses, cluster and mode where those
are not configured. With ECS_DATADIR configured (a flag, the environment or a file) the run file is
not read.`

// lookupCommand returns the command called name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// printCommands prints berth's usage: the command list.
func printCommands(w io.Writer) {
	fmt.Fprint(w, "usage: berth [COMMAND] [flags] [ARGS]\n\n"+
		"Berth runs ECS tasks on this host's Docker Engine. \"berth agent\" (or \"berth\" alone) runs the agent;\n"+
		"the other commands work with the agent running on this host.\n\ncommands:\n")
	const column = 13
	for _, c := range commands() {
		name := strings.TrimSpace(c.name + " " + c.args)
		if len(name) < column {
			fmt.Fprintf(w, "  %-*s%s\n", column, name, c.summary)
			continue
		}
		fmt.Fprintf(w, "  %s\n  %*s%s\n", name, column, "", c.summary)
	}
	fmt.Fprint(w, "\n"+findAgentHelp+"\n\n"+
		"Run \"berth COMMAND -h\" (or \"berth help COMMAND\") for a command's usage and flags; \"berth agent -h\"\n"+
		"lists the configuration flags.\n")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one berth command and returns the process exit code: the command's, 0 for help,
// 2 for an unknown command.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelpFlag(args[0]) {
		printCommands(stdout)
		return 0
	}
	name := "agent" // berth alone, or with flags only, runs the agent
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	c, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "berth: unknown command %q\n\n", name)
		printCommands(stderr)
		return 2
	}
	return c.run(ctx, c, args, environ, stdout, stderr)
}

// isHelpFlag reports whether arg asks for help as the flag package understands it.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

func runHelp(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	f := newFlags(c, stderr, nil, false)
	pos, err := f.parse(args, stdout)
	if err == nil && len(pos) > 1 {
		err = f.usageError("want at most one COMMAND, got %d arguments", len(pos))
	}
	if code, ok := flagExit(err); ok {
		return code
	}
	if len(pos) == 0 {
		printCommands(stdout)
		return 0
	}
	named, ok := lookupCommand(pos[0])
	if !ok {
		fmt.Fprintf(stderr, "berth help: unknown command %q\n\n", pos[0])
		printCommands(stderr)
		return 2
	}
	return named.run(ctx, named, []string{"-h"}, environ, stdout, stderr)
}

func runVersion(_ context.Context, c command, args, _ []string, stdout, stderr io.Writer) int {
	if code, ok := flagExit(parseNoArgs(c, args, stdout, stderr)); ok {
		return code
	}
	fmt.Fprintln(stdout, version.Get().String())
	return 0
}

func runCleanupNAT(ctx context.Context, c command, args, _ []string, stdout, stderr io.Writer) int {
	if code, ok := flagExit(parseNoArgs(c, args, stdout, stderr)); ok {
		return code
	}
	if err := hostnat.Remove(ctx, hostnat.Config{}); err != nil {
		fmt.Fprintf(stderr, "berth cleanup-task-endpoint-nat: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "task endpoint NAT removed: containers no longer reach 169.254.170.2")
	return 0
}

// parseNoArgs parses the command line of c, a command without flags or arguments.
func parseNoArgs(c command, args []string, stdout, stderr io.Writer) error {
	f := newFlags(c, stderr, nil, false)
	pos, err := f.parse(args, stdout)
	if err == nil && len(pos) > 0 {
		err = f.usageError("want no arguments, got %d", len(pos))
	}
	return err
}

// exitCode is returned when the command line itself ends the command: -h (0) or a bad flag or
// argument (2). Why has been printed already.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// flags is a command's flag set: its own flags, then, for a command that takes them, the
// configuration flags.
type flags struct {
	*flag.FlagSet
	c     command
	own   map[string]bool // the command's own flags, by name
	given func() map[string]string
}

// newFlags returns c's flag set, with its own flags, which extra registers (nil: none), and, with
// withConfig, the configuration flags. Errors go to stderr.
func newFlags(c command, stderr io.Writer, extra func(*flag.FlagSet), withConfig bool) *flags {
	fs := flag.NewFlagSet("berth "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints the usage itself: on stdout when asked for, a pointer to it on a mistake
	if extra != nil {
		extra(fs)
	}
	f := &flags{FlagSet: fs, c: c, own: map[string]bool{}, given: func() map[string]string { return nil }}
	fs.VisitAll(func(fl *flag.Flag) { f.own[fl.Name] = true })
	if withConfig {
		f.given = config.RegisterFlags(fs)
	}
	return f
}

// parse parses args, flags anywhere among the positional arguments, which it returns. -h prints the
// command's usage to stdout and returns exitCode(0); a bad flag returns exitCode(2), the flag package
// having said why.
func (f *flags) parse(args []string, stdout io.Writer) ([]string, error) {
	pos, err := parseInterspersed(f.FlagSet, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.usage(stdout)
		return nil, exitCode(0)
	case err != nil:
		fmt.Fprintf(f.Output(), "run \"berth %s -h\" for its usage\n", f.c.name)
		return nil, exitCode(2)
	}
	return pos, nil
}

// usage prints the command's usage line, what it does, how it finds the agent, and its flags: its
// own, then the configuration flags.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n%s\n", usageLine(f.c, countFlags(f.FlagSet) > 0), f.c.about)
	if f.c.findsAgent {
		fmt.Fprintf(w, "\n%s\n", findAgentHelp)
	}
	printFlags(w, "\nflags:\n", f.FlagSet, func(name string) bool { return f.own[name] })
	printFlags(w, "\nconfiguration flags (each overrides its ECS_* variable and the files):\n", f.FlagSet, func(name string) bool { return !f.own[name] })
}

// usageLine is c's synopsis: "usage: berth run [flags] FILE".
func usageLine(c command, hasFlags bool) string {
	line := "usage: berth " + c.name
	if hasFlags {
		line += " [flags]"
	}
	if c.args != "" {
		line += " " + c.args
	}
	return line
}

// printFlags prints, under heading, the flags of fs that keep selects by name; nothing when none is.
func printFlags(w io.Writer, heading string, fs *flag.FlagSet, keep func(string) bool) {
	sel := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(fl *flag.Flag) {
		if keep(fl.Name) {
			sel.Var(fl.Value, fl.Name, fl.Usage)
		}
	})
	if countFlags(sel) == 0 {
		return
	}
	fmt.Fprint(w, heading)
	sel.SetOutput(w)
	sel.PrintDefaults()
}

// countFlags returns how many flags fs defines.
func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// usageError prints a mistake on the command line, with the command's usage line, and returns
// exitCode(2).
func (f *flags) usageError(format string, a ...any) error {
	fmt.Fprintf(f.Output(), "berth %s: %s\n%s\nrun \"berth %s -h\" for more\n", f.c.name, fmt.Sprintf(format, a...),
		usageLine(f.c, countFlags(f.FlagSet) > 0), f.c.name)
	return exitCode(2)
}

// loadConfig parses c's command line, its flags (its own, which extra registers, and the
// configuration flags) and nargs positional arguments, which it returns, and loads the
// configuration; for a command that talks to the running agent it then locates it (locateAgent).
// The error is an exitCode when the command line ended the command; with a configuration error the
// Result is returned too.
func loadConfig(c command, nargs int, args, environ []string, stdout, stderr io.Writer, extra func(*flag.FlagSet)) (*config.Result, []string, agentLookup, error) {
	f := newFlags(c, stderr, extra, true)
	pos, err := f.parse(args, stdout)
	if err != nil {
		return nil, nil, agentLookup{}, err
	}
	if len(pos) != nargs {
		return nil, nil, agentLookup{}, f.usageError("want %s, got %d argument(s)", wantArgs(c, nargs), len(pos))
	}
	res, err := config.Load(config.Sources{Environ: environ, Flags: f.given()})
	if err != nil || !c.findsAgent {
		return res, pos, agentLookup{}, err
	}
	return res, pos, locateAgent(res, environ, stderr), nil
}

// wantArgs names the positional arguments c wants: its args, or "no arguments".
func wantArgs(c command, nargs int) string {
	if nargs == 0 {
		return "no arguments"
	}
	return c.args
}

// flagExit returns the exit code when err ended the command at the command line.
func flagExit(err error) (int, bool) {
	var code exitCode
	if errors.As(err, &code) {
		return int(code), true
	}
	return 0, false
}

func runAgent(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	var opts app.Options
	res, _, _, err := loadConfig(c, 0, args, environ, stdout, stderr, func(fs *flag.FlagSet) {
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

func runConfig(_ context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	res, _, _, err := loadConfig(c, 0, args, environ, stdout, stderr, nil)
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

func runPull(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	res, rest, _, err := loadConfig(c, 1, args, environ, stdout, stderr, nil)
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

// runControlCommand returns the command that runs do, `berth run FILE` or `berth stop TASK`, against
// the running agent's embedded control plane.
func runControlCommand(do func(context.Context, *config.Config, agentLookup, string, io.Writer, time.Duration) error) func(
	context.Context, command, []string, []string, io.Writer, io.Writer) int {
	return func(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
		wait := 5 * time.Minute
		res, rest, where, err := loadConfig(c, 1, args, environ, stdout, stderr, func(fs *flag.FlagSet) {
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
		if err := do(ctx, res.Config, where, rest[0], stdout, wait); err != nil {
			fmt.Fprintf(stderr, "berth %s: %v\n", c.name, err)
			return 1
		}
		return 0
	}
}

// runDrain runs `berth drain`.
func runDrain(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	res, _, where, err := loadConfig(c, 0, args, environ, stdout, stderr, nil)
	if code, ok := flagExit(err); ok {
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", err)
		return 1
	}
	if err := drain(ctx, res.Config, where, stdout); err != nil {
		fmt.Fprintf(stderr, "berth drain: %v\n", err)
		return 1
	}
	return 0
}

// healthcheckTimeout bounds the whole healthcheck, so a hung agent reads as unhealthy.
const healthcheckTimeout = 5 * time.Second

func runHealthcheck(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	res, _, where, err := loadConfig(c, 0, args, environ, stdout, stderr, nil)
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
		fmt.Fprintf(stderr, "berth healthcheck: unhealthy: %v%s\n", err, where.hint())
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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
)

// execAbout is what `berth exec -h` says of it.
const execAbout = `Runs COMMAND in a container of one of the running agent's tasks, through the Docker Engine, with
this terminal (a TTY when stdin is one) or these pipes; berth exits with the command's status, or
125 when it could not run it. TASK is a task ARN, ID or unique ID prefix ("berth ps" lists them);
CONTAINER defaults to the task's only container, else its first essential one.`

// execRequest is what `berth exec` was asked to run.
type execRequest struct {
	task, container string // container: "" for the default one
	cfg             dockerclient.ExecConfig
	forceTTY, noTTY bool
}

// parseExec parses the arguments of c, `berth exec`: berth's flags (the configuration's too) and
// TASK [CONTAINER], then "--" and the command. It returns the request and the configuration flags
// given. -h prints the usage to stdout.
func parseExec(c command, args []string, stdout, stderr io.Writer) (execRequest, func() map[string]string, error) {
	var req execRequest
	f := newFlags(c, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.cfg.User, "u", "", "run as `USER` (a name or UID, [:group])")
		fs.StringVar(&req.cfg.WorkingDir, "w", "", "run in `DIR`")
		fs.Func("e", "set an environment variable `K=V` (repeatable)", func(v string) error {
			if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
				return fmt.Errorf("want K=V, got %q", v)
			}
			req.cfg.Env = append(req.cfg.Env, v)
			return nil
		})
		fs.BoolVar(&req.forceTTY, "t", false, "give the command a TTY even when stdin is not a terminal")
		fs.BoolVar(&req.noTTY, "T", false, "give the command no TTY even when stdin is a terminal")
	}, true)
	dash := slices.Index(args, "--")
	if dash < 0 {
		if slices.ContainsFunc(args, isHelpFlag) {
			f.usage(stdout)
			return req, nil, exitCode(0)
		}
		return req, nil, f.usageError("no command: give it after --")
	}
	pos, err := f.parse(args[:dash], stdout)
	if err != nil {
		return req, nil, err
	}
	req.cfg.Cmd = args[dash+1:]
	switch {
	case len(pos) == 0 || len(pos) > 2:
		return req, nil, f.usageError("want TASK [CONTAINER] before --, got %d argument(s)", len(pos))
	case len(req.cfg.Cmd) == 0:
		return req, nil, f.usageError("no command after --")
	case req.forceTTY && req.noTTY:
		return req, nil, f.usageError("-t and -T contradict each other")
	}
	req.task = pos[0]
	if len(pos) == 2 {
		req.container = pos[1]
	}
	return req, f.given, nil
}

// runExec runs c, `berth exec`: the command's exit status, 125 when berth could not run it, 2 for a
// bad command line.
func runExec(ctx context.Context, c command, args, environ []string, stdin *os.File, stdout, stderr io.Writer) int {
	req, given, err := parseExec(c, args, stdout, stderr)
	if code, ok := flagExit(err); ok {
		return code
	}
	res, err := config.Load(config.Sources{Environ: environ, Flags: given()})
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
		}
		return exitFailed
	}
	where := locateAgent(res, environ, stderr)
	docker, err := dockerclient.NewClient(dockerclient.Config{Endpoint: res.Config.DockerHost})
	if err != nil {
		fmt.Fprintf(stderr, "berth exec: %v\n", err)
		return exitFailed
	}
	defer docker.Close()
	code, err := execIn(ctx, res.Config, where, docker, req, stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "berth exec: %v\n", err)
		return exitFailed
	}
	return code
}

// execer runs a command in a container; *dockerclient.Client is one.
type execer interface {
	Exec(ctx context.Context, id string, cfg dockerclient.ExecConfig) (int, error)
}

var _ execer = (*dockerclient.Client)(nil)

// execIn resolves req's task and container from the agent (found as where says) and runs the
// command in it, with stdin and a terminal when stdin is one (or -t), and returns the command's
// exit code.
func execIn(ctx context.Context, cfg *config.Config, where agentLookup, docker execer, req execRequest, stdin *os.File, stdout, stderr io.Writer) (int, error) {
	tasks, err := fetchTasks(ctx, cfg, where)
	if err != nil {
		return 0, err
	}
	t, err := resolveTask(tasks, req.task)
	if err != nil {
		return 0, err
	}
	c, err := defaultContainer(t)
	if req.container != "" {
		c, err = namedContainer(t, req.container)
	}
	if err != nil {
		return 0, err
	}
	switch {
	case c.DockerID == "":
		return 0, fmt.Errorf("container %s of task %s has no Docker container yet (status %s)", c.Name, taskID(t.Arn), statusText(c))
	case c.KnownStatus != "RUNNING":
		return 0, fmt.Errorf("container %s of task %s is not running: its status is %s", c.Name, taskID(t.Arn), statusText(c))
	}
	run := req.cfg
	run.Stdout, run.Stderr = stdout, stderr
	if stdin != nil {
		run.Stdin = stdin
	}
	terminal := isTerminal(stdin)
	run.TTY = (terminal || req.forceTTY) && !req.noTTY
	if run.TTY && terminal {
		restore, err := rawTerminal(stdin)
		if err != nil {
			return 0, fmt.Errorf("terminal: %w", err)
		}
		defer restore()
		sizeCtx, stop := context.WithCancel(ctx)
		defer stop()
		run.Resize = windowSizes(sizeCtx, stdin)
	}
	code, err := docker.Exec(ctx, c.DockerID, run)
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, fmt.Errorf("interrupted; the command may still be running in container %s of task %s", c.Name, taskID(t.Arn))
	case errors.Is(err, dockerclient.ErrNotRunning):
		return 0, fmt.Errorf("container %s of task %s is not running (the Docker Engine says so): %w", c.Name, taskID(t.Arn), err)
	case errdefs.IsNotFound(err):
		return 0, fmt.Errorf("container %s of task %s is gone from the Docker Engine: %w", c.Name, taskID(t.Arn), err)
	case err != nil:
		return 0, err
	}
	return code, nil
}

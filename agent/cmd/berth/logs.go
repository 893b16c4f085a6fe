package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/introspection"
)

// logsAbout is what `berth logs -h` says of it.
const logsAbout = `Prints a task's container output through the Docker Engine's log API (log drivers json-file, local
and journald, and others the Engine keeps a local copy of): stdout to stdout, stderr to stderr.
Without CONTAINER, every container of the task, each line prefixed with its container's name, in
time order (with -f, as the lines come). TASK is a task ARN, ID or unique ID prefix. Exits 1 when
the output of a container cannot be shown, saying where it goes instead.`

// logsRequest is what `berth logs` was asked to show.
type logsRequest struct {
	task, container string // container: "" for all of them
	follow          bool
	since           time.Time
	tail            int
	timestamps      bool
}

// parseSince reads --since: a non-negative Go duration back from now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %s: a duration back from now must not be negative", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (10m) or an RFC 3339 time (2026-12-02T15:04:05Z)", s)
	}
	return t, nil
}

// parseLogs parses the arguments of c, `berth logs`, flags anywhere. It returns the request and
// the configuration flags given. -h prints the usage to stdout.
func parseLogs(c command, args []string, now time.Time, stdout, stderr io.Writer) (logsRequest, func() map[string]string, error) {
	var req logsRequest
	f := newFlags(c, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&req.follow, "f", false, "follow the output until the task's containers stop (or Ctrl-C)")
		fs.Func("since", "only output since `D`: a duration (10m, 1h30m) back from now, or an RFC 3339 time", func(v string) error {
			t, err := parseSince(v, now)
			req.since = t
			return err
		})
		fs.Func("tail", "start with each container's last `N` lines", func(v string) error {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil || n < 0 || fmt.Sprint(n) != v {
				return fmt.Errorf("want a number of lines, got %q", v)
			}
			req.tail = n
			return nil
		})
		fs.BoolVar(&req.timestamps, "t", false, "show the Engine's timestamp of each line")
	}, true)
	pos, err := f.parse(args, stdout)
	if err != nil {
		return req, nil, err
	}
	if len(pos) == 0 || len(pos) > 2 {
		return req, nil, f.usageError("want TASK [CONTAINER], got %d argument(s)", len(pos))
	}
	req.task = pos[0]
	if len(pos) == 2 {
		req.container = pos[1]
	}
	return req, f.given, nil
}

// runLogs runs c, `berth logs`: 0 when every container's output was shown, 1 otherwise, 2 for a bad
// command line.
func runLogs(ctx context.Context, c command, args, environ []string, stdout, stderr io.Writer) int {
	req, given, err := parseLogs(c, args, time.Now(), stdout, stderr)
	if code, ok := flagExit(err); ok {
		return code
	}
	res, err := config.Load(config.Sources{Environ: environ, Flags: given()})
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(stderr, "berth: invalid configuration: %v\n", e)
		}
		return 1
	}
	where := locateAgent(res, environ, stderr)
	client, err := dockerclient.NewClient(dockerclient.Config{Endpoint: res.Config.DockerHost})
	if err != nil {
		fmt.Fprintf(stderr, "berth logs: %v\n", err)
		return 1
	}
	defer client.Close()
	tasks, err := fetchTasks(ctx, res.Config, where)
	if err != nil {
		fmt.Fprintf(stderr, "berth logs: %v\n", err)
		return 1
	}
	if err := showLogs(ctx, client, tasks, req, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "berth logs: %v\n", err)
		return 1
	}
	return 0
}

// logSource reads containers' output; *dockerclient.Client is one.
type logSource interface {
	InspectContainer(ctx context.Context, id string) (*docker.Container, error)
	ContainerLogs(ctx context.Context, id string, opts dockerclient.LogsOptions, fn func(dockerclient.LogLine) error) error
}

var _ logSource = (*dockerclient.Client)(nil)

// errNotShown says that the output of some of the containers could not be shown; each was named
// on stderr.
var errNotShown = errors.New("some output could not be shown")

// showLogs prints the output of req's containers of its task. A container whose output cannot be
// read is named on stderr, with why, and the others are shown; the error then says so.
func showLogs(ctx context.Context, src logSource, tasks []introspection.TaskResponse, req logsRequest, stdout, stderr io.Writer) error {
	t, err := resolveTask(tasks, req.task)
	if err != nil {
		return err
	}
	cs := taskContainers(t)
	if req.container != "" {
		c, err := namedContainer(t, req.container)
		if err != nil {
			return err
		}
		cs = []introspection.ContainerResponse{c}
	}
	if len(cs) == 0 {
		return fmt.Errorf("task %s has no containers", taskID(t.Arn))
	}
	out := &logPrinter{stdout: stdout, stderr: stderr, timestamps: req.timestamps}
	if len(cs) > 1 {
		for _, c := range cs {
			out.width = max(out.width, len(c.Name))
		}
	}
	streams := make([]*logStream, 0, len(cs))
	var failed []string
	for _, c := range cs {
		if c.DockerID == "" {
			failed = append(failed, fmt.Sprintf("container %s has no Docker container yet (status %s): no output", c.Name, statusText(c)))
			continue
		}
		info, err := src.InspectContainer(ctx, c.DockerID)
		if err != nil {
			failed = append(failed, fmt.Sprintf("container %s: %v", c.Name, err))
			continue
		}
		streams = append(streams, &logStream{name: c.Name, id: c.DockerID, info: info,
			opts: dockerclient.LogsOptions{Follow: req.follow, Since: req.since, Tail: req.tail, TTY: info.Config != nil && info.Config.Tty}})
	}
	if req.follow {
		followAll(ctx, src, streams, out)
	} else {
		mergeAll(ctx, src, streams, out)
	}
	for _, s := range streams {
		if s.err != nil && !errors.Is(s.err, context.Canceled) {
			failed = append(failed, s.failure())
		}
	}
	for _, f := range failed {
		fmt.Fprintf(stderr, "berth logs: %s\n", f)
	}
	if len(failed) > 0 {
		return errNotShown
	}
	return nil
}

// logStream is one container whose output is read.
type logStream struct {
	name, id string
	info     *docker.Container
	opts     dockerclient.LogsOptions
	err      error // how reading ended, once it did
}

// failure says why the stream's output could not be shown (all of it, or the rest).
func (s *logStream) failure() string {
	if errors.Is(s.err, dockerclient.ErrLogsNotReadable) {
		driver := s.info.HostConfig.LogConfig.Type
		return fmt.Sprintf("container %s logs with the %s driver, which the Docker Engine cannot read back: %s",
			s.name, driver, whereLogsGo(driver, s.info.HostConfig.LogConfig.Config, s.id))
	}
	return fmt.Sprintf("container %s: %v", s.name, s.err)
}

// whereLogsGo says where a log driver sends the output of container dockerID, from its options.
func whereLogsGo(driver string, opts map[string]string, dockerID string) string {
	or := func(key, fallback string) string {
		if v := opts[key]; v != "" {
			return v
		}
		return fallback
	}
	switch driver {
	case "awslogs":
		where := "CloudWatch Logs, log group " + or("awslogs-group", "(not set)")
		if p := opts["awslogs-stream-prefix"]; p != "" {
			where += ", streams " + p + "/<container>/<task ID>"
		} else if s := opts["awslogs-stream"]; s != "" {
			where += ", stream " + s
		}
		return fmt.Sprintf("its output is in %s, region %s: read it there (aws logs tail %s)", where, or("awslogs-region", "(not set)"), or("awslogs-group", "GROUP"))
	case "none":
		return "its output is discarded; give it a logConfiguration with the json-file or local driver to keep it"
	case "awsfirelens":
		return "its output goes to the task's FireLens log router; read it where the router's configuration sends it"
	case "fluentd":
		return "its output goes to fluentd at " + or("fluentd-address", "localhost:24224") + "; read it there"
	case "splunk":
		return "its output goes to Splunk at " + or("splunk-url", "(not set)") + "; read it there"
	case "gelf":
		return "its output goes to the GELF server at " + or("gelf-address", "(not set)") + "; read it there"
	case "syslog":
		return "its output goes to syslog at " + or("syslog-address", "the host's syslog") + "; read it there"
	case "journald":
		return "its output is in the host's journal: journalctl CONTAINER_ID=" + dockerID[:min(12, len(dockerID))]
	}
	return fmt.Sprintf("read it where the %s driver sends it", driver)
}

// logPrinter writes lines to stdout or stderr, each prefixed with its container's name padded to
// width when width is not zero (several containers), and with its timestamp when asked. It is safe
// for concurrent use.
type logPrinter struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	width          int
	timestamps     bool
}

func (p *logPrinter) print(name string, l dockerclient.LogLine) {
	var b strings.Builder
	if p.width > 0 {
		fmt.Fprintf(&b, "%-*s | ", p.width, name)
	}
	if p.timestamps && !l.Time.IsZero() {
		b.WriteString(l.Time.UTC().Format(time.RFC3339Nano))
		b.WriteByte(' ')
	}
	b.Write(l.Text)
	b.WriteByte('\n')
	w := p.stdout
	if l.Stream == dockerclient.Stderr {
		w = p.stderr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(w, b.String())
}

// followAll prints every stream's lines as they come, until each stream ended (its container
// stopped) or ctx is done.
func followAll(ctx context.Context, src logSource, streams []*logStream, out *logPrinter) {
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() {
			s.err = src.ContainerLogs(ctx, s.id, s.opts, func(l dockerclient.LogLine) error {
				out.print(s.name, l)
				return nil
			})
		})
	}
	wg.Wait()
}

// mergeBuffer is how many lines each stream reads ahead of the merge.
const mergeBuffer = 256

// mergeAll prints the streams' lines merged in time order: each stream is in order already, so the
// earliest of their next lines goes first (a line without a time goes at once).
func mergeAll(ctx context.Context, src logSource, streams []*logStream, out *logPrinter) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type next struct {
		line dockerclient.LogLine
		ok   bool
	}
	chans := make([]chan dockerclient.LogLine, len(streams))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, s := range streams {
		chans[i] = make(chan dockerclient.LogLine, mergeBuffer)
		wg.Go(func() {
			defer close(chans[i])
			s.err = src.ContainerLogs(ctx, s.id, s.opts, func(l dockerclient.LogLine) error {
				l.Text = append([]byte(nil), l.Text...) // the reader reuses it
				select {
				case chans[i] <- l:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
	}
	heads := make([]next, len(streams))
	for i := range heads {
		heads[i].line, heads[i].ok = <-chans[i]
	}
	for {
		first := -1
		for i, h := range heads {
			if h.ok && (first < 0 || h.line.Time.Before(heads[first].line.Time)) {
				first = i
			}
		}
		if first < 0 {
			return
		}
		out.print(streams[first].name, heads[first].line)
		heads[first].line, heads[first].ok = <-chans[first]
	}
}

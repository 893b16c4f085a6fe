package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/introspection"
)

// fakeLogs is the Engine's side of berth logs: each container's log driver and lines.
type fakeLogs struct {
	drivers map[string]docker.LogConfig
	lines   map[string][]dockerclient.LogLine
	mu      sync.Mutex
	opts    map[string]dockerclient.LogsOptions // what each read asked for
}

func (f *fakeLogs) InspectContainer(_ context.Context, id string) (*docker.Container, error) {
	d, ok := f.drivers[id]
	if !ok {
		return nil, &dockerclient.NotFoundError{Kind: "container", Name: id}
	}
	return &docker.Container{ID: id, Config: &docker.Config{}, HostConfig: &docker.HostConfig{LogConfig: d}}, nil
}

func (f *fakeLogs) ContainerLogs(_ context.Context, id string, opts dockerclient.LogsOptions, fn func(dockerclient.LogLine) error) error {
	f.mu.Lock()
	f.opts[id] = opts
	f.mu.Unlock()
	switch f.drivers[id].Type {
	case "json-file", "local":
	default:
		return fmt.Errorf("logs of container %q: %w: configured logging driver does not support reading", id, dockerclient.ErrLogsNotReadable)
	}
	for _, l := range f.lines[id] {
		buf := append([]byte(nil), l.Text...)
		l.Text = buf
		if err := fn(l); err != nil {
			return err
		}
		clear(buf) // the reader reuses its buffer: a kept line must have been copied
	}
	return nil
}

func at(sec int) time.Time { return time.Date(2026, 12, 2, 3, 0, sec, 0, time.UTC) }

func line(stream dockerclient.LogStream, sec int, text string) dockerclient.LogLine {
	return dockerclient.LogLine{Stream: stream, Time: at(sec), Text: []byte(text)}
}

func logsTask() []introspection.TaskResponse {
	return []introspection.TaskResponse{{Arn: arnPrefix + "feed01", Family: "app", Version: "1", KnownStatus: "RUNNING",
		Containers: []introspection.ContainerResponse{
			{Name: "web", DockerID: "web0", KnownStatus: "RUNNING", Essential: true},
			{Name: "sidecar", DockerID: "side0", KnownStatus: "RUNNING"},
			{Name: "shipper", DockerID: "ship0", KnownStatus: "RUNNING"},
			{Name: "quiet", DockerID: "quiet0", KnownStatus: "RUNNING"},
			{Name: "late", KnownStatus: "NONE"},
		}}}
}

func newFakeLogs() *fakeLogs {
	return &fakeLogs{opts: map[string]dockerclient.LogsOptions{},
		drivers: map[string]docker.LogConfig{"web0": {Type: "json-file"}, "side0": {Type: "local"},
			"ship0":  {Type: "awslogs", Config: map[string]string{"awslogs-group": "/ecs/app", "awslogs-region": "eu-west-1", "awslogs-stream-prefix": "app"}},
			"quiet0": {Type: "none"}},
		lines: map[string][]dockerclient.LogLine{
			"web0":  {line(dockerclient.Stdout, 1, "web one"), line(dockerclient.Stderr, 3, "web oops"), line(dockerclient.Stdout, 5, "web three")},
			"side0": {line(dockerclient.Stdout, 2, "side one"), line(dockerclient.Stdout, 4, "side two"), line(dockerclient.Stderr, 6, "side err")},
		}}
}

func TestLogsMergeInTimeOrder(t *testing.T) {
	f := newFakeLogs()
	var stdout, stderr bytes.Buffer
	tasks := logsTask()
	tasks[0].Containers = tasks[0].Containers[:2] // web and sidecar
	require.NoError(t, showLogs(t.Context(), f, tasks, logsRequest{task: "feed", tail: 2}, &stdout, &stderr))
	assert.Equal(t, "web     | web one\nsidecar | side one\nsidecar | side two\nweb     | web three\n", stdout.String(),
		"both containers' stdout, in time order, prefixed with their names padded")
	assert.Equal(t, "web     | web oops\nsidecar | side err\n", stderr.String(), "stderr to stderr")
	assert.Equal(t, dockerclient.LogsOptions{Tail: 2}, f.opts["web0"])

	stdout.Reset()
	stderr.Reset()
	require.NoError(t, showLogs(t.Context(), f, tasks, logsRequest{task: "feed", container: "web", timestamps: true}, &stdout, &stderr))
	assert.Equal(t, "2026-12-02T03:00:01Z web one\n2026-12-02T03:00:05Z web three\n", stdout.String(), "one container: no prefix; -t: the times")
	assert.Equal(t, "2026-12-02T03:00:03Z web oops\n", stderr.String())
}

func TestLogsFollow(t *testing.T) {
	f := newFakeLogs()
	var stdout, stderr bytes.Buffer
	tasks := logsTask()
	tasks[0].Containers = tasks[0].Containers[:2]
	since := at(0)
	require.NoError(t, showLogs(t.Context(), f, tasks, logsRequest{task: "feed", follow: true, since: since}, &stdout, &stderr))
	got := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	assert.ElementsMatch(t, []string{"web     | web one", "web     | web three", "sidecar | side one", "sidecar | side two"}, got,
		"as they come: each container's lines, in its own order")
	assert.Less(t, strings.Index(stdout.String(), "web one"), strings.Index(stdout.String(), "web three"))
	assert.Equal(t, dockerclient.LogsOptions{Follow: true, Since: since}, f.opts["side0"])
}

func TestLogsUnreadableDrivers(t *testing.T) {
	f := newFakeLogs()
	var stdout, stderr bytes.Buffer
	err := showLogs(t.Context(), f, logsTask(), logsRequest{task: "feed01"}, &stdout, &stderr)
	assert.ErrorIs(t, err, errNotShown)
	assert.Contains(t, stdout.String(), "web     | web one\n", "the readable containers are shown")
	assert.Contains(t, stdout.String(), "sidecar | side one\n")
	for _, want := range []string{
		"berth logs: container late has no Docker container yet (status NONE): no output\n",
		"berth logs: container shipper logs with the awslogs driver, which the Docker Engine cannot read back: " +
			"its output is in CloudWatch Logs, log group /ecs/app, streams app/<container>/<task ID>, region eu-west-1: read it there (aws logs tail /ecs/app)\n",
		"berth logs: container quiet logs with the none driver, which the Docker Engine cannot read back: its output is discarded",
	} {
		assert.Contains(t, stderr.String(), want)
	}

	stdout.Reset()
	stderr.Reset()
	err = showLogs(t.Context(), f, logsTask(), logsRequest{task: "feed01", container: "quiet"}, &stdout, &stderr)
	assert.ErrorIs(t, err, errNotShown)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "container quiet logs with the none driver")

	err = showLogs(t.Context(), f, logsTask(), logsRequest{task: "feed01", container: "db"}, &stdout, &stderr)
	assert.EqualError(t, err, `task feed01 has no container "db"; its containers: web, sidecar, shipper, quiet, late`)
	err = showLogs(t.Context(), f, logsTask(), logsRequest{task: "beef"}, &stdout, &stderr)
	assert.ErrorContains(t, err, `no task "beef"`)
}

func TestWhereLogsGo(t *testing.T) {
	for _, tt := range []struct {
		driver string
		opts   map[string]string
		want   string
	}{
		{"awslogs", map[string]string{"awslogs-group": "g", "awslogs-region": "us-east-1", "awslogs-stream": "s"},
			"its output is in CloudWatch Logs, log group g, stream s, region us-east-1: read it there (aws logs tail g)"},
		{"fluentd", nil, "its output goes to fluentd at localhost:24224; read it there"},
		{"splunk", map[string]string{"splunk-url": "https://splunk:8088"}, "its output goes to Splunk at https://splunk:8088; read it there"},
		{"gelf", map[string]string{"gelf-address": "udp://g:12201"}, "its output goes to the GELF server at udp://g:12201; read it there"},
		{"syslog", nil, "its output goes to syslog at the host's syslog; read it there"},
		{"awsfirelens", nil, "its output goes to the task's FireLens log router; read it where the router's configuration sends it"},
		{"journald", nil, "its output is in the host's journal: journalctl CONTAINER_ID=0123456789ab"},
		{"etwlogs", nil, "read it where the etwlogs driver sends it"},
	} {
		assert.Equal(t, tt.want, whereLogsGo(tt.driver, tt.opts, "0123456789abcdef"), tt.driver)
	}
}

func TestParseLogs(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		args     []string
		want     logsRequest
		wantCode int
		wantErr  string
	}{
		{name: "task", args: []string{"feed"}, wantCode: -1, want: logsRequest{task: "feed"}},
		{name: "flags after the names", args: []string{"feed", "web", "-f", "--since", "10m", "--tail", "5", "-t"}, wantCode: -1,
			want: logsRequest{task: "feed", container: "web", follow: true, since: now.Add(-10 * time.Minute), tail: 5, timestamps: true}},
		{name: "since a time", args: []string{"--since=2026-12-01T10:00:00.5+01:00", "feed"}, wantCode: -1,
			want: logsRequest{task: "feed", since: time.Date(2026, 12, 1, 9, 0, 0, 5e8, time.UTC)}},
		{name: "no task", args: []string{"-f"}, wantCode: 2, wantErr: "want TASK [CONTAINER], got 0"},
		{name: "three names", args: []string{"a", "b", "c"}, wantCode: 2, wantErr: "got 3"},
		{name: "bad since", args: []string{"--since", "yesterday", "a"}, wantCode: 2, wantErr: "want a duration (10m) or an RFC 3339 time"},
		{name: "negative since", args: []string{"--since", "-5m", "a"}, wantCode: 2, wantErr: "must not be negative"},
		{name: "bad tail", args: []string{"--tail", "all", "a"}, wantCode: 2, wantErr: `want a number of lines, got "all"`},
		{name: "negative tail", args: []string{"--tail", "-1", "a"}, wantCode: 2, wantErr: `want a number of lines, got "-1"`},
		{name: "help", args: []string{"--help"}, wantCode: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got, _, err := parseLogs(mustCommand(t, "logs"), tt.args, now, &stdout, &stderr)
			if tt.wantCode == 0 {
				assert.Equal(t, exitCode(0), err)
				assert.Contains(t, stdout.String(), "usage: berth logs [flags] TASK [CONTAINER]\n", "help goes to stdout")
				assert.Empty(t, stderr.String())
				return
			}
			if tt.wantCode > 0 {
				code, ok := flagExit(err)
				require.True(t, ok, "an exit code, got %v", err)
				assert.Equal(t, tt.wantCode, code)
				assert.Contains(t, stderr.String(), tt.wantErr)
				assert.Empty(t, stdout.String())
				return
			}
			require.NoError(t, err, stderr.String())
			assert.True(t, tt.want.since.Equal(got.since), "since %v, want %v", got.since, tt.want.since)
			got.since, tt.want.since = time.Time{}, time.Time{}
			assert.Equal(t, tt.want, got)
		})
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mustCommand returns the command called name.
func mustCommand(t *testing.T, name string) command {
	t.Helper()
	c, ok := lookupCommand(name)
	require.True(t, ok, "no command %q", name)
	return c
}

// berthCommands are the commands the list must show, each with its usage line.
var berthCommands = []struct{ name, usage string }{
	{"agent", "usage: berth agent [flags]\n"},
	{"config", "usage: berth config [flags]\n"},
	{"healthcheck", "usage: berth healthcheck [flags]\n"},
	{"ps", "usage: berth ps [flags]\n"},
	{"exec", "usage: berth exec [flags] TASK [CONTAINER] -- COMMAND [ARG...]\n"},
	{"logs", "usage: berth logs [flags] TASK [CONTAINER]\n"},
	{"run", "usage: berth run [flags] FILE\n"},
	{"drain", "usage: berth drain [flags]\n"},
	{"stop", "usage: berth stop [flags] TASK\n"},
	{"pull", "usage: berth pull [flags] IMAGE\n"},
	{"version", "usage: berth version\n"},
	{"cleanup-task-endpoint-nat", "usage: berth cleanup-task-endpoint-nat\n"},
	{"help", "usage: berth help [COMMAND]\n"},
}

// agentFlags are flags berth agent takes; the command list names none of them.
var agentFlags = []string{"-stop-tasks-on-exit", "-datadir", "-cluster string", "-registry-require", "-loglevel", "-ecs-config"}

// runBerth runs berth with args in an environment that reads nothing of the host's.
func runBerth(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, testEnviron(t, "", ""), &out, &errOut)
	return out.String(), errOut.String(), code
}

// berth --help, -h, -help and help print the command list on stdout and exit 0: every command
// with its line, and none of the agent's flags.
func TestHelpListsTheCommands(t *testing.T) {
	require.Len(t, commands(), len(berthCommands), "every command is in berthCommands")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr, code := runBerth(t, args...)
			assert.Equal(t, 0, code)
			assert.Empty(t, stderr)
			assert.True(t, strings.HasPrefix(stdout, "usage: berth [COMMAND] [flags] [ARGS]\n"), stdout)
			for _, c := range berthCommands {
				assert.Regexp(t, "\n  "+c.name+"[ \n]", stdout, "the list shows %s", c.name)
			}
			for _, line := range []string{
				"\n  agent        run the agent (the default)\n",
				"\n  run FILE     register a task definition with the embedded control plane, run it, follow it to RUNNING\n",
				"\n  cleanup-task-endpoint-nat\n               remove the iptables rules",
				`Run "berth COMMAND -h" (or "berth help COMMAND") for a command's usage and flags`,
				"/run/berth/agent.json", "BERTH_RUN_FILE", "ECS_DATADIR",
			} {
				assert.Contains(t, stdout, line)
			}
			for _, f := range agentFlags {
				assert.NotContains(t, stdout, f, "the command list shows no agent flag")
			}
		})
	}
}

// berth agent -h prints the agent's flags, its own and the configuration flags, and not the
// command list.
func TestAgentHelpListsItsFlags(t *testing.T) {
	for _, flag := range []string{"-h", "--help"} {
		t.Run(flag, func(t *testing.T) {
			stdout, stderr, code := runBerth(t, "agent", flag)
			assert.Equal(t, 0, code)
			assert.Empty(t, stderr)
			assert.True(t, strings.HasPrefix(stdout, "usage: berth agent [flags]\n"), stdout)
			for _, f := range agentFlags {
				assert.Contains(t, stdout, "\n  "+f)
			}
			assert.Contains(t, stdout, "\nflags:\n  -stop-tasks-on-exit\n")
			assert.Contains(t, stdout, "\nconfiguration flags (each overrides its ECS_* variable and the files):\n  -cluster string\n")
			assert.Contains(t, stdout, "(overrides ECS_DATADIR)")
			for _, c := range []string{"commands:", "healthcheck", "cleanup-task-endpoint-nat", "  logs ", "  pull "} {
				assert.NotContains(t, stdout, c, "berth agent -h is not the command list")
			}
		})
	}
}

// Every command's -h prints its usage on stdout and exits 0 without doing anything; berth help
// COMMAND prints the same.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range berthCommands {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runBerth(t, c.name, "-h")
			assert.Equal(t, 0, code, "stderr: %s", stderr)
			assert.Empty(t, stderr)
			assert.True(t, strings.HasPrefix(stdout, c.usage), "%s -h begins with its usage line:\n%s", c.name, stdout)
			assert.Greater(t, len(stdout), len(c.usage)+40, "it says what the command does")
			did := map[string]string{"version": "go1.", "cleanup-task-endpoint-nat": "NAT removed", "help": "commands:"}
			switch c.name {
			case "version", "cleanup-task-endpoint-nat", "help":
				assert.NotContains(t, stdout, "configuration flags", "%s takes no configuration flags", c.name)
				assert.NotContains(t, stdout, did[c.name], "%s -h did not run it", c.name)
			default:
				assert.Contains(t, stdout, "\nconfiguration flags", "%s takes the configuration flags", c.name)
				assert.Contains(t, stdout, "  -datadir string\n")
			}
			helped, helpErr, helpCode := runBerth(t, "help", c.name)
			assert.Equal(t, 0, helpCode)
			assert.Empty(t, helpErr)
			assert.Equal(t, stdout, helped, "berth help %s is berth %s -h", c.name, c.name)
		})
	}
	// Each command's own flags are in its usage, with their argument names.
	for cmd, own := range map[string][]string{
		"run":  {"\nflags:\n  -wait duration\n"},
		"stop": {"\nflags:\n  -wait duration\n"},
		"exec": {"\n  -u USER\n", "\n  -w DIR\n", "\n  -e K=V\n", "\n  -t\t", "\n  -T\t"},
		"logs": {"\n  -f\t", "\n  -since D\n", "\n  -tail N\n", "\n  -t\t"},
		"ps":   {"/run/berth/agent.json"},
	} {
		stdout, _, _ := runBerth(t, cmd, "--help")
		for _, s := range own {
			assert.Contains(t, stdout, s, "berth %s --help", cmd)
		}
	}
}

// Mistakes on the command line exit 2 with what was wrong and where the usage is, on stderr.
func TestCommandLineMistakes(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr []string
	}{
		{[]string{"frobnicate"}, []string{`berth: unknown command "frobnicate"`, "\ncommands:\n", "\n  run FILE ", "\n  cleanup-task-endpoint-nat\n"}},
		{[]string{"help", "frobnicate"}, []string{`berth help: unknown command "frobnicate"`, "\ncommands:\n"}},
		{[]string{"help", "run", "stop"}, []string{"berth help: want at most one COMMAND, got 2 arguments", "usage: berth help [COMMAND]"}},
		{[]string{"run"}, []string{"berth run: want FILE, got 0 argument(s)\nusage: berth run [flags] FILE\n", `run "berth run -h" for more`}},
		{[]string{"stop", "a", "b"}, []string{"berth stop: want TASK, got 2 argument(s)", "usage: berth stop [flags] TASK"}},
		{[]string{"ps", "extra"}, []string{"berth ps: want no arguments, got 1 argument(s)"}},
		{[]string{"version", "extra"}, []string{"berth version: want no arguments, got 1"}},
		{[]string{"ps", "--nope"}, []string{"flag provided but not defined: -nope", `run "berth ps -h" for its usage`}},
		{[]string{"--nope"}, []string{"flag provided but not defined: -nope", `run "berth agent -h" for its usage`}},
		{[]string{"cleanup-task-endpoint-nat", "--force"}, []string{"flag provided but not defined: -force"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, stderr, code := runBerth(t, tt.args...)
			assert.Equal(t, 2, code, "stderr: %s", stderr)
			assert.Empty(t, stdout)
			for _, s := range tt.wantErr {
				assert.Contains(t, stderr, s)
			}
		})
	}
}

// Flags may follow a command's arguments: berth run FILE --wait 1s reads FILE.
func TestFlagsAfterArguments(t *testing.T) {
	_, stderr, code := runBerth(t, "run", "/nonexistent/web.json", "--wait", "1s")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "berth run: open /nonexistent/web.json: no such file or directory")
}

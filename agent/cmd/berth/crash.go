package main

import (
	"os"
	"strings"
	"syscall"

	"github.com/berth-agent/berth/agent/task"
)

// crashEnv names the test-only variable (its points are the engine.Probe* constants and
// controlplane.ProbeRejectedSaved) that makes the agent kill itself with SIGKILL at one step of
// a task's life: BERTH_TEST_CRASH_AT=<probe point>[:<task known status>][@<task family>], for example
// saved:RUNNING@web or after-create@web. The crash-recovery integration tests use it to stop the real
// binary at exact points; nothing else should.
const crashEnv = "BERTH_TEST_CRASH_AT"

// crashProbe returns the engine probe crashEnv asks for, or nil.
func crashProbe(environ []string) func(string, *task.Task) {
	var spec string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, crashEnv+"="); ok {
			spec = v
		}
	}
	if spec == "" {
		return nil
	}
	spec, family, _ := strings.Cut(spec, "@")
	point, status, _ := strings.Cut(spec, ":")
	return func(p string, t *task.Task) {
		if p != point || (family != "" && t.Family != family) || (status != "" && t.KnownStatus.String() != status) {
			return
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; nothing may happen after this point
	}
}

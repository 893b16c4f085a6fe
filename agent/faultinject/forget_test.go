package faultinject

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// lockCount returns how many namespace locks the injector holds.
func lockCount(inj *Injector) int {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return len(inj.locks)
}

// Every awsvpc task's stop sweeps its own namespace under that namespace's lock; the lock goes with
// the sweep, so a hundred tasks come and go without a hundred locks staying behind.
func TestNamespaceLocksDoNotOutliveTheirTasks(t *testing.T) {
	inj, f := newFake(rule{prefix: "tc -j q show", out: "[]"})
	dir := t.TempDir()
	const n = 100
	for i := range n {
		ns := filepath.Join(dir, fmt.Sprintf("netns-%d", i))
		require.NoError(t, os.WriteFile(ns, nil, 0o600)) // stands in for /proc/PID/ns/net
		tk := &task.Task{Arn: fmt.Sprintf("arn:aws:ecs:us-west-2:1:task/c/%d", i), NetworkMode: task.NetworkAWSVPC,
			EnableFaultInjection: true, AWSVPC: &task.AWSVPC{NetNS: ns}}
		inj.removeTaskFaults(context.Background(), tk, logger.Nop())
	}
	swept := 0
	for _, c := range f.calls {
		if strings.HasSuffix(c, ": iptables -w 5 -S") {
			swept++
		}
	}
	assert.Equal(t, n, swept, "each task's namespace was swept")
	assert.Zero(t, lockCount(inj), "no namespace lock is left once nothing holds it")
}

// The lock of a namespace still excludes: a second request waits while the first holds it, and the
// lock is forgotten only once the second has let it go too.
func TestNamespaceLockExcludesWhileShared(t *testing.T) {
	inj, _ := newFake()
	unlock := inj.lock("/run/netns/a")
	acquired, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		unlockSecond := inj.lock("/run/netns/a")
		close(acquired)
		<-release
		unlockSecond()
	}()
	require.Eventually(t, func() bool {
		inj.mu.Lock()
		defer inj.mu.Unlock()
		return inj.locks["/run/netns/a"] != nil && inj.locks["/run/netns/a"].users == 2
	}, 5*time.Second, time.Millisecond, "the second request waits for the lock")
	select {
	case <-acquired:
		t.Fatal("the second request got the lock while the first held it")
	default:
	}
	unlock()
	select {
	case <-acquired:
	case <-time.After(5 * time.Second):
		t.Fatal("the second request did not get the lock once the first let it go")
	}
	assert.Equal(t, 1, lockCount(inj), "kept while the second request holds it")
	close(release)
	<-done
	assert.Zero(t, lockCount(inj))
}

// A fault a request starts after the task's stop removed its faults (the request passed the task
// endpoint's checks before the stop began) is removed at the task's cleanup, with its record: nothing
// of it stays in the host's namespace or in the injector once the task is forgotten.
func TestCleanupRemovesFaultsStartedDuringTheStop(t *testing.T) {
	inj, f := newFake(rule{prefix: "iptables -w 5 -C", err: exitError(t)})
	tk := hostTask()
	ctx := context.Background()
	inj.removeTaskFaults(ctx, tk, logger.Nop()) // the stop: nothing started yet
	require.NoError(t, inj.StartBlackholePort(ctx, tk, taskendpoint.BlackholePort{Port: 53, Protocol: "udp", TrafficType: "egress"}))
	f.calls = nil
	inj.removeLateFaults(ctx, tk, logger.Nop())
	assert.Equal(t, []string{
		": iptables -w 5 -D OUTPUT -j egress-udp-53", ": iptables -w 5 -F egress-udp-53", ": iptables -w 5 -X egress-udp-53",
		": ip6tables -w 5 -D OUTPUT -j egress-udp-53", ": ip6tables -w 5 -F egress-udp-53", ": ip6tables -w 5 -X egress-udp-53",
	}, f.calls)
	inj.mu.Lock()
	assert.Empty(t, inj.started, "the task's record is gone")
	inj.mu.Unlock()

	f.calls = nil
	inj.removeLateFaults(ctx, tk, logger.Nop())
	assert.Empty(t, f.calls, "a task with nothing started since its stop costs no command at its cleanup")
	assert.Zero(t, lockCount(inj))
}

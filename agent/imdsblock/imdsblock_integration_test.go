//go:build integration

package imdsblock

// Integration tests against the real iptables, inside a network namespace the test creates
// (testutils.NewNS) standing in for the host, with a DOCKER-USER chain made as the Docker Engine
// makes it. They need root and iptables and fail without them. Nothing is done in the namespace the
// test process started in (inNS refuses it), and no packet is ever sent: the rule's presence is read
// with `iptables -S`.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// startNetNS is the namespace of the test process, which the tests must never change.
var startNetNS = func() uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		panic(err)
	}
	return st.Ino
}()

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

// inNS runs fn on a thread in n, refusing the test process's own namespace.
func inNS(t *testing.T, n ns.NetNS, fn func()) {
	t.Helper()
	require.NoError(t, n.Do(func(ns.NetNS) error {
		cur := nsIno(t, fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		require.Equal(t, nsIno(t, n.Path()), cur, "the thread is not in the test namespace")
		require.NotEqual(t, startNetNS, cur, "refusing to act on the test process's namespace")
		fn()
		return nil
	}))
}

// iptablesS is `iptables -S DOCKER-USER` in the current namespace.
func iptablesS(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-S", chain).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

func runIptables(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	require.NoError(t, err, "iptables %v: %s", args, out)
}

// Install puts the rule first in DOCKER-USER, ahead of the RETURN the Engine appends, and Check finds
// it; deleted behind the agent's back (a firewall reload), Check says so and Install puts it back;
// Remove takes it away and leaves Docker's rule. Without DOCKER-USER, Install says why.
func TestInstallCheckRemoveRealIptables(t *testing.T) {
	_, err := exec.LookPath("iptables")
	require.NoError(t, err, "iptables is needed")
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	ctx := context.Background()
	const rule = "-A DOCKER-USER -d 169.254.169.254/32 -i docker0 -m comment --comment berth-bridge-imds-block -j DROP"
	inNS(t, n, func() {
		require.ErrorIs(t, Install(ctx, Config{}), ErrNoDockerUser)
		require.ErrorIs(t, Check(ctx, Config{}), ErrNotInstalled)

		runIptables(t, "-N", chain)
		runIptables(t, "-A", chain, "-j", "RETURN")
		runIptables(t, "-I", "FORWARD", "1", "-j", chain)
		require.NoError(t, Install(ctx, Config{}))
		lines := strings.Split(strings.TrimSpace(iptablesS(t)), "\n")
		assert.Equal(t, []string{"-N DOCKER-USER", rule, "-A DOCKER-USER -j RETURN"}, lines)
		require.NoError(t, Check(ctx, Config{}))
		require.NoError(t, Install(ctx, Config{}))
		assert.Equal(t, 1, strings.Count(iptablesS(t), "berth-bridge-imds-block"), "installed once")

		runIptables(t, "-D", chain, "1")
		require.ErrorIs(t, Check(ctx, Config{}), ErrNotInstalled)
		runIptables(t, "-I", chain, "1", "-s", "10.1.0.0/16", "-j", "ACCEPT")
		require.NoError(t, Install(ctx, Config{}))
		lines = strings.Split(strings.TrimSpace(iptablesS(t)), "\n")
		assert.Equal(t, rule, lines[1], "first, ahead of the operator's ACCEPT")
		require.NoError(t, Check(ctx, Config{}))

		require.NoError(t, Remove(ctx, Config{}))
		assert.NotContains(t, iptablesS(t), "berth-bridge-imds-block")
		assert.Contains(t, iptablesS(t), "-A DOCKER-USER -j RETURN")
		require.NoError(t, Remove(ctx, Config{}))
	})
}

//go:build integration

package hostnat

// Integration tests against the real iptables and /proc/sys, each inside network namespaces the
// test creates (testutils.NewNS): one stands in for the host, with its own bridges, and one for a
// container on a veth plugged into a bridge. They need root and iptables and fail without them.
// Nothing is ever done in the namespace the test process started in (inNS refuses it), and no
// namespace has a default route: a packet the rules do not catch goes nowhere.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Names and addresses of the test namespaces; 192.0.2.0/24 is TEST-NET-1, never routed anywhere.
const (
	testBridge     = "bnat-br0"
	testTaskBridge = "bnat-br1"
	testHostVeth   = "bnat-v0h"
	testCtrVeth    = "bnat-v0c"
	testSink       = "bnat-sink0"
	testHostAddr   = "192.0.2.1/24"
	testCtrAddr    = "192.0.2.2/24"
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

// newNS creates a namespace, deleted at clean-up (with every link in it), with lo up when loUp.
// Without lo, 127.0.0.0/8 is not local to the namespace and is routed like any other address.
func newNS(t *testing.T, loUp bool) ns.NetNS {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "these tests need root")
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	require.NotEqual(t, startNetNS, nsIno(t, n.Path()))
	if !loUp {
		return n
	}
	inNS(t, n, func() {
		lo, err := netlink.LinkByName("lo")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(lo))
	})
	return n
}

// inNS runs fn on a thread locked in n, after checking that the thread is there and not in the
// test process's own namespace.
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

// addBridge adds an up bridge to the current namespace, with addr when it is not empty.
func addBridge(t *testing.T, name, addr string) netlink.Link {
	t.Helper()
	require.NoError(t, netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}))
	br, err := netlink.LinkByName(name)
	require.NoError(t, err)
	if addr != "" {
		a, err := netlink.ParseAddr(addr)
		require.NoError(t, err)
		require.NoError(t, netlink.AddrAdd(br, a))
	}
	require.NoError(t, netlink.LinkSetUp(br))
	return br
}

// hostNS is a namespace standing in for the host: testBridge (with testHostAddr) and
// testTaskBridge, both with route_localnet off.
func hostNS(t *testing.T) ns.NetNS {
	h := newNS(t, true)
	inNS(t, h, func() {
		addBridge(t, testBridge, testHostAddr)
		addBridge(t, testTaskBridge, "")
	})
	return h
}

// plugContainer adds a container namespace on a veth into testBridge of host, with testCtrAddr and
// a route to the endpoint via the bridge, and no other route; its lo is down.
func plugContainer(t *testing.T, host ns.NetNS) ns.NetNS {
	c := newNS(t, false)
	inNS(t, host, func() {
		br, err := netlink.LinkByName(testBridge)
		require.NoError(t, err)
		require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: testHostVeth, MasterIndex: br.Attrs().Index}, PeerName: testCtrVeth}))
		v, err := netlink.LinkByName(testHostVeth)
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(v))
		peer, err := netlink.LinkByName(testCtrVeth)
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetNsFd(peer, int(c.Fd())))
	})
	inNS(t, c, func() {
		v, err := netlink.LinkByName(testCtrVeth)
		require.NoError(t, err)
		a, err := netlink.ParseAddr(testCtrAddr)
		require.NoError(t, err)
		require.NoError(t, netlink.AddrAdd(v, a))
		require.NoError(t, netlink.LinkSetUp(v))
		require.NoError(t, netlink.RouteAdd(&netlink.Route{LinkIndex: v.Attrs().Index, Dst: hostRoute(EndpointIP), Gw: net.ParseIP("192.0.2.1")}))
	})
	return c
}

// addSinkLink adds a link that drops what is sent through it: a dummy, or an ifb on kernels built
// without the dummy driver (as in agent/ecscni's tests).
func addSinkLink(attrs netlink.LinkAttrs) error {
	err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = netlink.LinkAdd(&netlink.Ifb{LinkAttrs: attrs})
	}
	return err
}

func hostRoute(ip string) *net.IPNet {
	return &net.IPNet{IP: net.ParseIP(ip).To4(), Mask: net.CIDRMask(32, 32)}
}

// requireNoDefaultRoute checks that nothing the rules miss can leave the namespace.
func requireNoDefaultRoute(t *testing.T) {
	t.Helper()
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	require.NoError(t, err)
	for _, r := range routes {
		require.False(t, r.Dst == nil || r.Dst.IP.IsUnspecified(), "a default route: %v", r)
	}
}

// listRules is `iptables -t TABLE -S` of the current namespace, for nat and filter.
func listRules(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, table := range []string{"nat", "filter"} {
		b, err := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput()
		require.NoError(t, err, "iptables -t %s -S: %s", table, b)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			out = append(out, "-t "+table+" "+line)
		}
	}
	return out
}

func localnetOf(t *testing.T, bridge string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + bridge + "/route_localnet")
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func setLocalnet(t *testing.T, bridge, v string) {
	t.Helper()
	require.NoError(t, os.WriteFile("/proc/sys/net/ipv4/conf/"+bridge+"/route_localnet", []byte(v), 0))
}

// serve answers on addr in the current namespace with the client's address.
func serve(t *testing.T, addr, name string) {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s from %s", name, r.RemoteAddr)
	}), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
}

// get sends GET / to addr from the current namespace (dialled here, on this thread) and returns the
// body.
func get(addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	req.Close = true
	if err := req.Write(c); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

var fullConfig = Config{DockerBridge: testBridge, TaskBridges: []string{testTaskBridge}, HostNetwork: true}

// TestIntegrationInstallCheckRemove: Install makes exactly the expected rules and sets
// route_localnet; a second Install changes nothing; Remove leaves no chain, jump or setting.
func TestIntegrationInstallCheckRemove(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	inNS(t, h, func() {
		before := listRules(t)
		ok, err := Installed(ctx, fullConfig)
		require.NoError(t, err)
		require.False(t, ok)

		require.NoError(t, Install(ctx, fullConfig))
		want := []string{
			"-t nat -P PREROUTING ACCEPT",
			"-t nat -P INPUT ACCEPT",
			"-t nat -P OUTPUT ACCEPT",
			"-t nat -P POSTROUTING ACCEPT",
			"-t nat -N BERTH-TASK-ENDPOINT",
			"-t nat -N BERTH-TASK-ENDPOINT-HOST",
			"-t nat -A PREROUTING -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT",
			"-t nat -A OUTPUT -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT-HOST",
			`-t nat -A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i bnat-br0 -p tcp -m tcp --dport 80 -m comment --comment "berth-task-endpoint:set-route_localnet" -j DNAT --to-destination 127.0.0.1:51679`,
			`-t nat -A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i bnat-br1 -p tcp -m tcp --dport 80 -m comment --comment "berth-task-endpoint:set-route_localnet" -j DNAT --to-destination 127.0.0.1:51679`,
			"-t nat -A BERTH-TASK-ENDPOINT-HOST -d 169.254.170.2/32 -p tcp -m tcp --dport 80 -m comment --comment berth-task-endpoint -j REDIRECT --to-ports 51679",
			"-t filter -P INPUT ACCEPT",
			"-t filter -P FORWARD ACCEPT",
			"-t filter -P OUTPUT ACCEPT",
			"-t filter -N BERTH-TASK-ENDPOINT",
			"-t filter -A INPUT -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT",
			"-t filter -A BERTH-TASK-ENDPOINT -d 127.0.0.0/8 -i bnat-br0 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment berth-task-endpoint -j DROP",
			"-t filter -A BERTH-TASK-ENDPOINT -d 127.0.0.0/8 -i bnat-br1 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment berth-task-endpoint -j DROP",
		}
		assert.Equal(t, want, listRules(t))
		assert.Equal(t, "1", localnetOf(t, testBridge))
		assert.Equal(t, "1", localnetOf(t, testTaskBridge))
		require.NoError(t, Check(ctx, fullConfig))

		require.NoError(t, Install(ctx, fullConfig), "a second Install")
		assert.Equal(t, want, listRules(t), "a second Install changes nothing")

		require.NoError(t, Remove(ctx, fullConfig))
		after := listRules(t)
		assert.Equal(t, before, after)
		for _, line := range after {
			assert.NotContains(t, line, "BERTH")
			assert.NotContains(t, line, "berth")
		}
		assert.Equal(t, "0", localnetOf(t, testBridge))
		assert.Equal(t, "0", localnetOf(t, testTaskBridge))
		require.ErrorIs(t, Check(ctx, fullConfig), ErrNotInstalled)
		require.NoError(t, Remove(ctx, fullConfig), "a second Remove")
		assert.Equal(t, before, listRules(t))
	})
}

// TestIntegrationPrune: an Install with a smaller config removes the rules of a bridge no longer
// named (restoring its route_localnet) and the host REDIRECT.
func TestIntegrationPrune(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	inNS(t, h, func() {
		small := Config{DockerBridge: testBridge}
		require.NoError(t, Install(ctx, small))
		want := listRules(t)
		require.NoError(t, Install(ctx, fullConfig))
		require.NoError(t, Install(ctx, small))
		assert.Equal(t, want, listRules(t))
		assert.Equal(t, "1", localnetOf(t, testBridge))
		assert.Equal(t, "0", localnetOf(t, testTaskBridge))
		require.NoError(t, Check(ctx, small))
		require.ErrorIs(t, Check(ctx, fullConfig), ErrNotInstalled)
	})
}

// TestIntegrationRouteLocalnetNotOurs: a setting found on is left on by Remove.
func TestIntegrationRouteLocalnetNotOurs(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	inNS(t, h, func() {
		setLocalnet(t, testBridge, "1")
		cfg := Config{DockerBridge: testBridge}
		require.NoError(t, Install(ctx, cfg))
		assert.Contains(t, listRules(t), "-t nat -A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i bnat-br0 -p tcp -m tcp --dport 80 -m comment --comment berth-task-endpoint -j DNAT --to-destination 127.0.0.1:51679")
		require.NoError(t, Remove(ctx, cfg))
		assert.Equal(t, "1", localnetOf(t, testBridge))
	})
}

// TestIntegrationRollback fails each step of an Install in turn, from nothing and from a smaller
// Install, with the real iptables, and checks that the rules and settings are as before.
func TestIntegrationRollback(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	inNS(t, h, func() {
		base, err := newHost(fullConfig)
		require.NoError(t, err)
		for _, start := range []*Config{nil, {DockerBridge: testBridge}} {
			require.NoError(t, Remove(ctx, fullConfig))
			if start != nil {
				require.NoError(t, Install(ctx, *start))
			}
			before := listRules(t)
			localnet := []string{localnetOf(t, testBridge), localnetOf(t, testTaskBridge)}

			var steps []string
			probe := *base
			probe.hook = func(s string) error { steps = append(steps, s); return nil }
			require.NoError(t, probe.install(ctx, fullConfig))
			require.NoError(t, Remove(ctx, fullConfig))
			if start != nil {
				require.NoError(t, Install(ctx, *start))
			}
			require.Equal(t, before, listRules(t))
			require.NotEmpty(t, steps)

			for i, step := range steps {
				injected := errors.New("injected")
				failing := *base
				failing.hook = func(s string) error {
					if s == step {
						return injected
					}
					return nil
				}
				err := failing.install(ctx, fullConfig)
				require.ErrorIs(t, err, injected, "step %d %s", i, step)
				assert.Contains(t, err.Error(), step)
				assert.Equal(t, before, listRules(t), "after a failure at step %d %s", i, step)
				assert.Equal(t, localnet, []string{localnetOf(t, testBridge), localnetOf(t, testTaskBridge)},
					"after a failure at step %d %s", i, step)
			}
		}
	})
}

// TestIntegrationMissingBridge: a bridge that does not exist fails Install, which changes nothing.
func TestIntegrationMissingBridge(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	inNS(t, h, func() {
		before := listRules(t)
		err := Install(ctx, Config{DockerBridge: testBridge, TaskBridges: []string{"bnat-nosuch"}})
		require.Error(t, err)
		assert.True(t, errdefs.IsNotFound(err), "err = %v", err)
		assert.Contains(t, err.Error(), "bnat-nosuch")
		assert.Equal(t, before, listRules(t))
		assert.Equal(t, "0", localnetOf(t, testBridge))
	})
}

// TestIntegrationIptablesFailsMidway: iptables itself refusing a step (a wrapper that fails the
// REDIRECT) rolls back the rules added before it, and the error names the step.
func TestIntegrationIptablesFailsMidway(t *testing.T) {
	ctx := t.Context()
	iptablesBin, err := exec.LookPath("iptables")
	require.NoError(t, err)
	wrapper := filepath.Join(t.TempDir(), "iptables")
	require.NoError(t, os.WriteFile(wrapper, []byte(`#!/bin/sh
case "$*" in *" -A "*REDIRECT*) echo "iptables: injected failure" >&2; exit 4;; esac
exec `+iptablesBin+` "$@"
`), 0o755))
	h := hostNS(t)
	inNS(t, h, func() {
		before := listRules(t)
		cfg := fullConfig
		cfg.IptablesPath = wrapper
		err := Install(ctx, cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "add rule "+redirectRule().String())
		assert.Contains(t, err.Error(), "injected failure")
		assert.Equal(t, before, listRules(t))
		assert.Equal(t, "0", localnetOf(t, testBridge))
		assert.Equal(t, "0", localnetOf(t, testTaskBridge))
	})
}

// TestIntegrationEndToEnd: a container on the bridge reaches the endpoint's server on
// 127.0.0.1:51679 of the host as 169.254.170.2:80, with its own address as the source, once (and
// only once) the rules are in place; the host's own request is redirected with HostNetwork; and
// the guard keeps the container away from the rest of the host's loopback.
func TestIntegrationEndToEnd(t *testing.T) {
	ctx := t.Context()
	h := hostNS(t)
	c := plugContainer(t, h)
	endpoint := net.JoinHostPort(EndpointIP, fmt.Sprint(EndpointPort))
	inNS(t, h, func() {
		requireNoDefaultRoute(t)
		serve(t, fmt.Sprintf("127.0.0.1:%d", ListenPort), "endpoint")
		serve(t, "127.0.0.1:51678", "other")
		// The host's own route to the endpoint goes to a dummy: what REDIRECT misses is dropped.
		require.NoError(t, addSinkLink(netlink.LinkAttrs{Name: testSink}))
		sink, err := netlink.LinkByName(testSink)
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(sink))
		require.NoError(t, netlink.RouteAdd(&netlink.Route{LinkIndex: sink.Attrs().Index, Dst: hostRoute(EndpointIP)}))
	})
	inNS(t, c, func() {
		requireNoDefaultRoute(t)
		_, err := get(endpoint, time.Second)
		require.Error(t, err, "no rule yet: the request must not arrive")
	})

	cfg := Config{DockerBridge: testBridge, TaskBridges: []string{testTaskBridge}}
	inNS(t, h, func() {
		require.NoError(t, Install(ctx, cfg))
		require.NoError(t, Check(ctx, cfg), "the rules are in place before a container asks")
		_, err := get(endpoint, time.Second)
		require.Error(t, err, "no HostNetwork: the host's own request is not redirected")
	})
	inNS(t, c, func() {
		requireNoDefaultRoute(t)
		body, err := get(endpoint, 5*time.Second)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(body, "endpoint from 192.0.2.2:"), "body %q", body)
	})

	inNS(t, h, func() {
		require.NoError(t, Install(ctx, fullConfig))
		require.NoError(t, Check(ctx, fullConfig))
		body, err := get(endpoint, 5*time.Second)
		require.NoError(t, err)
		// REDIRECT changes only the destination: the source is the one picked for the route to the
		// endpoint (here the bridge's, as the sink has no address).
		assert.True(t, strings.HasPrefix(body, "endpoint from 192.0.2.1:"), "body %q", body)
	})

	// The guard: a container that sends to 127.0.0.1 through the bridge (its lo is down, so
	// 127.0.0.0/8 is not local to it, and it routes 127.0.0.1 via the host) reaches the host's loopback when route_localnet is on without
	// the guard, and not with it.
	inNS(t, c, func() {
		v, err := netlink.LinkByName(testCtrVeth)
		require.NoError(t, err)
		setLocalnet(t, testCtrVeth, "1")
		require.NoError(t, netlink.RouteAdd(&netlink.Route{LinkIndex: v.Attrs().Index, Dst: hostRoute("127.0.0.1"), Gw: net.ParseIP("192.0.2.1")}))
		requireNoDefaultRoute(t)
	})
	inNS(t, h, func() {
		require.NoError(t, Remove(ctx, fullConfig))
		setLocalnet(t, testBridge, "1")
	})
	inNS(t, c, func() {
		body, err := get("127.0.0.1:51678", 5*time.Second)
		require.NoError(t, err, "without the guard the host's loopback is open")
		assert.True(t, strings.HasPrefix(body, "other from 192.0.2.2:"), "body %q", body)
	})
	inNS(t, h, func() { require.NoError(t, Install(ctx, cfg)) })
	inNS(t, c, func() {
		_, err := get("127.0.0.1:51678", time.Second)
		require.Error(t, err, "the guard drops what was not DNATed")
		body, err := get(endpoint, 5*time.Second)
		require.NoError(t, err, "the endpoint still answers")
		assert.True(t, strings.HasPrefix(body, "endpoint from 192.0.2.2:"), "body %q", body)
	})
	inNS(t, h, func() {
		require.NoError(t, Remove(ctx, fullConfig))
		assert.Equal(t, "1", localnetOf(t, testBridge), "a setting found on stays on")
	})
}

// iptablesRun runs iptables in the current namespace and fails the test on an error.
func iptablesRun(t *testing.T, args ...string) {
	t.Helper()
	b, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	require.NoError(t, err, "iptables %v: %s", args, b)
}

// hasRule reports whether r is in place in the current namespace (iptables -C).
func hasRule(r rule) bool {
	return exec.Command("iptables", append([]string{"-w", "-t", r.table, "-C", r.chain}, r.spec...)...).Run() == nil
}

// countedSystem is the host's operations, counting the checks.
type countedSystem struct {
	system
	checks atomic.Int32
}

func (c *countedSystem) check(ctx context.Context, cfg Config) error {
	c.checks.Add(1)
	return c.system.check(ctx, cfg)
}

// runKeeper runs k.Run in n until stop is called or the test ends.
func runKeeper(t *testing.T, n ns.NetNS, k *Keeper) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Do(func(ns.NetNS) error { k.Run(ctx); return nil }) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// pollIn polls cond in n every few milliseconds until it holds, failing the test after 20 s.
func pollIn(t *testing.T, n ns.NetNS, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := false
		inNS(t, n, func() { ok = cond() })
		if ok {
			return
		}
		require.True(t, time.Now().Before(deadline), "timed out waiting until %s", what)
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestIntegrationKeeperPutsRulesBack: while the Keeper runs, a guard rule deleted with iptables, then
// the whole filter table and the whole nat table flushed (a firewall reload), are back within a few
// check intervals, with route_localnet on and still recorded as the agent's.
func TestIntegrationKeeperPutsRulesBack(t *testing.T) {
	h := hostNS(t)
	cfg := Config{DockerBridge: testBridge, TaskBridges: []string{testTaskBridge}}
	k := NewKeeper(KeeperConfig{NAT: cfg, Interval: 100 * time.Millisecond})
	inNS(t, h, func() {
		require.NoError(t, k.Ensure(t.Context()))
		require.NoError(t, Check(t.Context(), cfg))
	})
	runKeeper(t, h, k)

	for _, tc := range []struct {
		name    string
		breakIt []string
	}{
		{"guard rule deleted", append([]string{"-t", "filter", "-D", ChainGuard}, guardRule(testBridge).spec...)},
		{"filter table flushed", []string{"-t", "filter", "-F"}},
		{"nat table flushed", []string{"-t", "nat", "-F"}},
	} {
		inNS(t, h, func() {
			iptablesRun(t, tc.breakIt...)
			require.Error(t, Check(t.Context(), cfg), tc.name)
		})
		pollIn(t, h, tc.name+": the NAT is back", func() bool {
			return hasRule(guardRule(testBridge)) && Check(t.Context(), cfg) == nil
		})
		inNS(t, h, func() {
			assert.Equal(t, "1", localnetOf(t, testBridge), tc.name)
			assert.Equal(t, "1", localnetOf(t, testTaskBridge), tc.name)
			assert.True(t, hasRule(dnatRule(testBridge, true)), "%s: the DNAT rule still records that route_localnet is the agent's", tc.name)
		})
		assert.NoError(t, k.Err(), tc.name)
	}
}

// TestIntegrationKeeperRouteLocalnetOffWithoutTheGuard: when the guard is deleted and iptables then
// refuses to add it back (a wrapper that fails while a marker file exists), the Keeper turns
// route_localnet off and reports the NAT missing; from then on route_localnet is never on while the
// guard is missing; once iptables works again the guard and route_localnet are back, the DNAT rule
// still records that route_localnet is the agent's (the flush took the record), and Remove turns it
// off.
func TestIntegrationKeeperRouteLocalnetOffWithoutTheGuard(t *testing.T) {
	iptablesBin, err := exec.LookPath("iptables")
	require.NoError(t, err)
	dir := t.TempDir()
	marker := filepath.Join(dir, "refuse-guard")
	wrapper := filepath.Join(dir, "iptables")
	require.NoError(t, os.WriteFile(wrapper, []byte(`#!/bin/sh
if [ -e `+marker+` ]; then
	case "$*" in *"-A `+ChainGuard+` "*"127.0.0.0/8"*|*"-I INPUT"*) echo "iptables: injected failure" >&2; exit 4;; esac
fi
exec `+iptablesBin+` "$@"
`), 0o755))

	h := hostNS(t)
	cfg := Config{DockerBridge: testBridge, IptablesPath: wrapper}
	k := NewKeeper(KeeperConfig{NAT: cfg, Interval: 100 * time.Millisecond})
	ops := &countedSystem{}
	k.ops = ops
	inNS(t, h, func() {
		require.NoError(t, k.Ensure(t.Context()))
		require.Equal(t, "1", localnetOf(t, testBridge))
		require.True(t, hasRule(dnatRule(testBridge, true)))
	})
	stop := runKeeper(t, h, k)

	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	inNS(t, h, func() {
		iptablesRun(t, append([]string{"-t", "filter", "-D", ChainGuard}, guardRule(testBridge).spec...)...)
		iptablesRun(t, "-t", "nat", "-F", ChainNAT)
	})
	require.Eventually(t, func() bool { return k.Err() != nil }, 20*time.Second, 10*time.Millisecond, "the keeper reports the NAT missing")
	assert.Contains(t, k.Err().Error(), "injected failure")

	// unguarded reads route_localnet, then whether the guard is there: the keeper adds the guard before
	// it turns route_localnet on, so on, then missing, in this order, is a moment of both.
	unguarded := func() bool {
		on := localnetOf(t, testBridge) == "1"
		return on && !hasRule(guardRule(testBridge))
	}
	inNS(t, h, func() {
		assert.Equal(t, "0", localnetOf(t, testBridge), "route_localnet is off while the guard cannot be installed")
		assert.False(t, hasRule(guardRule(testBridge)))
	})
	// Three failed checks later it is still off.
	checks := ops.checks.Load()
	pollIn(t, h, "three more checks", func() bool {
		require.False(t, unguarded(), "route_localnet on without the guard")
		require.Error(t, k.Err())
		return ops.checks.Load() >= checks+3
	})

	require.NoError(t, os.Remove(marker))
	pollIn(t, h, "the guard and route_localnet are back", func() bool {
		require.False(t, unguarded(), "route_localnet on without the guard")
		return hasRule(guardRule(testBridge)) && localnetOf(t, testBridge) == "1" && k.Err() == nil
	})
	stop()
	inNS(t, h, func() {
		assert.True(t, hasRule(dnatRule(testBridge, true)), "the DNAT rule records that route_localnet is the agent's")
		require.NoError(t, Remove(t.Context(), cfg))
		assert.Equal(t, "0", localnetOf(t, testBridge), "and Remove turns it off")
	})
}

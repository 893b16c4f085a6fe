//go:build integration

package faultinject

// Integration tests against the real iptables and tc, in two network namespaces the test creates
// (named flt…) joined by a veth pair: "task" (its end is eth0, 10.99.7.1) and "peer" (10.99.7.2, and
// 169.254.170.2 standing in for the task endpoint). They need root, iproute2, iptables and tc, and
// fail without them. Nothing is done in the test process's own namespace.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

const (
	taskAddr = "10.99.7.1"
	peerAddr = "10.99.7.2"
)

// pair is the two namespaces of a test.
type pair struct {
	task, peer ns.NetNS
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%v: %s", args, out)
	return string(out)
}

// newPair makes the two namespaces and the veth between them; they are removed with the test.
func newPair(t *testing.T) pair {
	t.Helper()
	id := fmt.Sprintf("flt%d%d", os.Getpid()%100000, time.Now().UnixNano()%1000)
	tn, pn := id+"t", id+"p"
	sh(t, "ip", "netns", "add", tn)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", tn).Run() })
	sh(t, "ip", "netns", "add", pn)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pn).Run() })
	sh(t, "ip", "link", "add", id+"a", "netns", tn, "type", "veth", "peer", "name", id+"b", "netns", pn)
	in := func(n string, args ...string) { sh(t, append([]string{"ip", "netns", "exec", n}, args...)...) }
	in(tn, "ip", "link", "set", id+"a", "name", AWSVPCInterface)
	in(tn, "ip", "addr", "add", taskAddr+"/24", "dev", AWSVPCInterface)
	in(tn, "ip", "link", "set", AWSVPCInterface, "up")
	in(tn, "ip", "link", "set", "lo", "up")
	in(tn, "ip", "route", "add", "169.254.170.2/32", "dev", AWSVPCInterface)
	in(pn, "ip", "addr", "add", peerAddr+"/24", "dev", id+"b")
	in(pn, "ip", "addr", "add", "169.254.170.2/32", "dev", id+"b")
	in(pn, "ip", "link", "set", id+"b", "up")
	in(pn, "ip", "link", "set", "lo", "up")
	var p pair
	var err error
	p.task, err = ns.GetNS("/run/netns/" + tn)
	require.NoError(t, err)
	p.peer, err = ns.GetNS("/run/netns/" + pn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.task.Close(); _ = p.peer.Close() })
	return p
}

// listen listens on addr inside n; the listener is closed with the test. Connections are accepted
// and closed.
func listen(t *testing.T, n ns.NetNS, addr string) {
	t.Helper()
	var l net.Listener
	require.NoError(t, n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	}))
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// reachable reports whether a TCP connection from n to addr is made within a second (a dropped
// SYN is not answered at all).
func reachable(t *testing.T, n ns.NetNS, addr string) bool {
	t.Helper()
	var err error
	require.NoError(t, n.Do(func(ns.NetNS) error {
		runtime.LockOSThread()
		var c net.Conn
		c, err = net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return nil
	}))
	return err == nil
}

// saved is iptables-save (both families) inside n.
func saved(t *testing.T, n ns.NetNS) string {
	t.Helper()
	return sh(t, "nsenter", "--net="+n.Path(), "iptables-save") + sh(t, "nsenter", "--net="+n.Path(), "ip6tables-save")
}

func awsvpcTask(n ns.NetNS) *task.Task {
	return &task.Task{Arn: "arn:aws:ecs:us-west-2:1:task/c/flt", NetworkMode: task.NetworkAWSVPC, EnableFaultInjection: true,
		AWSVPC: &task.AWSVPC{NetNS: n.Path()}}
}

// An ingress black hole on one port drops connections to it and to it only; its status is running;
// a second start leaves the one chain; stop removes every trace of it.
func TestBlackholeIngressRealNamespace(t *testing.T) {
	p := newPair(t)
	listen(t, p.task, taskAddr+":8080")
	listen(t, p.task, taskAddr+":8081")
	inj := New(Config{})
	tk := awsvpcTask(p.task)
	ctx := context.Background()
	bh := taskendpoint.BlackholePort{Port: 8080, Protocol: "tcp", TrafficType: "ingress"}
	require.True(t, reachable(t, p.peer, taskAddr+":8080"))

	require.NoError(t, inj.StartBlackholePort(ctx, tk, bh))
	assert.False(t, reachable(t, p.peer, taskAddr+":8080"), "the black-holed port answers")
	assert.True(t, reachable(t, p.peer, taskAddr+":8081"), "another port is black-holed too")
	running, err := inj.BlackholePortRunning(ctx, tk, bh)
	require.NoError(t, err)
	assert.True(t, running)
	other, err := inj.BlackholePortRunning(ctx, tk, taskendpoint.BlackholePort{Port: 8081, Protocol: "tcp", TrafficType: "ingress"})
	require.NoError(t, err)
	assert.False(t, other)

	require.NoError(t, inj.StartBlackholePort(ctx, tk, bh), "a second start of the same black hole")
	rules := saved(t, p.task)
	assert.Equal(t, 2, strings.Count(rules, "-A INPUT -j ingress-tcp-8080"), "one jump in each family: %s", rules)
	assert.Contains(t, rules, "-A ingress-tcp-8080 -p tcp -m tcp --dport 8080 -j DROP")

	require.NoError(t, inj.StopBlackholePort(ctx, tk, bh))
	assert.NotContains(t, saved(t, p.task), "ingress-tcp-8080")
	assert.True(t, reachable(t, p.peer, taskAddr+":8080"))
	running, err = inj.BlackholePortRunning(ctx, tk, bh)
	require.NoError(t, err)
	assert.False(t, running)
	require.NoError(t, inj.StopBlackholePort(ctx, tk, bh), "stopping a black hole that does not run")
}

// An egress black hole of port 80 with the task endpoint's address among SourcesToFilter (as the task
// endpoint adds it) drops the task's connections to port 80 but for that address; the task's stop
// hook removes every black hole from its namespace.
func TestBlackholeEgressKeepsTaskEndpointRealNamespace(t *testing.T) {
	p := newPair(t)
	listen(t, p.peer, ":80")
	inj := New(Config{})
	tk := awsvpcTask(p.task)
	ctx := context.Background()
	bh := taskendpoint.BlackholePort{Port: 80, Protocol: "tcp", TrafficType: "egress", SourcesToFilter: []string{"169.254.170.2"}}

	require.NoError(t, inj.StartBlackholePort(ctx, tk, bh))
	assert.False(t, reachable(t, p.task, peerAddr+":80"), "port 80 is not black-holed")
	assert.True(t, reachable(t, p.task, "169.254.170.2:80"), "the task endpoint is black-holed")
	assert.Contains(t, saved(t, p.task), "-A egress-tcp-80 -d 169.254.170.2/32 -p tcp -m tcp --dport 80 -j ACCEPT")

	require.NoError(t, inj.StopBlackholePort(ctx, tk, bh))
	assert.NotContains(t, saved(t, p.task), "egress-tcp-80")
	assert.True(t, reachable(t, p.task, peerAddr+":80"))

	// At the task's stop, its stop hook sweeps its namespace.
	require.NoError(t, inj.StartBlackholePort(ctx, tk, bh))
	require.NoError(t, inj.StartBlackholePort(ctx, tk, taskendpoint.BlackholePort{Port: 53, Protocol: "udp", TrafficType: "ingress"}))
	inj.removeTaskFaults(ctx, tk, logger.Nop())
	rules := saved(t, p.task)
	assert.NotContains(t, rules, "egress-tcp-80")
	assert.NotContains(t, rules, "ingress-udp-53")
	assert.True(t, reachable(t, p.task, peerAddr+":80"))
}

// Where the kernel has no netem (this machine's), the probe says so by name and latency and packet
// loss fail to start (the task endpoint answers the ECS agent's 500 "internal error"), leaving
// nothing behind; where it has netem, the probe says available and a second netem fault is refused
// as the ECS agent refuses it.
func TestNetemRealNamespace(t *testing.T) {
	p := newPair(t)
	inj := New(Config{})
	tk := awsvpcTask(p.task)
	ctx := context.Background()
	latency := taskendpoint.Netem{Kind: taskendpoint.NetemLatency, DelayMilliseconds: 50, Sources: []string{peerAddr}, FlowsPercent: 100}
	loss := taskendpoint.Netem{Kind: taskendpoint.NetemPacketLoss, LossPercent: 50, Sources: []string{peerAddr}, FlowsPercent: 100}
	support := Probe(ctx)
	before := sh(t, "nsenter", "--net="+p.task.Path(), "tc", "qdisc", "show", "dev", AWSVPCInterface)

	if !support.Available {
		assert.Contains(t, support.Reason, "tc cannot add the prio and netem qdiscs faults need")
		for _, f := range []taskendpoint.Netem{latency, loss} {
			err := inj.StartNetem(ctx, tk, f)
			require.Error(t, err)
			assert.False(t, errors.Is(err, taskendpoint.ErrLatencyRunning) || errors.Is(err, taskendpoint.ErrPacketLossRunning))
		}
		l, pl, err := inj.NetemRunning(ctx, tk)
		require.NoError(t, err)
		assert.False(t, l || pl)
		assert.Equal(t, before, sh(t, "nsenter", "--net="+p.task.Path(), "tc", "qdisc", "show", "dev", AWSVPCInterface))
		return
	}
	assert.Empty(t, support.Reason)
	require.NoError(t, inj.StartNetem(ctx, tk, latency))
	l, pl, err := inj.NetemRunning(ctx, tk)
	require.NoError(t, err)
	assert.True(t, l)
	assert.False(t, pl)
	assert.ErrorIs(t, inj.StartNetem(ctx, tk, latency), taskendpoint.ErrLatencyRunning)
	assert.ErrorIs(t, inj.StartNetem(ctx, tk, loss), taskendpoint.ErrLatencyRunning)
	require.NoError(t, inj.StopNetem(ctx, tk, taskendpoint.NetemLatency))
	assert.Equal(t, before, sh(t, "nsenter", "--net="+p.task.Path(), "tc", "qdisc", "show", "dev", AWSVPCInterface))
}

// Chains a dead agent left, in a restored awsvpc task's namespace and in the namespace host-mode
// tasks use, are removed by RemoveLeftovers; a chain of another name stays.
func TestRemoveLeftoversRealNamespace(t *testing.T) {
	p := newPair(t)
	host := p.peer // stands in for the host's namespace
	inj := New(Config{HostNetNS: host.Path(), HostInterface: func() (string, error) { return "lo", nil }})
	ipt := func(n ns.NetNS, args ...string) {
		sh(t, append([]string{"nsenter", "--net=" + n.Path(), "iptables", "-w", "5"}, args...)...)
	}
	for _, n := range []ns.NetNS{p.task, host} {
		ipt(n, "-N", "ingress-tcp-9000")
		ipt(n, "-A", "ingress-tcp-9000", "-p", "tcp", "-d", "0.0.0.0/0", "--dport", "9000", "-j", "DROP")
		ipt(n, "-I", "INPUT", "-j", "ingress-tcp-9000")
		ipt(n, "-N", "egress-udp-53")
		ipt(n, "-I", "OUTPUT", "-j", "egress-udp-53")
		ipt(n, "-N", "KEEP-ME")
	}
	tk := awsvpcTask(p.task)
	require.NotNil(t, inj.TaskHook(tk), "a task with enableFaultInjection has a hook")
	inj.RemoveLeftovers(context.Background(), []string{tk.Arn})
	for _, n := range []ns.NetNS{p.task, host} {
		rules := saved(t, n)
		assert.NotContains(t, rules, "ingress-tcp-9000")
		assert.NotContains(t, rules, "egress-udp-53")
		assert.Contains(t, rules, ":KEEP-ME")
	}
}

package faultinject

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// exitError returns a real *exec.ExitError: a command that ran and failed.
func exitError(t *testing.T) error {
	t.Helper()
	err := exec.Command("false").Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit))
	return err
}

// fakeRun is a runFunc that records each command ("NETNS: name args", and its input) and answers
// by the first rule whose prefix the command has.
type fakeRun struct {
	mu    sync.Mutex
	calls []string
	stdin []string
	rules []rule
}

type rule struct {
	prefix string
	out    string
	err    error
}

func (f *fakeRun) run(_ context.Context, netns, stdin, name string, args ...string) ([]byte, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, netns+": "+cmd)
	if stdin != "" {
		f.stdin = append(f.stdin, stdin)
	}
	for _, r := range f.rules {
		if strings.HasPrefix(cmd, r.prefix) {
			return []byte(r.out), r.err
		}
	}
	return nil, nil
}

func newFake(rules ...rule) (*Injector, *fakeRun) {
	f := &fakeRun{rules: rules}
	inj := New(Config{HostInterface: func() (string, error) { return "ens5", nil }})
	inj.run = f.run
	return inj, f
}

// hostTask is a host-mode task: its faults go to the agent's namespace (netns "") and ens5.
func hostTask() *task.Task {
	return &task.Task{Arn: "arn:aws:ecs:us-west-2:1:task/c/h", NetworkMode: task.NetworkHost, EnableFaultInjection: true}
}

const (
	latencyJSON = `[{"kind":"netem","handle":"200:","parent":"100:1","options":{"limit":1000,"delay":{"delay":0.1,"jitter":0.01,"correlation":0},"ecn":false,"gap":0}}]`
	lossJSON    = `[{"kind":"netem","handle":"200:","parent":"100:1","options":{"limit":1000,"loss-random":{"loss":0.25,"correlation":0},"ecn":false,"gap":0}}]`
)

// The black hole's commands are the ECS agent's, in its order, for both families, each source
// filtered in its own family.
func TestStartBlackholeCommands(t *testing.T) {
	inj, f := newFake(rule{prefix: "iptables -w 5 -C", err: exitError(t)})
	err := inj.StartBlackholePort(context.Background(), hostTask(), taskendpoint.BlackholePort{Port: 80, Protocol: "tcp",
		TrafficType: "egress", SourcesToFilter: []string{"169.254.170.2", "fd00::/8"}})
	require.NoError(t, err)
	assert.Equal(t, []string{
		": iptables -w 5 -C egress-tcp-80 -p tcp --dport 80 -j DROP",
		": iptables -w 5 -N egress-tcp-80",
		": iptables -w 5 -A egress-tcp-80 -p tcp -d 169.254.170.2 --dport 80 -j ACCEPT",
		": iptables -w 5 -A egress-tcp-80 -p tcp -d 0.0.0.0/0 --dport 80 -j DROP",
		": iptables -w 5 -I OUTPUT -j egress-tcp-80",
		": ip6tables -w 5 -N egress-tcp-80",
		": ip6tables -w 5 -A egress-tcp-80 -p tcp -d fd00::/8 --dport 80 -j ACCEPT",
		": ip6tables -w 5 -A egress-tcp-80 -p tcp -d ::/0 --dport 80 -j DROP",
		": ip6tables -w 5 -I OUTPUT -j egress-tcp-80",
	}, f.calls)
}

// A black hole that runs already is left as it is; a failed start removes what it made; an
// iptables that cannot be run at all is an error, not "not running".
func TestBlackholeRunningAndRollback(t *testing.T) {
	bh := taskendpoint.BlackholePort{Port: 8080, Protocol: "udp", TrafficType: "ingress"}
	inj, f := newFake()
	require.NoError(t, inj.StartBlackholePort(context.Background(), hostTask(), bh))
	assert.Equal(t, []string{": iptables -w 5 -C ingress-udp-8080 -p udp --dport 8080 -j DROP"}, f.calls)

	inj, f = newFake(rule{prefix: "iptables -w 5 -C", err: exitError(t)}, rule{prefix: "iptables -w 5 -I", err: errors.New("iptables: exit status 4")})
	require.Error(t, inj.StartBlackholePort(context.Background(), hostTask(), bh))
	assert.Equal(t, []string{
		": iptables -w 5 -D INPUT -j ingress-udp-8080", ": iptables -w 5 -F ingress-udp-8080", ": iptables -w 5 -X ingress-udp-8080",
		": ip6tables -w 5 -D INPUT -j ingress-udp-8080", ": ip6tables -w 5 -F ingress-udp-8080", ": ip6tables -w 5 -X ingress-udp-8080",
	}, f.calls[len(f.calls)-6:])

	inj, _ = newFake(rule{prefix: "iptables", err: &exec.Error{Name: "iptables", Err: exec.ErrNotFound}})
	_, err := inj.BlackholePortRunning(context.Background(), hostTask(), bh)
	require.Error(t, err)
}

// The netem tree is the ECS agent's: root prio, a 10-band prio, ten 10-band prios, netem on the
// first FlowsPercent bands, u32 filters for the filtered and the impaired addresses, flow hashes.
func TestNetemBatch(t *testing.T) {
	const pm = "priomap 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"
	const hash = "flow hash keys src,dst,proto,proto-src,proto-dst divisor 10"
	got := strings.Split(strings.TrimSuffix(netemBatch("eth0", taskendpoint.Netem{Kind: taskendpoint.NetemLatency, DelayMilliseconds: 100,
		JitterMilliseconds: 10, Sources: []string{"10.0.0.0/8", "fd00::1"}, SourcesToFilter: []string{"10.0.0.2"}, FlowsPercent: 11}), "\n"), "\n")
	want := []string{"qdisc add dev eth0 parent 1:1 handle 10: prio bands 10 " + pm}
	for _, l := range []string{"1 100", "2 101", "3 102", "4 103", "5 104", "6 105", "7 106", "8 107", "9 108", "a 109"} {
		parent, handle, _ := strings.Cut(l, " ")
		want = append(want, "qdisc add dev eth0 parent 10:"+parent+" handle "+handle+": prio bands 10 "+pm)
	}
	for _, l := range []string{"100:1 200", "100:2 201", "100:3 202", "100:4 203", "100:5 204", "100:6 205", "100:7 206", "100:8 207",
		"100:9 208", "100:a 209", "101:1 210"} {
		parent, handle, _ := strings.Cut(l, " ")
		want = append(want, "qdisc add dev eth0 parent "+parent+" handle "+handle+": netem delay 100ms 10ms")
	}
	want = append(want,
		"filter add dev eth0 protocol all parent 1:0 prio 1 u32 match ip dst 10.0.0.2 flowid 1:3",
		"filter add dev eth0 protocol all parent 1:0 prio 2 u32 match ip dst 10.0.0.0/8 flowid 1:1",
		"filter add dev eth0 protocol all parent 1:0 prio 2 u32 match ip6 dst fd00::1 flowid 1:1",
		"filter add dev eth0 protocol all parent 10: handle 1 prio 2 "+hash+" baseclass 10:1")
	for i := range 10 {
		want = append(want, fmt.Sprintf("filter add dev eth0 protocol all parent %d: handle %d prio 2 %s baseclass %d:1", 100+i, i+1, hash, 100+i))
	}
	assert.Equal(t, want, got)

	loss := netemBatch("eth0", taskendpoint.Netem{Kind: taskendpoint.NetemPacketLoss, LossPercent: 25, Sources: []string{"0.0.0.0/0"}, FlowsPercent: 100})
	assert.Contains(t, loss, "qdisc add dev eth0 parent 109:a handle 299: netem loss 25%\n")
	assert.NotContains(t, loss, "handle 300:")
}

// One netem fault at a time: a second is refused by kind before any tc change, as the ECS agent
// refuses it; status tells latency from loss by netem's loss-random.
func TestNetemOneAtATime(t *testing.T) {
	latency := taskendpoint.Netem{Kind: taskendpoint.NetemLatency, DelayMilliseconds: 1, Sources: []string{"10.0.0.1"}, FlowsPercent: 100}
	loss := taskendpoint.Netem{Kind: taskendpoint.NetemPacketLoss, LossPercent: 5, Sources: []string{"10.0.0.1"}, FlowsPercent: 100}
	for _, tc := range []struct {
		name, shown      string
		want             error
		isLatency, isLos bool
	}{
		{"latency runs", latencyJSON, taskendpoint.ErrLatencyRunning, true, false},
		{"loss runs", lossJSON, taskendpoint.ErrPacketLossRunning, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj, f := newFake(rule{prefix: "tc -j q show dev ens5 parent 100:1", out: tc.shown})
			for _, n := range []taskendpoint.Netem{latency, loss} {
				assert.ErrorIs(t, inj.StartNetem(context.Background(), hostTask(), n), tc.want)
			}
			l, pl, err := inj.NetemRunning(context.Background(), hostTask())
			require.NoError(t, err)
			assert.Equal(t, []bool{tc.isLatency, tc.isLos}, []bool{l, pl})
			for _, c := range f.calls {
				assert.NotContains(t, c, "add")
			}
		})
	}
}

// Where the kernel has no netem, the start fails and the root it added is removed; with no root
// added (no prio either, as on this machine), nothing is removed.
func TestNetemStartFailureRollsBack(t *testing.T) {
	n := taskendpoint.Netem{Kind: taskendpoint.NetemLatency, DelayMilliseconds: 1, Sources: []string{"10.0.0.1"}, FlowsPercent: 100}
	inj, f := newFake(rule{prefix: "tc -j q show", out: "[]"}, rule{prefix: "tc -batch -", err: exitError(t)})
	require.Error(t, inj.StartNetem(context.Background(), hostTask(), n))
	assert.Equal(t, []string{": tc qdisc del dev ens5 parent 1:1 handle 10:", ": tc qdisc del dev ens5 root handle 1: prio"}, f.calls[len(f.calls)-2:])

	inj, f = newFake(rule{prefix: "tc -j q show", out: "[]"}, rule{prefix: "tc qdisc add", err: exitError(t)})
	require.Error(t, inj.StartNetem(context.Background(), hostTask(), n))
	assert.Equal(t, []string{": tc -j q show dev ens5 parent 100:1", ": tc qdisc add dev ens5 root handle 1: prio priomap 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"}, f.calls)
}

// At a host-mode task's stop, the faults it started are removed, and nothing else of the host's.
func TestStopRemovesHostTaskFaults(t *testing.T) {
	inj, f := newFake(rule{prefix: "iptables -w 5 -C", err: exitError(t)}, rule{prefix: "tc -j q show", out: "[]"})
	tk := hostTask()
	ctx := context.Background()
	require.NoError(t, inj.StartBlackholePort(ctx, tk, taskendpoint.BlackholePort{Port: 53, Protocol: "udp", TrafficType: "egress"}))
	require.NoError(t, inj.StartNetem(ctx, tk, taskendpoint.Netem{Kind: taskendpoint.NetemPacketLoss, LossPercent: 5, Sources: []string{"10.0.0.1"}, FlowsPercent: 1}))
	f.calls = nil
	inj.removeTaskFaults(ctx, tk, logger.Nop())
	assert.Equal(t, []string{
		": iptables -w 5 -D OUTPUT -j egress-udp-53", ": iptables -w 5 -F egress-udp-53", ": iptables -w 5 -X egress-udp-53",
		": ip6tables -w 5 -D OUTPUT -j egress-udp-53", ": ip6tables -w 5 -F egress-udp-53", ": ip6tables -w 5 -X egress-udp-53",
		": tc qdisc del dev ens5 parent 1:1 handle 10:", ": tc qdisc del dev ens5 root handle 1: prio",
	}, f.calls)
	f.calls = nil
	inj.removeTaskFaults(ctx, tk, logger.Nop())
	assert.Empty(t, f.calls, "a second stop has nothing left to remove")
	assert.Nil(t, inj.TaskHook(&task.Task{Arn: "x", NetworkMode: task.NetworkHost}), "a task without enableFaultInjection has no hook")
}

// The probe names what is missing: a tool, a working iptables, or tc's prio and netem qdiscs.
func TestProbeReasons(t *testing.T) {
	all := func(string) (string, error) { return "/usr/sbin/x", nil }
	ok := func(context.Context, string, string, string, ...string) ([]byte, error) { return nil, nil }
	assert.Equal(t, Support{Available: true}, probe(context.Background(), all, ok))

	noTC := func(name string) (string, error) {
		if name == "tc" {
			return "", exec.ErrNotFound
		}
		return "/usr/sbin/" + name, nil
	}
	assert.Equal(t, Support{Reason: "tc is not installed: executable file not found in $PATH"}, probe(context.Background(), noTC, ok))

	noNetem := func(_ context.Context, _, stdin, name string, args ...string) ([]byte, error) {
		if stdin != "" {
			return nil, errors.New("tc -batch -: exit status 2: Error: Specified qdisc kind is unknown.")
		}
		return nil, nil
	}
	assert.Equal(t, Support{Reason: "tc cannot add the prio and netem qdiscs faults need (is sch_netem in the kernel?): tc -batch -: exit status 2: Error: Specified qdisc kind is unknown."},
		probe(context.Background(), all, noNetem))
}

func TestRouteInterface(t *testing.T) {
	const table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n" +
		"ens5\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
	iface, err := routeInterface(strings.NewReader(table))
	require.NoError(t, err)
	assert.Equal(t, "ens5", iface)
	_, err = routeInterface(strings.NewReader(table[:strings.Index(table, "ens5")]))
	require.Error(t, err)
}

// Package faultinject applies the network faults a task with enableFaultInjection asks for through
// the task endpoint, inside the task's network namespace (an awsvpc task's; the host's own for a
// host-mode task), as the Amazon ECS agent does (ecs-agent/tmds/handlers/fault/v1/handlers):
//
//	network-blackhole-port   iptables and ip6tables chains named TRAFFICTYPE-PROTOCOL-PORT
//	                         (ingress-tcp-8080), jumped to first from INPUT (ingress) or OUTPUT
//	                         (egress): ACCEPT for each of SourcesToFilter, then DROP for the rest
//	network-latency,         a tc tree on each of the task's interfaces (eth0 for awsvpc, the
//	network-packet-loss      default route's for host mode): root prio 1: whose band 1:1 leads
//	                         through prio 10: to ten prio 100:…109: and netem qdiscs 200:… on
//	                         FlowsPercent of the 100 bands; u32 filters send SourcesToFilter to band
//	                         1:3 (untouched) and Sources to 1:1, flow hash filters spread the flows
//
// The commands run inside the namespace through nsenter --net, bounded by the caller's context.
// One request at a time changes a namespace. A task has one latency or packet-loss fault at most;
// black holes of different ports, protocols or traffic types add up.
//
// Faults do not outlive their task, nor an agent restart (as with the ECS agent, whose faults are
// an experiment's and end with it): the Injector is an engine feature whose stop hook removes a
// task's faults before its containers stop (its cleanup hook, any a request started meanwhile), and
// at agent start RemoveLeftovers sweeps the host's namespace and those of the restored tasks that
// allow faults of every chain and tc tree of the shapes above. In the host's namespace that also removes a chain of the same name the operator
// made (ingress-tcp-22); Berth makes no other chain of these names.
package faultinject

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// AWSVPCInterface is the interface of an awsvpc task's namespace its faults go to: its ENI (in local
// mode, the local network); the task bridge, which leads to the task endpoint, is left alone.
const AWSVPCInterface = "eth0"

// hookTimeout bounds the removal of one task's faults at its stop, and each namespace's sweep.
const hookTimeout = 20 * time.Second

// waitDelay is how long a command may hold its output open after it was killed.
const waitDelay = time.Second

// runFunc runs name with args inside netns ("" : the agent's own), stdin as its input, and returns
// its combined output. An error wrapping *exec.ExitError means the command ran and failed.
type runFunc func(ctx context.Context, netns, stdin, name string, args ...string) ([]byte, error)

// Config is what New needs; every field may be left zero.
type Config struct {
	Logger *logger.Logger // nil: nothing is logged
	// HostInterface returns the host's interface host-mode tasks' faults go to; nil: the interface
	// of the default route (/proc/net/route).
	HostInterface func() (string, error)
	// HostNetNS is the namespace host-mode tasks' faults go to; "": the agent's own. Tests give one
	// that stands in for the host's.
	HostNetNS string
}

// Injector applies and removes faults. It is the agent's taskendpoint.FaultInjector and an engine
// feature (stop hook and recovery). It is safe for concurrent use.
type Injector struct {
	log       *logger.Logger
	run       runFunc
	hostIface func() (string, error)
	hostNetNS string

	mu       sync.Mutex
	locks    map[string]*nsLock // by namespace ("" : the agent's own), while a request holds or waits for it
	started  map[string]*startedFaults
	restored map[string]string // ARN → namespace of the restored awsvpc tasks, until RemoveLeftovers
}

// nsLock serialises the requests that change one namespace; users counts the requests holding or
// waiting for it, guarded by Injector.mu, so that it is dropped with the last one: a namespace goes
// with its task, and so must its lock.
type nsLock struct {
	mu    sync.Mutex
	users int
}

// startedFaults are the faults the agent started for one task, which its stop removes.
type startedFaults struct {
	blackholes map[string]string // chain → the built-in chain that jumps to it
	netem      bool
}

var (
	_ taskendpoint.FaultInjector = (*Injector)(nil)
	_ engine.Feature             = (*Injector)(nil)
	_ engine.Recoverer           = (*Injector)(nil)
)

// New returns an injector.
func New(cfg Config) *Injector {
	if cfg.Logger == nil {
		cfg.Logger = logger.Nop()
	}
	if cfg.HostInterface == nil {
		cfg.HostInterface = defaultRouteInterface
	}
	return &Injector{log: cfg.Logger, run: runInNetns, hostIface: cfg.HostInterface, hostNetNS: cfg.HostNetNS,
		locks: map[string]*nsLock{}, started: map[string]*startedFaults{}, restored: map[string]string{}}
}

// target is where a task's faults go.
type target struct {
	arn    string
	netns  string // "" : the agent's own
	ifaces []string
}

// targetOf returns t's target: an awsvpc task's namespace and ENI, or the host's for a host-mode
// task. It fails for other modes and for an awsvpc task whose namespace is not set up.
func (inj *Injector) targetOf(t *task.Task) (target, error) {
	switch t.NetworkMode {
	case task.NetworkAWSVPC:
		ns := t.NetworkNamespace()
		if ns == "" {
			return target{}, fmt.Errorf("task %s: %w: %w: its network namespace is not set up", t.Arn, taskendpoint.ErrNoFaultTarget, errdefs.ErrFailedPrecondition)
		}
		if _, err := os.Stat(ns); err != nil {
			return target{}, fmt.Errorf("task %s: %w: network namespace: %w", t.Arn, taskendpoint.ErrNoFaultTarget, err)
		}
		return target{arn: t.Arn, netns: ns, ifaces: []string{AWSVPCInterface}}, nil
	case task.NetworkHost:
		iface, err := inj.hostIface()
		if err != nil {
			return target{}, fmt.Errorf("task %s: %w: the host's interface: %w", t.Arn, taskendpoint.ErrNoFaultTarget, err)
		}
		return target{arn: t.Arn, netns: inj.hostNetNS, ifaces: []string{iface}}, nil
	}
	return target{}, fmt.Errorf("task %s: %w: faults need networkMode awsvpc or host, not %s", t.Arn, errdefs.ErrInvalidArgument, t.NetworkMode)
}

// lock locks the namespace netns and returns its unlock, which forgets the lock once no request
// holds or waits for it.
func (inj *Injector) lock(netns string) func() {
	inj.mu.Lock()
	l, ok := inj.locks[netns]
	if !ok {
		l = &nsLock{}
		inj.locks[netns] = l
	}
	l.users++
	inj.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		inj.mu.Lock()
		defer inj.mu.Unlock()
		if l.users--; l.users == 0 {
			delete(inj.locks, netns)
		}
	}
}

// record notes (on) or forgets a fault started for a task.
func (inj *Injector) record(arn string, change func(*startedFaults)) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	s, ok := inj.started[arn]
	if !ok {
		s = &startedFaults{blackholes: map[string]string{}}
		inj.started[arn] = s
	}
	change(s)
	if len(s.blackholes) == 0 && !s.netem {
		delete(inj.started, arn)
	}
}

// runInNetns is the agent's runFunc: nsenter --net=NETNS for a namespace, the command itself for the
// host's.
func runInNetns(ctx context.Context, netns, stdin, name string, args ...string) ([]byte, error) {
	if netns != "" {
		args = append([]string{"--net=" + netns, "--", name}, args...)
		name = "nsenter"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = waitDelay
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("%s: %w", name, ctx.Err())
		}
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, brief(out))
	}
	return out, nil
}

// isExit reports whether err is a command's own failure (it ran and exited non-zero).
func isExit(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit)
}

// brief is a command's output for an error: its first line, at most 200 bytes.
func brief(out []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	if len(line) > 200 {
		line = line[:200]
	}
	return string(line)
}

// defaultRouteInterface returns the interface of the host's IPv4 default route.
func defaultRouteInterface() (string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return routeInterface(f)
}

// routeInterface reads /proc/net/route's table and returns the interface of its first default
// route (destination and mask 0).
func routeInterface(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: no IPv4 default route", errdefs.ErrNotFound)
}

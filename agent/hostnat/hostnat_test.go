package hostnat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// The rules, as `iptables -S` prints them (the comment with a colon in double quotes).
const (
	wantGuardJump  = "-t filter -A INPUT -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT"
	wantNATJump    = "-t nat -A PREROUTING -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT"
	wantHostJump   = "-t nat -A OUTPUT -m comment --comment berth-task-endpoint -j BERTH-TASK-ENDPOINT-HOST"
	wantRedirect   = "-t nat -A BERTH-TASK-ENDPOINT-HOST -d 169.254.170.2/32 -p tcp -m tcp --dport 80 -m comment --comment berth-task-endpoint -j REDIRECT --to-ports 51679"
	wantDNATMarked = "-t nat -A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i docker0 -p tcp -m tcp --dport 80 -m comment --comment berth-task-endpoint:set-route_localnet -j DNAT --to-destination 127.0.0.1:51679"
	wantDNATPlain  = "-t nat -A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i docker0 -p tcp -m tcp --dport 80 -m comment --comment berth-task-endpoint -j DNAT --to-destination 127.0.0.1:51679"
	wantGuard      = "-t filter -A BERTH-TASK-ENDPOINT -d 127.0.0.0/8 -i docker0 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment berth-task-endpoint -j DROP"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  rule
		want string
	}{
		{"guard jump", guardJump().rule, wantGuardJump},
		{"nat jump", natJump().rule, wantNATJump},
		{"host jump", hostJump().rule, wantHostJump},
		{"redirect", redirectRule(), wantRedirect},
		{"dnat, route_localnet set by us", dnatRule("docker0", true), wantDNATMarked},
		{"dnat, route_localnet found on", dnatRule("docker0", false), wantDNATPlain},
		{"guard", guardRule("docker0"), wantGuard},
		{"task bridge", dnatRule("ecs-bridge", false), strings.Replace(wantDNATPlain, "docker0", "ecs-bridge", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.got.String()) })
	}
	assert.True(t, guardJump().first, "the guard goes first in INPUT")
	assert.False(t, natJump().first)
	assert.False(t, hostJump().first)
}

func TestConfigBridges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    []string
		invalid bool
	}{
		{"default", Config{}, []string{"docker0"}, false},
		{"named", Config{DockerBridge: "br-1a2b3c4d5e6f"}, []string{"br-1a2b3c4d5e6f"}, false},
		{"task bridges", Config{TaskBridges: []string{"ecs-bridge", "berth.br_2"}}, []string{"docker0", "ecs-bridge", "berth.br_2"}, false},
		{"too long", Config{DockerBridge: "abcdefghijklmnop"}, nil, true},
		{"wildcard", Config{TaskBridges: []string{"veth+"}}, nil, true},
		{"negation", Config{TaskBridges: []string{"!docker0"}}, nil, true},
		{"slash", Config{TaskBridges: []string{"a/b"}}, nil, true},
		{"space", Config{TaskBridges: []string{"a b"}}, nil, true},
		{"empty task bridge", Config{TaskBridges: []string{""}}, nil, true},
		{"twice", Config{TaskBridges: []string{"docker0"}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.bridges()
			if tc.invalid {
				assert.True(t, errdefs.IsInvalidArgument(err), "err = %v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseListed(t *testing.T) {
	for _, tc := range []struct {
		line string
		want listed
		ok   bool
	}{
		{"-N BERTH-TASK-ENDPOINT", listed{}, false},
		{"-P INPUT ACCEPT", listed{}, false},
		{"-A BERTH-TASK-ENDPOINT -d 169.254.170.2/32 -i docker0 -p tcp -m tcp --dport 80 -m comment --comment \"berth-task-endpoint:set-route_localnet\" -j DNAT --to-destination 127.0.0.1:51679",
			listed{"docker0", labelSetLocalnet}, true},
		{"-A BERTH-TASK-ENDPOINT -d 127.0.0.0/8 -i br0 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment berth-task-endpoint -j DROP",
			listed{"br0", label}, true},
		{`-A X -m comment --comment "a \"quoted\" word" -j RETURN`, listed{"", `a "quoted" word`}, true},
	} {
		t.Run(tc.line, func(t *testing.T) {
			got, ok := parseListed(tc.line)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// fakeHost is a host on fakes with docker0 and ecs-bridge, route_localnet off, and records the steps
// Install takes.
func fakeHost() (*host, *fakeIPT, fakeLocalnet, *[]string) {
	ipt, sys := newFakeIPT(), fakeLocalnet{"docker0": false, "ecs-bridge": false, "lo": false}
	var steps []string
	h := &host{ipt: ipt, sys: sys, hook: func(step string) error { steps = append(steps, step); return nil }}
	return h, ipt, sys, &steps
}

// fakeRules is the rules of the fake, rendered as rule.String does, with -N lines for our chains.
func fakeRules(f *fakeIPT) []string {
	var out []string
	for _, d := range f.dump() {
		if c, ok := strings.CutPrefix(d, "chain "); ok {
			if f.user[c] {
				t, ch, _ := strings.Cut(c, "/")
				out = append(out, "-t "+t+" -N "+ch)
			}
			continue
		}
		c, spec, _ := strings.Cut(d, " ")
		t, ch, _ := strings.Cut(c, "/")
		out = append(out, "-t "+t+" -A "+ch+" "+spec)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestInstallTwiceCheckRemove(t *testing.T) {
	ctx := context.Background()
	h, ipt, sys, steps := fakeHost()
	before := ipt.dump()
	cfg := Config{HostNetwork: true, TaskBridges: []string{"ecs-bridge"}}

	require.ErrorIs(t, h.check(ctx, cfg), ErrNotInstalled)
	require.NoError(t, h.install(ctx, cfg))
	want := sorted(
		"-t filter -N BERTH-TASK-ENDPOINT", "-t nat -N BERTH-TASK-ENDPOINT", "-t nat -N BERTH-TASK-ENDPOINT-HOST",
		wantGuardJump, wantNATJump, wantHostJump, wantRedirect,
		wantDNATMarked, strings.Replace(wantDNATMarked, "docker0", "ecs-bridge", 1),
		wantGuard, strings.Replace(wantGuard, "docker0", "ecs-bridge", 1))
	assert.Equal(t, want, fakeRules(ipt))
	assert.Equal(t, fakeLocalnet{"docker0": true, "ecs-bridge": true, "lo": false}, sys)
	require.NoError(t, h.check(ctx, cfg))
	assert.NotEmpty(t, *steps)

	*steps = nil
	require.NoError(t, h.install(ctx, cfg))
	assert.Empty(t, *steps, "a second Install changes nothing")
	assert.Equal(t, want, fakeRules(ipt))

	require.NoError(t, h.remove(ctx))
	assert.Equal(t, before, ipt.dump())
	assert.Equal(t, fakeLocalnet{"docker0": false, "ecs-bridge": false, "lo": false}, sys)
	require.NoError(t, h.remove(ctx), "Remove of nothing")
	assert.Equal(t, before, ipt.dump())
}

func TestInstallKeepsRouteLocalnetFoundOn(t *testing.T) {
	ctx := context.Background()
	h, ipt, sys, _ := fakeHost()
	sys["docker0"] = true
	require.NoError(t, h.install(ctx, Config{}))
	assert.Contains(t, fakeRules(ipt), wantDNATPlain, "no record: the setting was not ours")
	require.NoError(t, h.remove(ctx))
	assert.True(t, sys["docker0"], "Remove leaves a setting it did not make")

	// Found on, then the bridge is made again (the setting back to 0): the next Install turns it on
	// and from then on it is ours to restore.
	require.NoError(t, h.install(ctx, Config{}))
	sys["docker0"] = false
	require.ErrorIs(t, h.check(ctx, Config{}), ErrNotInstalled)
	require.NoError(t, h.install(ctx, Config{}))
	assert.Contains(t, fakeRules(ipt), wantDNATMarked)
	assert.NotContains(t, fakeRules(ipt), wantDNATPlain)
	require.NoError(t, h.check(ctx, Config{}))
	require.NoError(t, h.remove(ctx))
	assert.False(t, sys["docker0"])
}

func TestInstallPrunesWhatConfigNoLongerAsks(t *testing.T) {
	ctx := context.Background()
	h, ipt, sys, _ := fakeHost()
	require.NoError(t, h.install(ctx, Config{HostNetwork: true, TaskBridges: []string{"ecs-bridge"}}))
	require.NoError(t, h.install(ctx, Config{}))
	assert.Equal(t, sorted("-t filter -N BERTH-TASK-ENDPOINT", "-t nat -N BERTH-TASK-ENDPOINT",
		wantGuardJump, wantNATJump, wantDNATMarked, wantGuard), fakeRules(ipt))
	assert.Equal(t, fakeLocalnet{"docker0": true, "ecs-bridge": false, "lo": false}, sys)
	require.NoError(t, h.check(ctx, Config{}))
}

func TestInstallMissingBridgeChangesNothing(t *testing.T) {
	h, ipt, sys, steps := fakeHost()
	before, sysBefore := ipt.dump(), maps.Clone(sys)
	err := h.install(context.Background(), Config{TaskBridges: []string{"ecs-bridge", "nosuch0"}})
	require.Error(t, err)
	assert.True(t, errdefs.IsNotFound(err), "err = %v", err)
	assert.Contains(t, err.Error(), "nosuch0")
	assert.Empty(t, *steps)
	assert.Equal(t, before, ipt.dump())
	assert.Equal(t, sysBefore, sys)
}

// TestInstallRollsBackEveryStep fails each step Install takes in turn, from nothing and from an
// Install of a smaller config, and checks that the failed call leaves everything as it found it.
func TestInstallRollsBackEveryStep(t *testing.T) {
	ctx := context.Background()
	full := Config{HostNetwork: true, TaskBridges: []string{"ecs-bridge"}}
	for _, start := range []struct {
		name string
		cfg  *Config
	}{{"from nothing", nil}, {"from docker0 only", &Config{}}} {
		prepare := func() (*host, *fakeIPT, fakeLocalnet, *[]string) {
			h, ipt, sys, steps := fakeHost()
			if start.cfg != nil {
				require.NoError(t, h.install(ctx, *start.cfg))
			}
			*steps = nil
			return h, ipt, sys, steps
		}
		h, _, _, steps := prepare()
		require.NoError(t, h.install(ctx, full))
		all := slices.Clone(*steps)
		require.NotEmpty(t, all)
		for i, step := range all {
			t.Run(fmt.Sprintf("%s/%d %s", start.name, i, step), func(t *testing.T) {
				h, ipt, sys, _ := prepare()
				before, sysBefore := ipt.dump(), maps.Clone(sys)
				injected := errors.New("injected")
				h.hook = func(s string) error {
					if s == step {
						return injected
					}
					return nil
				}
				err := h.install(ctx, full)
				require.ErrorIs(t, err, injected)
				assert.Contains(t, err.Error(), step)
				assert.Equal(t, before, ipt.dump())
				assert.Equal(t, sysBefore, sys)
			})
		}
	}
}

func TestInstallCancelled(t *testing.T) {
	h, ipt, _, _ := fakeHost()
	before := ipt.dump()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, h.install(ctx, Config{}), context.Canceled)
	assert.Equal(t, before, ipt.dump())
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	cfg := Config{HostNetwork: true}
	for _, tc := range []struct {
		name    string
		breakIt func(*fakeIPT, fakeLocalnet)
		want    string
	}{
		{"guard jump", func(f *fakeIPT, _ fakeLocalnet) { del(f, guardJump().rule) }, wantGuardJump},
		{"nat jump", func(f *fakeIPT, _ fakeLocalnet) { del(f, natJump().rule) }, wantNATJump},
		{"host jump", func(f *fakeIPT, _ fakeLocalnet) { del(f, hostJump().rule) }, wantHostJump},
		{"redirect", func(f *fakeIPT, _ fakeLocalnet) { del(f, redirectRule()) }, wantRedirect},
		{"dnat", func(f *fakeIPT, _ fakeLocalnet) { del(f, dnatRule("docker0", true)) }, wantDNATPlain},
		{"guard", func(f *fakeIPT, _ fakeLocalnet) { del(f, guardRule("docker0")) }, wantGuard},
		{"route_localnet", func(_ *fakeIPT, s fakeLocalnet) { s["docker0"] = false }, "net.ipv4.conf.docker0.route_localnet is 0"},
		{"bridge gone", func(_ *fakeIPT, s fakeLocalnet) { delete(s, "docker0") }, `bridge "docker0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ipt, sys, _ := fakeHost()
			require.NoError(t, h.install(ctx, cfg))
			require.NoError(t, h.check(ctx, cfg))
			tc.breakIt(ipt, sys)
			err := h.check(ctx, cfg)
			require.ErrorIs(t, err, ErrNotInstalled)
			assert.True(t, errdefs.IsNotFound(err))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func del(f *fakeIPT, r rule) {
	if err := f.Delete(r.table, r.chain, r.spec...); err != nil {
		panic(err)
	}
}

func TestMissingIptables(t *testing.T) {
	cfg := Config{IptablesPath: "/nonexistent/iptables"}
	ctx := context.Background()
	for name, err := range map[string]error{"Install": Install(ctx, cfg), "Remove": Remove(ctx, cfg), "Check": Check(ctx, cfg)} {
		assert.ErrorIs(t, err, ErrNoIptables, name)
		assert.True(t, errdefs.IsFailedPrecondition(err), name)
		assert.Contains(t, err.Error(), "Debian package iptables", name)
	}
	ok, err := Installed(ctx, cfg)
	assert.False(t, ok)
	assert.ErrorIs(t, err, ErrNoIptables)
}

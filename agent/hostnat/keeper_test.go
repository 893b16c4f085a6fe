package hostnat

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// countingOps counts the checks a Keeper runs on its host.
type countingOps struct {
	*host
	checks atomic.Int32
}

func (c *countingOps) check(ctx context.Context, cfg Config) error {
	c.checks.Add(1)
	return c.host.check(ctx, cfg)
}

// fakeKeeper is a Keeper of cfg on a fake host (docker0 and ecs-bridge, route_localnet off) with a
// fake clock. fail, when set, fails the Install step it names.
func fakeKeeper(cfg Config) (*Keeper, *countingOps, *fakeIPT, fakeLocalnet, *clockwork.FakeClock, *string) {
	h, ipt, sys, _ := fakeHost()
	fail := new(string)
	h.hook = func(step string) error {
		if step == *fail {
			return errors.New("injected")
		}
		return nil
	}
	clock := clockwork.NewFakeClock()
	k := NewKeeper(KeeperConfig{NAT: cfg, Clock: clock})
	ops := &countingOps{host: h}
	k.ops = ops
	return k, ops, ipt, sys, clock, fail
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestKeeperReinstallsWhatIsMissing: whatever rule or setting disappears, Ensure puts it back and the
// NAT counts as in place; a NAT in place is left as it is.
func TestKeeperReinstallsWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	cfg := Config{HostNetwork: true}
	for _, tc := range []struct {
		name    string
		breakIt func(*fakeIPT, fakeLocalnet)
	}{
		{"nothing", func(*fakeIPT, fakeLocalnet) {}},
		{"guard rule", func(f *fakeIPT, _ fakeLocalnet) { del(f, guardRule("docker0")) }},
		{"guard jump", func(f *fakeIPT, _ fakeLocalnet) { del(f, guardJump().rule) }},
		{"nat jump", func(f *fakeIPT, _ fakeLocalnet) { del(f, natJump().rule) }},
		{"dnat", func(f *fakeIPT, _ fakeLocalnet) { del(f, dnatRule("docker0", true)) }},
		{"redirect", func(f *fakeIPT, _ fakeLocalnet) { del(f, redirectRule()) }},
		{"route_localnet", func(_ *fakeIPT, s fakeLocalnet) { s["docker0"] = false }},
		{"filter table flushed", func(f *fakeIPT, _ fakeLocalnet) {
			del(f, guardJump().rule)
			require.NoError(t, f.ClearAndDeleteChain("filter", ChainGuard))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, _, ipt, sys, _, _ := fakeKeeper(cfg)
			require.ErrorIs(t, k.Err(), errNotChecked, "not in place before the first Ensure")
			require.NoError(t, k.Ensure(ctx))
			want := fakeRules(ipt)
			require.Contains(t, want, wantGuard)
			_, changed := k.Missing()

			tc.breakIt(ipt, sys)
			require.NoError(t, k.Ensure(ctx))
			assert.Equal(t, want, fakeRules(ipt))
			assert.True(t, sys["docker0"], "route_localnet is on again")
			assert.NoError(t, k.Err())
			reason, _ := k.Missing()
			assert.Empty(t, reason)
			assert.False(t, closed(changed), "repaired within one Ensure: the NAT never counted as missing")
		})
	}
}

// TestKeeperGuardCannotBeInstalled: when the guard is gone and cannot be put back, route_localnet is
// turned off (also when the record that Install turned it on went with a flush), the NAT counts as
// missing with the error, and Missing's channel tells; once the guard can be installed, all is back.
func TestKeeperGuardCannotBeInstalled(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		breakIt func(*fakeIPT)
	}{
		{"guard rule deleted", func(f *fakeIPT) { del(f, guardRule("docker0")) }},
		{"everything flushed", func(f *fakeIPT) {
			del(f, guardJump().rule)
			del(f, natJump().rule)
			require.NoError(t, f.ClearAndDeleteChain("filter", ChainGuard))
			require.NoError(t, f.ClearAndDeleteChain("nat", ChainNAT))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, _, ipt, sys, _, fail := fakeKeeper(Config{})
			require.NoError(t, k.Ensure(ctx))
			want := fakeRules(ipt)
			require.True(t, sys["docker0"])
			_, changed := k.Missing()

			tc.breakIt(ipt)
			*fail = "add rule " + guardRule("docker0").String()
			err := k.Ensure(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "injected")
			assert.False(t, sys["docker0"], "route_localnet is off while the guard is missing")
			assert.Equal(t, err, k.Err())
			reason, now := k.Missing()
			assert.Contains(t, reason, "waiting for the task endpoint's NAT at 169.254.170.2")
			assert.Contains(t, reason, "injected")
			assert.True(t, closed(changed), "Missing's channel tells the NAT went missing")

			*fail = ""
			require.NoError(t, k.Ensure(ctx))
			assert.Equal(t, want, fakeRules(ipt), "the rules are back, with the record that route_localnet is ours")
			assert.True(t, sys["docker0"])
			assert.NoError(t, k.Err())
			reason, _ = k.Missing()
			assert.Empty(t, reason)
			assert.True(t, closed(now), "Missing's channel tells the NAT is back")
		})
	}
}

// TestKeeperLeavesRouteLocalnetWithTheGuard: an install that fails elsewhere than the guard (the DNAT
// rule) keeps route_localnet as it was where the guard is in force.
func TestKeeperLeavesRouteLocalnetWithTheGuard(t *testing.T) {
	ctx := context.Background()
	k, _, ipt, sys, _, fail := fakeKeeper(Config{})
	require.NoError(t, k.Ensure(ctx))
	del(ipt, dnatRule("docker0", true))
	*fail = "add rule " + dnatRule("docker0", true).String()
	require.Error(t, k.Ensure(ctx))
	assert.Contains(t, fakeRules(ipt), wantGuard)
	assert.True(t, sys["docker0"], "the guard is in force: route_localnet is left on")
}

// TestKeeperRunChecksPeriodicallyAndSoonerAfterAFailure: Run checks every interval while the NAT is
// in place, and after a failure again after 1 s, then 2 s, until it is back.
func TestKeeperRunChecksPeriodicallyAndSoonerAfterAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	k, ops, ipt, sys, clock, fail := fakeKeeper(Config{})
	require.NoError(t, k.Ensure(ctx))
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// advance moves the clock on by d and returns once Run waits again (having run any Ensure due).
	advance := func(d time.Duration) {
		t.Helper()
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(d)
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
	}
	checks := func() int32 { return ops.checks.Load() }
	require.Equal(t, int32(1), checks())

	advance(DefaultCheckInterval - time.Millisecond)
	assert.Equal(t, int32(1), checks(), "not before the interval")
	advance(time.Millisecond)
	assert.Equal(t, int32(2), checks(), "a check once the interval is over")

	del(ipt, guardRule("docker0"))
	advance(DefaultCheckInterval)
	assert.Equal(t, int32(3), checks())
	assert.Contains(t, fakeRules(ipt), wantGuard, "the rule that disappeared is back")
	require.NoError(t, k.Err())

	del(ipt, guardRule("docker0"))
	*fail = "add rule " + guardRule("docker0").String()
	advance(DefaultCheckInterval)
	require.Error(t, k.Err())
	assert.False(t, sys["docker0"])
	advance(time.Second)
	assert.Equal(t, int32(5), checks(), "1 s after a failure")
	advance(time.Second)
	assert.Equal(t, int32(5), checks(), "then 2 s")
	advance(time.Second)
	assert.Equal(t, int32(6), checks())

	*fail = ""
	advance(4 * time.Second)
	assert.Equal(t, int32(7), checks())
	require.NoError(t, k.Err())
	assert.Contains(t, fakeRules(ipt), wantGuard)
	assert.True(t, sys["docker0"])
	advance(time.Second)
	assert.Equal(t, int32(7), checks(), "back in place: the interval again")
}

// TestKeeperTaskBridges: a task bridge is served while it exists and left out once it is gone (its
// rules, which match nothing then, stay for when it is back); AddTaskBridge installs one at once and
// refuses a missing or invalid one.
func TestKeeperTaskBridges(t *testing.T) {
	ctx := context.Background()
	k, _, ipt, sys, _, _ := fakeKeeper(Config{TaskBridges: []string{"awsvpc-br"}})
	require.NoError(t, k.Ensure(ctx), "a task bridge that does not exist yet is left out")
	assert.NotContains(t, fakeRules(ipt), guardRule("ecs-bridge").String())

	require.NoError(t, k.AddTaskBridge(ctx, "ecs-bridge"))
	assert.Contains(t, fakeRules(ipt), guardRule("ecs-bridge").String())
	assert.True(t, sys["ecs-bridge"])

	sys["awsvpc-br"] = false
	require.NoError(t, k.Ensure(ctx))
	assert.Contains(t, fakeRules(ipt), guardRule("awsvpc-br").String(), "a configured task bridge once it exists")

	delete(sys, "ecs-bridge")
	require.NoError(t, k.Ensure(ctx), "a bridge that is gone is left out")
	assert.Contains(t, fakeRules(ipt), guardRule("ecs-bridge").String())
	sys["ecs-bridge"] = false
	require.NoError(t, k.Ensure(ctx), "the bridge made again")
	assert.True(t, sys["ecs-bridge"], "is served again")

	err := k.AddTaskBridge(ctx, "nosuch0")
	assert.True(t, errdefs.IsNotFound(err), "err = %v", err)
	err = k.AddTaskBridge(ctx, "veth+")
	assert.True(t, errdefs.IsInvalidArgument(err), "err = %v", err)
	require.NoError(t, k.Ensure(ctx), "an invalid bridge is not kept")
}

// TestKeeperStoppingRecordsNothing: an Ensure cut short by the agent stopping leaves the state as it
// was.
func TestKeeperStoppingRecordsNothing(t *testing.T) {
	k, _, ipt, _, _, _ := fakeKeeper(Config{})
	require.NoError(t, k.Ensure(context.Background()))
	del(ipt, guardRule("docker0"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, k.Ensure(ctx), context.Canceled)
	assert.NoError(t, k.Err())
}

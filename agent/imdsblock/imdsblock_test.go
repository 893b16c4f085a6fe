package imdsblock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// fakeIPT is DOCKER-USER as iptables keeps it: rules in order, each its spec joined by spaces.
type fakeIPT struct {
	exists bool
	rules  []string
}

var _ iptables = (*fakeIPT)(nil)

func (f *fakeIPT) ChainExists(string, string) (bool, error) { return f.exists, nil }

func (f *fakeIPT) List(_, c string) ([]string, error) {
	if !f.exists {
		return nil, errors.New("fake iptables: no chain by that name")
	}
	out := []string{"-N " + c}
	for _, r := range f.rules {
		out = append(out, "-A "+c+" "+r)
	}
	return out, nil
}

func (f *fakeIPT) Insert(_, _ string, pos int, spec ...string) error {
	if !f.exists {
		return errors.New("fake iptables: no chain by that name")
	}
	f.rules = slices.Insert(f.rules, pos-1, strings.Join(spec, " "))
	return nil
}

func (f *fakeIPT) DeleteById(_, _ string, id int) error {
	if id < 1 || id > len(f.rules) {
		return errors.New("fake iptables: index of deletion too big")
	}
	f.rules = slices.Delete(f.rules, id-1, id)
	return nil
}

const (
	ours        = "-d 169.254.169.254/32 -i docker0 -m comment --comment berth-bridge-imds-block -j DROP"
	dockerEnd   = "-j RETURN"
	operatorLog = "-s 10.0.0.0/8 -j LOG"
	operatorOK  = "-s 10.1.0.0/16 -j ACCEPT"
)

// Install puts the rule first, ahead of what Docker and the operator have there, and is idempotent;
// Check then finds it in place.
func TestInstallAndCheck(t *testing.T) {
	ipt := &fakeIPT{exists: true, rules: []string{operatorLog, dockerEnd}}
	require.ErrorIs(t, check(ipt, Config{}), ErrNotInstalled)
	require.NoError(t, install(ipt, Config{}))
	assert.Equal(t, []string{ours, operatorLog, dockerEnd}, ipt.rules)
	require.NoError(t, check(ipt, Config{}))
	require.NoError(t, install(ipt, Config{}))
	assert.Equal(t, []string{ours, operatorLog, dockerEnd}, ipt.rules, "installed once")

	// Behind a harmless rule it is in place still; behind one that may accept, it is not, and Install
	// puts it first again, deleting the copy further down.
	ipt.rules = []string{operatorLog, ours, dockerEnd}
	require.NoError(t, check(ipt, Config{}))
	ipt.rules = []string{operatorOK, ours, dockerEnd}
	assert.ErrorIs(t, check(ipt, Config{}), ErrNotInstalled)
	require.NoError(t, install(ipt, Config{}))
	assert.Equal(t, []string{ours, operatorOK, dockerEnd}, ipt.rules)
}

// A rule of ours for another bridge (the configuration changed) or a copy goes at the next Install;
// a rule that only looks like ours (another target) is not taken for it.
func TestInstallRemovesStaleRules(t *testing.T) {
	stale := strings.Replace(ours, "docker0", "br-old", 1)
	lookalike := strings.Replace(ours, "-j DROP", "-j ACCEPT", 1)
	ipt := &fakeIPT{exists: true, rules: []string{stale, operatorLog, ours, lookalike, ours, dockerEnd}}
	require.NoError(t, install(ipt, Config{}))
	assert.Equal(t, []string{operatorLog, ours, dockerEnd}, ipt.rules)

	ipt.rules = []string{lookalike, dockerEnd}
	assert.ErrorIs(t, check(ipt, Config{}), ErrNotInstalled, "an ACCEPT before it is not the block")
	require.NoError(t, install(ipt, Config{}))
	assert.Equal(t, []string{ours, dockerEnd}, ipt.rules)

	custom := strings.Replace(ours, "docker0", "br-tasks", 1)
	require.NoError(t, install(ipt, Config{DockerBridge: "br-tasks"}))
	assert.Equal(t, []string{custom, dockerEnd}, ipt.rules)
}

// Without DOCKER-USER (the Engine manages no iptables) Install fails with ErrNoDockerUser and Check
// says the block is not in place; a bridge name iptables would read as a pattern is refused.
func TestNoDockerUserAndBadBridge(t *testing.T) {
	ipt := &fakeIPT{}
	err := install(ipt, Config{})
	assert.ErrorIs(t, err, ErrNoDockerUser)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), `"iptables" setting`)
	assert.ErrorIs(t, check(ipt, Config{}), ErrNotInstalled)
	require.NoError(t, remove(ipt), "nothing to remove")

	for _, b := range []string{"docker+", "!docker0", "-j", "a-very-long-bridge-name"} {
		err := install(&fakeIPT{exists: true}, Config{DockerBridge: b})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, b)
	}
}

// Remove deletes every rule of ours, whichever bridge, and nothing else; twice is no error.
func TestRemove(t *testing.T) {
	stale := strings.Replace(ours, "docker0", "br-old", 1)
	ipt := &fakeIPT{exists: true, rules: []string{ours, operatorLog, stale, dockerEnd}}
	require.NoError(t, remove(ipt))
	assert.Equal(t, []string{operatorLog, dockerEnd}, ipt.rules)
	require.NoError(t, remove(ipt))
	assert.Equal(t, []string{operatorLog, dockerEnd}, ipt.rules)
}

// keep re-checks on every tick, installs again when the rule went (a firewall reload) and reports
// that; a failure is reported once until it changes.
func TestKeep(t *testing.T) {
	clock := clockwork.NewFakeClock()
	ipt := &fakeIPT{exists: true, rules: []string{dockerEnd}}
	var mu sync.Mutex
	var reports []string
	failing := errors.New("xtables lock held")
	var fail bool
	checkFn := func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return failing
		}
		return check(ipt, Config{})
	}
	installFn := func(context.Context) error { mu.Lock(); defer mu.Unlock(); return install(ipt, Config{}) }
	ticks := make(chan struct{}, 16)
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			reports = append(reports, "put back")
		} else {
			reports = append(reports, err.Error())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		keep(ctx, clock, time.Minute, func(ctx context.Context) error {
			defer func() { ticks <- struct{}{} }()
			return checkFn(ctx)
		}, installFn, report)
	}()
	tick := func() {
		t.Helper()
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(time.Minute)
		<-ticks
	}
	tick() // missing: put back
	tick() // in place: nothing
	mu.Lock()
	fail = true
	mu.Unlock()
	tick()
	tick()
	mu.Lock()
	fail = false
	ipt.rules = []string{dockerEnd} // a firewall reload
	mu.Unlock()
	tick()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	cancel()
	<-done
	assert.Equal(t, []string{"put back", "xtables lock held", "put back"}, reports)
	assert.Equal(t, []string{ours, dockerEnd}, ipt.rules)
}

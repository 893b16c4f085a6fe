package hostnat

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/berth-agent/berth/agent/errdefs"
)

// fakeIPT keeps rules as iptables does, for the parts this package uses: chains per table, rules in
// order, a chain that is jumped to cannot be deleted, a jump to a missing chain is an error.
type fakeIPT struct {
	chains map[string][]string // "table/chain" → rules, each its spec joined by spaces
	user   map[string]bool     // "table/chain" of the chains made by NewChain
}

var _ iptables = (*fakeIPT)(nil)

func newFakeIPT() *fakeIPT {
	f := &fakeIPT{chains: map[string][]string{}, user: map[string]bool{}}
	for _, c := range []string{"nat/PREROUTING", "nat/INPUT", "nat/OUTPUT", "nat/POSTROUTING",
		"filter/INPUT", "filter/FORWARD", "filter/OUTPUT"} {
		f.chains[c] = nil
	}
	return f
}

// errFakeNoChain stands for iptables' exit status 1 on a chain that does not exist.
var errFakeNoChain = errors.New("fake iptables: no chain/target/match by that name")

func (f *fakeIPT) checkTarget(table string, spec []string) error {
	if i := slices.Index(spec, "-j"); i >= 0 && i+1 < len(spec) && strings.HasPrefix(spec[i+1], "BERTH") {
		if _, ok := f.chains[table+"/"+spec[i+1]]; !ok {
			return fmt.Errorf("fake iptables: chain %q does not exist", spec[i+1])
		}
	}
	return nil
}

func (f *fakeIPT) Exists(table, chain string, spec ...string) (bool, error) {
	if err := f.checkTarget(table, spec); err != nil {
		return false, err
	}
	return slices.Contains(f.chains[table+"/"+chain], strings.Join(spec, " ")), nil
}

func (f *fakeIPT) Append(table, chain string, spec ...string) error {
	return f.Insert(table, chain, len(f.chains[table+"/"+chain])+1, spec...)
}

func (f *fakeIPT) Insert(table, chain string, pos int, spec ...string) error {
	rules, ok := f.chains[table+"/"+chain]
	if !ok {
		return errFakeNoChain
	}
	if err := f.checkTarget(table, spec); err != nil {
		return err
	}
	f.chains[table+"/"+chain] = slices.Insert(rules, pos-1, strings.Join(spec, " "))
	return nil
}

func (f *fakeIPT) Delete(table, chain string, spec ...string) error {
	rules, ok := f.chains[table+"/"+chain]
	if !ok {
		return errFakeNoChain
	}
	i := slices.Index(rules, strings.Join(spec, " "))
	if i < 0 {
		return errors.New("fake iptables: bad rule (does a matching rule exist in that chain?)")
	}
	f.chains[table+"/"+chain] = slices.Delete(rules, i, i+1)
	return nil
}

func (f *fakeIPT) NewChain(table, chain string) error {
	if _, ok := f.chains[table+"/"+chain]; ok {
		return errors.New("fake iptables: chain already exists")
	}
	f.chains[table+"/"+chain] = nil
	f.user[table+"/"+chain] = true
	return nil
}

func (f *fakeIPT) ChainExists(table, chain string) (bool, error) {
	_, ok := f.chains[table+"/"+chain]
	return ok, nil
}

func (f *fakeIPT) ClearAndDeleteChain(table, chain string) error {
	if _, ok := f.chains[table+"/"+chain]; !ok {
		return nil
	}
	for name, rules := range f.chains {
		if !strings.HasPrefix(name, table+"/") {
			continue
		}
		for _, r := range rules {
			if strings.HasSuffix(r, "-j "+chain) {
				return fmt.Errorf("fake iptables: chain %s is still jumped to from %s", chain, name)
			}
		}
	}
	delete(f.chains, table+"/"+chain)
	delete(f.user, table+"/"+chain)
	return nil
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./,!-]+$`)

// List prints a chain as `iptables -S CHAIN` does, quoting a word that needs it.
func (f *fakeIPT) List(table, chain string) ([]string, error) {
	rules, ok := f.chains[table+"/"+chain]
	if !ok {
		return nil, errFakeNoChain
	}
	out := []string{"-N " + chain}
	if !f.user[table+"/"+chain] {
		out = []string{"-P " + chain + " ACCEPT"}
	}
	for _, r := range rules {
		words := strings.Fields(r)
		for i, w := range words {
			if !plainWord.MatchString(w) {
				words[i] = `"` + w + `"`
			}
		}
		out = append(out, "-A "+chain+" "+strings.Join(words, " "))
	}
	return out, nil
}

// dump is every chain of every table with its rules, in a stable order, for comparing states.
func (f *fakeIPT) dump() []string {
	var out []string
	for name, rules := range f.chains {
		out = append(out, "chain "+name)
		for _, r := range rules {
			out = append(out, name+" "+r)
		}
	}
	sort.Strings(out)
	return out
}

// fakeLocalnet is route_localnet per existing interface.
type fakeLocalnet map[string]bool

var _ localnet = fakeLocalnet{}

func (f fakeLocalnet) get(bridge string) (bool, error) {
	on, ok := f[bridge]
	if !ok {
		return false, fmt.Errorf("bridge %q: %w", bridge, errdefs.New(errdefs.ErrNotFound, "no such interface"))
	}
	return on, nil
}

func (f fakeLocalnet) set(bridge string, on bool) error {
	if _, ok := f[bridge]; !ok {
		return fmt.Errorf("bridge %q: %w", bridge, errdefs.New(errdefs.ErrNotFound, "no such interface"))
	}
	f[bridge] = on
	return nil
}

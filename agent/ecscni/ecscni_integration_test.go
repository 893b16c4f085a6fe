//go:build integration

package ecscni

// Integration tests against the real CNI plugins (built by scripts/build-cni-plugins.sh) in real
// network namespaces; they need root and fail without it. A namespace from testutils.NewNS stands
// in for the pause container, a dummy interface in the host namespace for an attached ENI. Traffic
// stays on the host: between the host and namespaces the tests create, or rejected locally.
//
// The tests use their own bridges and task bridge subnet, so they cannot collide with a Berth
// running on the same host (ecs-bridge, 169.254.172.0/22), and run one after another because they
// share those bridges.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	testBridge      = "berth-tbr0"
	testLocalBridge = "berth-tlo0"
	testSubnet      = "169.254.176.0/22"
	testGateway     = "169.254.176.1"
	testLocalSubnet = "172.31.251.0/24"
	testLocalGW     = "172.31.251.1"
)

// pluginsDir builds the plugins once per test binary: into $BERTH_CNI_PLUGINS when set (the
// Makefile sets it), else into .run/cni-plugins of the repository. The script skips the build
// when the directory already holds them.
var pluginsDir = sync.OnceValues(func() (string, error) {
	dir := os.Getenv("BERTH_CNI_PLUGINS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".run", "cni-plugins")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "build-cni-plugins.sh"))
	if err != nil {
		return "", err
	}
	out, err := exec.Command("bash", script, dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", script, dir, err, out)
	}
	return dir, nil
})

type harness struct {
	t       *testing.T
	c       *Client
	state   string
	plugins string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("ecscni integration tests need root (network namespaces, links, iptables)")
	}
	dir, err := pluginsDir()
	require.NoError(t, err, "build the CNI plugins (set BERTH_CNI_PLUGINS to a directory holding them)")
	state := t.TempDir()
	c, err := New(Config{
		PluginDirs:       []string{dir},
		StateDir:         state,
		TaskBridge:       testBridge,
		TaskBridgeSubnet: mustCIDR(t, testSubnet),
		LocalBridge:      testLocalBridge,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, b := range []string{testBridge, testLocalBridge} {
			if l, err := netlink.LinkByName(b); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	})
	return &harness{t: t, c: c, state: state, plugins: dir}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// taskIDPrefix begins every task ID this test process makes, so that the NAT rules of another
// process's tasks on the same host (an agent another package's tests run, which names its network
// LocalNetwork too) are not taken for this one's leftovers.
var taskIDPrefix = "task-" + randHex(3) + "-"

func newTaskID() string { return taskIDPrefix + randHex(8) }

// newNS creates a namespace standing in for a pause container; it is removed at clean-up unless
// the test removed it already (deleteNS).
func (h *harness) newNS() ns.NetNS {
	h.t.Helper()
	n, err := testutils.NewNS()
	require.NoError(h.t, err)
	h.t.Cleanup(func() { deleteNS(n) })
	return n
}

// deleteNS closes and unmounts n, which destroys the namespace and the virtual links in it.
func deleteNS(n ns.NetNS) {
	_ = n.Close()
	_ = testutils.UnmountNS(n)
}

// addSinkLink adds a link that drops what is sent through it: a dummy, or an ifb on kernels
// built without the dummy driver (the two behave alike here: no peer, nothing leaves).
func addSinkLink(attrs netlink.LinkAttrs) error {
	err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = netlink.LinkAdd(&netlink.Ifb{LinkAttrs: attrs})
	}
	return err
}

// newENI adds a dummy interface with a random MAC to the host namespace, standing in for an ENI.
func (h *harness) newENI() (name, mac string) {
	h.t.Helper()
	hw := net.HardwareAddr{0x02, 0xbe, 0, 0, 0, 0}
	_, _ = rand.Read(hw[2:])
	name = "bteni" + randHex(3)
	require.NoError(h.t, addSinkLink(netlink.LinkAttrs{Name: name, HardwareAddr: hw}))
	h.t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil && l.Attrs().HardwareAddr.String() == hw.String() {
			_ = netlink.LinkDel(l)
		}
	})
	return name, hw.String()
}

func (h *harness) eniTask(netns ns.NetNS, mac string) TaskNetwork {
	return TaskNetwork{
		TaskID: newTaskID(),
		NetNS:  netns.Path(),
		ENI: &ENI{
			MAC:           mac,
			IPv4:          *mustCIDR(h.t, "10.199.3.17/24"),
			Gateway:       net.ParseIP("10.199.3.1"),
			DNSServers:    []string{"10.199.0.2"},
			SearchDomains: []string{"ec2.internal"},
		},
	}
}

func (h *harness) localTask(netns ns.NetNS) TaskNetwork {
	return TaskNetwork{TaskID: newTaskID(), NetNS: netns.Path(), LocalSubnet: mustCIDR(h.t, testLocalSubnet)}
}

// setup runs Setup and tears the task down at clean-up.
func (h *harness) setup(tn TaskNetwork) Result {
	h.t.Helper()
	res, err := h.c.Setup(h.t.Context(), tn)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = h.c.Teardown(context.Background(), tn) })
	return res
}

// inNS runs fn in the namespace at path on a locked thread.
func inNS(t *testing.T, path string, fn func()) {
	t.Helper()
	require.NoError(t, ns.WithNetNSPath(path, func(ns.NetNS) error { fn(); return nil }))
}

// nsLink is one interface in a namespace, with its IPv4 addresses and routes.
type nsLink struct {
	mac    string
	addrs  []string // CIDR
	routes map[string]string
}

func readLink(t *testing.T, path, name string) (nsLink, bool) {
	t.Helper()
	var out nsLink
	found := false
	inNS(t, path, func() {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return
		}
		found = true
		out.mac = l.Attrs().HardwareAddr.String()
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		require.NoError(t, err)
		for _, a := range addrs {
			out.addrs = append(out.addrs, a.IPNet.String())
		}
		routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
		require.NoError(t, err)
		out.routes = map[string]string{}
		for _, r := range routes {
			dst := "0.0.0.0/0"
			if r.Dst != nil {
				dst = r.Dst.String()
			}
			gw := ""
			if r.Gw != nil {
				gw = r.Gw.String()
			}
			out.routes[dst] = gw
		}
	})
	return out, found
}

func inSubnet(t *testing.T, cidrAddr, subnet string) bool {
	ip, _, err := net.ParseCIDR(cidrAddr)
	require.NoError(t, err)
	_, n, err := net.ParseCIDR(subnet)
	require.NoError(t, err)
	return n.Contains(ip)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftovers lists what the tasks (all this process made when none is given) still have on the host:
// cache entries, host-local allocations and NAT rules, and, when no task is given, veths on the test
// bridges.
func (h *harness) leftovers(taskIDs ...string) []string {
	h.t.Helper()
	var out []string
	matches := func(s string) bool {
		for _, id := range taskIDs {
			if strings.Contains(s, id) {
				return true
			}
		}
		return len(taskIDs) == 0
	}
	results, _ := os.ReadDir(filepath.Join(h.state, "cache", "results"))
	for _, e := range results {
		if matches(e.Name()) {
			out = append(out, "cache "+e.Name())
		}
	}
	nets, _ := os.ReadDir(filepath.Join(h.state, "ipam"))
	for _, n := range nets {
		files, _ := os.ReadDir(filepath.Join(h.state, "ipam", n.Name()))
		for _, f := range files {
			if net.ParseIP(f.Name()) == nil {
				continue // lock, last_reserved_ip.0
			}
			b, _ := os.ReadFile(filepath.Join(h.state, "ipam", n.Name(), f.Name()))
			if matches(string(b)) {
				out = append(out, fmt.Sprintf("ipam %s/%s %q", n.Name(), f.Name(), b))
			}
		}
	}
	nat, err := exec.Command("iptables", "-w", "-t", "nat", "-S").CombinedOutput()
	require.NoError(h.t, err, "%s", nat)
	for _, line := range strings.Split(string(nat), "\n") {
		if strings.Contains(line, LocalNetwork) && strings.Contains(line, taskIDPrefix) && matches(line) {
			out = append(out, "iptables "+line)
		}
	}
	if len(taskIDs) == 0 {
		out = append(out, h.veths()...)
	}
	return out
}

// veths lists the veths attached to the test bridges (host ends of task interfaces).
func (h *harness) veths() []string {
	h.t.Helper()
	links, err := netlink.LinkList()
	require.NoError(h.t, err)
	bridges := map[int]string{}
	for _, l := range links {
		if l.Attrs().Name == testBridge || l.Attrs().Name == testLocalBridge {
			bridges[l.Attrs().Index] = l.Attrs().Name
		}
	}
	var out []string
	for _, l := range links {
		if b, ok := bridges[l.Attrs().MasterIndex]; ok && l.Type() == "veth" {
			out = append(out, "veth "+l.Attrs().Name+" on "+b)
		}
	}
	return out
}

func TestENITask(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	eniName, mac := h.newENI()
	tn := h.eniTask(netns, mac)
	tn.AdditionalLocalRoutes = []cnitypes.IPNet{*mustCIDR(t, "10.20.0.0/16"), *mustCIDR(t, "1.2.3.4/22"), *mustCIDR(t, testGateway+"/32")}

	res := h.setup(tn)
	require.Equal(t, "10.199.3.17", res.ENIIPv4)
	require.Equal(t, 24, res.ENIPrefixLength)
	require.Equal(t, mac, res.ENIMAC)
	require.Equal(t, "10.199.3.1", res.Gateway)
	require.Equal(t, testGateway, res.BridgeGateway)
	require.Equal(t, []string{"10.199.0.2"}, res.DNSServers)
	require.Equal(t, []string{"ec2.internal"}, res.SearchDomains)

	_, err := netlink.LinkByName(eniName)
	require.ErrorAs(t, err, new(netlink.LinkNotFoundError), "the ENI left the host namespace")

	eth0, ok := readLink(t, netns.Path(), "eth0")
	require.True(t, ok, "eth0 in the task namespace")
	require.Equal(t, mac, eth0.mac)
	require.Equal(t, []string{"10.199.3.17/24"}, eth0.addrs)
	require.Equal(t, "10.199.3.1", eth0.routes["0.0.0.0/0"], "default route via the ENI gateway")

	br, ok := readLink(t, netns.Path(), "ecs-eth0")
	require.True(t, ok, "ecs-eth0 in the task namespace")
	require.Len(t, br.addrs, 1)
	require.True(t, inSubnet(t, br.addrs[0], testSubnet), "%s in %s", br.addrs[0], testSubnet)
	require.Equal(t, br.addrs[0], res.BridgeIPv4+"/22")
	require.Equal(t, testGateway, br.routes["169.254.170.2/32"])
	require.Equal(t, testGateway, br.routes["10.20.0.0/16"])
	require.Equal(t, testGateway, br.routes["1.2.0.0/22"])
	require.Equal(t, testGateway, br.routes[testGateway+"/32"])
	_, hasDefault := br.routes["0.0.0.0/0"]
	require.False(t, hasDefault, "no default route on the task bridge")

	require.NoError(t, h.c.Check(t.Context(), tn))

	again, err := h.c.Setup(t.Context(), tn)
	require.NoError(t, err, "Setup of a task already set up")
	require.Equal(t, res, again)

	t.Run("host and task reach each other over the bridge", func(t *testing.T) {
		// Host → task: a listener in the namespace on the task's bridge address.
		var l net.Listener
		inNS(t, netns.Path(), func() {
			var err error
			l, err = net.Listen("tcp4", net.JoinHostPort(res.BridgeIPv4, "0"))
			require.NoError(t, err)
		})
		acceptOnce(t, l, func() (net.Conn, error) { return net.DialTimeout("tcp4", l.Addr().String(), 3*time.Second) })

		// Task → host: a listener on the bridge gateway in the host namespace.
		hl, err := net.Listen("tcp4", net.JoinHostPort(testGateway, "0"))
		require.NoError(t, err)
		acceptOnce(t, hl, func() (c net.Conn, err error) {
			inNS(t, netns.Path(), func() { c, err = net.DialTimeout("tcp4", hl.Addr().String(), 3*time.Second) })
			return c, err
		})
	})

	t.Run("Check notices a missing interface", func(t *testing.T) {
		other := h.newNS()
		_, otherMAC := h.newENI()
		tn2 := h.eniTask(other, otherMAC)
		tn2.ENI.IPv4 = *mustCIDR(t, "10.199.3.18/24")
		h.setup(tn2)
		inNS(t, other.Path(), func() {
			l, err := netlink.LinkByName("ecs-eth0")
			require.NoError(t, err)
			require.NoError(t, netlink.LinkDel(l))
		})
		require.Error(t, h.c.Check(t.Context(), tn2))
	})

	// Teardown, twice.
	require.NoError(t, h.c.Teardown(t.Context(), tn))
	require.NoError(t, h.c.Teardown(t.Context(), tn))
	require.Empty(t, h.leftovers(tn.TaskID))
	require.Empty(t, h.veths(), "the other task lost its ecs-eth0, so no veth at all")
	back, err := netlink.LinkByName(eniName)
	require.NoError(t, err, "the ENI is back in the host namespace")
	require.Equal(t, mac, back.Attrs().HardwareAddr.String())
	_, ok = readLink(t, netns.Path(), "ecs-eth0")
	require.False(t, ok)
	_, ok = readLink(t, netns.Path(), "eth0")
	require.False(t, ok)
	require.ErrorIs(t, h.c.Check(t.Context(), tn), ErrNotSetUp)
}

// acceptOnce dials l with dial and checks that the connection is accepted and carries a byte.
func acceptOnce(t *testing.T, l net.Listener, dial func() (net.Conn, error)) {
	t.Helper()
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			b := make([]byte, 1)
			_, err = c.Read(b)
			c.Close()
		}
		accepted <- err
	}()
	c, err := dial()
	require.NoError(t, err, "dial %s", l.Addr())
	_, err = c.Write([]byte{1})
	require.NoError(t, err)
	c.Close()
	select {
	case err := <-accepted:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s accepted nothing", l.Addr())
	}
}

func TestStaticBridgeAddress(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	_, mac := h.newENI()
	tn := h.eniTask(netns, mac)
	tn.BridgeIPv4 = mustCIDR(t, "169.254.176.200/22")

	res := h.setup(tn)
	require.Equal(t, "169.254.176.200", res.BridgeIPv4)
	br, ok := readLink(t, netns.Path(), "ecs-eth0")
	require.True(t, ok)
	require.Equal(t, []string{"169.254.176.200/22"}, br.addrs)
	require.Equal(t, testGateway, br.routes["169.254.170.2/32"])

	require.NoError(t, h.c.Teardown(t.Context(), tn))
	require.Empty(t, h.leftovers())
}

func TestBlockIMDS(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	_, mac := h.newENI()
	tn := h.eniTask(netns, mac) // ENI mode: eth0 is a dummy, so even a stray packet would go nowhere
	tn.BlockIMDS = true
	// Additional routes covering IMDS do not re-open it.
	tn.AdditionalLocalRoutes = []cnitypes.IPNet{*mustCIDR(t, "169.254.169.254/32"), *mustCIDR(t, "169.254.0.0/16")}
	h.setup(tn)
	require.NoError(t, h.c.Check(t.Context(), tn))

	// Only dial once the prohibit route is certainly there.
	blocked, err := imdsBlocked(netns.Path())
	require.NoError(t, err)
	require.True(t, blocked)

	var dialErr error
	var elapsed time.Duration
	inNS(t, netns.Path(), func() {
		start := time.Now()
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(IMDSAddress, "80"), 3*time.Second)
		elapsed = time.Since(start)
		if c != nil {
			c.Close()
		}
		dialErr = err
	})
	require.Error(t, dialErr)
	require.Less(t, elapsed, time.Second, "rejected at once, not timed out: %v", dialErr)
	require.True(t, errors.Is(dialErr, syscall.EACCES) || errors.Is(dialErr, syscall.ENETUNREACH) || errors.Is(dialErr, syscall.EHOSTUNREACH), "%v", dialErr)

	// Check notices the block is gone.
	inNS(t, netns.Path(), func() { require.NoError(t, netlink.RouteDel(imdsRoute())) })
	require.ErrorContains(t, h.c.Check(t.Context(), tn), "not blocked")
}

func TestLocalMode(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	tn := h.localTask(netns)
	tn.BlockIMDS = true

	res := h.setup(tn)
	require.Equal(t, testLocalGW, res.Gateway)
	require.Empty(t, res.DNSServers)
	eth0, ok := readLink(t, netns.Path(), "eth0")
	require.True(t, ok)
	require.Len(t, eth0.addrs, 1)
	require.True(t, inSubnet(t, eth0.addrs[0], testLocalSubnet), eth0.addrs[0])
	require.Equal(t, res.ENIIPv4+"/24", eth0.addrs[0])
	require.Equal(t, testLocalGW, eth0.routes["0.0.0.0/0"])
	br, ok := readLink(t, netns.Path(), "ecs-eth0")
	require.True(t, ok)
	require.True(t, inSubnet(t, br.addrs[0], testSubnet))
	require.NotEmpty(t, h.leftovers(tn.TaskID), "NAT rules, veths, allocations while set up")
	require.NoError(t, h.c.Check(t.Context(), tn))

	// The task reaches the local bridge gateway (the host).
	hl, err := net.Listen("tcp4", net.JoinHostPort(testLocalGW, "0"))
	require.NoError(t, err)
	acceptOnce(t, hl, func() (c net.Conn, err error) {
		inNS(t, netns.Path(), func() { c, err = net.DialTimeout("tcp4", hl.Addr().String(), 3*time.Second) })
		return c, err
	})

	require.NoError(t, h.c.Teardown(t.Context(), tn))
	require.NoError(t, h.c.Teardown(t.Context(), tn))
	require.Empty(t, h.leftovers())
}

// TestTeardownAfterNetNSDeleted: the pause container is gone before Teardown.
func TestTeardownAfterNetNSDeleted(t *testing.T) {
	h := newHarness(t)
	for _, mode := range []string{"eni", "local"} {
		t.Run(mode, func(t *testing.T) {
			netns := h.newNS()
			tn := h.localTask(netns)
			eniName := ""
			if mode == "eni" {
				var mac string
				eniName, mac = h.newENI()
				tn = h.eniTask(netns, mac)
			}
			h.setup(tn)
			deleteNS(netns)
			if mode == "eni" {
				// A virtual ENI dies with the namespace; a real one would return to the host.
				eventually(t, "dummy ENI destroyed with its namespace", func() bool {
					_, err := netlink.LinkByName(eniName)
					return err != nil
				})
			}
			require.NoError(t, h.c.Teardown(t.Context(), tn))
			require.NoError(t, h.c.Teardown(t.Context(), tn))
			eventually(t, "nothing left", func() bool { return len(h.leftovers()) == 0 })
		})
	}
}

// TestNetNSPathReused: the pause container died and its /proc/<pid>/ns/net path now names another
// namespace; Teardown must not delete that namespace's interfaces.
func TestNetNSPathReused(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	_, mac := h.newENI()
	tn := h.eniTask(netns, mac)
	h.setup(tn)
	path := netns.Path()
	deleteNS(netns)

	other := h.newNS()
	inNS(t, other.Path(), func() {
		for _, name := range []string{"eth0", "ecs-eth0"} {
			require.NoError(t, addSinkLink(netlink.LinkAttrs{Name: name}))
		}
		lo, err := netlink.LinkByName("lo")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(lo))
	})
	f, err := os.Create(path)
	require.NoError(t, err)
	f.Close()
	require.NoError(t, unix.Mount(other.Path(), path, "none", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH); _ = os.Remove(path) })

	require.NoError(t, h.c.Teardown(t.Context(), tn))
	for _, name := range []string{"eth0", "ecs-eth0"} {
		_, ok := readLink(t, path, name)
		require.True(t, ok, "%s of the other namespace untouched", name)
	}
	eventually(t, "nothing left", func() bool { return len(h.leftovers()) == 0 })
}

// TestRollback: the task bridge fails after the ENI was added; Setup deletes the ENI network.
func TestRollback(t *testing.T) {
	h := newHarness(t)
	if l, err := netlink.LinkByName(testBridge); err == nil {
		require.NoError(t, netlink.LinkDel(l))
	}
	// A non-bridge link where the task bridge should be makes the bridge plugin fail.
	require.NoError(t, addSinkLink(netlink.LinkAttrs{Name: testBridge}))

	netns := h.newNS()
	eniName, mac := h.newENI()
	tn := h.eniTask(netns, mac)
	_, err := h.c.Setup(t.Context(), tn)
	require.ErrorContains(t, err, "add network "+BridgeNetwork)
	require.Empty(t, h.leftovers())
	back, err := netlink.LinkByName(eniName)
	require.NoError(t, err, "the ENI is back in the host namespace")
	require.Equal(t, mac, back.Attrs().HardwareAddr.String())
	_, ok := readLink(t, netns.Path(), "eth0")
	require.False(t, ok)
}

// TestENINotAttached: host-device finds no interface with the MAC; nothing is left behind.
func TestENINotAttached(t *testing.T) {
	h := newHarness(t)
	netns := h.newNS()
	tn := h.eniTask(netns, "02:be:ff:ff:ff:fe")
	_, err := h.c.Setup(t.Context(), tn)
	require.ErrorContains(t, err, "add network "+ENINetwork)
	require.Empty(t, h.leftovers())
}

// TestSetupAgainInNewNetNS: the task's pause container was replaced; Setup removes what was left
// of the first namespace and sets up the new one.
func TestSetupAgainInNewNetNS(t *testing.T) {
	h := newHarness(t)
	first := h.newNS()
	tn := h.localTask(first)
	old := h.setup(tn)
	deleteNS(first)

	second := h.newNS()
	tn.NetNS = second.Path()
	res, err := h.c.Setup(t.Context(), tn)
	require.NoError(t, err)
	require.NoError(t, h.c.Check(t.Context(), tn))
	eth0, ok := readLink(t, second.Path(), "eth0")
	require.True(t, ok)
	require.Equal(t, []string{res.ENIIPv4 + "/24"}, eth0.addrs)
	t.Logf("first namespace had %s, second has %s", old.ENIIPv4, res.ENIIPv4)

	// Teardown needs only the task ID once Setup recorded the networks.
	require.NoError(t, h.c.Teardown(t.Context(), TaskNetwork{TaskID: tn.TaskID}))
	eventually(t, "nothing left", func() bool { return len(h.leftovers()) == 0 })
}

func TestManyTasks(t *testing.T) {
	h := newHarness(t)
	_, mac := h.newENI()
	var ids []string
	for i := range 30 {
		netns := h.newNS()
		tn := h.localTask(netns)
		if i%2 == 0 {
			tn = h.eniTask(netns, mac) // the same ENI, moved back by each teardown
		}
		ids = append(ids, tn.TaskID)
		_, err := h.c.Setup(t.Context(), tn)
		require.NoError(t, err, "task %d", i)
		require.NoError(t, h.c.Teardown(t.Context(), tn), "task %d", i)
		deleteNS(netns)
	}
	require.Empty(t, h.leftovers(ids...))
	require.Empty(t, h.leftovers(), "nothing at all in the cache and allocations")
}

func TestLeftovers(t *testing.T) {
	h := newHarness(t)
	keepNS, goneNS, deadNS := h.newNS(), h.newNS(), h.newNS()
	_, mac := h.newENI()
	keep := h.localTask(keepNS)
	gone := h.eniTask(goneNS, mac)
	dead := h.localTask(deadNS) // namespace deleted before Leftovers
	for _, tn := range []TaskNetwork{keep, gone, dead} {
		h.setup(tn)
	}
	deleteNS(deadNS)
	// An address whose set-up never got as far as libcni's record.
	orphan := "task-orphan" + randHex(4)
	dir := filepath.Join(h.state, "ipam", BridgeNetwork)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "169.254.179.250"), []byte(orphan+"\r\necs-eth0"), 0o600))

	removed, err := h.c.Leftovers(t.Context(), func(id string) bool { return id == keep.TaskID })
	require.NoError(t, err)
	require.ElementsMatch(t, []string{gone.TaskID, dead.TaskID, orphan}, removed)
	eventually(t, "nothing left of the forgotten tasks", func() bool {
		return len(h.leftovers(gone.TaskID, dead.TaskID, orphan)) == 0
	})
	require.Len(t, h.veths(), 2, "only the known local-mode task's two veths")
	_, ok := readLink(t, goneNS.Path(), "eth0")
	require.False(t, ok, "the forgotten task's ENI left its namespace")
	require.NoError(t, h.c.Check(t.Context(), keep), "the known task is untouched")

	removed, err = h.c.Leftovers(t.Context(), func(id string) bool { return id == keep.TaskID })
	require.NoError(t, err)
	require.Empty(t, removed)
}

func TestVerifyPlugins(t *testing.T) {
	h := newHarness(t)
	require.NoError(t, h.c.VerifyPlugins(t.Context()))

	// A copy of the directory without static.
	partial := t.TempDir()
	for _, p := range requiredPlugins {
		if p != "static" {
			require.NoError(t, os.Symlink(filepath.Join(h.plugins, p), filepath.Join(partial, p)))
		}
	}
	c, err := New(Config{PluginDirs: []string{partial}, StateDir: t.TempDir()}, nil)
	require.NoError(t, err)
	err = c.VerifyPlugins(t.Context())
	require.ErrorIs(t, err, ErrPluginNotFound)
	var pe *PluginError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "static", pe.Plugin)
	for _, p := range requiredPlugins {
		if p != "static" {
			require.NotContains(t, err.Error(), "CNI plugin "+p+":")
		}
	}

	// A binary that does not answer VERSION.
	require.NoError(t, os.WriteFile(filepath.Join(partial, "static"), []byte("#!/bin/sh\nexit 3\n"), 0o755))
	err = c.VerifyPlugins(t.Context())
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "static", pe.Plugin)
	require.ErrorContains(t, err, "VERSION")
}

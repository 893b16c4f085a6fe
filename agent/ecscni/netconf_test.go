package ecscni

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

func mustCIDR(t *testing.T, s string) *cnitypes.IPNet {
	t.Helper()
	n, err := cnitypes.ParseCIDR(s) // keeps the host part, as Berth's config does
	require.NoError(t, err)
	return (*cnitypes.IPNet)(n)
}

func newTestClient(t *testing.T) (*Client, string) {
	t.Helper()
	dir := t.TempDir()
	c, err := New(Config{PluginDirs: []string{"/nonexistent"}, StateDir: dir}, nil)
	require.NoError(t, err)
	return c, filepath.Join(dir, "ipam")
}

func testENI(t *testing.T) *ENI {
	return &ENI{
		MAC:           "0A:1B:2C:3D:4E:5F",
		IPv4:          *mustCIDR(t, "10.0.1.5/24"),
		Gateway:       net.ParseIP("10.0.1.1"),
		DNSServers:    []string{"10.0.0.2"},
		SearchDomains: []string{"ec2.internal"},
	}
}

// TestNetworkLists compares the generated network lists with the JSON each plugin is meant to get.
func TestNetworkLists(t *testing.T) {
	c, ipamDir := newTestClient(t)
	ipamJSON := fmt.Sprintf("%q", ipamDir)

	eniList := `{
		"cniVersion": "1.0.0", "name": "berth-eni",
		"plugins": [{
			"type": "host-device", "hwaddr": "0a:1b:2c:3d:4e:5f",
			"ipam": {
				"type": "static",
				"addresses": [{"address": "10.0.1.5/24", "gateway": "10.0.1.1"}],
				"routes": [{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}],
				"dns": {"nameservers": ["10.0.0.2"], "search": ["ec2.internal"]}
			},
			"dns": {"nameservers": ["10.0.0.2"], "search": ["ec2.internal"]}
		}]
	}`
	bridgeList := func(routes string) string {
		return `{
			"cniVersion": "1.0.0", "name": "berth-bridge",
			"plugins": [{
				"type": "bridge", "bridge": "ecs-bridge", "isGateway": true, "ipMasq": false,
				"ipam": {
					"type": "host-local",
					"ranges": [[{"subnet": "169.254.172.0/22", "gateway": "169.254.172.1"}]],
					"dataDir": ` + ipamJSON + `,
					"routes": ` + routes + `
				}
			}]
		}`
	}
	credentialsRoute := `[{"dst": "169.254.170.2/32", "gw": "169.254.172.1"}]`
	localList := func(subnet, gw string) string {
		return `{
			"cniVersion": "1.0.0", "name": "berth-local",
			"plugins": [{
				"type": "bridge", "bridge": "berth-local0", "isGateway": true, "ipMasq": true,
				"ipam": {
					"type": "host-local",
					"ranges": [[{"subnet": "` + subnet + `", "gateway": "` + gw + `"}]],
					"dataDir": ` + ipamJSON + `,
					"routes": [{"dst": "0.0.0.0/0", "gw": "` + gw + `"}]
				}
			}]
		}`
	}

	tests := []struct {
		name   string
		tn     TaskNetwork
		first  string // eth0's list
		bridge string // ecs-eth0's list
	}{
		{
			name:   "ENI",
			tn:     TaskNetwork{TaskID: "t1", ENI: testENI(t)},
			first:  eniList,
			bridge: bridgeList(credentialsRoute),
		},
		{
			name: "ENI without DNS",
			tn: TaskNetwork{TaskID: "t1", ENI: &ENI{
				MAC: "0a:1b:2c:3d:4e:5f", IPv4: *mustCIDR(t, "10.0.1.5/24"), Gateway: net.ParseIP("10.0.1.1"),
			}},
			first: `{
				"cniVersion": "1.0.0", "name": "berth-eni",
				"plugins": [{
					"type": "host-device", "hwaddr": "0a:1b:2c:3d:4e:5f",
					"ipam": {
						"type": "static",
						"addresses": [{"address": "10.0.1.5/24", "gateway": "10.0.1.1"}],
						"routes": [{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}]
					}
				}]
			}`,
			bridge: bridgeList(credentialsRoute),
		},
		{
			name:   "local mode, default subnet",
			tn:     TaskNetwork{TaskID: "t1"},
			first:  localList("172.31.250.0/24", "172.31.250.1"),
			bridge: bridgeList(credentialsRoute),
		},
		{
			name:   "local mode, subnet given with a host part",
			tn:     TaskNetwork{TaskID: "t1", LocalSubnet: mustCIDR(t, "10.9.8.77/24")},
			first:  localList("10.9.8.0/24", "10.9.8.1"),
			bridge: bridgeList(credentialsRoute),
		},
		{
			name:  "static task bridge address",
			tn:    TaskNetwork{TaskID: "t1", ENI: testENI(t), BridgeIPv4: mustCIDR(t, "169.254.172.10/22")},
			first: eniList,
			bridge: `{
				"cniVersion": "1.0.0", "name": "berth-bridge",
				"plugins": [{
					"type": "bridge", "bridge": "ecs-bridge", "isGateway": true, "ipMasq": false,
					"ipam": {
						"type": "static",
						"addresses": [{"address": "169.254.172.10/22", "gateway": "169.254.172.1"}],
						"routes": [{"dst": "169.254.170.2/32", "gw": "169.254.172.1"}]
					}
				}]
			}`,
		},
		{
			name: "additional local routes: masked, deduplicated, after the credentials route",
			tn: TaskNetwork{TaskID: "t1", ENI: testENI(t), AdditionalLocalRoutes: []cnitypes.IPNet{
				*mustCIDR(t, "1.2.3.4/22"), *mustCIDR(t, "5.6.7.8/32"), *mustCIDR(t, "169.254.170.2/32"),
				*mustCIDR(t, "5.6.7.8/32"), *mustCIDR(t, "169.254.172.1/32"),
			}},
			first: eniList,
			bridge: bridgeList(`[
				{"dst": "169.254.170.2/32", "gw": "169.254.172.1"},
				{"dst": "1.2.0.0/22", "gw": "169.254.172.1"},
				{"dst": "5.6.7.8/32", "gw": "169.254.172.1"},
				{"dst": "169.254.172.1/32", "gw": "169.254.172.1"}
			]`),
		},
		{
			name: "additional routes with a static task bridge address",
			tn: TaskNetwork{TaskID: "t1", BridgeIPv4: mustCIDR(t, "169.254.175.254/22"),
				AdditionalLocalRoutes: []cnitypes.IPNet{*mustCIDR(t, "10.11.12.13/32")}},
			first: localList("172.31.250.0/24", "172.31.250.1"),
			bridge: `{
				"cniVersion": "1.0.0", "name": "berth-bridge",
				"plugins": [{
					"type": "bridge", "bridge": "ecs-bridge", "isGateway": true, "ipMasq": false,
					"ipam": {
						"type": "static",
						"addresses": [{"address": "169.254.175.254/22", "gateway": "169.254.172.1"}],
						"routes": [
							{"dst": "169.254.170.2/32", "gw": "169.254.172.1"},
							{"dst": "10.11.12.13/32", "gw": "169.254.172.1"}
						]
					}
				}]
			}`,
		},
		{
			// The IMDS block is a route Berth adds in the namespace, not part of any list.
			name:   "BlockIMDS leaves the lists alone",
			tn:     TaskNetwork{TaskID: "t1", ENI: testENI(t), BlockIMDS: true},
			first:  eniList,
			bridge: bridgeList(credentialsRoute),
		},
		{
			name: "BlockIMDS drops an additional route to IMDS itself, keeps broader ones",
			tn: TaskNetwork{TaskID: "t1", ENI: testENI(t), BlockIMDS: true, AdditionalLocalRoutes: []cnitypes.IPNet{
				*mustCIDR(t, "169.254.169.254/32"), *mustCIDR(t, "169.254.0.0/16"),
			}},
			first: eniList,
			bridge: bridgeList(`[
				{"dst": "169.254.170.2/32", "gw": "169.254.172.1"},
				{"dst": "169.254.0.0/16", "gw": "169.254.172.1"}
			]`),
		},
		{
			name: "without BlockIMDS a route to IMDS is an ordinary additional route",
			tn: TaskNetwork{TaskID: "t1", ENI: testENI(t), AdditionalLocalRoutes: []cnitypes.IPNet{
				*mustCIDR(t, "169.254.169.254/32"),
			}},
			first: eniList,
			bridge: bridgeList(`[
				{"dst": "169.254.170.2/32", "gw": "169.254.172.1"},
				{"dst": "169.254.169.254/32", "gw": "169.254.172.1"}
			]`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lists, err := c.lists(tt.tn)
			require.NoError(t, err)
			require.Len(t, lists, 2)

			wantFirst := ENINetwork
			if tt.tn.ENI == nil {
				wantFirst = LocalNetwork
			}
			require.Equal(t, wantFirst, lists[0].name)
			require.Equal(t, "eth0", lists[0].ifName)
			require.JSONEq(t, tt.first, string(lists[0].conf.Bytes))

			require.Equal(t, BridgeNetwork, lists[1].name)
			require.Equal(t, "ecs-eth0", lists[1].ifName)
			require.JSONEq(t, tt.bridge, string(lists[1].conf.Bytes))

			for _, l := range lists {
				require.Equal(t, "1.0.0", l.conf.CNIVersion)
				require.Equal(t, l.name, l.conf.Name)
				require.Len(t, l.conf.Plugins, 1)
				if tt.tn.BlockIMDS {
					require.NotContains(t, string(l.conf.Bytes), IMDSAddress)
				}
			}
		})
	}
}

func TestNetworkListsCustomBridge(t *testing.T) {
	c, err := New(Config{
		PluginDirs: []string{"/x"}, StateDir: t.TempDir(),
		TaskBridge: "tb0", TaskBridgeSubnet: mustCIDR(t, "169.254.176.9/22"), LocalBridge: "lb0",
	}, nil)
	require.NoError(t, err)
	lists, err := c.lists(TaskNetwork{TaskID: "t", AdditionalLocalRoutes: []cnitypes.IPNet{*mustCIDR(t, "10.0.0.0/8")}})
	require.NoError(t, err)
	require.Contains(t, string(lists[0].conf.Bytes), `"bridge":"lb0"`)
	b := string(lists[1].conf.Bytes)
	require.Contains(t, b, `"bridge":"tb0"`)
	require.Contains(t, b, `"ranges":[[{"subnet":"169.254.176.0/22","gateway":"169.254.176.1"}]]`)
	require.Contains(t, b, `{"dst":"10.0.0.0/8","gw":"169.254.176.1"}`)
}

func TestInvalidTaskNetwork(t *testing.T) {
	c, _ := newTestClient(t)
	eni := func(f func(*ENI)) *ENI { e := testENI(t); f(e); return e }
	tests := []struct {
		name string
		tn   TaskNetwork
	}{
		{"ARN as task ID", TaskNetwork{TaskID: "arn:aws:ecs:us-east-1:1:task/c/abc"}},
		{"empty task ID", TaskNetwork{}},
		{"bad MAC", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.MAC = "zz" })}},
		{"IPv6 ENI address", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.IPv4 = *mustCIDR(t, "2001:db8::5/64") })}},
		{"ENI network address", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.IPv4 = *mustCIDR(t, "10.0.1.0/24") })}},
		{"gateway outside the subnet", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.Gateway = net.ParseIP("10.0.2.1") })}},
		{"gateway is the address", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.Gateway = net.ParseIP("10.0.1.5") })}},
		{"no gateway", TaskNetwork{TaskID: "t", ENI: eni(func(e *ENI) { e.Gateway = nil })}},
		{"bridge address outside the bridge subnet", TaskNetwork{TaskID: "t", BridgeIPv4: mustCIDR(t, "169.254.180.10/22")}},
		{"bridge address with another prefix", TaskNetwork{TaskID: "t", BridgeIPv4: mustCIDR(t, "169.254.172.10/24")}},
		{"bridge address is the gateway", TaskNetwork{TaskID: "t", BridgeIPv4: mustCIDR(t, "169.254.172.1/22")}},
		{"default route as additional route", TaskNetwork{TaskID: "t", AdditionalLocalRoutes: []cnitypes.IPNet{*mustCIDR(t, "0.0.0.0/0")}}},
		{"IPv6 additional route", TaskNetwork{TaskID: "t", AdditionalLocalRoutes: []cnitypes.IPNet{*mustCIDR(t, "2001:db8::/32")}}},
		{"local subnet overlapping the task bridge", TaskNetwork{TaskID: "t", LocalSubnet: mustCIDR(t, "169.254.0.0/16")}},
		{"local subnet too small", TaskNetwork{TaskID: "t", LocalSubnet: mustCIDR(t, "10.0.0.0/31")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.lists(tt.tn)
			require.ErrorIs(t, err, ErrInvalidNetwork)
		})
	}
}

func TestNewInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no plugin dirs", Config{StateDir: dir}},
		{"relative state dir", Config{PluginDirs: []string{"/x"}, StateDir: "cni"}},
		{"long bridge name", Config{PluginDirs: []string{"/x"}, StateDir: dir, TaskBridge: "a-very-long-bridge"}},
		{"same bridges", Config{PluginDirs: []string{"/x"}, StateDir: dir, TaskBridge: "b0", LocalBridge: "b0"}},
		{"IPv6 bridge subnet", Config{PluginDirs: []string{"/x"}, StateDir: dir, TaskBridgeSubnet: mustCIDR(t, "fd00::/64")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.True(t, errdefs.IsInvalidArgument(err))
		})
	}
}

// TestAllocations reads host-local's disk store format.
func TestAllocations(t *testing.T) {
	c, ipamDir := newTestClient(t)
	dir := filepath.Join(ipamDir, BridgeNetwork)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	write("169.254.172.2", "task-a\r\necs-eth0")
	write("169.254.172.3", "task-b\r\necs-eth0")
	write("last_reserved_ip.0", "169.254.172.3")
	write("lock", "")
	write("169.254.172.9", "garbage")

	allocs, err := c.allocations(BridgeNetwork)
	require.NoError(t, err)
	var got []string
	for _, a := range allocs {
		got = append(got, a.ip.String()+" "+a.taskID+" "+a.ifName)
	}
	require.Equal(t, []string{"169.254.172.2 task-a ecs-eth0", "169.254.172.3 task-b ecs-eth0"}, got)

	none, err := c.allocations(LocalNetwork)
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestVerifyPluginsMissing names every missing plugin without running anything.
func TestVerifyPluginsMissing(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Config{PluginDirs: []string{dir}, StateDir: t.TempDir()}, nil)
	require.NoError(t, err)
	err = c.VerifyPlugins(t.Context())
	require.ErrorIs(t, err, ErrPluginNotFound)
	for _, p := range requiredPlugins {
		require.Contains(t, err.Error(), "CNI plugin "+p+":")
	}
	var pe *PluginError
	require.True(t, errors.As(err, &pe))
	require.True(t, strings.HasPrefix(pe.Error(), "CNI plugin "))
}

func TestNetNSNotFound(t *testing.T) {
	c, _ := newTestClient(t)
	tn := TaskNetwork{TaskID: "t", NetNS: filepath.Join(t.TempDir(), "gone")}
	_, err := c.Setup(t.Context(), tn)
	require.ErrorIs(t, err, ErrNetNSNotFound)
	require.ErrorIs(t, c.Check(t.Context(), tn), ErrNetNSNotFound)
}

func TestSentinelsMatchTheirErrdefsClass(t *testing.T) {
	for _, err := range []error{ErrNetNSNotFound, ErrNotSetUp, ErrPluginNotFound} {
		require.True(t, errdefs.IsNotFound(fmt.Errorf("task t: %w", err)), "%v", err)
	}
	for _, err := range []error{ErrInvalidConfig, ErrInvalidNetwork} {
		require.True(t, errdefs.IsInvalidArgument(fmt.Errorf("task t: %w", err)), "%v", err)
	}
	require.NotErrorIs(t, ErrNotSetUp, ErrNetNSNotFound)
}

package ecscni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/set"
)

// The CNI network configuration lists, built as Go structs and marshalled to JSON. Only the keys
// Berth sets are declared; every plugin reads its own keys from the same object.

// netConfList is a CNI network configuration list.
type netConfList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

// hostDeviceConf configures the host-device plugin: it moves the host interface with MAC HWAddr
// into the namespace, renames it to the attachment's interface name and runs IPAM on it.
type hostDeviceConf struct {
	Type   string        `json:"type"`
	HWAddr string        `json:"hwaddr"`
	IPAM   ipamConf      `json:"ipam"`
	DNS    *cnitypes.DNS `json:"dns,omitempty"` // host-device returns this one, not its IPAM's
}

// bridgeConf configures the bridge plugin: a veth pair between the namespace and Bridge.
type bridgeConf struct {
	Type      string   `json:"type"`
	Bridge    string   `json:"bridge"`
	IsGateway bool     `json:"isGateway"` // the bridge gets the IPAM gateway address
	IPMasq    bool     `json:"ipMasq"`
	IPAM      ipamConf `json:"ipam"`
}

// ipamConf is the ipam object of host-local (Ranges, DataDir) and static (Addresses, DNS).
type ipamConf struct {
	Type      string            `json:"type"`
	Ranges    [][]ipamRange     `json:"ranges,omitempty"`
	DataDir   string            `json:"dataDir,omitempty"`
	Addresses []staticAddress   `json:"addresses,omitempty"`
	Routes    []*cnitypes.Route `json:"routes,omitempty"`
	DNS       *cnitypes.DNS     `json:"dns,omitempty"`
}

type ipamRange struct {
	Subnet  cnitypes.IPNet `json:"subnet"`
	Gateway net.IP         `json:"gateway,omitempty"`
}

type staticAddress struct {
	Address cnitypes.IPNet `json:"address"` // the address itself with its prefix length
	Gateway net.IP         `json:"gateway,omitempty"`
}

// netList is one network configuration list of a task and the interface it creates.
type netList struct {
	name   string // network name: names the cache entry and host-local's allocation dir
	ifName string
	conf   *libcni.NetworkConfigList
}

// containerIDPattern is libcni's rule for container IDs; a task ID also names cache files.
var containerIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// lists returns tn's network lists in ADD order: the task ENI (or, in local mode, the local
// network) on eth0, then the task bridge on ecs-eth0. It wraps ErrInvalidNetwork when tn is not
// well formed; it does not look at the namespace.
func (c *Client) lists(tn TaskNetwork) ([]netList, error) {
	if !containerIDPattern.MatchString(tn.TaskID) {
		return nil, fmt.Errorf("%w: task ID %q: want letters, digits, '_', '.' or '-' (not an ARN)", ErrInvalidNetwork, tn.TaskID)
	}
	var first netList
	var err error
	if tn.ENI != nil {
		first, err = c.eniList(*tn.ENI)
	} else {
		first, err = c.localList(tn.LocalSubnet)
	}
	if err != nil {
		return nil, err
	}
	bridge, err := c.bridgeList(tn.BridgeIPv4, tn.AdditionalLocalRoutes, tn.BlockIMDS)
	if err != nil {
		return nil, err
	}
	return []netList{first, bridge}, nil
}

// eniList is the task ENI: host-device matched by MAC, static IPAM with the ENI's address and a
// default route through the subnet gateway.
func (c *Client) eniList(eni ENI) (netList, error) {
	mac, err := net.ParseMAC(eni.MAC)
	if err != nil || len(mac) != 6 {
		return netList{}, fmt.Errorf("%w: ENI MAC address %q", ErrInvalidNetwork, eni.MAC)
	}
	addr, subnet, err := hostAddress(eni.IPv4)
	if err != nil {
		return netList{}, fmt.Errorf("%w: ENI address: %v", ErrInvalidNetwork, err)
	}
	gw := eni.Gateway.To4()
	if gw == nil || !contains(subnet, gw) || gw.Equal(addr.IP) {
		return netList{}, fmt.Errorf("%w: ENI gateway %q is not another IPv4 address in %s", ErrInvalidNetwork, eni.Gateway, subnet)
	}
	ipam := ipamConf{
		Type:      "static",
		Addresses: []staticAddress{{Address: addr, Gateway: gw}},
		Routes:    []*cnitypes.Route{{Dst: defaultRoute(), GW: gw}},
	}
	if len(eni.DNSServers) > 0 || len(eni.SearchDomains) > 0 {
		ipam.DNS = &cnitypes.DNS{Nameservers: slices.Clone(eni.DNSServers), Search: slices.Clone(eni.SearchDomains)}
	}
	return newNetList(ENINetwork, TaskENIIfName, hostDeviceConf{Type: "host-device", HWAddr: mac.String(), IPAM: ipam, DNS: ipam.DNS})
}

// localList stands in for the ENI in local mode: a bridge with NAT, host-local IPAM on subnet
// (DefaultLocalSubnet when nil) and a default route through the bridge.
func (c *Client) localList(subnet *cnitypes.IPNet) (netList, error) {
	s, err := localSubnet(subnet)
	if err != nil {
		return netList{}, err
	}
	if b := *c.cfg.TaskBridgeSubnet; contains(s, b.IP) || contains(b, s.IP) {
		return netList{}, fmt.Errorf("%w: local subnet %s overlaps the task bridge subnet %s", ErrInvalidNetwork, cidr(s), cidr(b))
	}
	gw := firstHost(s)
	return newNetList(LocalNetwork, TaskENIIfName, bridgeConf{
		Type:      "bridge",
		Bridge:    c.cfg.LocalBridge,
		IsGateway: true,
		IPMasq:    true,
		IPAM: ipamConf{
			Type:    "host-local",
			Ranges:  [][]ipamRange{{{Subnet: s, Gateway: gw}}},
			DataDir: c.ipamDir(),
			Routes:  []*cnitypes.Route{{Dst: defaultRoute(), GW: gw}},
		},
	})
}

// localSubnet is subnet masked to its network, or DefaultLocalSubnet when nil.
func localSubnet(subnet *cnitypes.IPNet) (cnitypes.IPNet, error) {
	if subnet == nil {
		n, _ := cnitypes.ParseCIDR(DefaultLocalSubnet)
		return cnitypes.IPNet(*n), nil
	}
	s, err := validSubnet(*subnet)
	if err != nil {
		return cnitypes.IPNet{}, fmt.Errorf("%w: local subnet: %v", ErrInvalidNetwork, err)
	}
	return s, nil
}

// bridgeList is the task bridge: host-local IPAM on the bridge subnet, or static with override,
// and routes to the credentials endpoint and every additional local route through the bridge
// gateway. It never routes 0.0.0.0/0, nor 169.254.169.254/32 when blockIMDS (that route is the
// prohibit route, which a broader additional route does not override).
func (c *Client) bridgeList(override *cnitypes.IPNet, extra []cnitypes.IPNet, blockIMDS bool) (netList, error) {
	subnet := *c.cfg.TaskBridgeSubnet
	gw := firstHost(subnet)
	credentials := cnitypes.IPNet{IP: net.ParseIP(CredentialsEndpoint).To4(), Mask: net.CIDRMask(32, 32)}
	routes := []*cnitypes.Route{{Dst: net.IPNet(credentials), GW: gw}}
	seen := set.Of(cidr(credentials))
	if blockIMDS {
		seen.Add(IMDSAddress + "/32")
	}
	for _, r := range extra {
		dst, err := network(r)
		if err != nil {
			return netList{}, fmt.Errorf("%w: additional local route: %v", ErrInvalidNetwork, err)
		}
		if ones, _ := dst.Mask.Size(); ones == 0 {
			return netList{}, fmt.Errorf("%w: additional local route %s: the task bridge never carries the default route", ErrInvalidNetwork, cidr(dst))
		}
		if seen.Has(cidr(dst)) {
			continue
		}
		seen.Add(cidr(dst))
		routes = append(routes, &cnitypes.Route{Dst: net.IPNet(dst), GW: gw})
	}
	ipam := ipamConf{
		Type:    "host-local",
		Ranges:  [][]ipamRange{{{Subnet: subnet, Gateway: gw}}},
		DataDir: c.ipamDir(),
		Routes:  routes,
	}
	if override != nil {
		addr, s, err := hostAddress(*override)
		if err != nil {
			return netList{}, fmt.Errorf("%w: task bridge address: %v", ErrInvalidNetwork, err)
		}
		if cidr(s) != cidr(subnet) || addr.IP.Equal(gw) {
			return netList{}, fmt.Errorf("%w: task bridge address %s: want a host address in %s other than the gateway %s",
				ErrInvalidNetwork, cidr(addr), cidr(subnet), gw)
		}
		ipam = ipamConf{Type: "static", Addresses: []staticAddress{{Address: addr, Gateway: gw}}, Routes: routes}
	}
	return newNetList(BridgeNetwork, TaskBridgeIfName, bridgeConf{
		Type:      "bridge",
		Bridge:    c.cfg.TaskBridge,
		IsGateway: true,
		IPMasq:    false,
		IPAM:      ipam,
	})
}

// newNetList marshals one plugin into a list named name and parses it back the way libcni does.
func newNetList(name, ifName string, plugin any) (netList, error) {
	b, err := json.Marshal(netConfList{CNIVersion: CNIVersion, Name: name, Plugins: []any{plugin}})
	if err != nil {
		return netList{}, fmt.Errorf("network %s: %w", name, err)
	}
	conf, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return netList{}, fmt.Errorf("network %s: %w", name, err)
	}
	return netList{name: name, ifName: ifName, conf: conf}, nil
}

func (c *Client) ipamDir() string  { return filepath.Join(c.cfg.StateDir, "ipam") }
func (c *Client) cacheDir() string { return filepath.Join(c.cfg.StateDir, "cache") }

// hostAddress checks that a is an IPv4 host address of its prefix (not the network or broadcast
// address, prefix at most /30) and returns it with its subnet.
func hostAddress(a cnitypes.IPNet) (cnitypes.IPNet, cnitypes.IPNet, error) {
	ip := a.IP.To4()
	if ip == nil || a.Mask == nil {
		return cnitypes.IPNet{}, cnitypes.IPNet{}, fmt.Errorf("%q is not an IPv4 address with a prefix length", cidr(a))
	}
	subnet, err := network(a)
	if err != nil {
		return cnitypes.IPNet{}, cnitypes.IPNet{}, err
	}
	if ones, _ := subnet.Mask.Size(); ones > 30 {
		return cnitypes.IPNet{}, cnitypes.IPNet{}, fmt.Errorf("%s: prefix longer than /30 leaves no room for a gateway", cidr(a))
	}
	if ip.Equal(subnet.IP) || ip.Equal(broadcast(subnet)) {
		return cnitypes.IPNet{}, cnitypes.IPNet{}, fmt.Errorf("%s is the network or broadcast address of its prefix", cidr(a))
	}
	return cnitypes.IPNet{IP: ip, Mask: subnet.Mask}, subnet, nil
}

// network returns n masked to its prefix, as an IPv4 network; the kernel refuses routes whose
// destination has host bits set, and configuration may carry them ("1.2.3.4/22").
func network(n cnitypes.IPNet) (cnitypes.IPNet, error) {
	ip := n.IP.To4()
	if ip == nil || n.Mask == nil {
		return cnitypes.IPNet{}, fmt.Errorf("%q is not an IPv4 prefix", cidr(n))
	}
	ones, bits := n.Mask.Size()
	if bits != 32 && !(bits == 128 && ones >= 96) {
		return cnitypes.IPNet{}, fmt.Errorf("%q is not an IPv4 prefix", cidr(n))
	}
	if bits == 128 {
		ones -= 96
	}
	mask := net.CIDRMask(ones, 32)
	return cnitypes.IPNet{IP: ip.Mask(mask), Mask: mask}, nil
}

// firstHost is the first address of s, which Berth uses as the gateway of its subnets.
func firstHost(s cnitypes.IPNet) net.IP {
	ip := slices.Clone(s.IP.To4().Mask(s.Mask))
	ip[3]++
	return ip
}

func broadcast(s cnitypes.IPNet) net.IP {
	ip := slices.Clone(s.IP.To4())
	for i := range ip {
		ip[i] |= ^s.Mask[i]
	}
	return ip
}

func contains(n cnitypes.IPNet, ip net.IP) bool { return (*net.IPNet)(&n).Contains(ip) }

func defaultRoute() net.IPNet { return net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)} }

// validSubnet checks that s is an IPv4 prefix with room for a gateway and returns its network.
func validSubnet(s cnitypes.IPNet) (cnitypes.IPNet, error) {
	n, err := network(s)
	if err != nil {
		return cnitypes.IPNet{}, err
	}
	if ones, _ := n.Mask.Size(); ones > 30 {
		return cnitypes.IPNet{}, errors.New("prefix longer than /30")
	}
	return n, nil
}

// cidr is n in CIDR notation.
func cidr(n cnitypes.IPNet) string { return (*net.IPNet)(&n).String() }

// Package ecscni sets up and tears down the network namespace of awsvpc tasks with the CNI
// reference plugins (pinned by scripts/build-cni-plugins.sh) through libcni.
//
// Each task gets two network configuration lists, added in this order and deleted in reverse:
//
//	pause container netns                      host
//	┌──────────────────────────────┐
//	│ eth0      ◀── host-device ───┼──── the task ENI, matched by MAC (static IPAM,
//	│                              │     default route via the subnet gateway)
//	│                              │     local mode: bridge berth-local0 + NAT, host-local IPAM
//	│ ecs-eth0  ◀── bridge ────────┼──── ecs-bridge 169.254.172.1/22 (host-local, or static with
//	│  169.254.170.2/32, additional│     OverrideAWSVPCLocalIPv4Address); routes via .1, never
//	│  local routes via .1         │     the default route
//	│ prohibit 169.254.169.254/32  │ ◀── BlockIMDS (netlink, dies with the namespace)
//	└──────────────────────────────┘
//
// What was added is recorded by libcni in a cache under Config.StateDir, with the identity
// (nsfs inode) of the namespace it was added to. Teardown and Leftovers work from that record, so
// they need no state of their own, and they enter a namespace only while it is still the one the
// record names: a /proc/<pid>/ns/net path whose pause container died may belong to another process
// by then, and deleting "eth0" or "ecs-eth0" there would break it. Without a matching namespace a
// list is deleted without one, which releases its addresses (the interfaces die with the
// namespace, and an ENI moved into it returns to the host).
//
// Calls for different tasks may run concurrently; calls for one task must not (the engine runs
// one worker per task).
package ecscni

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
)

// Names, addresses and versions of the task network.
const (
	PluginsVersion = "v1.10.0" // of github.com/containernetworking/plugins, as scripts/build-cni-plugins.sh installs
	CNIVersion     = "1.0.0"   // cniVersion of every network list

	TaskENIIfName    = "eth0"     // the ENI (local mode: the local network) inside the task
	TaskBridgeIfName = "ecs-eth0" // the task bridge inside the task

	// Network list names: they name libcni's cache entries and host-local's allocation dirs.
	ENINetwork    = "berth-eni"
	LocalNetwork  = "berth-local"
	BridgeNetwork = "berth-bridge"

	DefaultTaskBridge       = "ecs-bridge"
	DefaultTaskBridgeSubnet = "169.254.172.0/22" // the bridge (host) side is its first address
	DefaultLocalBridge      = "berth-local0"
	// DefaultLocalSubnet is the local-mode stand-in for the ENI subnet: clear of docker0
	// (172.17.0.0/16) and of the task bridge.
	DefaultLocalSubnet = "172.31.250.0/24"

	CredentialsEndpoint = "169.254.170.2"   // routed through the task bridge
	IMDSAddress         = "169.254.169.254" // blocked when TaskNetwork.BlockIMDS
)

// requiredPlugins are the plugin binaries the network lists run.
var requiredPlugins = []string{"bridge", "host-device", "host-local", "static"}

// netnsArg is the CNI_ARGS key recording the namespace's identity (see netnsID) in libcni's cache;
// IgnoreUnknown=1 makes the plugins accept it.
const netnsArg = "BERTH_NETNS_ID"

// rollbackTimeout bounds the clean-up of a failed Setup, which runs even when ctx is done.
const rollbackTimeout = time.Minute

// Error classes; each is a finer kind of an errdefs class, which errors.Is matches too.
var (
	// ErrInvalidConfig is wrapped by New for a bad Config. An errdefs.ErrInvalidArgument.
	ErrInvalidConfig = errdefs.New(errdefs.ErrInvalidArgument, "invalid CNI config")
	// ErrInvalidNetwork is wrapped when a TaskNetwork is not well formed. An errdefs.ErrInvalidArgument.
	ErrInvalidNetwork = errdefs.New(errdefs.ErrInvalidArgument, "invalid task network")
	// ErrNetNSNotFound is wrapped by Setup and Check when the task's namespace does not exist. An
	// errdefs.ErrNotFound.
	ErrNetNSNotFound = errdefs.New(errdefs.ErrNotFound, "network namespace not found")
	// ErrNotSetUp is wrapped by Check when a network of the task was not set up in its namespace. An
	// errdefs.ErrNotFound.
	ErrNotSetUp = errdefs.New(errdefs.ErrNotFound, "task network not set up")
	// ErrPluginNotFound is wrapped (in a *PluginError) by VerifyPlugins for a missing binary. An
	// errdefs.ErrNotFound.
	ErrPluginNotFound = errdefs.New(errdefs.ErrNotFound, "CNI plugin not found")
)

// PluginError is a required plugin that is missing or unusable.
type PluginError struct {
	Plugin string // e.g. "host-device"
	Err    error
}

// Error names the plugin and the cause.
func (e *PluginError) Error() string { return fmt.Sprintf("CNI plugin %s: %v", e.Plugin, e.Err) }

// Unwrap returns the cause.
func (e *PluginError) Unwrap() error { return e.Err }

// Config configures a Client. Zero TaskBridge, TaskBridgeSubnet and LocalBridge take the defaults.
type Config struct {
	PluginDirs []string // where the plugin binaries are (ECS_CNI_PLUGINS_PATH)
	// StateDir is a directory Berth owns, e.g. $ECS_DATADIR/cni: libcni's cache of what was added
	// is in StateDir/cache, host-local's address allocations in StateDir/ipam.
	StateDir         string
	TaskBridge       string          // bridge of the task bridge network (DefaultTaskBridge)
	TaskBridgeSubnet *cnitypes.IPNet // its subnet (DefaultTaskBridgeSubnet); the bridge gets the first address
	LocalBridge      string          // bridge of the local-mode network (DefaultLocalBridge)
}

// TaskNetwork is one task's networking. AdditionalLocalRoutes travel as a field, as the review
// asked, not as an extra parameter.
type TaskNetwork struct {
	TaskID                string          // CNI ContainerID: letters, digits, '_', '.', '-' (the ARN's last part)
	NetNS                 string          // /proc/<pid>/ns/net of the pause container
	ENI                   *ENI            // nil in local mode
	BridgeIPv4            *cnitypes.IPNet // OverrideAWSVPCLocalIPv4Address; nil = host-local IPAM
	AdditionalLocalRoutes []cnitypes.IPNet
	BlockIMDS             bool
	// LocalSubnet is the local-mode network standing in for the ENI's subnet (nil =
	// DefaultLocalSubnet); every local-mode task on a host should use the same one.
	LocalSubnet *cnitypes.IPNet
}

// ENI is the elastic network interface attached to the host for a task.
type ENI struct {
	MAC           string
	IPv4          cnitypes.IPNet // the address with the subnet's prefix length, e.g. 10.0.1.5/24
	Gateway       net.IP
	DNSServers    []string
	SearchDomains []string
}

// Result is what Setup configured in the task namespace. Addresses are bare (no prefix length).
type Result struct {
	ENIIPv4         string // eth0's address (local mode: its address in the local subnet)
	ENIPrefixLength int
	ENIMAC          string
	Gateway         string // eth0's default gateway
	BridgeIPv4      string // ecs-eth0's address
	BridgeGateway   string // the host side of the task bridge, e.g. 169.254.172.1
	// DNSServers and SearchDomains are the ENI's, for the task's resolv.conf (empty in local mode).
	DNSServers    []string
	SearchDomains []string
}

// Plugin is what the engine needs from the task network.
type Plugin interface {
	// Setup adds the task's networks to its namespace; when a later one fails it deletes what it
	// added. A task already set up in the same namespace gets its recorded result back.
	Setup(ctx context.Context, tn TaskNetwork) (Result, error)
	// Check reports whether the task's networks are still as Setup left them.
	Check(ctx context.Context, tn TaskNetwork) error
	// Teardown deletes the task's networks in reverse order. It is idempotent and succeeds when
	// the namespace is already gone.
	Teardown(ctx context.Context, tn TaskNetwork) error
	// VerifyPlugins checks that every required plugin binary is present and answers VERSION with
	// support for CNIVersion; the error names each plugin that does not (*PluginError).
	VerifyPlugins(ctx context.Context) error
	// Leftovers deletes the networks of every task for which known returns false and returns
	// their IDs. known must report true for tasks being set up concurrently.
	Leftovers(ctx context.Context, known func(taskID string) bool) (removed []string, err error)
}

// Client runs the CNI plugins for awsvpc tasks. It is safe for concurrent use by different tasks.
type Client struct {
	cfg Config
	cni libcni.CNI
	log *logger.Logger
}

var _ Plugin = (*Client)(nil)

// New returns a Client and creates cfg.StateDir. log may be nil.
func New(cfg Config, log *logger.Logger) (*Client, error) {
	if log == nil {
		log = logger.Nop()
	}
	if len(cfg.PluginDirs) == 0 {
		return nil, fmt.Errorf("%w: no plugin directory", ErrInvalidConfig)
	}
	cfg.PluginDirs = slices.Clone(cfg.PluginDirs)
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("%w: state directory %q is not an absolute path", ErrInvalidConfig, cfg.StateDir)
	}
	if cfg.TaskBridge == "" {
		cfg.TaskBridge = DefaultTaskBridge
	}
	if cfg.LocalBridge == "" {
		cfg.LocalBridge = DefaultLocalBridge
	}
	for _, b := range []string{cfg.TaskBridge, cfg.LocalBridge} {
		if len(b) > 15 || strings.ContainsAny(b, "/ :") {
			return nil, fmt.Errorf("%w: bridge name %q", ErrInvalidConfig, b)
		}
	}
	if cfg.TaskBridge == cfg.LocalBridge {
		return nil, fmt.Errorf("%w: task and local bridge are both %q", ErrInvalidConfig, cfg.TaskBridge)
	}
	var subnet cnitypes.IPNet
	if cfg.TaskBridgeSubnet == nil {
		n, _ := cnitypes.ParseCIDR(DefaultTaskBridgeSubnet)
		subnet = cnitypes.IPNet(*n)
	} else {
		n, err := validSubnet(*cfg.TaskBridgeSubnet)
		if err != nil {
			return nil, fmt.Errorf("%w: task bridge subnet: %v", ErrInvalidConfig, err)
		}
		subnet = n
	}
	cfg.TaskBridgeSubnet = &subnet
	c := &Client{cfg: cfg, log: log}
	for _, d := range []string{c.cacheDir(), c.ipamDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create CNI state directory: %w", err)
		}
	}
	c.cni = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, c.cacheDir(), nil)
	return c, nil
}

// Setup adds the task ENI (or local network) and then the task bridge to tn.NetNS, and then blocks
// IMDS when asked. When a step fails it deletes every list it tried, a failed one included (the
// CNI runtime's duty), even when ctx is done.
func (c *Client) Setup(ctx context.Context, tn TaskNetwork) (Result, error) {
	lists, err := c.lists(tn)
	if err != nil {
		return Result{}, fmt.Errorf("task %s: set up network: %w", tn.TaskID, err)
	}
	nsID, err := netnsID(tn.NetNS)
	if err != nil {
		return Result{}, fmt.Errorf("task %s: set up network: %w", tn.TaskID, nsErr(err))
	}
	cached, err := c.cached(tn.TaskID)
	if err != nil {
		return Result{}, fmt.Errorf("task %s: set up network: %w", tn.TaskID, err)
	}
	if len(cached) > 0 {
		if res, ok := c.recordedResult(tn, nsID, lists, cached); ok {
			if tn.BlockIMDS {
				if err := blockIMDS(tn.NetNS); err != nil {
					return Result{}, fmt.Errorf("task %s: block instance metadata: %w", tn.TaskID, err)
				}
			}
			return res, nil
		}
		// Left by an earlier namespace of this task, or by a set-up that never finished.
		if err := c.Teardown(ctx, tn); err != nil {
			return Result{}, fmt.Errorf("task %s: remove earlier network: %w", tn.TaskID, err)
		}
	}
	results := make([]*current.Result, len(lists))
	for i, l := range lists {
		r, err := c.cni.AddNetworkList(ctx, l.conf, c.runtimeConf(tn.TaskID, tn.NetNS, l.ifName, nsID))
		if err == nil {
			results[i], err = current.NewResultFromResult(r)
		}
		if err != nil {
			err = fmt.Errorf("task %s: add network %s (%s): %w", tn.TaskID, l.name, l.ifName, err)
			if rbErr := c.rollback(ctx, tn, nsID, lists[:i+1]); rbErr != nil {
				return Result{}, errors.Join(err, fmt.Errorf("roll back: %w", rbErr))
			}
			return Result{}, err
		}
	}
	// After the lists, so that the prohibit route replaces any route to IMDS they added (an
	// additional local route may cover it). Nothing runs in the namespace but the pause container
	// until Setup returns.
	if tn.BlockIMDS {
		if err := blockIMDS(tn.NetNS); err != nil {
			err = fmt.Errorf("task %s: block instance metadata: %w", tn.TaskID, nsErr(err))
			if rbErr := c.rollback(ctx, tn, nsID, lists); rbErr != nil {
				return Result{}, errors.Join(err, fmt.Errorf("roll back: %w", rbErr))
			}
			return Result{}, err
		}
	}
	return makeResult(results[0], results[1])
}

// rollback deletes lists (the ones a failed Setup tried) in reverse order, entering the namespace
// for a list only while it holds the list's interface.
func (c *Client) rollback(ctx context.Context, tn TaskNetwork, nsID string, lists []netList) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	var errs []error
	for _, l := range slices.Backward(lists) {
		a := attachment{network: l.name, ifName: l.ifName, conf: l.conf}
		if ok, err := linkExists(tn.NetNS, l.ifName); err == nil && ok {
			a.netns, a.nsID = tn.NetNS, nsID
		}
		if err := c.del(ctx, tn.TaskID, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordedResult returns the result libcni recorded for tn when every list was added to the same
// namespace (nsID).
func (c *Client) recordedResult(tn TaskNetwork, nsID string, lists []netList, cached map[string]*libcni.NetworkAttachment) (Result, bool) {
	results := make([]*current.Result, len(lists))
	for i, l := range lists {
		a, ok := cached[l.name]
		if !ok || a.NetNS != tn.NetNS || argValue(a.CniArgs, netnsArg) != nsID {
			return Result{}, false
		}
		conf, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			return Result{}, false
		}
		r, err := c.cni.GetNetworkListCachedResult(conf, c.runtimeConf(tn.TaskID, tn.NetNS, l.ifName, nsID))
		if err != nil || r == nil {
			return Result{}, false
		}
		if results[i], err = current.NewResultFromResult(r); err != nil {
			return Result{}, false
		}
	}
	res, err := makeResult(results[0], results[1])
	return res, err == nil
}

// Check runs CNI CHECK on the task's networks as recorded at Setup and checks the IMDS block.
func (c *Client) Check(ctx context.Context, tn TaskNetwork) error {
	lists, err := c.lists(tn)
	if err != nil {
		return fmt.Errorf("task %s: check network: %w", tn.TaskID, err)
	}
	nsID, err := netnsID(tn.NetNS)
	if err != nil {
		return fmt.Errorf("task %s: check network: %w", tn.TaskID, nsErr(err))
	}
	cached, err := c.cached(tn.TaskID)
	if err != nil {
		return fmt.Errorf("task %s: check network: %w", tn.TaskID, err)
	}
	var errs []error
	for _, l := range lists {
		a, ok := cached[l.name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("task %s: network %s: %w", tn.TaskID, l.name, ErrNotSetUp))
			continue
		case a.NetNS != tn.NetNS || argValue(a.CniArgs, netnsArg) != nsID:
			errs = append(errs, fmt.Errorf("task %s: network %s: %w in %s (set up in another namespace)", tn.TaskID, l.name, ErrNotSetUp, tn.NetNS))
			continue
		}
		conf, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: network %s: recorded config: %w", tn.TaskID, l.name, err))
			continue
		}
		if err := c.cni.CheckNetworkList(ctx, conf, c.runtimeConf(tn.TaskID, tn.NetNS, l.ifName, nsID)); err != nil {
			errs = append(errs, fmt.Errorf("task %s: check network %s (%s): %w", tn.TaskID, l.name, l.ifName, err))
		}
	}
	if tn.BlockIMDS {
		blocked, err := imdsBlocked(tn.NetNS)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("task %s: check instance metadata block: %w", tn.TaskID, nsErr(err)))
		case !blocked:
			errs = append(errs, fmt.Errorf("task %s: instance metadata (%s) is not blocked", tn.TaskID, IMDSAddress))
		}
	}
	return errors.Join(errs...)
}

// Teardown deletes the task bridge and then the ENI (or local) network of the task. It deletes
// what libcni recorded at Setup, and tn's lists that have no record (a set-up interrupted before
// libcni wrote one) without a namespace, which releases their addresses; with a record, only
// tn.TaskID needs to be right. A namespace that is gone, or is no longer the one recorded, is not
// entered. It carries on after a failed DEL and returns every error.
func (c *Client) Teardown(ctx context.Context, tn TaskNetwork) error {
	if !containerIDPattern.MatchString(tn.TaskID) {
		return fmt.Errorf("task %s: tear down network: %w: task ID %q", tn.TaskID, ErrInvalidNetwork, tn.TaskID)
	}
	cached, err := c.cached(tn.TaskID)
	if err != nil {
		return fmt.Errorf("task %s: tear down network: %w", tn.TaskID, err)
	}
	lists, err := c.lists(tn)
	if err != nil {
		if len(cached) == 0 {
			return fmt.Errorf("task %s: tear down network: %w", tn.TaskID, err)
		}
		lists = nil // what was recorded is enough
	}
	var atts []attachment
	for _, l := range lists {
		if _, ok := cached[l.name]; !ok {
			atts = append(atts, attachment{network: l.name, ifName: l.ifName, conf: l.conf})
		}
	}
	for _, a := range cached {
		att, err := recorded(a)
		if err != nil {
			return fmt.Errorf("task %s: tear down network: %w", tn.TaskID, err)
		}
		atts = append(atts, att)
	}
	return c.delAll(ctx, tn.TaskID, atts)
}

// VerifyPlugins checks every required plugin and logs the version each was built from.
func (c *Client) VerifyPlugins(ctx context.Context) error {
	var errs []error
	for _, name := range requiredPlugins {
		path, err := c.findPlugin(name)
		if err != nil {
			errs = append(errs, &PluginError{Plugin: name, Err: err})
			continue
		}
		info, err := c.cni.GetVersionInfo(ctx, name)
		if err != nil {
			errs = append(errs, &PluginError{Plugin: name, Err: fmt.Errorf("%s: VERSION: %w", path, err)})
			continue
		}
		if !slices.Contains(info.SupportedVersions(), CNIVersion) {
			errs = append(errs, &PluginError{Plugin: name, Err: fmt.Errorf("%s supports CNI %v, not %s", path, info.SupportedVersions(), CNIVersion)})
			continue
		}
		built := "unknown"
		if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Version != "" {
			built = bi.Main.Version
		}
		if built != PluginsVersion {
			c.log.Warn("CNI plugin is not the pinned version", "plugin", name, "path", path, "version", built, "want", PluginsVersion)
			continue
		}
		c.log.Debug("CNI plugin", "plugin", name, "path", path, "version", built)
	}
	return errors.Join(errs...)
}

// findPlugin returns the path of the first executable file named name in the plugin directories.
func (c *Client) findPlugin(name string) (string, error) {
	for _, d := range c.cfg.PluginDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w in %s", ErrPluginNotFound, strings.Join(c.cfg.PluginDirs, ":"))
}

// Leftovers deletes what libcni recorded, and host-local addresses still allocated, for every task
// known reports false for. A task is reported once all its networks are deleted; the others are in
// the error, to be tried again.
func (c *Client) Leftovers(ctx context.Context, known func(taskID string) bool) ([]string, error) {
	all, err := c.cni.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("read CNI cache: %w", err)
	}
	byTask := map[string][]attachment{}
	have := map[[3]string]bool{} // task, network, interface
	var errs []error
	for _, a := range all {
		if known(a.ContainerID) {
			continue
		}
		att, err := recorded(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", a.ContainerID, err))
			continue
		}
		byTask[a.ContainerID] = append(byTask[a.ContainerID], att)
		have[[3]string{a.ContainerID, a.Network, a.IfName}] = true
	}
	// Addresses allocated by a set-up that never got as far as libcni's record.
	for _, network := range []string{BridgeNetwork, LocalNetwork} {
		allocs, err := c.allocations(network)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, al := range allocs {
			if have[[3]string{al.taskID, network, al.ifName}] || known(al.taskID) {
				continue
			}
			var l netList
			if network == BridgeNetwork {
				l, err = c.bridgeList(nil, nil, false)
			} else {
				l, err = c.localList(nil)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			byTask[al.taskID] = append(byTask[al.taskID], attachment{network: network, ifName: al.ifName, conf: l.conf})
			have[[3]string{al.taskID, network, al.ifName}] = true
		}
	}
	var removed []string
	for _, id := range slices.Sorted(maps.Keys(byTask)) {
		if err := c.delAll(ctx, id, byTask[id]); err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("removed the network of a task Berth no longer knows", "task", id, "networks", len(byTask[id]))
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// attachment is one network list of a task to delete.
type attachment struct {
	network string
	ifName  string
	conf    *libcni.NetworkConfigList
	netns   string // namespace path recorded at ADD; "" = none
	nsID    string // its identity recorded at ADD; the namespace is entered only when it still matches
}

// recorded turns a libcni cache entry into an attachment.
func recorded(a *libcni.NetworkAttachment) (attachment, error) {
	conf, err := libcni.NetworkConfFromBytes(a.Config)
	if err != nil {
		return attachment{}, fmt.Errorf("network %s: recorded config: %w", a.Network, err)
	}
	return attachment{network: a.Network, ifName: a.IfName, conf: conf, netns: a.NetNS, nsID: argValue(a.CniArgs, netnsArg)}, nil
}

// delAll deletes atts in teardown order (task bridge first) and returns every error.
func (c *Client) delAll(ctx context.Context, taskID string, atts []attachment) error {
	sort.SliceStable(atts, func(i, j int) bool { return teardownRank(atts[i].network) < teardownRank(atts[j].network) })
	var errs []error
	for _, a := range atts {
		if a.netns != "" {
			if id, err := netnsID(a.netns); err != nil || id != a.nsID || a.nsID == "" {
				c.log.Debug("CNI DEL without the namespace: gone or no longer the task's", "task", taskID, "network", a.network, "netns", a.netns)
				a.netns = ""
			}
		}
		if err := c.del(ctx, taskID, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func teardownRank(network string) int {
	switch network {
	case BridgeNetwork:
		return 0
	case ENINetwork, LocalNetwork:
		return 1
	default:
		return 2
	}
}

// del runs CNI DEL for one attachment. Without a namespace the bridge plugin cannot learn the
// addresses whose NAT rules it installed, so for the local network del removes them itself, with
// the addresses host-local (or libcni's record) still holds.
func (c *Client) del(ctx context.Context, taskID string, a attachment) error {
	rt := c.runtimeConf(taskID, a.netns, a.ifName, a.nsID)
	var masq []*net.IPNet
	if a.netns == "" && a.network == LocalNetwork {
		masq = c.addressesOf(a, rt, taskID)
	}
	if err := c.cni.DelNetworkList(ctx, a.conf, rt); err != nil {
		return fmt.Errorf("task %s: delete network %s (%s): %w", taskID, a.network, a.ifName, err)
	}
	if len(masq) > 0 {
		if err := ip.TeardownIPMasqForNetworks(masq, a.conf.Name, a.ifName, taskID); err != nil {
			return fmt.Errorf("task %s: network %s: remove NAT rules: %w", taskID, a.network, err)
		}
	}
	return nil
}

// addressesOf returns the addresses a's IPAM gave the task, from host-local's allocations and
// libcni's record.
func (c *Client) addressesOf(a attachment, rt *libcni.RuntimeConf, taskID string) []*net.IPNet {
	var out []*net.IPNet
	var seen set.Set[string]
	add := func(ipn net.IPNet) {
		if !seen.Has(ipn.IP.String()) {
			seen.Add(ipn.IP.String())
			out = append(out, &ipn)
		}
	}
	if r, err := c.cni.GetNetworkListCachedResult(a.conf, rt); err == nil && r != nil {
		if res, err := current.NewResultFromResult(r); err == nil {
			for _, ipc := range res.IPs {
				add(ipc.Address)
			}
		}
	}
	allocs, _ := c.allocations(a.conf.Name)
	for _, al := range allocs {
		if al.taskID == taskID && al.ifName == a.ifName {
			add(net.IPNet{IP: al.ip, Mask: net.CIDRMask(32, 32)})
		}
	}
	return out
}

// allocation is one address host-local holds, as its disk store writes it: a file named by the
// address holding "<container ID>\r\n<interface>".
type allocation struct {
	ip     net.IP
	taskID string
	ifName string
}

// allocations lists host-local's allocations for network in Berth's IPAM directory.
func (c *Client) allocations(network string) ([]allocation, error) {
	dir := filepath.Join(c.ipamDir(), network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read IPAM allocations: %w", err)
	}
	var out []allocation
	for _, e := range entries {
		addr := net.ParseIP(e.Name())
		if addr == nil || !e.Type().IsRegular() {
			continue // lock, last_reserved_ip.*
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // released meanwhile
		}
		id, ifName, ok := strings.Cut(strings.TrimSpace(string(b)), "\r\n")
		if !ok || !containerIDPattern.MatchString(id) {
			continue
		}
		out = append(out, allocation{ip: addr, taskID: id, ifName: strings.TrimSpace(ifName)})
	}
	return out, nil
}

// cached returns libcni's records of the task, by network name.
func (c *Client) cached(taskID string) (map[string]*libcni.NetworkAttachment, error) {
	atts, err := c.cni.GetCachedAttachments(taskID)
	if err != nil {
		return nil, fmt.Errorf("read CNI cache: %w", err)
	}
	out := make(map[string]*libcni.NetworkAttachment, len(atts))
	for _, a := range atts {
		out[a.Network] = a
	}
	return out, nil
}

// runtimeConf is the CNI runtime configuration of one attachment; nsID is recorded in CNI_ARGS.
func (c *Client) runtimeConf(taskID, netns, ifName, nsID string) *libcni.RuntimeConf {
	args := [][2]string{{"IgnoreUnknown", "1"}}
	if nsID != "" {
		args = append(args, [2]string{netnsArg, nsID})
	}
	return &libcni.RuntimeConf{ContainerID: taskID, NetNS: netns, IfName: ifName, Args: args}
}

func argValue(args [][2]string, key string) string {
	for _, kv := range args {
		if kv[0] == key {
			return kv[1]
		}
	}
	return ""
}

// nsErr turns the netns helpers' errNetNSGone into ErrNetNSNotFound for callers.
func nsErr(err error) error {
	if errors.Is(err, errNetNSGone) {
		return fmt.Errorf("%w: %v", ErrNetNSNotFound, err)
	}
	return err
}

// makeResult reads eth0's and ecs-eth0's addresses from the ADD results.
func makeResult(eth0, bridge *current.Result) (Result, error) {
	if len(eth0.IPs) == 0 || len(bridge.IPs) == 0 {
		return Result{}, errors.New("CNI result without an address")
	}
	ones, _ := eth0.IPs[0].Address.Mask.Size()
	res := Result{
		ENIIPv4:         eth0.IPs[0].Address.IP.String(),
		ENIPrefixLength: ones,
		ENIMAC:          resultMAC(eth0),
		BridgeIPv4:      bridge.IPs[0].Address.IP.String(),
		DNSServers:      slices.Clone(eth0.DNS.Nameservers),
		SearchDomains:   slices.Clone(eth0.DNS.Search),
	}
	if gw := eth0.IPs[0].Gateway; gw != nil {
		res.Gateway = gw.String()
	}
	if gw := bridge.IPs[0].Gateway; gw != nil {
		res.BridgeGateway = gw.String()
	}
	return res, nil
}

// resultMAC is the MAC of the interface the result's first address is on.
func resultMAC(r *current.Result) string {
	if i := r.IPs[0].Interface; i != nil && *i >= 0 && *i < len(r.Interfaces) {
		return r.Interfaces[*i].Mac
	}
	for _, i := range r.Interfaces {
		if i.Sandbox != "" {
			return i.Mac
		}
	}
	return ""
}

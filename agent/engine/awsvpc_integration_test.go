//go:build integration

package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
)

// Bridges and subnets of these tests, apart from a real agent's ecs-bridge and berth-local0.
const (
	itTaskBridge  = "berth-ebr0"
	itLocalBridge = "berth-elo0"
	itPauseImage  = "berth/pause:latest"
)

// itNetwork builds the CNI client for the engine's awsvpc tests from the plugins make test builds.
func itNetwork(t *testing.T) (*ecscni.Client, string) {
	t.Helper()
	dir := os.Getenv("BERTH_CNI_PLUGINS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "berth-cni-"+ecscni.PluginsVersion)
		out, err := exec.Command("bash", "../../scripts/build-cni-plugins.sh", dir).CombinedOutput()
		require.NoError(t, err, "build the CNI plugins: %s", out)
	}
	subnet, err := cnitypes.ParseCIDR("169.254.180.0/22")
	require.NoError(t, err)
	state := t.TempDir()
	cni, err := ecscni.New(ecscni.Config{PluginDirs: []string{dir}, StateDir: state, TaskBridge: itTaskBridge,
		TaskBridgeSubnet: (*cnitypes.IPNet)(subnet), LocalBridge: itLocalBridge}, logger.Nop())
	require.NoError(t, err)
	require.NoError(t, cni.VerifyPlugins(t.Context()), "the CNI plugins must be built (make cni-plugins)")
	t.Cleanup(func() {
		for _, name := range []string{itTaskBridge, itLocalBridge} {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	})
	return cni, state
}

func awsvpcHarness(t *testing.T, mutate ...func(*AWSVPCConfig)) (*itHarness, string) {
	cni, state := itNetwork(t)
	local, err := cnitypes.ParseCIDR("172.31.253.0/24") // apart from ecscni's own tests
	require.NoError(t, err)
	h := newITHarness(t, func(c *Config) {
		c.AWSVPC = AWSVPCConfig{Network: cni, ENIs: ecscni.ENIWatcher{}, PauseImage: itPauseImage, LocalSubnet: (*cnitypes.IPNet)(local)}
		for _, m := range mutate {
			m(&c.AWSVPC)
		}
	})
	_, err = h.client.InspectImage(t.Context(), itPauseImage)
	require.NoError(t, err, "the pause image must be built (make images)")
	// Stop every task before the harness ends the engine, so that CNI DEL runs and no address, NAT rule
	// or cache entry outlives the test (the harness's own cleanup only removes containers).
	t.Cleanup(func() {
		for _, tk := range h.eng.Tasks() {
			require.NoError(t, h.eng.StopTask(context.Background(), tk.Arn, "test over"))
		}
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			stopped := true
			for _, tk := range h.eng.Tasks() {
				stopped = stopped && tk.KnownStatus == task.TaskStopped && (tk.AWSVPC == nil || tk.AWSVPC.TornDown)
			}
			if stopped {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Error("awsvpc tasks did not stop and release their networking within a minute")
	})
	return h, state
}

func awsvpcTaskDef(family string, containers ...string) string {
	return fmt.Sprintf(`{"family": %q, "networkMode": "awsvpc", "containerDefinitions": [%s]}`, family, joinDefs(containers))
}

func joinDefs(cs []string) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += ", "
		}
		out += c
	}
	return out
}

// TestIntegrationAWSVPCLocalMode: an awsvpc task in local mode gets its own namespace, in which its
// containers talk over localhost; the host reaches it on its task bridge address; teardown leaves no
// CNI cache entry behind.
func TestIntegrationAWSVPCLocalMode(t *testing.T) {
	h, state := awsvpcHarness(t)
	arn := h.run(t, awsvpcTaskDef("vpc",
		itContainer("server", true, "", "listen", "-addr", ":9000", "-msg", "hello-from-task"),
		itContainer("client", false, `"dependsOn": [{"containerName": "server", "condition": "START"}]`,
			"connect", "-addr", "127.0.0.1:9000", "-read", "-timeout", "10s")))
	tk := h.waitTask(t, arn, 60*time.Second, "let the client finish", func(tk *task.Task) bool {
		return tk.KnownStatus == task.TaskRunning && tk.Container("client").KnownStatus == task.ContainerStopped
	})
	require.NotNil(t, tk.Container("client").ExitCode)
	assert.Equal(t, 0, *tk.Container("client").ExitCode, "the client reached the server over localhost")
	require.NotNil(t, tk.AWSVPC)
	assert.True(t, netContains(t, "172.31.253.0/24", tk.AWSVPC.IPv4), "eth0 is on the local subnet: %s", tk.AWSVPC.IPv4)
	assert.True(t, netContains(t, "169.254.180.0/22", tk.AWSVPC.BridgeIPv4), "ecs-eth0 is on the task bridge: %s", tk.AWSVPC.BridgeIPv4)
	assert.Equal(t, task.ContainerResourcesProvisioned, tk.Container(PauseContainerName).KnownStatus)

	conn, err := net.DialTimeout("tcp", net.JoinHostPort(tk.AWSVPC.BridgeIPv4, "9000"), 5*time.Second)
	require.NoError(t, err, "the host reaches the task on its bridge address")
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	conn.Close()
	assert.Contains(t, string(buf[:n]), "hello-from-task")

	require.NoError(t, h.eng.StopTask(context.Background(), arn, "done"))
	stopped := h.waitTask(t, arn, 30*time.Second, "stop", itStopped)
	assert.True(t, stopped.AWSVPC.TornDown)
	cache, err := filepath.Glob(filepath.Join(state, "cache", "results", "*"+CNITaskID(arn)+"*"))
	require.NoError(t, err)
	assert.Empty(t, cache, "no CNI cache entry of the task remains")
}

// TestIntegrationAWSVPCStaticAddressWaits: with OverrideAWSVPCLocalIPv4Address a second awsvpc task
// waits, with the reason visible, until the first has stopped and released its networking.
func TestIntegrationAWSVPCStaticAddressWaits(t *testing.T) {
	static, err := cnitypes.ParseCIDR("169.254.180.10/22")
	require.NoError(t, err)
	addr := cnitypes.IPNet{IP: net.ParseIP("169.254.180.10").To4(), Mask: static.Mask}
	h, _ := awsvpcHarness(t, func(c *AWSVPCConfig) { c.BridgeIPv4 = &addr })
	first := h.run(t, awsvpcTaskDef("static1", itContainer("c", true, "", "sleep")))
	tk := h.waitTask(t, first, 60*time.Second, "run", itRunning)
	assert.Equal(t, "169.254.180.10", tk.AWSVPC.BridgeIPv4)

	second := h.run(t, awsvpcTaskDef("static2", itContainer("c", true, "", "sleep")))
	waiting := h.waitTask(t, second, 10*time.Second, "wait for the address", func(tk *task.Task) bool { return tk.PendingReason != "" })
	assert.Contains(t, waiting.PendingReason, "OverrideAWSVPCLocalIPv4Address")

	require.NoError(t, h.eng.StopTask(context.Background(), first, "make way"))
	tk = h.waitTask(t, second, 60*time.Second, "run after the first stopped", itRunning)
	assert.Equal(t, "169.254.180.10", tk.AWSVPC.BridgeIPv4)
}

// TestIntegrationAWSVPCENI: an interface with a chosen MAC stands in for an attached ENI; the task
// that names that MAC gets it as eth0 with the ENI's address and default route, and gives it back.
func TestIntegrationAWSVPCENI(t *testing.T) {
	h, _ := awsvpcHarness(t)
	hw := net.HardwareAddr{0x02, 0xbe, 0, 0, 0, 0}
	_, _ = rand.Read(hw[2:])
	name := fmt.Sprintf("bteng%x", []byte(hw[3:]))
	// An interface with no peer stands in for the ENI: dummy where the kernel has it, else ifb.
	if err := exec.Command("ip", "link", "add", name, "address", hw.String(), "type", "dummy").Run(); err != nil {
		out, err := exec.Command("ip", "link", "add", name, "address", hw.String(), "type", "ifb").CombinedOutput()
		require.NoError(t, err, "add a stand-in ENI: %s", out)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})

	eniTask := h.newTask(t, awsvpcTaskDef("eni", itContainer("c", true, "", "sleep")))
	eniTask.ENI = &task.ENI{MAC: hw.String(), IPv4: netip.MustParsePrefix("10.77.0.5/24"), Gateway: netip.MustParseAddr("10.77.0.1"), DNSServers: []string{"10.77.0.2"}}
	require.NoError(t, h.eng.AddTask(context.Background(), eniTask))
	running := h.waitTask(t, eniTask.Arn, 60*time.Second, "run", itRunning)
	assert.Equal(t, "10.77.0.5", running.AWSVPC.IPv4)

	require.NoError(t, ns.WithNetNSPath(running.AWSVPC.NetNS, func(ns.NetNS) error {
		eth0, err := netlink.LinkByName("eth0")
		require.NoError(t, err)
		assert.Equal(t, hw.String(), eth0.Attrs().HardwareAddr.String(), "eth0 is the ENI")
		addrs, err := netlink.AddrList(eth0, netlink.FAMILY_V4)
		require.NoError(t, err)
		require.Len(t, addrs, 1)
		assert.Equal(t, "10.77.0.5/24", addrs[0].IPNet.String())
		routes, err := netlink.RouteList(eth0, netlink.FAMILY_V4)
		require.NoError(t, err)
		var gw string
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				gw = r.Gw.String()
			}
		}
		assert.Equal(t, "10.77.0.1", gw, "the default route goes via the subnet gateway")
		return nil
	}))

	pauseInfo, err := h.client.InspectContainer(t.Context(), running.Container(PauseContainerName).DockerID)
	require.NoError(t, err)
	appInfo, err := h.client.InspectContainer(t.Context(), running.Container("c").DockerID)
	require.NoError(t, err)
	resolv, err := os.ReadFile(appInfo.ResolvConfPath)
	require.NoError(t, err)
	assert.Equal(t, pauseInfo.ResolvConfPath, appInfo.ResolvConfPath, "the task's containers share the pause container's resolv.conf")
	assert.Contains(t, string(resolv), "nameserver 10.77.0.2", "the ENI's DNS servers are the task's")

	require.NoError(t, h.eng.StopTask(context.Background(), eniTask.Arn, "done"))
	h.waitTask(t, eniTask.Arn, 30*time.Second, "stop", itStopped)
	_, err = netlink.LinkByName(name)
	assert.NoError(t, err, "the ENI is back in the host namespace")
}

func netContains(t *testing.T, cidr, ip string) bool {
	_, n, err := net.ParseCIDR(cidr)
	require.NoError(t, err)
	return n.Contains(net.ParseIP(ip))
}

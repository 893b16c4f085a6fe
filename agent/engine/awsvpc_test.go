package engine

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/task"
)

func TestAWSVPCPauseContainer(t *testing.T) {
	cfg := testConfig()
	network := &fakeNetwork{}
	cfg.AWSVPC = AWSVPCConfig{Network: network, PauseImage: "berth/pause"}
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/awsvpc"
	tk := newTask(arn, ctr("app"))
	tk.NetworkMode = task.NetworkAWSVPC
	h.add(tk)
	running := h.waitStatus(arn, task.TaskRunning)
	pause := running.Container(PauseContainerName)
	require.NotNil(t, pause, "the engine adds the pause container")
	assert.Equal(t, task.ContainerResourcesProvisioned, pause.KnownStatus)
	assert.Zero(t, h.puller.pulls("berth/pause"), "the pause image is not pulled")
	require.NotNil(t, running.AWSVPC)
	assert.Equal(t, "/proc/100/ns/net", running.AWSVPC.NetNS, "CNI runs against the pause container's namespace")
	assert.Equal(t, "10.0.0.2", running.AWSVPC.IPv4)
	assert.Equal(t, []string{"setup awsvpc /proc/100/ns/net"}, network.log())

	creates := h.docker.createCalls()
	require.Len(t, creates, 2)
	assert.Equal(t, PauseContainerName, creates[0].Config.Labels[LabelContainerName], "the pause container is created first")
	assert.Equal(t, "none", creates[0].HostConfig.NetworkMode)
	assert.Equal(t, "container:"+pause.DockerID, creates[1].HostConfig.NetworkMode)

	require.NoError(t, h.engine.StopTask(context.Background(), arn, "done"))
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Equal(t, []string{"app", PauseContainerName}, h.stopOrder(), "the pause container stops last")
	assert.Equal(t, []string{"setup awsvpc /proc/100/ns/net", "teardown awsvpc /proc/100/ns/net"}, network.log(),
		"the network is torn down once, before the pause container stops")
	assert.True(t, stopped.AWSVPC.TornDown)
}

// A teardown that fails at the stop is tried once more at the cleanup, before the task is forgotten:
// its addresses and CNI records do not wait for the next agent start. A task torn down at its stop
// is not torn down again.
func TestAWSVPCTeardownRetriedAtCleanup(t *testing.T) {
	cfg := testConfig()
	network := &fakeNetwork{}
	cfg.AWSVPC = AWSVPCConfig{Network: network, PauseImage: "berth/pause"}
	h := newHarness(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, tt := range []struct {
		arn       string
		failures  int
		teardowns int
	}{
		{arn: "arn:aws:ecs:local:000000000000:task/test-cluster/teardown-fails", failures: 2, teardowns: 3},
		{arn: "arn:aws:ecs:local:000000000000:task/test-cluster/teardown-works", failures: 0, teardowns: 1},
	} {
		network.mu.Lock()
		network.calls, network.failTeardowns = nil, tt.failures
		network.mu.Unlock()
		tk := newTask(tt.arn, ctr("app"))
		tk.NetworkMode = task.NetworkAWSVPC
		h.add(tk)
		h.waitStatus(tt.arn, task.TaskRunning)
		require.NoError(t, h.engine.StopTask(ctx, tt.arn, "done"))
		stopped := h.waitStatus(tt.arn, task.TaskStopped)
		assert.Equal(t, tt.failures == 0, stopped.AWSVPC.TornDown, tt.arn)
		n, err := h.engine.CleanupStopped(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		id := CNITaskID(tt.arn)
		want := []string{"setup " + id + " /proc/100/ns/net"}
		for range tt.teardowns {
			want = append(want, "teardown "+id+" /proc/100/ns/net")
		}
		assert.Equal(t, want, network.log(), "%s: at the stop (BeforeStop, Stopped), then at the cleanup if still up", tt.arn)
	}
}

func TestAWSVPCRefusedWithoutTaskNetworking(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:aws:ecs:local:000000000000:task/test-cluster/nonet"
	tk := newTask(arn, ctr("app"))
	tk.NetworkMode = task.NetworkAWSVPC
	h.add(tk)
	stopped := h.waitStatus(arn, task.TaskStopped)
	assert.Contains(t, stopped.StoppedReason, "ECS_ENABLE_TASK_ENI=true")
	assert.Empty(t, h.docker.createCalls())
}

func TestAWSVPCStaticAddressOneTaskAtATime(t *testing.T) {
	cfg := testConfig()
	static := mustCIDR(t, "169.254.172.10/22")
	cfg.AWSVPC = AWSVPCConfig{Network: &fakeNetwork{}, PauseImage: "berth/pause", BridgeIPv4: &static}
	h := newHarness(t, cfg)
	first, second := "arn:aws:ecs:local:000000000000:task/test-cluster/one", "arn:aws:ecs:local:000000000000:task/test-cluster/two"
	for _, arn := range []string{first, second} {
		tk := newTask(arn, ctr("app"))
		tk.NetworkMode = task.NetworkAWSVPC
		h.add(tk)
		if arn == first {
			h.waitStatus(first, task.TaskRunning)
		}
	}
	waiting := h.waitTask(second, "wait for the static address", func(tk *task.Task) bool { return tk.PendingReason != "" })
	assert.Contains(t, waiting.PendingReason, "OverrideAWSVPCLocalIPv4Address")
	assert.Contains(t, waiting.PendingReason, first)

	require.NoError(t, h.engine.StopTask(context.Background(), first, "make way"))
	h.waitStatus(first, task.TaskStopped)
	h.waitStatus(second, task.TaskRunning)
}

type fakeENIs struct{ present map[string]bool }

func (f fakeENIs) WaitForMAC(ctx context.Context, mac string) error {
	if f.present[mac] {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestAWSVPCWaitsForTheENI(t *testing.T) {
	for _, tt := range []struct {
		name    string
		present bool
	}{{name: "ENI appears", present: true}, {name: "ENI never appears", present: false}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			network := &fakeNetwork{}
			const mac = "0a:58:0a:00:00:05"
			cfg.AWSVPC = AWSVPCConfig{Network: network, PauseImage: "berth/pause", ENIs: fakeENIs{present: map[string]bool{mac: tt.present}},
				ENIWait: 50 * time.Millisecond}
			h := newHarness(t, cfg)
			const arn = "arn:aws:ecs:us-west-2:012345678901:task/test-cluster/eni"
			tk := newTask(arn, ctr("app"))
			tk.NetworkMode = task.NetworkAWSVPC
			tk.ENI = &task.ENI{MAC: mac, IPv4: netip.MustParsePrefix("10.0.0.5/24"), Gateway: netip.MustParseAddr("10.0.0.1")}
			h.add(tk)
			if tt.present {
				h.waitStatus(arn, task.TaskRunning)
				assert.Len(t, network.log(), 1)
				return
			}
			stopped := h.waitStatus(arn, task.TaskStopped)
			assert.Contains(t, stopped.StoppedReason, "timed out")
			assert.Contains(t, stopped.StoppedReason, mac, "the reason names the MAC")
			assert.Empty(t, network.log(), "no network is set up without the ENI")
		})
	}
}

// fakeNetwork stands in for the CNI plugins: it records calls and hands out one address.
type fakeNetwork struct {
	mu            sync.Mutex
	calls         []string
	failTeardowns int // Teardown fails this many times first
}

func (n *fakeNetwork) Setup(_ context.Context, tn ecscni.TaskNetwork) (ecscni.Result, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, "setup "+tn.TaskID+" "+tn.NetNS)
	return ecscni.Result{ENIIPv4: "10.0.0.2", BridgeIPv4: "169.254.172.3"}, nil
}

func (n *fakeNetwork) Teardown(_ context.Context, tn ecscni.TaskNetwork) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, "teardown "+tn.TaskID+" "+tn.NetNS)
	if n.failTeardowns > 0 {
		n.failTeardowns--
		return errors.New("plugin bridge: failed to delete the veth")
	}
	return nil
}

func (n *fakeNetwork) log() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

package dockerstats

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// netDevFixture is /proc/PID/net/dev of an awsvpc task's namespace as Linux writes it: the
// loopback, the ENI (eth0) and Berth's task bridge (ecs-eth0).
const netDevFixture = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    4820      60    0    0    0     0          0         0     4820      60    0    0    0     0       0          0
  eth0: 1296347    1042    1    2    0     0          0         0    98123     803    3    4    0     0       0          0
ecs-eth0:   5310      41    0    0    0     0          0         0     7032      55    0    0    0     0       0          0
`

func TestParseNetDev(t *testing.T) {
	got, err := parseNetDev([]byte(netDevFixture), map[string]bool{"ecs-eth0": true})
	require.NoError(t, err)
	assert.Equal(t, map[string]dockerclient.NetworkStats{
		"eth0": {RxBytes: 1296347, RxPackets: 1042, RxErrors: 1, RxDropped: 2, TxBytes: 98123, TxPackets: 803, TxErrors: 3, TxDropped: 4},
	}, got)

	got, err = parseNetDev([]byte(netDevFixture), nil)
	require.NoError(t, err)
	assert.Equal(t, dockerclient.NetworkStats{RxBytes: 5310, RxPackets: 41, TxBytes: 7032, TxPackets: 55}, got["ecs-eth0"])
	assert.NotContains(t, got, "lo", "the loopback is never a network")

	got, err = parseNetDev([]byte(strings.Join(strings.Split(netDevFixture, "\n")[:2], "\n")), nil)
	require.NoError(t, err)
	assert.Empty(t, got, "headers only: no interface")

	header := strings.Join(strings.Split(netDevFixture, "\n")[:2], "\n") + "\n"
	for name, line := range map[string]string{
		"no colon":          "  eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",
		"too few counters":  "  eth0: 1 2 3",
		"too many counters": "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
		"not a number":      "  eth0: 1 2 3 4 5 6 7 8 x 10 11 12 13 14 15 16",
		"negative":          "  eth0: -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",
		"no name":           "  : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseNetDev([]byte(header+line+"\n"), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "line 3")
		})
	}
}

func TestNetDevOf(t *testing.T) {
	for netns, want := range map[string]string{
		"/proc/4242/ns/net":    "/host/proc/4242/net/dev",
		"/proc/1/ns/net":       "/host/proc/1/net/dev",
		"/proc/self/ns/net":    "",
		"/proc/0/ns/net":       "",
		"/var/run/netns/task1": "",
		"/proc/42/ns/net/..":   "",
		"/proc/../1/ns/net":    "",
		"":                     "",
	} {
		got, ok := netDevOf("/host/proc", netns)
		assert.Equal(t, want != "", ok, netns)
		assert.Equal(t, want, got, netns)
	}
}

func TestWithNetworks(t *testing.T) {
	nets := map[string]dockerclient.NetworkStats{"eth0": {RxBytes: 10, TxBytes: 20}}
	got := withNetworks(json.RawMessage(`{"id":"abc","networks":{"old":{}},"read":"x"}`), nets)
	assert.JSONEq(t, `{"id":"abc","read":"x","networks":{"eth0":{"rx_bytes":10,"rx_packets":0,"rx_errors":0,"rx_dropped":0,
		"tx_bytes":20,"tx_packets":0,"tx_errors":0,"tx_dropped":0}}}`, string(got))
	for _, raw := range []string{`[]`, `null`, `"x"`, `{`} {
		assert.Equal(t, raw, string(withNetworks(json.RawMessage(raw), nets)), "not an object: unchanged")
	}
}

// TestStatsInTaskNetNS: an awsvpc container's samples, which have no networks from Docker, are
// served with its task namespace's interfaces and, from the second, their rate; a container asked
// without a namespace keeps Docker's.
func TestStatsInTaskNetNS(t *testing.T) {
	proc := t.TempDir()
	dev := filepath.Join(proc, "4242", "net", "dev")
	require.NoError(t, os.MkdirAll(filepath.Dir(dev), 0o755))
	writeDev := func(rx, tx uint64) {
		body := strings.Join(strings.Split(netDevFixture, "\n")[:2], "\n") + "\n" +
			fmt.Sprintf("    lo: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n  eth0: %d 7 0 0 0 0 0 0 %d 5 0 0 0 0 0 0\necs-eth0: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n", rx, tx)
		require.NoError(t, os.WriteFile(dev, []byte(body), 0o644))
	}
	c, f, _ := newTestCache(t, Config{ProcRoot: proc, NetNSIgnore: []string{"ecs-eth0"}})
	ctx := t.Context()

	writeDev(1000, 400)
	ch := make(chan answer, 1)
	go func() {
		raw, err := c.Stats(ctx, "api", "/proc/4242/ns/net")
		ch <- answer{raw, err}
	}()
	st := f.nextStream(t)
	st.send(t, sample("api", t0, -1, 0))
	a := await(t, ch)
	require.NoError(t, a.err)
	var got struct {
		Networks map[string]dockerclient.NetworkStats `json:"networks"`
		Memory   map[string]any                       `json:"memory_stats"`
	}
	require.NoError(t, json.Unmarshal(a.raw, &got))
	assert.Equal(t, map[string]dockerclient.NetworkStats{"eth0": {RxBytes: 1000, RxPackets: 7, TxBytes: 400, TxPackets: 5}}, got.Networks)
	assert.Equal(t, map[string]any{"usage": 4096.0}, got.Memory, "Docker's fields stay")
	assert.Nil(t, rateOf(t, a.raw), "no rate from one sample")

	writeDev(3000, 1400)
	st.send(t, sample("api", t0.Add(2*time.Second), -1, 0))
	raw, err := c.Stats(ctx, "api", "/proc/4242/ns/net")
	require.NoError(t, err)
	// rx: (3000-1000) / 2 s; tx: (1400-400) / 2 s.
	assert.Equal(t, &networkRate{RxBytesPerSec: 1000, TxBytesPerSec: 500}, rateOf(t, raw))

	require.NoError(t, os.Remove(dev))
	st.send(t, sample("api", t0.Add(3*time.Second), -1, 0))
	raw, err = c.Stats(ctx, "api", "/proc/4242/ns/net")
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "networks", "the namespace is gone: Docker's sample as it is")

	ch2 := make(chan answer, 1)
	go func() {
		raw, err := c.Stats(ctx, "web", "")
		ch2 <- answer{raw, err}
	}()
	web := f.nextStream(t)
	web.send(t, sample("web", t0, 50, 60))
	a = await(t, ch2)
	require.NoError(t, a.err)
	assert.Contains(t, string(a.raw), `"networks":{"eth0":{"rx_bytes":50,"tx_bytes":60}}`, "Docker's networks, untouched")
}

package dockerstats

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// An awsvpc task's containers share the network namespace of its pause container, which Docker
// created without a network: Docker's stats of them have no networks. Like the ECS agent, which
// reads the links of the task's namespace, Berth reads the namespace's interface counters, from
// /proc/PID/net/dev of a process in it, and serves them as the networks of every container of the
// task (see Cache.Stats).

// netNSPath matches the form of the task's namespace Berth knows: /proc/PID/ns/net.
var netNSPath = regexp.MustCompile(`^/proc/([1-9][0-9]{0,9})/ns/net$`)

// netDevOf returns the net/dev file under procRoot of the process whose namespace netns is, or
// false when netns is not of the form /proc/PID/ns/net.
func netDevOf(procRoot, netns string) (string, bool) {
	m := netNSPath.FindStringSubmatch(netns)
	if m == nil {
		return "", false
	}
	return filepath.Join(procRoot, m[1], "net", "dev"), true
}

// netDevFields are the counters of one line of /proc/net/dev: eight received, eight sent.
const netDevFields = 16

// parseNetDev reads the interface counters of /proc/PID/net/dev (two header lines, then one line
// per interface: "name: rx bytes packets errs drop fifo frame compressed multicast tx bytes
// packets errs drop fifo colls carrier compressed"). The loopback interface and those skip names
// are left out. A line that does not parse is an error naming it; the time taken is linear in the
// input.
func parseNetDev(b []byte, skip map[string]bool) (map[string]dockerclient.NetworkStats, error) {
	out := map[string]dockerclient.NetworkStats{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n <= 2 {
			continue // the headers
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, counters, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		fields := strings.Fields(counters)
		if !ok || name == "" || len(fields) != netDevFields {
			return nil, fmt.Errorf("net/dev line %d: want \"name: %d counters\", got %q", n, netDevFields, line)
		}
		var v [netDevFields]uint64
		for i, f := range fields {
			u, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("net/dev line %d (%s): counter %d: %w", n, name, i+1, err)
			}
			v[i] = u
		}
		if name == "lo" || skip[name] {
			continue
		}
		out[name] = dockerclient.NetworkStats{RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("net/dev: %w", err)
	}
	return out, nil
}

// withNetworks returns the stats object raw with its networks member set to nets. raw is returned
// as it is when it is not a JSON object.
func withNetworks(raw json.RawMessage, nets map[string]dockerclient.NetworkStats) json.RawMessage {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return raw
	}
	n, err := json.Marshal(nets)
	if err != nil {
		return raw
	}
	obj["networks"] = n
	out, err := json.Marshal(obj)
	if err != nil {
		return raw
	}
	return out
}

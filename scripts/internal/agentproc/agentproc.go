// Package agentproc builds the berth binary for the scripts (bench, soak) and reads what the kernel
// says of a process — the agent's, the Docker Engine's: CPU time and resident memory — and which
// processes run a given program.
package agentproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Build builds the berth binary at bin as `make build` does: statically, without cgo.
func Build(ctx context.Context, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/berth-agent/berth/agent/cmd/berth")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build berth: %w\n%s", err, out)
	}
	return nil
}

// ClockTicks is the kernel's USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
func ClockTicks() (int, error) {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 0, fmt.Errorf("getconf CLK_TCK: %w", err)
	}
	hz, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || hz <= 0 {
		return 0, fmt.Errorf("getconf CLK_TCK printed %q", out)
	}
	return hz, nil
}

// CPUTicks returns utime+stime of a process, in clock ticks.
func CPUTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces: count fields after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return utime + stime, nil
}

// ResidentMiB returns VmRSS of a process.
func ResidentMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return float64(kib) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// Processes returns the IDs, in increasing order, of the processes whose command name (comm, at
// most 15 bytes) match accepts. Processes that exit while /proc is read are left out.
func Processes(match func(comm string) bool) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && match(strings.TrimSuffix(string(comm), "\n")) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

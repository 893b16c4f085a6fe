package engine

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// HostMeminfo is where the host's memory is read from.
const HostMeminfo = "/proc/meminfo"

// HostResources returns what this host offers tasks: 1024 CPU units per core, the memory meminfo
// (HostMeminfo) gives less reservedMiB (ECS_RESERVED_MEMORY), and every host port but the reserved
// ones. Reserving all the memory is an error naming the key.
func HostResources(meminfo string, reservedMiB int, reservedTCP, reservedUDP []uint16) (Resources, error) {
	total, err := memTotalMiB(meminfo)
	if err != nil {
		return Resources{}, err
	}
	if reservedMiB >= total {
		return Resources{}, fmt.Errorf("ECS_RESERVED_MEMORY (%d MiB) leaves no memory of the host's %d MiB for tasks", reservedMiB, total)
	}
	return Resources{CPU: runtime.NumCPU() * 1024, MemoryMiB: total - reservedMiB, ReservedTCP: reservedTCP, ReservedUDP: reservedUDP}, nil
}

// memTotalMiB reads MemTotal from a meminfo file.
func memTotalMiB(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.Atoi(fields[1])
			if err != nil {
				return 0, fmt.Errorf("read host memory: MemTotal %q: %w", fields[1], err)
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("read host memory: no MemTotal in %s", path)
}

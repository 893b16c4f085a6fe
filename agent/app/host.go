package app

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/engine"
)

// hostResources is what this host offers tasks: 1024 CPU units per core, its memory less
// ECS_RESERVED_MEMORY, and every host port but the reserved ones.
func hostResources(cfg *config.Config) (engine.Resources, error) {
	total, err := memTotalMiB("/proc/meminfo")
	if err != nil {
		return engine.Resources{}, err
	}
	if cfg.ReservedMemoryMiB >= total {
		return engine.Resources{}, fmt.Errorf("ECS_RESERVED_MEMORY (%d MiB) leaves no memory of the host's %d MiB for tasks", cfg.ReservedMemoryMiB, total)
	}
	return engine.Resources{
		CPU:         runtime.NumCPU() * 1024,
		MemoryMiB:   total - cfg.ReservedMemoryMiB,
		ReservedTCP: cfg.ReservedPorts,
		ReservedUDP: cfg.ReservedPortsUDP,
	}, nil
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

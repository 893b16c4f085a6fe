package app

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/taskcgroup"
)

// taskCgroupRoot is where task cgroups live in each hierarchy, as the ECS agent's.
const taskCgroupRoot = "/ecs"

// taskCgroups returns the engine's task cgroups with ECS_ENABLE_TASK_CPU_MEM_LIMIT, or nil without
// it. A host where they cannot be made is an error naming the keys: running tasks without the
// limits they ask for would drop part of them.
func taskCgroups(cfg *config.Config) (engine.TaskCgroups, error) {
	if !cfg.TaskCPUMemLimit {
		return nil, nil
	}
	m, err := taskcgroup.New(taskcgroup.Config{Root: taskCgroupRoot, CPUPeriod: cfg.CgroupCPUPeriod, FS: cfg.CgroupPath, PIDs: cfg.TaskPidsLimit})
	if err != nil {
		return nil, fmt.Errorf("ECS_ENABLE_TASK_CPU_MEM_LIMIT=true but task cgroups cannot be made in %s (ECS_CGROUP_PATH): %w; set ECS_ENABLE_TASK_CPU_MEM_LIMIT=false to run tasks without task-level limits", cfg.CgroupPath, err)
	}
	return m, nil
}

// dynamicHostPorts returns ECS_DYNAMIC_HOST_PORT_RANGE, else the kernel's ephemeral port range,
// else 49153-65535, as the ECS agent chooses it.
func dynamicHostPorts(cfg *config.Config) [2]int {
	if cfg.DynamicHostPortRange != [2]int{} {
		return cfg.DynamicHostPortRange
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo >= 1 && lo <= hi && hi <= 65535 {
				return [2]int{lo, hi}
			}
		}
	}
	return [2]int{49153, 65535}
}

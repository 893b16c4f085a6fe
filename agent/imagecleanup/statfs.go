package imagecleanup

import (
	"fmt"
	"syscall"
)

// StatfsUsage returns a DiskUsage for the filesystem holding path, computed as df computes Use%:
// used / (used + available to unprivileged users), where used = blocks - free. Blocks reserved for
// root therefore count neither as used nor as available. Each call returns a fresh sample.
func StatfsUsage(path string) DiskUsage {
	return func() (float64, error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(path, &st); err != nil {
			return 0, fmt.Errorf("statfs %q: %w", path, err)
		}
		used := float64(st.Blocks) - float64(st.Bfree)
		total := used + float64(st.Bavail)
		if st.Blocks == 0 || total <= 0 {
			return 0, fmt.Errorf("statfs %q: filesystem reports no blocks", path)
		}
		return used / total, nil
	}
}

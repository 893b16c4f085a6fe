package agentproc

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcessesFindsThisTest(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	name := strings.TrimSpace(string(comm))
	pids, err := Processes(func(c string) bool { return c == name })
	require.NoError(t, err)
	assert.Contains(t, pids, os.Getpid())

	none, err := Processes(func(string) bool { return false })
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestCPUTicksAndResidentMemoryOfThisTest(t *testing.T) {
	before, err := CPUTicks(os.Getpid())
	require.NoError(t, err)
	hz, err := ClockTicks()
	require.NoError(t, err)
	// Spin until the kernel has counted at least one more tick of CPU time for this process.
	deadline := time.Now().Add(5 * time.Second)
	for {
		now, err := CPUTicks(os.Getpid())
		require.NoError(t, err)
		if now > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU tick counted (CLK_TCK %d) in 5 s of spinning", hz)
		}
	}
	rss, err := ResidentMiB(os.Getpid())
	require.NoError(t, err)
	assert.Greater(t, rss, 0.5)

	_, err = CPUTicks(-1)
	assert.Error(t, err)
}

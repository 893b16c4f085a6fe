package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemTotalMiB(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    int
		wantErr string
	}{
		{name: "typical", content: "MemTotal:       24576000 kB\nMemFree:  100 kB\n", want: 24000},
		{name: "not first line", content: "Foo: 1 kB\nMemTotal: 2048 kB\n", want: 2},
		{name: "missing", content: "MemFree: 1 kB\n", wantErr: "no MemTotal"},
		{name: "garbage", content: "MemTotal: lots kB\n", wantErr: `"lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meminfo")
			require.NoError(t, os.WriteFile(p, []byte(tt.content), 0o600))
			got, err := memTotalMiB(p)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestHostResourcesFromMeminfo: the host's memory less the reserved part, every core's 1024 units, the reserved
// ports as given; reserving all of it is an error naming the key.
func TestHostResourcesFromMeminfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	require.NoError(t, os.WriteFile(p, []byte("MemTotal: 4194304 kB\n"), 0o600))
	r, err := HostResources(p, 512, []uint16{22}, []uint16{53})
	require.NoError(t, err)
	assert.Equal(t, Resources{CPU: runtime.NumCPU() * 1024, MemoryMiB: 4096 - 512, ReservedTCP: []uint16{22}, ReservedUDP: []uint16{53}}, r)
	_, err = HostResources(p, 4096, nil, nil)
	assert.ErrorContains(t, err, "ECS_RESERVED_MEMORY (4096 MiB) leaves no memory")
}

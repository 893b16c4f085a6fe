package app

import (
	"os"
	"path/filepath"
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

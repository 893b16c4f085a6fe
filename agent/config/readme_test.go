package config

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEDocumentsEveryKey keeps the README's configuration table complete: every key the agent
// reads appears in it, with its flag, and Berth extensions are marked.
func TestREADMEDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	row := func(name string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "| `"+name+"` |") {
				return l
			}
		}
		return ""
	}
	for _, k := range keyTable() {
		r := row(k.name)
		if !assert.NotEmpty(t, r, "README.md has no table row for %s", k.name) {
			continue
		}
		if k.flag != "" {
			assert.Contains(t, r, "`--"+k.flag+"`", "README row of %s names its flag", k.name)
		}
		assert.Equal(t, k.berth, strings.Contains(r, "Berth extension"), "README row of %s marks Berth extensions", k.name)
	}
}

package version

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestECSAgentString: the ECS agent's form, which Datadog's ECS integration parses
// (comp/core/workloadmeta/collectors/util/ecs_util.go: the first `\bv(\d+(?:\.\d+){0,2}(?:-\w+)?)\b`)
// to the ECS agent release, never to Berth's own version.
func TestECSAgentString(t *testing.T) {
	for build, want := range map[Info]string{
		{Version: "0.4.0", GitHash: "1a2b3c4d"}:     "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d)",
		{Version: "v2.0.0-rc1", GitHash: "unknown"}: "Amazon ECS Agent - v1.105.1 (berth v2.0.0-rc1 unknown)",
	} {
		got := build.ECSAgentString()
		assert.Equal(t, want, got)
		assert.Equal(t, "1.105.1", datadogECSAgentVersion(got), "what Datadog reads")
	}
}

// datadogECSAgentVersion is Datadog's reading of the ECS agent's version, written out here by hand:
// the digits after the first "v" that starts a word, up to three dot-separated numbers and a
// "-suffix".
func datadogECSAgentVersion(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] != 'v' || (i > 0 && isWord(s[i-1])) || i+1 >= len(s) || s[i+1] < '0' || s[i+1] > '9' {
			continue
		}
		j, dots := i+1, 0
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' && dots < 2 && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9') {
			if s[j] == '.' {
				dots++
			}
			j++
		}
		return s[i+1 : j]
	}
	return ""
}

func isWord(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

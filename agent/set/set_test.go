package set

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	tests := []struct {
		name    string
		build   func() Set[string]
		want    []string
		present string
		absent  string
	}{
		{name: "zero value", build: func() Set[string] { return Set[string]{} }, want: []string{}, absent: "a"},
		{name: "of dedupes", build: func() Set[string] { return Of("b", "a", "b") }, want: []string{"a", "b"}, present: "a", absent: "c"},
		{name: "add to zero value", build: func() Set[string] {
			var s Set[string]
			s.Add("x")
			s.Add("x")
			return s
		}, want: []string{"x"}, present: "x", absent: "y"},
		{name: "remove", build: func() Set[string] {
			s := Of("a", "b")
			s.Remove("a")
			s.Remove("zz")
			return s
		}, want: []string{"b"}, present: "b", absent: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.build()
			assert.Equal(t, tt.want, Sorted(s))
			assert.Equal(t, len(tt.want), s.Len())
			if tt.present != "" {
				assert.True(t, s.Has(tt.present))
			}
			assert.False(t, s.Has(tt.absent))
		})
	}
}

func TestMarshalJSONIsStable(t *testing.T) {
	s := Of("012345678901", "602401143452", "100000000000")
	for range 20 {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		assert.JSONEq(t, `["012345678901","100000000000","602401143452"]`, string(b))
		assert.Equal(t, `["012345678901","100000000000","602401143452"]`, string(b))
	}
}

package secrets

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEnvFile(t *testing.T) {
	cases := []struct {
		name, body string
		want       []KeyValue
		err        string
	}{
		{name: "empty", body: ""},
		{name: "one", body: "A=1", want: []KeyValue{{"A", "1"}}},
		{name: "comments and blank lines", body: "# c\n\n  \n\t# indented comment\nA=1\n", want: []KeyValue{{"A", "1"}}},
		{name: "value keeps '=' and quotes and blanks", body: `A=x=y "z" ` + "\n", want: []KeyValue{{"A", `x=y "z" `}}},
		{name: "value keeps '#'", body: "A=1 # not a comment\n", want: []KeyValue{{"A", "1 # not a comment"}}},
		{name: "CRLF", body: "A=1\r\nB=2\r\n", want: []KeyValue{{"A", "1"}, {"B", "2"}}},
		{name: "BOM", body: "\ufeffA=1\n", want: []KeyValue{{"A", "1"}}},
		{name: "leading blanks before the name", body: "  A=1\n", want: []KeyValue{{"A", "1"}}},
		{name: "empty value skipped", body: "A=\nB=2\n", want: []KeyValue{{"B", "2"}}},
		{name: "repeats kept in order", body: "A=1\nB=2\nA=3\n", want: []KeyValue{{"A", "1"}, {"B", "2"}, {"A", "3"}}},
		{name: "no =", body: "A=1\nsecret-looking-line\n", err: "line 2 has no '='"},
		{name: "no name", body: "=value\n", err: "line 1 has no variable name"},
		{name: "blank in name", body: "A=1\n\nMY VAR=1\n", err: "line 3 has a blank"},
		{name: "NUL", body: "A=1\x00\n", err: "line 1 has a NUL byte"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEnvFile(tc.body)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.NotContains(t, err.Error(), "secret-looking-line")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestMergeEnvFiles(t *testing.T) {
	got := mergeEnvFiles([][]KeyValue{
		{{"A", "1"}, {"B", "2"}, {"A", "3"}},
		{{"B", "x"}, {"C", "4"}, {"C", "5"}, {"A", "y"}},
	})
	assert.Equal(t, []KeyValue{{"A", "3"}, {"B", "2"}, {"C", "5"}}, got)
}

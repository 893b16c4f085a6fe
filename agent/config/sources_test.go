package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEnvFile(t *testing.T) {
	type kv struct {
		key, text string
		line      int
	}
	tests := []struct {
		name      string
		in        string
		want      []kv
		wantLines []int // lines of the errors, in order
		wantKeys  []string
	}{
		{name: "empty", in: "", want: nil},
		{name: "comments and blanks", in: "# a comment\n\n   # indented comment\nECS_CLUSTER=c\n\n", want: []kv{{"ECS_CLUSTER", "c", 4}}},
		{name: "spaces around", in: "  ECS_CLUSTER = c  \n", want: []kv{{"ECS_CLUSTER", "c", 1}}},
		{name: "export", in: "export ECS_CLUSTER=c\nexport  ECS_LOGLEVEL=debug\n", want: []kv{{"ECS_CLUSTER", "c", 1}, {"ECS_LOGLEVEL", "debug", 2}}},
		{name: "empty value", in: "ECS_REGISTRY_ECR_REGIONS=\n", want: []kv{{"ECS_REGISTRY_ECR_REGIONS", "", 1}}},
		{name: "value with equals", in: "A=b=c\n", want: []kv{{"A", "b=c", 1}}},
		{name: "value with hash", in: "A=b#c\n", want: []kv{{"A", "b#c", 1}}},
		{name: "double quotes", in: `A="b c"` + "\n", want: []kv{{"A", "b c", 1}}},
		{name: "single quotes", in: "A='b c'\n", want: []kv{{"A", "b c", 1}}},
		{name: "empty quotes", in: "A=''\nB=\"\"\n", want: []kv{{"A", "", 1}, {"B", "", 2}}},
		{name: "JSON in single quotes", in: `A='{"k": "v"}'` + "\n", want: []kv{{"A", `{"k": "v"}`, 1}}},
		{name: "JSON in double quotes", in: `A="{"k": "v"}"` + "\n", want: []kv{{"A", `{"k": "v"}`, 1}}},
		{name: "other quote inside", in: `A="it's"` + "\nB='say \"hi\"'\n", want: []kv{{"A", "it's", 1}, {"B", `say "hi"`, 2}}},
		{name: "bare JSON", in: `A={"k":"v"}` + "\n", want: []kv{{"A", `{"k":"v"}`, 1}}},
		{name: "multi-line double", in: "A=\"one\ntwo\nthree\"\nB=b\n", want: []kv{{"A", "one\ntwo\nthree", 1}, {"B", "b", 4}}},
		{name: "multi-line single JSON", in: "# x\nA='{\n  \"k\": \"v\"\n}'\nB=b\n", want: []kv{{"A", "{\n  \"k\": \"v\"\n}", 2}, {"B", "b", 5}}},
		{name: "multi-line opening quote alone", in: "A=\"\nx\n\"\n", want: []kv{{"A", "\nx\n", 1}}},
		{name: "single quote alone closes on the next line", in: "A='\n'\n", want: []kv{{"A", "\n", 1}}},
		{name: "CRLF", in: "A=a\r\nB=\"b\r\nc\"\r\nC=c\r\n", want: []kv{{"A", "a", 1}, {"B", "b\nc", 2}, {"C", "c", 4}}},
		{name: "BOM", in: "\ufeffECS_CLUSTER=c\n", want: []kv{{"ECS_CLUSTER", "c", 1}}},
		{name: "BOM only on the first line", in: "A=a\n\ufeffB=b\n", want: []kv{{"A", "a", 1}, {"\ufeffB", "b", 2}}},
		{name: "no final newline", in: "A=a", want: []kv{{"A", "a", 1}}},
		{name: "duplicates are all returned", in: "A=1\nA=2\n", want: []kv{{"A", "1", 1}, {"A", "2", 2}}},

		{name: "no equals", in: "A=a\njust words\nB=b\n", want: []kv{{"A", "a", 1}, {"B", "b", 3}}, wantLines: []int{2}, wantKeys: []string{""}},
		{name: "empty key", in: "=x\n", wantLines: []int{1}, wantKeys: []string{""}},
		{name: "space in key", in: "A B=c\n", wantLines: []int{1}, wantKeys: []string{""}},
		{name: "quote in key", in: "\"A\"=c\n'B'=c\n", wantLines: []int{1, 2}, wantKeys: []string{"", ""}},
		{name: "export alone", in: "export\n", wantLines: []int{1}, wantKeys: []string{""}},
		{name: "several bad lines", in: "x\nA=1\ny\n\nz\n", want: []kv{{"A", "1", 2}}, wantLines: []int{1, 3, 5}, wantKeys: []string{"", "", ""}},
		{name: "unterminated", in: "A=1\nB=\"open\nC=3\n", want: []kv{{"A", "1", 1}}, wantLines: []int{2}, wantKeys: []string{"B"}},
		{name: "unterminated at EOF", in: "B='", wantLines: []int{1}, wantKeys: []string{"B"}},
		{name: "bad line then unterminated", in: "x\nB='open\n", wantLines: []int{1, 2}, wantKeys: []string{"", "B"}},
		{name: "line too long", in: "A=1\n" + strings.Repeat("x", 1<<20+1) + "\n", want: []kv{{"A", "1", 1}}, wantLines: []int{2}, wantKeys: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, err := parseEnvFile(strings.NewReader(tt.in), "/e")
			var got []kv
			for _, e := range entries {
				assert.False(t, e.json)
				got = append(got, kv{e.key, e.text, e.line})
			}
			assert.Equal(t, tt.want, got)
			if len(tt.wantLines) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			var lines []int
			var keys []string
			for _, e := range flatten(err) {
				var ce *Error
				require.ErrorAs(t, e, &ce)
				assert.Equal(t, SourceEnvFile, ce.Origin.Kind)
				assert.Equal(t, "/e", ce.Origin.File)
				lines = append(lines, ce.Origin.Line)
				keys = append(keys, ce.Key)
			}
			assert.Equal(t, tt.wantLines, lines)
			assert.Equal(t, tt.wantKeys, keys)
			for _, word := range []string{"just", "words", "open", "xxxx", "=c"} {
				assert.NotContains(t, err.Error(), word, "errors never quote the line")
			}
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestParseEnvFileReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := parseEnvFile(failingReader{boom}, "/e")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, boom)
}

func TestParseJSONFile(t *testing.T) {
	in := "{\n" +
		`  "Cluster": "c",` + "\n" + // 2
		`  "DockerStopTimeout": 30000000000,` + "\n" + // 3
		`  "InstanceAttributes": {` + "\n" + // 4
		`    "a": "b"` + "\n" +
		`  },` + "\n" +
		`  "ReservedPorts": [22, 80],` + "\n" + // 7
		`  "TaskENIEnabled": true, "Nothing": null,` + "\n" + // 8
		`  "Escaped": "a\"b\u0041"` + "\n" + // 9
		"}\n"
	entries, err := parseJSONFile([]byte(in), "/j")
	require.NoError(t, err)
	type kv struct {
		key, text   string
		isStr, json bool
		line        int
	}
	var got []kv
	for _, e := range entries {
		got = append(got, kv{e.key, e.text, e.isStr, e.json, e.line})
	}
	assert.Equal(t, []kv{
		{"Cluster", "c", true, true, 2},
		{"DockerStopTimeout", "30000000000", false, true, 3},
		{"InstanceAttributes", "{\n    \"a\": \"b\"\n  }", false, true, 4},
		{"ReservedPorts", "[22, 80]", false, true, 7},
		{"TaskENIEnabled", "true", false, true, 8},
		{"Nothing", "", true, true, 8},
		{"Escaped", `a"bA`, true, true, 9},
	}, got)
}

func TestPosition(t *testing.T) {
	data := []byte("ab\ncd\n\nef")
	tests := []struct {
		offset    int64
		line, col int
	}{
		{0, 1, 1}, {1, 1, 2}, {2, 1, 3}, {3, 2, 1}, {4, 2, 2}, {6, 3, 1}, {7, 4, 1}, {8, 4, 2}, {9, 4, 3}, {100, 4, 3},
	}
	for _, tt := range tests {
		line, col := position(data, tt.offset)
		assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{line, col}, "offset %d", tt.offset)
	}
}

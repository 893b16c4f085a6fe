package taskdef

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/set"
)

// sdkFields returns the JSON path of every field of Amazon ECS's task definition as the AWS SDK
// declares it: TaskDefinition, and the members of RegisterTaskDefinitionInput it lacks (tags).
func sdkFields() map[string]reflect.Type {
	paths := map[string]reflect.Type{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[types.TaskDefinition]().PkgPath() {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			p := prefix + lowerFirst(f.Name)
			paths[p] = f.Type
			walk(p+".", f.Type)
		}
	}
	walk("", reflect.TypeFor[types.TaskDefinition]())
	in := reflect.TypeFor[ecs.RegisterTaskDefinitionInput]()
	for i := range in.NumField() {
		f := in.Field(i)
		if p := lowerFirst(f.Name); f.IsExported() && paths[p] == nil {
			paths[p] = f.Type
			walk(p+".", f.Type)
		}
	}
	return paths
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}

// goFields returns the JSON path of every field Definition decodes.
func goFields() set.Set[string] {
	var paths set.Set[string]
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Definition]().PkgPath() {
			return
		}
		for i := range t.NumField() {
			if name := jsonName(t.Field(i)); name != "" {
				paths.Add(prefix + name)
				walk(prefix+name+".", t.Field(i).Type)
			}
		}
	}
	walk("", reflect.TypeFor[Definition]())
	return paths
}

// TestEveryECSFieldIsAnswered fails on a field of the AWS SDK's task definition that the table of
// fields does not answer: a new SDK field must be honoured or refused before the SDK is upgraded.
func TestEveryECSFieldIsAnswered(t *testing.T) {
	sdk := sdkFields()
	require.Greater(t, len(sdk), 150, "the walk found too few fields to be the SDK's task definition")
	table := map[string]Field{}
	for _, f := range Fields() {
		_, dup := table[f.Path]
		assert.False(t, dup, "%s is in the table twice", f.Path)
		table[f.Path] = f
	}
	for p := range sdk {
		if covered(p, table) {
			continue
		}
		t.Errorf("ECS field %s is neither honoured nor refused: add it to the table of fields (taskdef/fields.go) and the README", p)
	}
	for p := range table {
		assert.Contains(t, sdk, p, "the table of fields names %s, which ECS's task definition does not have", p)
	}
}

// covered reports whether the table answers p: p has an entry, or an ancestor is refused or
// informational (its children share its answer).
func covered(p string, table map[string]Field) bool {
	if _, ok := table[p]; ok {
		return true
	}
	for i := strings.LastIndexByte(p, '.'); i > 0; i = strings.LastIndexByte(p[:i], '.') {
		if f, ok := table[p[:i]]; ok {
			return f.Support != Honoured
		}
	}
	return false
}

// TestTableMatchesDefinition holds the table to what Parse does: an honoured field is one Definition
// decodes; a refused one is one it has no place for, so that Parse refuses it.
func TestTableMatchesDefinition(t *testing.T) {
	decoded := goFields()
	for _, f := range Fields() {
		switch f.Support {
		case Honoured:
			assert.True(t, decoded.Has(f.Path), "%s is honoured but Definition does not decode it", f.Path)
		case Refused:
			assert.False(t, decoded.Has(f.Path), "%s is refused but Definition decodes it", f.Path)
			assert.NotEmpty(t, f.Note, f.Path)
		case Informational:
			assert.NotEmpty(t, f.Note, f.Path)
		default:
			t.Errorf("%s has no support", f.Path)
		}
	}
	for _, p := range decoded.Values() {
		f, ok := fieldIndex()[p]
		assert.True(t, ok && f.Support != Refused, "Definition decodes %s, which the table does not honour", p)
	}
}

// TestRefusedFieldsAreRefused sets each refused field of the table in a valid definition and
// expects Parse to refuse it by name.
func TestRefusedFieldsAreRefused(t *testing.T) {
	for _, f := range Fields() {
		if f.Support != Refused {
			continue
		}
		t.Run(f.Path, func(t *testing.T) {
			def := map[string]any{"family": "f", "volumes": []any{map[string]any{"name": "v"}},
				"containerDefinitions": []any{map[string]any{"name": "c", "image": "i", "memory": 8}}}
			obj := def
			parts := strings.Split(f.Path, ".")
			for _, part := range parts[:len(parts)-1] {
				obj = obj[part].([]any)[0].(map[string]any)
			}
			obj[parts[len(parts)-1]] = true
			raw, err := json.Marshal(def)
			require.NoError(t, err)
			_, err = Parse(raw)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), strings.ReplaceAll(strings.Replace(f.Path, "volumes", "volumes[0]", 1),
				"containerDefinitions", "containerDefinitions[0]")+": not supported by Berth")
		})
	}
}

// TestREADMETableOfFields holds the README's table of fields to the table: a row for every task,
// volume and container field, and for every field deeper down that is not honoured.
func TestREADMETableOfFields(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, f := range Fields() {
		if strings.Count(f.Path, ".") > 1 && f.Support == Honoured {
			continue
		}
		row := "| `" + f.Path + "` | " + f.Support.String() + " |"
		assert.True(t, strings.Contains(string(readme), row), "the README's table of fields lacks the row %s", row)
	}
}

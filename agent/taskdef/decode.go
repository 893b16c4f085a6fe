package taskdef

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/set"
)

// decoder fills a Go value from a generic JSON tree (what json.Decoder with UseNumber produces) the way
// encoding/json would, except that it matches field names exactly, keeps going after a type error,
// names every type error by its full path, and answers a field the Go value lacks as the table of
// fields says: informational fields are skipped, refused and unknown ones are errors.
type decoder struct {
	errs []error
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// reflectValue returns the settable value p points to.
func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

// decode stores the JSON value v, found at path, into rv. A JSON null leaves rv as it is.
func (d *decoder) decode(path string, v any, rv reflect.Value) {
	if v == nil {
		return
	}
	if rv.Kind() != reflect.Pointer && rv.CanAddr() && rv.Addr().Type().Implements(unmarshalerType) {
		raw, err := json.Marshal(v)
		if err == nil {
			err = rv.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw)
		}
		if err != nil {
			d.errs = append(d.errs, &FieldError{Path: path, Msg: err.Error()})
		}
		return
	}
	switch rv.Kind() {
	case reflect.Pointer:
		p := reflect.New(rv.Type().Elem())
		d.decode(path, v, p.Elem())
		rv.Set(p)
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.wrongType(path, "a string", v)
			return
		}
		rv.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.wrongType(path, "true or false", v)
			return
		}
		rv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			d.wrongType(path, "an integer", v)
			return
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || rv.OverflowInt(i) {
			d.wrongType(path, "an integer in range", v)
			return
		}
		rv.SetInt(i)
	case reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			d.wrongType(path, "an array", v)
			return
		}
		s := reflect.MakeSlice(rv.Type(), len(items), len(items))
		for i, item := range items {
			d.decode(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i))
		}
		rv.Set(s)
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			d.wrongType(path, "an object", v)
			return
		}
		m := reflect.MakeMapWithSize(rv.Type(), len(obj))
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			e := reflect.New(rv.Type().Elem()).Elem()
			d.decode(fmt.Sprintf("%s[%q]", path, k), obj[k], e)
			m.SetMapIndex(reflect.ValueOf(k).Convert(rv.Type().Key()), e)
		}
		rv.Set(m)
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			d.wrongType(path, "an object", v)
			return
		}
		d.decodeStruct(path, obj, rv)
	default:
		// Only reached if a field of an unsupported kind is added to Definition.
		d.errs = append(d.errs, &FieldError{Path: path, Msg: "internal error: cannot decode into " + rv.Type().String()})
	}
}

// decodeStruct decodes the known keys of obj in field order, then answers the others.
func (d *decoder) decodeStruct(path string, obj map[string]any, rv reflect.Value) {
	t := rv.Type()
	var known set.Set[string]
	folded := make(map[string]string, t.NumField()) // lower-case name to name
	for i := range t.NumField() {
		name := jsonName(t.Field(i))
		if name == "" {
			continue
		}
		known.Add(name)
		folded[strings.ToLower(name)] = name
		if v, ok := obj[name]; ok {
			d.decode(join(path, name), v, rv.Field(i))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !known.Has(k) {
			d.other(join(path, k), k, obj[k], folded)
		}
	}
}

// other answers a field the Go value has no place for. A field that asks for nothing (null, false,
// "", [] or {}, as describe-task-definition prints many) is skipped whatever it is; so is an
// informational one. A refused field is an error saying why, an unknown one an error suggesting
// the field its name differs from only in case.
func (d *decoder) other(path, key string, v any, folded map[string]string) {
	switch v := v.(type) {
	case nil:
		return
	case bool:
		if !v {
			return
		}
	case string:
		if v == "" {
			return
		}
	case []any:
		if len(v) == 0 {
			return
		}
	case map[string]any:
		if len(v) == 0 {
			return
		}
	}
	f, ok := lookupField(path)
	switch {
	case ok && f.Support == Informational:
	case ok:
		d.errs = append(d.errs, &FieldError{Path: path, Msg: "not supported by Berth: " + f.Note})
	default:
		msg := "unknown field"
		if name, ok := folded[strings.ToLower(key)]; ok {
			msg = fmt.Sprintf("unknown field (did you mean %q?)", name)
		}
		d.errs = append(d.errs, &FieldError{Path: path, Msg: msg})
	}
}

func (d *decoder) wrongType(path, want string, v any) {
	d.errs = append(d.errs, &FieldError{Path: path, Msg: fmt.Sprintf("want %s, got %s", want, describe(v))})
}

// jsonName returns the JSON name of an exported struct field, or "" when JSON skips it.
func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		return f.Name
	}
	return name
}

// describe names the JSON type of v for an error message. It never quotes a string, which may hold a
// secret pasted into the wrong field.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		if len(v) > 32 {
			return "a number"
		}
		return "number " + string(v)
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

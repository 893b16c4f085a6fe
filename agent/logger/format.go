package logger

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// missingValue is the value given to an odd trailing key.
const missingValue = "(MISSING)"

// reservedPrefix is prepended to caller keys that collide with the fixed
// level, time and msg keys.
const reservedPrefix = "fields."

// field is a key with its value already rendered to text; raw marks values
// that are JSON literals (numbers, booleans, null) rather than strings.
type field struct {
	key string
	val string
	raw bool
}

// mergeFields returns a new slice holding base plus the kv pairs; a key
// already present takes the new value in place. base is never modified.
func mergeFields(base []field, kv []any) []field {
	out := make([]field, len(base), len(base)+(len(kv)+1)/2)
	copy(out, base)
	for i := 0; i < len(kv); i += 2 {
		key := renderKey(kv[i])
		var f field
		if i+1 < len(kv) {
			val, raw := renderValue(kv[i+1])
			f = field{key: key, val: val, raw: raw}
		} else {
			f = field{key: key, val: missingValue}
		}
		replaced := false
		for j := range out {
			if out[j].key == key {
				out[j] = f
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, f)
		}
	}
	return out
}

// renderKey turns a key into a string, renaming the reserved keys.
func renderKey(k any) string {
	s, ok := k.(string)
	if !ok {
		s, _ = renderValue(k)
	}
	switch s {
	case "level", "time", "msg":
		return reservedPrefix + s
	}
	return s
}

// renderValue formats v without ever dumping the contents of structs, maps,
// slices or pointers: those render as "<TYPE>" unless they implement error
// or fmt.Stringer.
func renderValue(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "null", true
	case string:
		return x, false
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case float64:
		return formatFloat(x, 64)
	case float32:
		return formatFloat(float64(x), 32)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), false
	case time.Duration:
		return x.String(), false
	case error:
		return safeString(v, func() string { return x.Error() }), false
	case fmt.Stringer:
		return safeString(v, func() string { return x.String() }), false
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), false
	case reflect.Bool:
		return strconv.FormatBool(rv.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return formatFloat(rv.Float(), rv.Type().Bits())
	}
	return "<" + rv.Type().String() + ">", false
}

// formatFloat renders finite floats as JSON numbers and the rest as strings.
func formatFloat(f float64, bits int) (string, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, bits), false
	}
	return strconv.FormatFloat(f, 'g', -1, bits), true
}

// safeString calls fn, turning a panic (typically a nil pointer receiver)
// into a placeholder instead of crashing the caller.
func safeString(v any, fn func() string) (s string) {
	defer func() {
		if r := recover(); r != nil {
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				s = "<nil>"
				return
			}
			s = "<PANIC>"
		}
	}()
	return fn()
}

// appendLogfmt appends one logfmt record and no newline.
func appendLogfmt(buf []byte, lvl level, t time.Time, msg string, fields []field) []byte {
	buf = append(buf, "level="...)
	buf = append(buf, lvl.name()...)
	buf = append(buf, " time="...)
	buf = t.UTC().AppendFormat(buf, TimeLayout)
	buf = append(buf, " msg="...)
	buf = appendLogfmtValue(buf, msg)
	for _, f := range fields {
		buf = append(buf, ' ')
		buf = appendLogfmtKey(buf, f.key)
		buf = append(buf, '=')
		buf = appendLogfmtValue(buf, f.val)
	}
	return buf
}

// logfmtUnsafe reports runes that force quoting of a logfmt value.
func logfmtUnsafe(r rune) bool {
	return r <= ' ' || r == '=' || r == '"' || r == utf8.RuneError || !unicode.IsPrint(r)
}

// appendLogfmtKey appends k with every unsafe rune replaced by '_'.
func appendLogfmtKey(buf []byte, k string) []byte {
	if k == "" {
		return append(buf, '_')
	}
	for _, r := range k {
		if logfmtUnsafe(r) {
			r = '_'
		}
		buf = utf8.AppendRune(buf, r)
	}
	return buf
}

// appendLogfmtValue appends v bare, or Go-quoted (so it stays on one line)
// when it is empty or holds spaces, quotes, '=', control or invalid runes.
func appendLogfmtValue(buf []byte, v string) []byte {
	if v == "" {
		return append(buf, `""`...)
	}
	for _, r := range v {
		if logfmtUnsafe(r) {
			return strconv.AppendQuote(buf, v)
		}
	}
	return append(buf, v...)
}

// appendJSON appends one JSON object and no newline.
func appendJSON(buf []byte, lvl level, t time.Time, msg string, fields []field) []byte {
	buf = append(buf, `{"level":"`...)
	buf = append(buf, lvl.name()...)
	buf = append(buf, `","time":"`...)
	buf = t.UTC().AppendFormat(buf, TimeLayout)
	buf = append(buf, `","msg":`...)
	buf = appendJSONString(buf, msg)
	for _, f := range fields {
		buf = append(buf, ',')
		buf = appendJSONString(buf, f.key)
		buf = append(buf, ':')
		if f.raw {
			buf = append(buf, f.val...)
		} else {
			buf = appendJSONString(buf, f.val)
		}
	}
	return append(buf, '}')
}

// appendJSONString appends s as a JSON string; control characters, invalid
// UTF-8 and U+2028/U+2029 are escaped so the record stays on one line.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < 0x20 || c == 0x7f:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// entry is one raw value read from a source.
type entry struct {
	key   string // as written in the source
	text  string // the value: unquoted for strings, the JSON literal for other JSON values
	json  bool   // read from the JSON file
	isStr bool   // for JSON values: the value was a JSON string
	line  int
}

var (
	errEnvLine     = errors.New("expected KEY=VALUE")
	errUnterminate = errors.New("quoted value is not closed")
)

// parseEnvFile reads KEY=VALUE lines: blank lines and lines starting with # are skipped, an optional
// `export ` prefix is accepted, and a value may be wrapped in single or double quotes, which may span
// lines. Errors name the line, never its contents, since env files hold secrets.
func parseEnvFile(r io.Reader, file string) ([]entry, error) {
	var (
		out  []entry
		errs []error
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		text := sc.Text()
		if lineNo == 1 {
			// A UTF-8 byte order mark (as Windows editors write) would otherwise become part of the first key.
			text = strings.TrimPrefix(text, utf8BOM)
		}
		line := strings.TrimSpace(text)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		start := lineNo
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"'") {
			errs = append(errs, &Error{Origin: Origin{Kind: SourceEnvFile, File: file, Line: start}, Err: errEnvLine})
			continue
		}
		v = strings.TrimSpace(v)
		if q := quoteOf(v); q != 0 {
			body := v[1:]
			for !strings.HasSuffix(body, string(q)) || body == "" {
				if !sc.Scan() {
					errs = append(errs, &Error{Key: k, Origin: Origin{Kind: SourceEnvFile, File: file, Line: start}, Err: errUnterminate})
					return out, errors.Join(errs...)
				}
				lineNo++
				body += "\n" + strings.TrimRight(sc.Text(), " \t\r")
			}
			v = body[:len(body)-1]
		}
		out = append(out, entry{key: k, text: v, line: start})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, &Error{Origin: Origin{Kind: SourceEnvFile, File: file, Line: lineNo + 1}, Err: err})
	}
	return out, errors.Join(errs...)
}

const utf8BOM = "\ufeff"

func quoteOf(v string) byte {
	if v != "" && (v[0] == '"' || v[0] == '\'') {
		return v[0]
	}
	return 0
}

var (
	errJSONTop      = errors.New("top level must be a JSON object")
	errJSONSyntax   = errors.New("invalid JSON")
	errJSONTrailing = errors.New("unexpected data after the top-level object")
)

// parseJSONFile reads a JSON object of configuration keys. It records the line of every key so that
// warnings and errors can point at it. A syntax error is reported by line and column only: the
// parser's own message can quote the file's contents.
func parseJSONFile(data []byte, file string) ([]entry, error) {
	fail := func(offset int64, err error) error {
		line, col := position(data, offset)
		return &Error{Origin: Origin{Kind: SourceJSONFile, File: file, Line: line},
			Err: fmt.Errorf("%w at line %d, column %d", err, line, col)}
	}
	// syntax reports a syntax error at the offending byte. The streaming decoder only knows where the
	// value it failed on started (which can be lines earlier for a nested value), so the exact offset
	// comes from a full parse; its message is dropped since it can quote the file.
	syntax := func(fallback int64, reason error) error {
		offset := fallback
		var se *json.SyntaxError
		if err := json.Unmarshal(data, new(any)); errors.As(err, &se) && se.Offset > 0 {
			offset = se.Offset - 1
		}
		return fail(offset, reason)
	}
	data = bytes.TrimPrefix(data, []byte(utf8BOM))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file configures nothing
		}
		return nil, syntax(dec.InputOffset(), errJSONSyntax)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fail(0, errJSONTop)
	}
	var out []entry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(dec.InputOffset(), errJSONSyntax)
		}
		k, _ := tok.(string)
		line, _ := position(data, dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntax(dec.InputOffset(), errJSONSyntax)
		}
		e := entry{key: k, json: true, line: line}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			e.text, e.isStr = s, true
		} else {
			e.text = string(raw)
		}
		out = append(out, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntax(dec.InputOffset(), errJSONSyntax)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, syntax(dec.InputOffset(), errJSONTrailing)
	}
	return out, nil
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// recordLine is the JSON line written for each event received.
type recordLine struct {
	Kind   string         `json:"kind"` // "record"
	Source string         `json:"source"`
	Tag    string         `json:"tag"`
	Time   string         `json:"time"`
	Record map[string]any `json:"record"`
}

// configLine is the JSON line written for a configuration file found at start.
type configLine struct {
	Kind     string       `json:"kind"` // "config"
	Path     string       `json:"path"`
	Size     int64        `json:"size"`
	SHA256   string       `json:"sha256"`
	Includes []configFile `json:"includes"`
}

// configFile is a file included from a configuration file; SHA256 is "missing" when it cannot be read.
type configFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// recorder writes JSON lines to stdout and to a file; safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	out  io.Writer
	file *os.File
}

func newRecorder(stdout io.Writer, path string) (*recorder, error) {
	r := &recorder{out: stdout}
	if path == "" {
		return r, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("records file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("records file: %w", err)
	}
	r.file = f
	return r, nil
}

// write appends v as one JSON line to both destinations.
func (r *recorder) write(v any) {
	line, _ := json.Marshal(v) // the lines hold jsonable values only: Marshal cannot fail
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out.Write(line)
	if r.file != nil {
		r.file.Write(line)
	}
}

func (r *recorder) entry(source string, e Entry) {
	rec, _ := jsonable(e.Record).(map[string]any)
	r.write(recordLine{Kind: "record", Source: source, Tag: e.Tag, Time: e.Time.Format(time.RFC3339Nano), Record: rec})
}

// Close closes the records file.
func (r *recorder) Close() error {
	if r.file == nil {
		return nil
	}
	return r.file.Close()
}

// jsonable turns a decoded MessagePack value into one encoding/json accepts and shows faithfully:
// binary as a string (what Fluent Bit and Fluentd do with it), non-finite floats as strings, an
// extension as {"ext": type, "base64": data}.
func jsonable(v any) any {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Sprint(v)
		}
	case Ext:
		return map[string]any{"ext": v.Type, "base64": base64.StdEncoding.EncodeToString(v.Data)}
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonable(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonable(e)
		}
		return out
	}
	return v
}

// Limits on what inspectConfig reads: a configuration file's size, the include depth and count.
const (
	maxConfigSize  = 1 << 20
	maxIncludeDeep = 8
	maxIncludes    = 64
)

// inspectConfig describes the configuration file at path and every file it includes; false when
// path does not exist.
func inspectConfig(path string) (configLine, bool) {
	f, ok := describeFile(path)
	if !ok {
		return configLine{}, false
	}
	c := configLine{Kind: "config", Path: f.Path, Size: f.Size, SHA256: f.SHA256, Includes: []configFile{}}
	seen := map[string]bool{path: true}
	var walk func(file string, depth int)
	walk = func(file string, depth int) {
		if depth > maxIncludeDeep {
			return
		}
		for _, inc := range includesOf(file) {
			if len(c.Includes) >= maxIncludes || seen[inc] {
				continue
			}
			seen[inc] = true
			desc, ok := describeFile(inc)
			if !ok {
				desc = configFile{Path: inc, SHA256: "missing"}
			}
			c.Includes = append(c.Includes, desc)
			if ok {
				walk(inc, depth+1)
			}
		}
	}
	walk(path, 1)
	return c, true
}

func describeFile(path string) (configFile, bool) {
	b, err := readLimited(path)
	if err != nil {
		return configFile{}, false
	}
	sum := sha256.Sum256(b)
	return configFile{Path: path, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, true
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigSize)
	}
	return b, nil
}

// includesOf lists the files a Fluent Bit (@INCLUDE) or Fluentd (@include) configuration file
// includes, relative paths resolved against the file's directory.
func includesOf(path string) []string {
	b, err := readLimited(path)
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 4096), maxConfigSize)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || !strings.EqualFold(fields[0], "@include") {
			continue
		}
		inc := fields[1]
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(filepath.Dir(path), inc)
		}
		out = append(out, filepath.Clean(inc))
	}
	return out
}

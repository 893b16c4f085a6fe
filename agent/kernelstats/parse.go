package kernelstats

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// The parsers below read the kernel's files in one pass over their bytes, without allocating
// except for what they return, and fail with an error naming the file and line on anything that
// is not the file's format.

// nextLine returns b's first line (without its newline) and the rest.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// nextField returns the first field of b (fields are separated by blanks) and the rest after it;
// an empty field when b holds none.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// errNumber: a counter that is not a decimal number that fits 64 bits.
var errNumber = errors.New("not an unsigned 64-bit decimal number")

// parseUint parses a decimal counter.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: empty", errNumber)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", errNumber, clip(b))
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows", errNumber, clip(b))
		}
		v = v*10 + d
	}
	return v, nil
}

// parseValue parses a file that holds one counter (memory.usage_in_bytes, pids.current), or
// "max" for files that may say no limit, which is given as maxValue.
func parseValue(path string, b []byte, maxValue uint64) (uint64, error) {
	line := bytes.TrimRight(b, "\n")
	f, rest := nextField(line)
	if extra, _ := nextField(rest); len(extra) != 0 || bytes.IndexByte(line, '\n') >= 0 {
		return 0, fmt.Errorf("%s: want one value, got %q", path, clip(b))
	}
	if string(f) == "max" {
		return maxValue, nil
	}
	v, err := parseUint(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// parseKV calls fn with each "KEY VALUE" line of b, the content of the file path (cpu.stat,
// memory.stat, cpuacct.stat, memory.events); blank lines are skipped.
func parseKV(path string, b []byte, fn func(key []byte, v uint64)) error {
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		if len(key) == 0 {
			continue
		}
		val, rest := nextField(rest)
		if extra, _ := nextField(rest); len(val) == 0 || len(extra) != 0 {
			return fmt.Errorf("%s line %d: want \"KEY VALUE\", got %q", path, n, clip(line))
		}
		v, err := parseUint(val)
		if err != nil {
			return fmt.Errorf("%s line %d (%s): %w", path, n, clip(key), err)
		}
		fn(key, v)
	}
	return nil
}

// parseUints parses a line of counters separated by blanks (cpuacct.usage_percpu).
func parseUints(path string, b []byte) ([]uint64, error) {
	var out []uint64
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		for f, rest := nextField(line); len(f) > 0; f, rest = nextField(rest) {
			v, err := parseUint(f)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, n, err)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// blkioOp returns the operation name of a v1 blkio line as a string, without allocating for the
// names the kernel writes.
func blkioOp(b []byte) string {
	switch string(b) {
	case "Read":
		return "Read"
	case "Write":
		return "Write"
	case "Sync":
		return "Sync"
	case "Async":
		return "Async"
	case "Discard":
		return "Discard"
	case "Total":
		return "Total"
	}
	return string(b)
}

// parseBlkio parses a v1 blkio statistics file (blkio.throttle.io_service_bytes and the like):
// lines "MAJ:MIN OP VALUE" or "MAJ:MIN VALUE", and "Total VALUE" lines, which Docker leaves out.
func parseBlkio(path string, b []byte) ([]BlkioStatEntry, error) {
	var out []BlkioStatEntry
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		// Docker splits the line at blanks and colons.
		var f [5][]byte
		nf := 0
		for rest := line; nf < len(f); nf++ {
			var tok []byte
			tok, rest = nextBlkioField(rest)
			if len(tok) == 0 {
				break
			}
			f[nf] = tok
		}
		switch {
		case nf == 0:
			continue
		case nf == 2 && string(f[0]) == "Total":
			continue
		case nf != 3 && nf != 4:
			return nil, fmt.Errorf("%s line %d: want \"MAJ:MIN [OP] VALUE\", got %q", path, n, clip(line))
		}
		var e BlkioStatEntry
		var err error
		if e.Major, err = parseUint(f[0]); err != nil {
			return nil, fmt.Errorf("%s line %d: major: %w", path, n, err)
		}
		if e.Minor, err = parseUint(f[1]); err != nil {
			return nil, fmt.Errorf("%s line %d: minor: %w", path, n, err)
		}
		value := f[2]
		if nf == 4 {
			e.Op, value = blkioOp(f[2]), f[3]
		}
		if e.Value, err = parseUint(value); err != nil {
			return nil, fmt.Errorf("%s line %d: value: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// nextBlkioField is nextField with the colon as a separator too.
func nextBlkioField(b []byte) (field, rest []byte) {
	sep := func(c byte) bool { return isSpace(c) || c == ':' }
	i := 0
	for i < len(b) && sep(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !sep(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// parseIOStat parses cgroup v2's io.stat (lines "MAJ:MIN rbytes=N wbytes=N rios=N ..."), into
// the entries Docker makes of it: a "read" and a "write" entry of bytes per device. Keys other than
// rbytes and wbytes are skipped whatever their value.
func parseIOStat(path string, b []byte) ([]BlkioStatEntry, error) {
	var out []BlkioStatEntry
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		dev, rest := nextField(line)
		if len(dev) == 0 {
			continue
		}
		maj, min, ok := bytes.Cut(dev, []byte(":"))
		major, err1 := parseUint(maj)
		minor, err2 := parseUint(min)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s line %d: want \"MAJ:MIN KEY=VALUE...\", got %q", path, n, clip(line))
		}
		var rbytes, wbytes uint64
		for kv, r := nextField(rest); len(kv) > 0; kv, r = nextField(r) {
			k, v, ok := bytes.Cut(kv, []byte("="))
			if !ok {
				return nil, fmt.Errorf("%s line %d: want KEY=VALUE, got %q", path, n, clip(kv))
			}
			var dst *uint64
			switch string(k) {
			case "rbytes":
				dst = &rbytes
			case "wbytes":
				dst = &wbytes
			default:
				continue
			}
			if *dst, err1 = parseUint(v); err1 != nil {
				return nil, fmt.Errorf("%s line %d (%s): %w", path, n, k, err1)
			}
		}
		out = append(out,
			BlkioStatEntry{Major: major, Minor: minor, Op: "read", Value: rbytes},
			BlkioStatEntry{Major: major, Minor: minor, Op: "write", Value: wbytes})
	}
	return out, nil
}

// Docker's constants for /proc/stat and cpuacct.stat: USER_HZ ticks a second (100 on Linux),
// converted to nanoseconds.
const (
	clockTicksPerSecond  = 100
	nanosecondsPerSecond = 1_000_000_000
	nanosecondsPerTick   = nanosecondsPerSecond / clockTicksPerSecond
)

// ticksToNanos converts USER_HZ ticks to nanoseconds, saturating rather than wrapping.
func ticksToNanos(t uint64) uint64 {
	if t > math.MaxUint64/nanosecondsPerTick {
		return math.MaxUint64
	}
	return t * nanosecondsPerTick
}

// parseProcStat reads what Docker takes from /proc/stat (content b of path): the system's CPU
// time — the sum of the first seven fields (user nice system idle iowait irq softirq) of the
// "cpu" line, in nanoseconds — and the number of CPUs, the "cpuN" lines. Like Docker, it stops at
// the first line that is not a cpu line.
func parseProcStat(path string, b []byte) (systemUsage uint64, cpus uint32, err error) {
	seen := false
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		if len(line) < 4 || string(line[:3]) != "cpu" {
			break
		}
		if line[3] >= '0' && line[3] <= '9' {
			cpus++
			continue
		}
		if line[3] != ' ' {
			continue
		}
		var ticks uint64
		rest := line[3:]
		for i := range 7 {
			var f []byte
			f, rest = nextField(rest)
			if len(f) == 0 {
				return 0, 0, fmt.Errorf("%s line %d: want at least 7 counters on the cpu line, got %d", path, n, i)
			}
			v, err := parseUint(f)
			if err != nil {
				return 0, 0, fmt.Errorf("%s line %d: counter %d: %w", path, n, i+1, err)
			}
			if ticks+v < ticks {
				ticks = math.MaxUint64
			} else {
				ticks += v
			}
		}
		systemUsage, seen = ticksToNanos(ticks), true
	}
	if !seen {
		return 0, 0, fmt.Errorf("%s: no \"cpu\" line at the start", path)
	}
	return systemUsage, cpus, nil
}

// netDevFields are the counters of one line of /proc/net/dev: eight received, eight sent.
const netDevFields = 16

// parseNetDev reads the interface counters of /proc/PID/net/dev (content b of path: two header
// lines, then one line per interface: "name: rx bytes packets errs drop fifo frame compressed
// multicast tx bytes packets errs drop fifo colls carrier compressed"). The loopback interface
// and those in skip are left out.
func parseNetDev(path string, b []byte, skip map[string]bool) (map[string]dockerclient.NetworkStats, error) {
	out := map[string]dockerclient.NetworkStats{}
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		if n <= 2 || len(bytes.TrimSpace(line)) == 0 {
			continue // the headers, or a blank line
		}
		name, counters, ok := bytes.Cut(line, []byte(":"))
		name = bytes.TrimSpace(name)
		if !ok || len(name) == 0 {
			return nil, fmt.Errorf("%s line %d: want \"NAME: %d counters\", got %q", path, n, netDevFields, clip(line))
		}
		var v [netDevFields]uint64
		rest := counters
		for i := range v {
			var f []byte
			f, rest = nextField(rest)
			u, err := parseUint(f)
			if err != nil {
				return nil, fmt.Errorf("%s line %d (%s): counter %d: %w", path, n, clip(name), i+1, err)
			}
			v[i] = u
		}
		if extra, _ := nextField(rest); len(extra) != 0 {
			return nil, fmt.Errorf("%s line %d (%s): more than %d counters", path, n, clip(name), netDevFields)
		}
		if string(name) == "lo" || skip[string(name)] {
			continue
		}
		out[string(name)] = dockerclient.NetworkStats{RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11]}
	}
	return out, nil
}

package kernelstats

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"007", 7, true}, {"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", 0, false}, {"99999999999999999999", 0, false}, {"", 0, false},
		{"-1", 0, false}, {"+1", 0, false}, {"1.5", 0, false}, {"0x10", 0, false}, {" 1", 0, false},
	} {
		got, err := parseUint([]byte(tc.in))
		assert.Equal(t, tc.ok, err == nil, "%q: %v", tc.in, err)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  uint64
		want uint64
	}{{"42\n", 0, 42}, {"42", 0, 42}, {"  42 \n", 0, 42}, {"max\n", 0, 0}, {"max\n", math.MaxUint64, math.MaxUint64}} {
		got, err := parseValue("f", []byte(tc.in), tc.max)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseKV(t *testing.T) {
	var keys []string
	var vals []uint64
	err := parseKV("f", []byte("a 1\n\n  b\t2 \nc 3"), func(k []byte, v uint64) {
		keys, vals = append(keys, string(k)), append(vals, v)
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, keys)
	assert.Equal(t, []uint64{1, 2, 3}, vals)
}

func TestParseBlkio(t *testing.T) {
	got, err := parseBlkio("f", []byte("8:0 Read 1\n8:16 Write 2\n\n253:1 3\n  8:0   Flush  4 \nTotal 7\n"))
	require.NoError(t, err)
	assert.Equal(t, []BlkioStatEntry{{8, 0, "Read", 1}, {8, 16, "Write", 2}, {253, 1, "", 3}, {8, 0, "Flush", 4}}, got)
	got, err = parseBlkio("f", []byte("Total 0\n"))
	require.NoError(t, err)
	assert.Nil(t, got)
	_, err = parseBlkio("f", []byte("Total\n"))
	assert.ErrorContains(t, err, "f line 1: want")
}

func TestParseIOStat(t *testing.T) {
	got, err := parseIOStat("f", []byte("8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.vrate=100.00 cost.usage=9\n\n259:0 wbytes=7\n"))
	require.NoError(t, err)
	assert.Equal(t, []BlkioStatEntry{{8, 0, "read", 1}, {8, 0, "write", 2}, {259, 0, "read", 0}, {259, 0, "write", 7}}, got)
	got, err = parseIOStat("f", nil)
	require.NoError(t, err)
	assert.Nil(t, got)
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		usage    uint64
		cpus     uint32
	}{
		{"the fixture", procStatFixture, systemUsageFixture, 2},
		{"steal and guest are not counted", "cpu  1 2 3 4 5 6 7 100 200 300\ncpu0 1 2 3 4 5 6 7\n", 28 * 10_000_000, 1},
		{"cpu lines after the first other line are not counted", "cpu  1 1 1 1 1 1 1\ncpu0 x\nintr 1\ncpu1 1\n", 7 * 10_000_000, 1},
		{"a cpu-like line between is passed over", "cpu  1 1 1 1 1 1 1\ncpux 1\ncpu0 1\n", 7 * 10_000_000, 1},
		{"no trailing newline", "cpu  1 1 1 1 1 1 1", 7 * 10_000_000, 0},
		{"saturates instead of wrapping", "cpu  18446744073709551615 1 0 0 0 0 0\n", math.MaxUint64, 0},
		{"a huge tick count saturates", "cpu  18446744073709551 0 0 0 0 0 0\n", math.MaxUint64, 0},
	} {
		usage, cpus, err := parseProcStat("f", []byte(tc.in))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.usage, usage, tc.name)
		assert.Equal(t, tc.cpus, cpus, tc.name)
	}
}

func TestParseNetDev(t *testing.T) {
	got, err := parseNetDev("f", []byte(netDevFixture+"\n"), map[string]bool{"eth1": true})
	require.NoError(t, err)
	assert.Equal(t, map[string]dockerclient.NetworkStats{"eth0": wantEth0}, got)
	got, err = parseNetDev("f", []byte(netDevFixture[:strings.Index(netDevFixture, "    lo")]), nil)
	require.NoError(t, err)
	assert.NotNil(t, got, "read, without interfaces: an empty map")
	assert.Empty(t, got)
}

func TestKeyIndex(t *testing.T) {
	for _, keys := range [][]string{v1MemoryKeys[:], v2MemoryKeys[:]} {
		for i, k := range keys {
			assert.Equal(t, i, keyIndex(keys, []byte(k)), k)
			if i > 0 {
				assert.Less(t, keys[i-1], k, "sorted")
			}
		}
		assert.Equal(t, -1, keyIndex(keys, []byte("zzz")))
		assert.Equal(t, -1, keyIndex(keys, []byte("")))
		assert.Equal(t, -1, keyIndex(keys, []byte("cach")))
	}
	assert.Len(t, v1MemoryKeys, 32)
	assert.Len(t, v2MemoryKeys, 31)
}

func TestUnescapeMountField(t *testing.T) {
	got, err := unescapeMountField(`/a\040b\011c\012d\134e`)
	require.NoError(t, err)
	assert.Equal(t, "/a b\tc\nd\\e", got)
	for _, bad := range []string{`/a\`, `/a\04`, `/a\0x0`, `/a\400`} {
		_, err := unescapeMountField(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzParsers feeds every parser the same bytes: none may panic, a number must parse as strconv
// parses it, and every result must be consistent with its input.
func FuzzParsers(f *testing.F) {
	for _, seed := range []string{
		procStatFixture, netDevFixture, v1CgroupFile, strings.Join(v1MountInfo, "\n"),
		v1Files["sys/fs/cgroup/memory/docker/"+testID]["memory.stat"],
		v1Files["sys/fs/cgroup/blkio/docker/"+testID]["blkio.throttle.io_service_bytes"],
		v2Files["io.stat"], v2Files["cpu.stat"], "max\n", "18446744073709551616", "8:0 Read 1 2 3",
		`/a\040b \1`, "cpu  1 2 3 4 5 6 7\ncpu0", "h\nh\neth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
		"0::/docker/" + testID, "MemTotal: 10 kB\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseUint(b)
		if want, serr := strconv.ParseUint(string(b), 10, 64); (err == nil) != (serr == nil) || err == nil && v != want {
			t.Fatalf("parseUint(%q) = %d, %v; strconv: %d, %v", b, v, err, want, serr)
		}
		_, _ = parseValue("f", b, math.MaxUint64)
		lines := strings.Count(string(b), "\n") + 1
		n := 0
		_ = parseKV("f", b, func([]byte, uint64) { n++ })
		if n > lines {
			t.Fatalf("parseKV: %d pairs from %d lines", n, lines)
		}
		if u, err := parseUints("f", b); err == nil && len(u) > len(b) {
			t.Fatalf("parseUints: %d numbers from %d bytes", len(u), len(b))
		}
		if e, err := parseBlkio("f", b); err == nil && len(e) > lines {
			t.Fatalf("parseBlkio: %d entries from %d lines", len(e), lines)
		}
		if e, err := parseIOStat("f", b); err == nil && len(e) > 2*lines {
			t.Fatalf("parseIOStat: %d entries from %d lines", len(e), lines)
		}
		if _, cpus, err := parseProcStat("f", b); err == nil && int(cpus) > lines {
			t.Fatalf("parseProcStat: %d cpus from %d lines", cpus, lines)
		}
		if m, err := parseNetDev("f", b, nil); err == nil && len(m) > lines {
			t.Fatalf("parseNetDev: %d interfaces from %d lines", len(m), lines)
		}
		_, _ = parseMemTotal("f", b)
		_, _, _ = parseProcCgroup("f", b)
		p := string(b)
		if c, err := containerCgroup(p, testID); err == nil && !strings.HasPrefix(p, c) {
			t.Fatalf("containerCgroup(%q) = %q, not a prefix", p, c)
		}
		_, _ = unescapeMountField(p)
		r := &Reader{}
		_ = r.parseMountInfo("f", b)
	})
}

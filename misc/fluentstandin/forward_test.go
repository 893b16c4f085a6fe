package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The frames below are MessagePack written out by hand from the spec
// (https://github.com/msgpack/msgpack/blob/master/spec.md) and the Fluent forward protocol v1.

var (
	// tag "app" as fixstr.
	tagApp = []byte{0xa3, 'a', 'p', 'p'}
	// {"log": "hi"}.
	recHi = []byte{0x81, 0xa3, 'l', 'o', 'g', 0xa2, 'h', 'i'}
	// EventTime 1700000000.5: fixext 8, type 0, seconds 0x6553f100, nanoseconds 500000000 (0x1dcd6500).
	eventTime = []byte{0xd7, 0x00, 0x65, 0x53, 0xf1, 0x00, 0x1d, 0xcd, 0x65, 0x00}
	// 1700000000 as uint 32.
	intTime = []byte{0xce, 0x65, 0x53, 0xf1, 0x00}
	// {"chunk": "c1"}.
	optChunk = []byte{0x81, 0xa5, 'c', 'h', 'u', 'n', 'k', 0xa2, 'c', '1'}
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadFrame(t *testing.T) {
	t1 := time.Date(2023, 11, 14, 22, 13, 20, 500000000, time.UTC)
	t0 := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	hi := map[string]any{"log": "hi"}
	entryPair := func(tm []byte) []byte { return cat([]byte{0x92}, tm, recHi) }
	packed := cat(entryPair(eventTime), entryPair(intTime))
	gzPacked := gz(t, packed)
	tests := []struct {
		name   string
		in     []byte
		want   []Entry
		chunk  string
		option map[string]any
	}{
		{"message mode", cat([]byte{0x93}, tagApp, eventTime, recHi), []Entry{{"app", t1, hi}}, "", nil},
		{"message mode, nil option (Docker's fluentd driver)", cat([]byte{0x94}, tagApp, eventTime, recHi, []byte{0xc0}), []Entry{{"app", t1, hi}}, "", nil},
		{"message mode with chunk", cat([]byte{0x94}, tagApp, intTime, recHi, optChunk), []Entry{{"app", t0, hi}}, "c1", map[string]any{"chunk": "c1"}},
		{"forward mode", cat([]byte{0x92}, tagApp, []byte{0x92}, entryPair(eventTime), entryPair(intTime)), []Entry{{"app", t1, hi}, {"app", t0, hi}}, "", nil},
		{"forward mode with chunk", cat([]byte{0x93}, tagApp, []byte{0x91}, entryPair(intTime), optChunk), []Entry{{"app", t0, hi}}, "c1", map[string]any{"chunk": "c1"}},
		{"packed forward, bin 8", cat([]byte{0x92}, tagApp, []byte{0xc4, byte(len(packed))}, packed), []Entry{{"app", t1, hi}, {"app", t0, hi}}, "", nil},
		{"packed forward, str 8", cat([]byte{0x92}, tagApp, []byte{0xd9, byte(len(packed))}, packed), []Entry{{"app", t1, hi}, {"app", t0, hi}}, "", nil},
		{"compressed packed forward", cat([]byte{0x93}, tagApp, []byte{0xc4, byte(len(gzPacked))}, gzPacked,
			[]byte{0x82, 0xaa}, []byte("compressed"), []byte{0xa4}, []byte("gzip"), []byte{0xa5}, []byte("chunk"), []byte{0xa2, 'z', '9'}),
			[]Entry{{"app", t1, hi}, {"app", t0, hi}}, "z9", map[string]any{"compressed": "gzip", "chunk": "z9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := readFrame(bufio.NewReader(bytes.NewReader(tt.in)), 1<<20)
			if err != nil {
				t.Fatalf("readFrame: %v", err)
			}
			if !reflect.DeepEqual(f.Entries, tt.want) {
				t.Errorf("entries = %#v, want %#v", f.Entries, tt.want)
			}
			if f.Chunk() != tt.chunk {
				t.Errorf("chunk = %q, want %q", f.Chunk(), tt.chunk)
			}
			if !reflect.DeepEqual(f.Option, tt.option) {
				t.Errorf("option = %#v, want %#v", f.Option, tt.option)
			}
		})
	}
}

func TestReadFrameTwoInARowThenEOF(t *testing.T) {
	one := cat([]byte{0x93}, tagApp, intTime, recHi)
	r := bufio.NewReader(bytes.NewReader(cat(one, one)))
	for i := range 2 {
		if _, err := readFrame(r, 1<<20); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if _, err := readFrame(r, 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: err = %v, want io.EOF", err)
	}
}

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want any
	}{
		{"nil", []byte{0xc0}, nil},
		{"false", []byte{0xc2}, false},
		{"true", []byte{0xc3}, true},
		{"positive fixint", []byte{0x7f}, int64(127)},
		{"negative fixint", []byte{0xff}, int64(-1)},
		{"uint 8", []byte{0xcc, 0xff}, int64(255)},
		{"uint 16", []byte{0xcd, 0x01, 0x00}, int64(256)},
		{"uint 64 above int64", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint64(1<<64 - 1)},
		{"int 8", []byte{0xd0, 0x80}, int64(-128)},
		{"int 16", []byte{0xd1, 0xff, 0x00}, int64(-256)},
		{"int 32", []byte{0xd2, 0xff, 0xff, 0xff, 0xfe}, int64(-2)},
		{"int 64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, int64(-1 << 63)},
		{"float 32", []byte{0xca, 0x3f, 0xc0, 0x00, 0x00}, float64(1.5)},
		{"float 64", []byte{0xcb, 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}, 3.141592653589793},
		{"str 16", cat([]byte{0xda, 0x00, 0x03}, []byte("abc")), "abc"},
		{"str 32", cat([]byte{0xdb, 0, 0, 0, 0x02}, []byte("ab")), "ab"},
		{"bin 16", []byte{0xc5, 0x00, 0x02, 0x01, 0x02}, []byte{1, 2}},
		{"array 16", []byte{0xdc, 0x00, 0x02, 0x01, 0x02}, []any{int64(1), int64(2)}},
		{"map 16, integer key", []byte{0xde, 0x00, 0x01, 0x05, 0xa1, 'x'}, map[string]any{"5": "x"}},
		{"map 32, nested", []byte{0xdf, 0, 0, 0, 1, 0xa1, 'a', 0x91, 0xc3}, map[string]any{"a": []any{true}}},
		{"fixext 4", []byte{0xd6, 0x05, 1, 2, 3, 4}, Ext{5, []byte{1, 2, 3, 4}}},
		{"ext 8", []byte{0xc7, 0x02, 0x07, 9, 8}, Ext{7, []byte{9, 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &decoder{r: bufio.NewReader(bytes.NewReader(tt.in)), budget: 1 << 10}
			got, err := d.value(0)
			if err != nil {
				t.Fatalf("value: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestReadFrameRefuses(t *testing.T) {
	deep := append(bytes.Repeat([]byte{0x91}, 100), 0xc0)
	tests := []struct {
		name string
		in   []byte
		want string // in the error
		is   error
	}{
		{"not an array", []byte{0xa3, 'a', 'b', 'c'}, "not a string of 3 bytes", nil},
		{"one element", cat([]byte{0x91}, tagApp), "array of 2 to 4 elements", nil},
		{"tag not a string", []byte{0x93, 0x01, 0x01, 0x80}, "the tag is an integer", nil},
		{"message mode without a record", cat([]byte{0x92}, tagApp, intTime), "3 or 4 elements", nil},
		{"record not a map", cat([]byte{0x93}, tagApp, intTime, []byte{0xa1, 'x'}), "the record is a string", nil},
		{"time a bool", cat([]byte{0x93}, tagApp, []byte{0xc3}, recHi), "the time is a bool", nil},
		{"ext time of the wrong type", cat([]byte{0x93}, tagApp, []byte{0xd7, 0x01, 0, 0, 0, 0, 0, 0, 0, 0}, recHi), "not an EventTime", nil},
		{"option not a map", cat([]byte{0x94}, tagApp, intTime, recHi, []byte{0x01}), "the option is an integer", nil},
		{"forward entry not a pair", cat([]byte{0x92}, tagApp, []byte{0x91, 0x91, 0x01}), "entry 0", nil},
		{"forward mode with 4 elements", cat([]byte{0x94}, tagApp, []byte{0x90}, []byte{0x80}, []byte{0x80}), "too many", nil},
		{"unknown compression", cat([]byte{0x93}, tagApp, []byte{0xc4, 0x00}, []byte{0x81, 0xaa}, []byte("compressed"), []byte{0xa3}, []byte("zst")), "compression", nil},
		{"gzip that is not", cat([]byte{0x93}, tagApp, []byte{0xc4, 0x02, 1, 2}, []byte{0x81, 0xaa}, []byte("compressed"), []byte{0xa4}, []byte("gzip")), "compressed entries", nil},
		{"truncated packed entry", cat([]byte{0x92}, tagApp, []byte{0xc4, 0x02, 0x92, 0x01}), "packed entry 0", io.ErrUnexpectedEOF},
		{"truncated", cat([]byte{0x93}, tagApp, intTime), "", io.ErrUnexpectedEOF},
		{"declared str beyond the limit", cat([]byte{0x93}, tagApp, intTime, []byte{0x81, 0xa1, 'x', 0xdb, 0x7f, 0xff, 0xff, 0xff}), "", errFrameTooLarge},
		{"declared array beyond the limit", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "", errFrameTooLarge},
		{"declared map beyond the limit", cat([]byte{0x93}, tagApp, intTime, []byte{0xdf, 0x10, 0, 0, 0}), "", errFrameTooLarge},
		{"nested too deeply", deep, "", errTooDeep},
		{"reserved byte", []byte{0xc1}, "0xc1 is not a MessagePack type", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readFrame(bufio.NewReader(bytes.NewReader(tt.in)), 4096)
			if err == nil {
				t.Fatal("readFrame accepted it")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to say %q", err, tt.want)
			}
		})
	}
}

// A gzip bomb: a few KiB that expand beyond the frame limit are refused once the limit is reached.
func TestReadFrameBoundsDecompression(t *testing.T) {
	// One entry [1, {"log": <str 32 of 1 MiB>}].
	big := cat([]byte{0x92, 0x01, 0x81, 0xa3, 'l', 'o', 'g', 0xdb, 0x00, 0x10, 0x00, 0x00}, bytes.Repeat([]byte{'a'}, 1<<20))
	bomb := gz(t, big)
	frame := cat([]byte{0x93}, tagApp, []byte{0xc5, byte(len(bomb) >> 8), byte(len(bomb))}, bomb,
		[]byte{0x81, 0xaa}, []byte("compressed"), []byte{0xa4}, []byte("gzip"))
	_, err := readFrame(bufio.NewReader(bytes.NewReader(frame)), 64<<10)
	if !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("err = %v, want errFrameTooLarge", err)
	}
}

func TestAck(t *testing.T) {
	// {"ack": "c1"}: fixmap 1, fixstr "ack", fixstr "c1".
	want := []byte{0x81, 0xa3, 'a', 'c', 'k', 0xa2, 'c', '1'}
	if got := ackFor("c1"); !bytes.Equal(got, want) {
		t.Errorf("ackFor(c1) = % x, want % x", got, want)
	}
	long := strings.Repeat("q", 40) // str 8 from 32 bytes on
	if got := ackFor(long); !bytes.Equal(got[:7], []byte{0x81, 0xa3, 'a', 'c', 'k', 0xd9, 40}) {
		t.Errorf("ackFor(40 bytes) starts % x", got[:7])
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(cat([]byte{0x94}, tagApp, eventTime, recHi, optChunk))
	f.Add(cat([]byte{0x92}, tagApp, []byte{0x91, 0x92}, intTime, recHi))
	packed := cat([]byte{0x92}, intTime, recHi)
	f.Add(cat([]byte{0x92}, tagApp, []byte{0xc4, byte(len(packed))}, packed))
	gzPacked := gz(f, packed)
	f.Add(cat([]byte{0x93}, tagApp, []byte{0xc4, byte(len(gzPacked))}, gzPacked, []byte{0x81, 0xaa}, []byte("compressed"), []byte{0xa4}, []byte("gzip")))
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	const limit = 4096
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			fr, err := readFrame(r, limit)
			if err != nil {
				return
			}
			for _, e := range fr.Entries {
				if e.Record == nil {
					t.Fatal("an accepted entry has no record")
				}
				jsonable(e.Record)
			}
		}
	})
}

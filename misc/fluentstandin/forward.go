package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Entry is one event of the Fluent forward protocol.
type Entry struct {
	Tag    string
	Time   time.Time
	Record map[string]any
}

// Frame is one decoded forward-protocol message: its events and its option map (nil when absent).
type Frame struct {
	Entries []Entry
	Option  map[string]any
}

// Chunk is the option's chunk id, "" when the sender asked for no ack.
func (f Frame) Chunk() string {
	c, _ := f.Option["chunk"].(string)
	return c
}

// readFrame reads one frame from r, holding at most limit bytes of it in memory (and limit more for
// the entries of a PackedForward frame, decompressed or not).
// It returns io.EOF when r ends cleanly before a frame, and another error for anything malformed;
// the connection cannot be resynchronised after that.
func readFrame(r *bufio.Reader, limit int64) (Frame, error) {
	if _, err := r.Peek(1); err != nil {
		return Frame{}, err
	}
	d := &decoder{r: r, budget: limit}
	v, err := d.value(0)
	if err != nil {
		return Frame{}, unexpected(err)
	}
	a, ok := v.([]any)
	if !ok || len(a) < 2 || len(a) > 4 {
		return Frame{}, fmt.Errorf("a frame is an array of 2 to 4 elements, not %s", describe(v))
	}
	tag, ok := a[0].(string)
	if !ok {
		return Frame{}, fmt.Errorf("the tag is %s, not a string", describe(a[0]))
	}
	// The option follows the record in Message mode and the entries in the other two.
	optionAt := 2
	switch a[1].(type) {
	case []any, string, []byte:
	default:
		optionAt = 3
		if len(a) < 3 {
			return Frame{}, errors.New("a Message frame has 3 or 4 elements")
		}
	}
	if len(a) > optionAt+1 {
		return Frame{}, fmt.Errorf("%d elements is too many for this mode", len(a))
	}
	var f Frame
	if len(a) == optionAt+1 {
		if f.Option, err = optionOf(a[optionAt]); err != nil {
			return Frame{}, err
		}
	}
	switch second := a[1].(type) {
	case []any: // Forward mode: [tag, [[time, record], ...], option]
		for i, e := range second {
			ent, err := entryOf(tag, e)
			if err != nil {
				return Frame{}, fmt.Errorf("entry %d: %w", i, err)
			}
			f.Entries = append(f.Entries, ent)
		}
	case string: // PackedForward mode: [tag, <MessagePack stream of [time, record]>, option]
		if f.Entries, err = unpack(tag, []byte(second), f.Option["compressed"], limit); err != nil {
			return Frame{}, err
		}
	case []byte:
		if f.Entries, err = unpack(tag, second, f.Option["compressed"], limit); err != nil {
			return Frame{}, err
		}
	default: // Message mode: [tag, time, record, option]
		ent, err := entryOf(tag, []any{a[1], a[2]})
		if err != nil {
			return Frame{}, err
		}
		f.Entries = []Entry{ent}
	}
	return f, nil
}

func optionOf(v any) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the option is %s, not a map", describe(v))
	}
	return m, nil
}

// unpack decodes the entries of a PackedForward frame, gunzipped first when compressed is "gzip";
// the decompressed stream is held to limit bytes as well.
func unpack(tag string, packed []byte, compressed any, limit int64) ([]Entry, error) {
	var src io.Reader = bytes.NewReader(packed)
	switch compressed {
	case nil, "text":
	case "gzip":
		gz, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("compressed entries: %w", err)
		}
		src = gz
	default:
		return nil, fmt.Errorf("compression %v is not supported", describe(compressed))
	}
	d := &decoder{r: bufio.NewReader(src), budget: limit}
	var out []Entry
	for {
		if _, err := d.r.Peek(1); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("packed entries: %w", err)
		}
		v, err := d.value(1)
		if err != nil {
			return nil, fmt.Errorf("packed entry %d: %w", len(out), unexpected(err))
		}
		ent, err := entryOf(tag, v)
		if err != nil {
			return nil, fmt.Errorf("packed entry %d: %w", len(out), err)
		}
		out = append(out, ent)
	}
}

// entryOf turns [time, record] into an Entry.
func entryOf(tag string, v any) (Entry, error) {
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return Entry{}, fmt.Errorf("an entry is [time, record], not %s", describe(v))
	}
	t, err := timeOf(pair[0])
	if err != nil {
		return Entry{}, err
	}
	rec, ok := pair[1].(map[string]any)
	if !ok {
		return Entry{}, fmt.Errorf("the record is %s, not a map", describe(pair[1]))
	}
	return Entry{Tag: tag, Time: t, Record: rec}, nil
}

// timeOf reads an event time: integer seconds, or the EventTime extension (type 0: seconds and
// nanoseconds, big-endian uint32 each). A float is accepted as seconds, as fluentd does.
func timeOf(v any) (time.Time, error) {
	switch t := v.(type) {
	case int64:
		return time.Unix(t, 0).UTC(), nil
	case uint64:
		return time.Time{}, fmt.Errorf("time %d is out of range", t)
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) || math.Abs(t) > 1<<62 {
			return time.Time{}, fmt.Errorf("time %v is out of range", t)
		}
		sec, frac := math.Modf(t)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
	case Ext:
		if t.Type != 0 || len(t.Data) != 8 {
			return time.Time{}, fmt.Errorf("extension type %d of %d bytes is not an EventTime", t.Type, len(t.Data))
		}
		sec := binary.BigEndian.Uint32(t.Data[:4])
		nsec := binary.BigEndian.Uint32(t.Data[4:])
		return time.Unix(int64(sec), int64(nsec)).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("the time is %s, not an integer or an EventTime", describe(v))
}

// describe names a decoded value's type for error messages, never its contents.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case bool:
		return "a bool"
	case int64, uint64:
		return "an integer"
	case float64:
		return "a float"
	case string:
		return fmt.Sprintf("a string of %d bytes", len(v))
	case []byte:
		return fmt.Sprintf("binary of %d bytes", len(v))
	case []any:
		return fmt.Sprintf("an array of %d elements", len(v))
	case map[string]any:
		return fmt.Sprintf("a map of %d entries", len(v))
	case Ext:
		return fmt.Sprintf("extension type %d", v.Type)
	}
	return fmt.Sprintf("%T", v)
}

// ackFor encodes the server's answer to a frame whose option carries chunk: {"ack": chunk}.
func ackFor(chunk string) []byte {
	return appendStr(appendStr([]byte{0x81}, "ack"), chunk)
}

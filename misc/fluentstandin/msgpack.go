package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Ext is a MessagePack extension value; the Fluent forward protocol uses type 0 (EventTime).
type Ext struct {
	Type int8
	Data []byte
}

// errFrameTooLarge reports a frame that would need more than the decoder's budget.
var errFrameTooLarge = errors.New("frame exceeds the size limit")

// errTooDeep reports a value nested deeper than maxDepth.
var errTooDeep = errors.New("value nested too deeply")

// maxDepth bounds nesting, so a hostile frame cannot exhaust the stack.
const maxDepth = 64

// decoder reads MessagePack values from r. Every value it decodes is charged against budget, the
// bytes left for the current frame: a declared length larger than what is left is refused before
// anything is allocated, so one frame never holds more than its budget (plus a constant per
// container) in memory.
type decoder struct {
	r      *bufio.Reader
	budget int64
}

// take charges n bytes against the budget.
func (d *decoder) take(n int64) error {
	if n < 0 || n > d.budget {
		return errFrameTooLarge
	}
	d.budget -= n
	return nil
}

func (d *decoder) byte1() (byte, error) {
	if err := d.take(1); err != nil {
		return 0, err
	}
	return d.r.ReadByte()
}

func (d *decoder) bytesN(n int64) ([]byte, error) {
	if err := d.take(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, unexpected(err)
	}
	return b, nil
}

// uintN reads a big-endian unsigned integer of size bytes (1, 2, 4 or 8).
func (d *decoder) uintN(size int) (uint64, error) {
	b, err := d.bytesN(int64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// value decodes one value: nil, bool, int64, uint64 (above MaxInt64 only), float64, string, []byte,
// []any, map[string]any (keys that are not strings are formatted with %v) or Ext.
func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	c, err := d.byte1()
	if err != nil {
		return nil, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xf0 == 0x80:
		return d.mapN(int64(c&0x0f), depth)
	case c&0xf0 == 0x90:
		return d.arrayN(int64(c&0x0f), depth)
	case c&0xe0 == 0xa0:
		b, err := d.bytesN(int64(c & 0x1f))
		return string(b), err
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6: // bin 8, 16, 32
		n, err := d.uintN(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		return d.bytesN(int64(n))
	case 0xd9, 0xda, 0xdb: // str 8, 16, 32
		n, err := d.uintN(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		b, err := d.bytesN(int64(n))
		return string(b), err
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8..64
		u, err := d.uintN(1 << (c - 0xcc))
		if err != nil {
			return nil, err
		}
		if u <= math.MaxInt64 {
			return int64(u), nil
		}
		return u, nil
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8..64
		size := 1 << (c - 0xd0)
		u, err := d.uintN(size)
		if err != nil {
			return nil, err
		}
		shift := 64 - 8*size
		return int64(u<<shift) >> shift, nil
	case 0xca:
		u, err := d.uintN(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		u, err := d.uintN(8)
		return math.Float64frombits(u), err
	case 0xdc, 0xdd: // array 16, 32
		n, err := d.uintN(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.arrayN(int64(n), depth)
	case 0xde, 0xdf: // map 16, 32
		n, err := d.uintN(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapN(int64(n), depth)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
		return d.ext(int64(1) << (c - 0xd4))
	case 0xc7, 0xc8, 0xc9: // ext 8, 16, 32
		n, err := d.uintN(1 << (c - 0xc7))
		if err != nil {
			return nil, err
		}
		return d.ext(int64(n))
	}
	return nil, fmt.Errorf("byte 0x%02x is not a MessagePack type", c)
}

func (d *decoder) ext(n int64) (any, error) {
	t, err := d.byte1()
	if err != nil {
		return nil, err
	}
	b, err := d.bytesN(n)
	return Ext{Type: int8(t), Data: b}, err
}

// arrayN decodes n elements. Each takes at least one byte, so n beyond the budget is refused at once.
func (d *decoder) arrayN(n int64, depth int) ([]any, error) {
	if n > d.budget {
		return nil, errFrameTooLarge
	}
	a := make([]any, 0, n)
	for range n {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	return a, nil
}

// mapN decodes n key/value pairs (two bytes at least each).
func (d *decoder) mapN(n int64, depth int) (map[string]any, error) {
	if 2*n > d.budget {
		return nil, errFrameTooLarge
	}
	m := make(map[string]any, n)
	for range n {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[keyString(k)] = v
	}
	return m, nil
}

func keyString(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case []byte:
		return string(k)
	}
	return fmt.Sprint(k)
}

// appendStr appends s as a MessagePack str.
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

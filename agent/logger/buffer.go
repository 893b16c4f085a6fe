package logger

import (
	"bytes"
	"sync"
)

// Buffer is an in-memory console for a Logger (or any writer) that is safe to read with String while
// others write to it. Tests use it to read back what was logged.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

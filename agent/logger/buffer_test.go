package logger

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBufferIsSafeToReadWhileWritten(t *testing.T) {
	var buf Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = buf.Write([]byte("x\n"))
				_ = buf.String()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 800, strings.Count(buf.String(), "x\n"))
}

package dockerclient

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// StreamError is an error Docker reported inside a pull's JSON progress
// stream ({"error": ..., "errorDetail": {...}}) after answering 200.
type StreamError struct {
	Code    int
	Message string
}

// Error returns Docker's message.
func (e *StreamError) Error() string { return e.Message }

// jsonMessage is one message of Docker's pull progress stream.
type jsonMessage struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	ProgressDetail *struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// layerState is what the stream told about one layer.
type layerState struct {
	current, total int64 // download bytes
	downloaded     bool  // downloaded, extracted or already present
	present        bool  // "Already exists": nothing to download
	lastKey        string
}

// Progress is a snapshot of a pull attempt's progress.
type Progress struct {
	LayersDone  int           // layers downloaded (or already present)
	LayersTotal int           // layers announced so far
	BytesDone   int64         // bytes downloaded
	BytesTotal  int64         // bytes of the layers whose size is known
	Idle        time.Duration // time since the stream last advanced
}

// progressTracker parses the raw JSON stream of one pull attempt (it is the
// attempt's OutputStream) and tracks layers, bytes, the last time the
// stream advanced and any in-stream error. It is safe for concurrent use.
type progressTracker struct {
	clock clockwork.Clock

	mu           sync.Mutex
	buf          []byte
	layers       map[string]*layerState
	lastPlain    string // last message without an id
	lastActivity time.Time
	err          *StreamError
}

func newProgressTracker(clock clockwork.Clock) *progressTracker {
	return &progressTracker{clock: clock, layers: map[string]*layerState{}, lastActivity: clock.Now()}
}

// Write consumes stream bytes; complete lines are parsed as they arrive.
func (t *progressTracker) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.handleLine(t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) == 0 {
		t.buf = nil // let the backing array go
	}
	return len(p), nil
}

// finish parses a trailing message not ended by a newline.
func (t *progressTracker) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > 0 {
		t.handleLine(t.buf)
		t.buf = nil
	}
}

// handleLine applies one JSON message; malformed lines are ignored.
func (t *progressTracker) handleLine(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var m jsonMessage
	if json.Unmarshal(line, &m) != nil {
		return
	}
	if m.Error != "" || m.ErrorDetail != nil {
		if t.err == nil {
			e := &StreamError{Message: m.Error}
			if m.ErrorDetail != nil {
				e.Code = m.ErrorDetail.Code
				if e.Message == "" {
					e.Message = m.ErrorDetail.Message
				}
			}
			t.err = e
		}
		t.touch()
		return
	}
	if m.ID == "" || strings.HasPrefix(m.Status, "Pulling from ") {
		if key := m.ID + "\x00" + m.Status; key != t.lastPlain {
			t.lastPlain = key
			t.touch()
		}
		return
	}

	l := t.layers[m.ID]
	if l == nil {
		l = &layerState{}
		t.layers[m.ID] = l
	}
	var cur, total int64
	if m.ProgressDetail != nil {
		cur, total = m.ProgressDetail.Current, m.ProgressDetail.Total
	}
	switch m.Status {
	case "Downloading":
		l.current = max(l.current, cur)
		if total > 0 {
			l.total = total
		}
	case "Verifying Checksum", "Download complete", "Extracting", "Pull complete":
		l.downloaded = true
		if l.total > 0 {
			l.current = l.total
		}
	case "Already exists":
		l.downloaded, l.present = true, true
	}
	// Only a message that differs from the layer's previous one counts as
	// activity: a repeated message is not progress.
	key := m.Status + "\x00" + strconv.FormatInt(cur, 10)
	if key != l.lastKey {
		l.lastKey = key
		t.touch()
	}
}

func (t *progressTracker) touch() { t.lastActivity = t.clock.Now() }

// idleSince returns when the stream last advanced.
func (t *progressTracker) idleSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastActivity
}

// streamErr returns the in-stream error, if Docker sent one.
func (t *progressTracker) streamErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		return nil
	}
	return t.err
}

// snapshot returns the attempt's progress so far.
func (t *progressTracker) snapshot() Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := Progress{LayersTotal: len(t.layers), Idle: t.clock.Now().Sub(t.lastActivity)}
	for _, l := range t.layers {
		if l.downloaded {
			p.LayersDone++
		}
		if !l.present {
			p.BytesDone += l.current
			p.BytesTotal += l.total
		}
	}
	return p
}

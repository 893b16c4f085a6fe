package dockerclient

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A real pull stream captured from Docker 20.10 (trimmed), split at awkward places.
const capturedStream = `{"status":"Pulling from explore","id":"v1"}
{"status":"Pulling fs layer","progressDetail":{},"id":"4f8bf0fdd0bc"}
{"status":"Pulling fs layer","progressDetail":{},"id":"76aebe268053"}
{"status":"Already exists","progressDetail":{},"id":"38aa3426254a"}
{"status":"Downloading","progressDetail":{"current":36464,"total":2000816},"progress":"[\u003e   ]  36.46kB/2.001MB","id":"4f8bf0fdd0bc"}
{"status":"Downloading","progressDetail":{"current":2000816,"total":2000816},"progress":"[=====\u003e]  2.001MB/2.001MB","id":"4f8bf0fdd0bc"}
{"status":"Verifying Checksum","progressDetail":{},"id":"4f8bf0fdd0bc"}
{"status":"Download complete","progressDetail":{},"id":"4f8bf0fdd0bc"}
{"status":"Downloading","progressDetail":{"current":32768,"total":2000816},"progress":"[\u003e   ]  32.77kB/2.001MB","id":"76aebe268053"}
{"status":"Retrying in 5 seconds","progressDetail":{},"id":"76aebe268053"}
`

func TestProgressTrackerParsesSplitStream(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	tr := newProgressTracker(clock)
	data := []byte(capturedStream)
	for i := 0; i < len(data); i += 7 {
		n, err := tr.Write(data[i:min(i+7, len(data))])
		require.NoError(t, err)
		require.Equal(t, min(7, len(data)-i), n)
	}
	tr.finish()
	require.NoError(t, tr.streamErr())
	p := tr.snapshot()
	assert.Equal(t, 3, p.LayersTotal)
	assert.Equal(t, 2, p.LayersDone)
	assert.Equal(t, int64(2000816+32768), p.BytesDone)
	assert.Equal(t, int64(2000816*2), p.BytesTotal)
}

func TestProgressTrackerDetectsStreamError(t *testing.T) {
	tr := newProgressTracker(clockwork.NewRealClock())
	_, _ = tr.Write([]byte(`{"status":"Pulling from explore","id":"v1"}` + "\r\n"))
	// The last message need not end with a newline.
	_, _ = tr.Write([]byte(`{"errorDetail":{"message":"error pulling image configuration: download failed after attempts=6: received unexpected HTTP status: 502 Bad Gateway"},"error":"error pulling image configuration: download failed after attempts=6: received unexpected HTTP status: 502 Bad Gateway"}`))
	assert.NoError(t, tr.streamErr(), "not parsed before the line is complete")
	tr.finish()
	err := tr.streamErr()
	require.Error(t, err)
	var se *StreamError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "error pulling image configuration: download failed after attempts=6: received unexpected HTTP status: 502 Bad Gateway", se.Message)
	assert.ErrorIs(t, classifyPull(err, time.Second), ErrRegistryUnavailable)
}

func TestProgressTrackerActivity(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(1000, 0))
	tr := newProgressTracker(clock)
	start := tr.idleSince()
	msg := `{"status":"Downloading","progressDetail":{"current":10,"total":100},"id":"aaa"}` + "\n"

	clock.Advance(time.Second)
	_, _ = tr.Write([]byte(msg))
	assert.Equal(t, start.Add(time.Second), tr.idleSince(), "a new message is activity")

	clock.Advance(time.Second)
	_, _ = tr.Write([]byte(msg))
	assert.Equal(t, start.Add(time.Second), tr.idleSince(), "the same message again is not")

	clock.Advance(time.Second)
	_, _ = tr.Write([]byte(`not json` + "\n"))
	assert.Equal(t, start.Add(time.Second), tr.idleSince(), "garbage is not")

	clock.Advance(time.Second)
	_, _ = tr.Write([]byte(`{"status":"Downloading","progressDetail":{"current":20,"total":100},"id":"aaa"}` + "\n"))
	assert.Equal(t, start.Add(4*time.Second), tr.idleSince(), "advancing bytes are")
	assert.Equal(t, time.Duration(0), tr.snapshot().Idle)
	clock.Advance(3 * time.Second)
	assert.Equal(t, 3*time.Second, tr.snapshot().Idle)
}

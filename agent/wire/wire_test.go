package wire_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/wire"
)

// note is a message of the test protocol.
type note struct {
	Text string `json:"text"`
}

func (*note) MessageType() string { return "Note" }

func testProtocol(required bool) wire.Protocol {
	return wire.Protocol{Name: "TEST", MessageRequired: required, New: func(typ string) wire.Message {
		switch typ {
		case "Note":
			return &note{}
		case wire.TypeCloseMessage:
			return &wire.CloseMessage{}
		case wire.TypeServerException:
			return &wire.ServerException{}
		case wire.TypeBadRequestException:
			return &wire.BadRequestException{}
		}
		return nil
	}}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	p := testProtocol(true)
	for _, m := range []wire.Message{
		&note{Text: "hi"},
		&wire.CloseMessage{Message: "bye"},
		&wire.ServerException{Message: "boom"},
		&wire.BadRequestException{Message: "no"},
	} {
		t.Run(m.MessageType(), func(t *testing.T) {
			data, err := p.Encode(m)
			require.NoError(t, err)
			got, err := p.Decode(data)
			require.NoError(t, err)
			assert.Equal(t, m, got)
		})
	}
	data, err := p.Encode(&note{Text: "hi"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"Note","message":{"text":"hi"}}`, string(data))
}

func TestEncodeNil(t *testing.T) {
	_, err := testProtocol(true).Encode(nil)
	assert.ErrorContains(t, err, "TEST")
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name     string
		required bool
		frame    string
		unknown  string // the type of an *UnknownTypeError; "": a malformed frame
	}{
		{"not JSON", true, `{not json secret-value`, ""},
		{"envelope of the wrong shape", true, `["secret-value"]`, ""},
		{"message of the wrong shape", true, `{"type":"Note","message":{"text":["secret-value"]}}`, ""},
		{"message not an object", false, `{"type":"Note","message":"secret-value"}`, ""},
		{"message absent", true, `{"type":"Note"}`, ""},
		{"message null", true, `{"type":"Note","message":null}`, ""},
		{"unknown type", true, `{"type":"FancyNewMessage","message":{"secret":"secret-value"}}`, "FancyNewMessage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testProtocol(tt.required).Decode([]byte(tt.frame))
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "secret-value")
			assert.Contains(t, err.Error(), "TEST")
			if tt.unknown != "" {
				var ute *wire.UnknownTypeError
				require.ErrorAs(t, err, &ute)
				assert.Equal(t, tt.unknown, ute.Type)
				assert.NotErrorIs(t, err, wire.ErrMalformedFrame)
				return
			}
			var mfe *wire.MalformedFrameError
			require.ErrorAs(t, err, &mfe)
			assert.ErrorIs(t, err, wire.ErrMalformedFrame)
			assert.True(t, errdefs.IsInvalidArgument(err))
			assert.False(t, errdefs.IsRetriable(err))
		})
	}
}

// A protocol that does not require a message decodes a frame without one to the empty message.
func TestDecodeOptionalMessage(t *testing.T) {
	for _, frame := range []string{`{"type":"Note"}`, `{"type":"Note","message":null}`} {
		m, err := testProtocol(false).Decode([]byte(frame))
		require.NoError(t, err, frame)
		assert.Equal(t, &note{}, m)
	}
}

func TestDescribeJSONError(t *testing.T) {
	assert.Equal(t, "invalid JSON", wire.DescribeJSONError(errors.New("x")))
}

// Package wire is the envelope the ACS and TCS websocket protocols share: every frame body is the
// JSON object {"type": <shape name>, "message": {…}}. It encodes and decodes envelopes for a
// Protocol, whose message types live in agent/acswire and agent/tcswire, and defines the few
// messages both protocols send in the same shape.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Message is the body of one frame. MessageType is the frame's "type", the shape name. Every message
// type of agent/acswire and agent/tcswire implements it, so a server can Encode the same frames a
// client Decodes, and the reverse.
type Message interface {
	MessageType() string
}

// Protocol is the vocabulary of one protocol: its name and the message types it knows.
type Protocol struct {
	// Name is the protocol's name in errors, e.g. ACS or TCS.
	Name string
	// New returns an empty message of the frame type typ, or nil when the protocol does not know it.
	New func(typ string) Message
	// MessageRequired makes a frame without a message (absent or null) malformed; otherwise it
	// decodes to the empty message of its type.
	MessageRequired bool
}

// Frame types both protocols send in the same shape.
const (
	TypeCloseMessage        = "CloseMessage"
	TypeServerException     = "ServerException"
	TypeBadRequestException = "BadRequestException"
)

// CloseMessage asks the client to end the session; it reconnects.
type CloseMessage struct {
	Message string `json:"message,omitempty"`
}

// ServerException is an error frame: the server failed.
type ServerException struct {
	Message string `json:"message,omitempty"`
}

// BadRequestException is an error frame: the server rejected a request as malformed.
type BadRequestException struct {
	Message string `json:"message,omitempty"`
}

// MessageType returns "CloseMessage".
func (*CloseMessage) MessageType() string { return TypeCloseMessage }

// MessageType returns "ServerException".
func (*ServerException) MessageType() string { return TypeServerException }

// MessageType returns "BadRequestException".
func (*BadRequestException) MessageType() string { return TypeBadRequestException }

// ErrMalformedFrame matches (errors.Is) every error for a frame that does not have the shape its
// protocol expects; it is an errdefs.ErrInvalidArgument.
var ErrMalformedFrame = errdefs.New(errdefs.ErrInvalidArgument, "malformed frame")

// MalformedFrameError is a frame of Protocol that does not have the expected shape; Reason says
// what is wrong without quoting the frame. It matches ErrMalformedFrame.
type MalformedFrameError struct {
	Protocol string
	Reason   string
}

// Error names the protocol and the reason.
func (e *MalformedFrameError) Error() string {
	return fmt.Sprintf("malformed %s frame: %s", e.Protocol, e.Reason)
}

// Unwrap returns ErrMalformedFrame.
func (e *MalformedFrameError) Unwrap() error { return ErrMalformedFrame }

// UnknownTypeError is a well-formed frame of a type its protocol does not know.
type UnknownTypeError struct {
	Protocol string
	Type     string
}

// Error names the protocol and the unknown type.
func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("unknown %s frame type %q", e.Protocol, e.Type)
}

// envelope is the JSON of every frame body.
type envelope struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message"`
}

// Encode returns the envelope {"type": m.MessageType(), "message": m}.
func (p Protocol) Encode(m Message) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("encode %s frame: nil message", p.Name)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", p.Name, m.MessageType(), err)
	}
	return json.Marshal(envelope{Type: m.MessageType(), Message: body})
}

// Decode parses an envelope into a pointer to the message type its "type" names. A frame that is
// not JSON, or whose message does not fit its type, gives a *MalformedFrameError; a frame of a type
// the protocol does not know gives an *UnknownTypeError. Error texts never quote the frame's
// contents, which may hold secrets.
func (p Protocol) Decode(data []byte) (Message, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, &MalformedFrameError{Protocol: p.Name, Reason: "envelope: " + DescribeJSONError(err)}
	}
	m := p.New(env.Type)
	if m == nil {
		return nil, &UnknownTypeError{Protocol: p.Name, Type: env.Type}
	}
	if len(env.Message) == 0 || string(env.Message) == "null" {
		if p.MessageRequired {
			return nil, &MalformedFrameError{Protocol: p.Name, Reason: env.Type + " without a message"}
		}
		return m, nil
	}
	if err := json.Unmarshal(env.Message, m); err != nil {
		return nil, &MalformedFrameError{Protocol: p.Name, Reason: env.Type + ": " + DescribeJSONError(err)}
	}
	return m, nil
}

// DescribeJSONError describes an error of encoding/json's decoding without quoting the input (which
// may hold secrets): where the syntax broke, or which field had the wrong type.
func DescribeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want %s", te.Field, te.Type)
	default:
		return "invalid JSON"
	}
}

package tcswire

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/berth-agent/berth/agent/wire"
)

// Every frame a TCS client sends is a signed request, not bare JSON:
//
//	Authorization: AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/ecs/aws4_request, SignedHeaders=host;x-amz-date, Signature=…\r\n
//	Host: <endpoint host:port>\r\n
//	X-Amz-Date: <yyyymmddThhmmssZ>\r\n
//	[X-Amz-Security-Token: …\r\n]
//	\r\n
//	{"type":"<ShapeName>","message":{…}}
//
// The signature is SigV4 (service ecs) over a synthetic GET of the session's upgrade URL — the
// telemetry endpoint's ws path with the upgrade's query — whose payload is the body, as the ECS agent
// signs it (ecs-agent/tcs/client/client.go, signRequestFunc).
// The client signs frames (agent/tcs); a server splits them with ParseFrame.

// ParseFrame splits a client frame into its header lines and its JSON body. It checks the shape
// only, not the signature; an error is a *wire.MalformedFrameError (matching wire.ErrMalformedFrame).
func ParseFrame(data []byte) (http.Header, []byte, error) {
	end := bytes.Index(data, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, nil, &wire.MalformedFrameError{Protocol: "TCS", Reason: "no empty line after the headers"}
	}
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(data[:end+4])))
	h, err := r.ReadMIMEHeader()
	if err != nil {
		return nil, nil, &wire.MalformedFrameError{Protocol: "TCS", Reason: err.Error()}
	}
	return http.Header(h), data[end+4:], nil
}

// AccessKeyID returns the access key ID of a SigV4 Authorization header value, or "" when it has
// none.
func AccessKeyID(authorization string) string {
	_, rest, ok := strings.Cut(authorization, "Credential=")
	if !ok {
		return ""
	}
	key, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return key
}

package tcs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Every frame the client sends is a signed request, not bare JSON:
//
//	Authorization: AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/ecs/aws4_request, SignedHeaders=host;x-amz-date, Signature=…\r\n
//	Host: <endpoint host:port>\r\n
//	X-Amz-Date: <yyyymmddThhmmssZ>\r\n
//	[X-Amz-Security-Token: …\r\n]
//	\r\n
//	{"type":"<ShapeName>","message":{…}}
//
// The signature is SigV4 (service ecs) over a synthetic POST of the body to the telemetry endpoint.

const (
	signingService = "ecs"
	// frameSignMethod is the method of the synthetic request a frame is signed as.
	frameSignMethod = http.MethodPost
)

// frameSigner signs frame bodies for one endpoint.
type frameSigner struct {
	endpoint    *url.URL
	region      string
	credentials aws.CredentialsProvider // nil: frames carry no Authorization
	signer      *v4.Signer
}

// sign returns the frame for body, signed at now.
func (s *frameSigner) sign(ctx context.Context, body []byte, now time.Time) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, frameSignMethod, s.endpoint.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build TCS frame request: %w", err)
	}
	if s.credentials != nil {
		creds, err := s.credentials.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("retrieve credentials to sign a TCS frame: %w", err)
		}
		sum := sha256.Sum256(body)
		if err := s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), signingService, s.region, now.UTC()); err != nil {
			return nil, fmt.Errorf("sign a TCS frame: %w", err)
		}
	} else {
		req.Header.Set("X-Amz-Date", now.UTC().Format("20060102T150405Z"))
	}
	var b bytes.Buffer
	writeHeader := func(name, value string) {
		if value != "" {
			b.WriteString(name + ": " + value + "\r\n")
		}
	}
	writeHeader("Authorization", req.Header.Get("Authorization"))
	writeHeader("Host", req.URL.Host)
	writeHeader("X-Amz-Date", req.Header.Get("X-Amz-Date"))
	writeHeader("X-Amz-Security-Token", req.Header.Get("X-Amz-Security-Token"))
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes(), nil
}

// ErrMalformedFrame: a frame is not header lines, an empty line and a body.
var ErrMalformedFrame = errors.New("malformed TCS frame")

// ParseFrame splits a client frame into its header lines and its JSON body. It checks the shape
// only, not the signature; an error wraps ErrMalformedFrame.
func ParseFrame(data []byte) (http.Header, []byte, error) {
	end := bytes.Index(data, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, nil, fmt.Errorf("%w: no empty line after the headers", ErrMalformedFrame)
	}
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(data[:end+4])))
	h, err := r.ReadMIMEHeader()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrMalformedFrame, err)
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

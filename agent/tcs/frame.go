package tcs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The client signs every frame it sends as a request; the layout is in agent/tcswire (frame.go).

const (
	signingService = "ecs"
	// frameSignMethod is the method of the synthetic request a frame is signed as: the ECS agent signs
	// a GET (ecs-agent/tcs/client/client.go, signRequestFunc), and TCS checks that.
	frameSignMethod = http.MethodGet
)

// frameSigner signs frame bodies.
type frameSigner struct {
	region      string
	credentials aws.CredentialsProvider // nil: frames carry no Authorization
	signer      *v4.Signer
}

// sign returns the frame for body, signed at now as a request for target, the session's upgrade URL
// with its query.
func (s *frameSigner) sign(ctx context.Context, target *url.URL, body []byte, now time.Time) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, frameSignMethod, target.String(), nil)
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

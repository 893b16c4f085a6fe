// Package wsclient opens the agent's SigV4-signed websocket connections to Amazon ECS (ACS and TCS)
// and holds what their sessions share: the upgrade URL, the frame reader, the goodbye and the
// heartbeat timer.
package wsclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
)

const (
	handshakeTimeout = 30 * time.Second
	// emptyPayloadHash is the SHA-256 of the empty body of the upgrade GET.
	emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	signingService   = "ecs"
)

// Dialer opens websocket connections to one ECS websocket service, signing each upgrade request.
type Dialer struct {
	service     string // ACS or TCS, in errors
	region      string
	credentials aws.CredentialsProvider // nil: unsigned
	readLimit   int64
	clock       clockwork.Clock
	signer      *v4.Signer
	ws          *websocket.Dialer
}

// NewDialer returns a Dialer for service (named in errors) that signs with credentials for region at
// clock's time (nil credentials send the upgrade unsigned, which only a local control plane accepts)
// and limits each frame it reads to readLimit bytes.
func NewDialer(service, region string, credentials aws.CredentialsProvider, readLimit int64, clock clockwork.Clock) *Dialer {
	return &Dialer{
		service:     service,
		region:      region,
		credentials: credentials,
		readLimit:   readLimit,
		clock:       clock,
		signer:      v4.NewSigner(),
		ws:          &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: handshakeTimeout},
	}
}

// HandshakeError is a websocket upgrade that the server answered with an HTTP status other than 101.
type HandshakeError struct {
	Service    string
	StatusCode int
	Err        error
}

// Error names the service and gives the HTTP status.
func (e *HandshakeError) Error() string {
	return fmt.Sprintf("%s refused the websocket upgrade: HTTP %d %s", e.Service, e.StatusCode, http.StatusText(e.StatusCode))
}

// Unwrap returns the dialer's error.
func (e *HandshakeError) Unwrap() error { return e.Err }

// ConnectURL returns the http(s) URL of the upgrade request: base's path with /ws, and query.
func ConnectURL(base *url.URL, query url.Values) *url.URL {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/ws"
	u.RawPath = ""
	u.RawQuery = query.Encode()
	u.Fragment = ""
	return &u
}

// Dial signs the upgrade request for u (http or https) and opens the websocket (ws or wss).
func (d *Dialer) Dial(ctx context.Context, u *url.URL) (*websocket.Conn, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", d.service, err)
	}
	if d.credentials != nil {
		creds, err := d.credentials.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("retrieve credentials to sign the %s connection: %w", d.service, err)
		}
		if err := d.signer.SignHTTP(ctx, creds, req, emptyPayloadHash, signingService, d.region, d.clock.Now().UTC()); err != nil {
			return nil, fmt.Errorf("sign the %s connection: %w", d.service, err)
		}
	}
	ws := *u
	ws.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	conn, resp, err := d.ws.DialContext(ctx, ws.String(), req.Header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &HandshakeError{Service: d.service, StatusCode: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("connect to %s at %s: %w", d.service, u.Host, err)
	}
	conn.SetReadLimit(d.readLimit)
	return conn, nil
}

// ReadFrames passes every frame of conn to frames until reading fails, which it sends to errc, or
// ctx ends.
func ReadFrames(ctx context.Context, conn *websocket.Conn, frames chan<- []byte, errc chan<- error) {
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			errc <- err
			return
		}
		select {
		case frames <- data:
		case <-ctx.Done():
			return
		}
	}
}

// Close says goodbye (best effort) and closes conn, which ends ReadFrames and any write.
func Close(conn *websocket.Conn) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = conn.Close()
}

// Restart makes t fire d from now, dropping a firing it may have made meanwhile.
func Restart(t clockwork.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.Chan():
		default:
		}
	}
	t.Reset(d)
}

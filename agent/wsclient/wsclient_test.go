package wsclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnectURL(t *testing.T) {
	base, err := url.Parse("https://ecs-a-1.us-west-2.amazonaws.com/base/?old=1#frag")
	require.NoError(t, err)
	got := ConnectURL(base, url.Values{"cluster": {"a b"}})
	assert.Equal(t, "https://ecs-a-1.us-west-2.amazonaws.com/base/ws?cluster=a+b", got.String())
	assert.Equal(t, "https://ecs-a-1.us-west-2.amazonaws.com/base/?old=1#frag", base.String(), "base is left alone")
}

// TestDialSignsTheUpgrade checks the signature the server receives against one made from scratch for
// what was dialed, and that a frame above the read limit ends ReadFrames with an error.
func TestDialSignsTheUpgrade(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	creds := aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", SessionToken: "token"}
	signed := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkSignature(r, creds, at); err != nil {
			signed <- err
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		signed <- nil
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.WriteMessage(websocket.TextMessage, []byte("small"))
		_ = conn.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 2048)))
		_, _, _ = conn.ReadMessage() // until the client goes
	}))
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)

	d := NewDialer("ACS", "us-west-2", credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken), 1024, clockwork.NewFakeClockAt(at))
	conn, err := d.Dial(context.Background(), ConnectURL(base, url.Values{"seqNum": {"7"}}))
	require.NoError(t, err)
	require.NoError(t, <-signed)
	defer Close(conn)

	frames := make(chan []byte)
	errc := make(chan error, 1)
	go ReadFrames(context.Background(), conn, frames, errc)
	assert.Equal(t, "small", string(<-frames))
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, websocket.ErrReadLimit)
	case f := <-frames:
		t.Fatalf("a %d-byte frame passed a 1024-byte read limit", len(f))
	}
}

// checkSignature signs what r dialed again, from scratch, and compares.
func checkSignature(r *http.Request, creds aws.Credentials, at time.Time) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return err
	}
	emptyBody := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(emptyBody[:]), "ecs", "us-west-2", at); err != nil {
		return err
	}
	if got, want := r.Header.Get("Authorization"), req.Header.Get("Authorization"); got != want {
		return fmt.Errorf("signature mismatch:\n got %s\nwant %s", got, want)
	}
	return nil
}

func TestDialNamesTheServiceThatRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)

	_, err = NewDialer("TCS", "us-west-2", nil, 1024, clockwork.NewRealClock()).Dial(context.Background(), ConnectURL(base, nil))
	var he *HandshakeError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, http.StatusForbidden, he.StatusCode)
	assert.Equal(t, "TCS refused the websocket upgrade: HTTP 403 Forbidden", err.Error())
}

func TestRestartDropsAnEarlierFiring(t *testing.T) {
	clock := clockwork.NewFakeClock()
	timer := clock.NewTimer(time.Second)
	clock.Advance(time.Second) // fires; nobody reads it
	Restart(timer, time.Minute)
	select {
	case <-timer.Chan():
		t.Fatal("the firing from before the restart was kept")
	default:
	}
	clock.Advance(time.Minute)
	select {
	case <-timer.Chan():
	case <-time.After(5 * time.Second):
		t.Fatal("the restarted timer did not fire a minute later")
	}
}

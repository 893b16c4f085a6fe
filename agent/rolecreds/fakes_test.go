package rolecreds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// The host's credentials the tests set, and the secrets the fake STS hands out; no secret may ever
// show up in a log line or an error.
const (
	hostKeyID     = "AKIDHOSTTEST"
	hostSecret    = "host-secret-access-key-2f1e8c4b"
	roleSecretPre = "role-secret-access-key-"
	roleTokenPre  = "role-session-token-"
)

// isolateAWS makes the SDK see no AWS configuration from the host: no shared files, no credentials,
// no region, no instance metadata. Tests then add what they need.
func isolateAWS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-credentials"))
	for _, k := range []string{
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_MAX_ATTEMPTS",
		"AWS_RETRY_MODE", "AWS_USE_FIPS_ENDPOINT", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
		"AWS_STS_REGIONAL_ENDPOINTS",
	} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// setHostCredentials gives the SDK static credentials through the environment.
func setHostCredentials(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", hostKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", hostSecret)
}

// assumeCall is one AssumeRole request the fake STS received.
type assumeCall struct {
	roleArn, sessionName, duration string
	keyID, region                  string
	signatureOK                    bool
}

// fakeSTS is an STS stand-in speaking the query protocol: AssumeRole answered with credentials
// that expire DurationSeconds after the test clock's now, or with an XML error.
type fakeSTS struct {
	srv   *httptest.Server
	clock clockwork.Clock
	gate  chan struct{} // when set, each request waits for a receive from it

	mu      sync.Mutex
	calls   []assumeCall
	issued  int
	status  int // 0: success
	errCode string
	errMsg  string
}

var credentialScope = regexp.MustCompile(`Credential=([^/]+)/([0-9]{8})/([^/]+)/sts/aws4_request`)

// newFakeSTS starts a fake STS and points the SDK at it (AWS_ENDPOINT_URL_STS). It closes every
// connection after its answer, so no client goroutine outlives a request.
func newFakeSTS(t *testing.T, clock clockwork.Clock) *fakeSTS {
	t.Helper()
	f := &fakeSTS{clock: clock}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.Config.SetKeepAlivesEnabled(false)
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	t.Setenv("AWS_ENDPOINT_URL_STS", f.srv.URL)
	return f
}

func (f *fakeSTS) fail(status int, code, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.errCode, f.errMsg = status, code, msg
}

func (f *fakeSTS) succeed() { f.fail(0, "", "") }

func (f *fakeSTS) requests() []assumeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]assumeCall(nil), f.calls...)
}

func (f *fakeSTS) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeSTS) serve(w http.ResponseWriter, r *http.Request) {
	if f.gate != nil {
		<-f.gate
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(body))
	if r.Method != http.MethodPost || r.URL.Path != "/" || err != nil ||
		form.Get("Action") != "AssumeRole" || form.Get("Version") != "2011-06-15" {
		http.Error(w, "unexpected request: "+string(body), http.StatusBadRequest)
		return
	}
	call := assumeCall{roleArn: form.Get("RoleArn"), sessionName: form.Get("RoleSessionName"), duration: form.Get("DurationSeconds")}
	if m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		call.keyID, call.region = m[1], m[3]
		call.signatureOK = validSignature(r, body, call.region)
	}
	f.mu.Lock()
	f.calls = append(f.calls, call)
	status, code, msg := f.status, f.errCode, f.errMsg
	if status == 0 {
		f.issued++
	}
	n := f.issued
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/xml")
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>
  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
</ErrorResponse>`, code, msg)
		return
	}
	secs, _ := time.ParseDuration(call.duration + "s")
	exp := f.clock.Now().Add(secs).UTC().Format(time.RFC3339)
	fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <Credentials>
      <AccessKeyId>ASIAROLE%d</AccessKeyId>
      <SecretAccessKey>%s%d</SecretAccessKey>
      <SessionToken>%s%d</SessionToken>
      <Expiration>%s</Expiration>
    </Credentials>
    <AssumedRoleUser>
      <Arn>%s/%s</Arn>
      <AssumedRoleId>AROA3XFRBF535PLBIFPI4:%s</AssumedRoleId>
    </AssumedRoleUser>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleResponse>`, n, roleSecretPre, n, roleTokenPre, n, exp, call.roleArn, call.sessionName, call.sessionName)
}

// validSignature recomputes the request's SigV4 signature with the host's secret key, over the
// headers the request says it signed, and compares it with the one it carries.
func validSignature(r *http.Request, body []byte, region string) bool {
	auth := r.Header.Get("Authorization")
	_, signed, ok := strings.Cut(auth, "SignedHeaders=")
	if !ok {
		return false
	}
	signed, _, _ = strings.Cut(signed, ",")
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return false
	}
	req, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return false
	}
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			req.Header.Set(h, r.Header.Get(h))
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: hostKeyID, SecretAccessKey: hostSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sts", region, at); err != nil {
		return false
	}
	return req.Header.Get("Authorization") == auth
}

// newLogger returns a debug-level logger writing logfmt lines to a buffer.
func newLogger(t *testing.T) (*logger.Logger, *logger.Buffer) {
	t.Helper()
	buf := &logger.Buffer{}
	l, err := logger.New(logger.Config{Level: "debug"}, buf)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l, buf
}

// logLines returns the lines of buf containing substr.
func logLines(buf *logger.Buffer, substr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l != "" && strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// assertNoSecrets fails when s holds a secret of the tests or a whole credentials ID.
func assertNoSecrets(t *testing.T, what, s string, ids ...string) {
	t.Helper()
	for _, secret := range append([]string{hostSecret, roleSecretPre, roleTokenPre}, ids...) {
		require.NotContains(t, s, secret, "%s leaks a secret", what)
	}
}

// Add, for the tests, makes the task's role of roleType (taskcreds.RoleTypeTaskApplication or taskcreds.RoleTypeTaskExecution) the role
// roleArn and returns its credentials ID at once; the role is assumed in the background and kept
// fresh until Remove. Adding the same role again returns the same ID; adding another roleArn for
// the same task and role type replaces the old role (its ID is forgotten). It returns "" and does
// nothing when roleArn is empty or the Provider is closed.
func (p *Provider) Add(taskArn, roleType, roleArn string) string {
	if roleArn == "" {
		return ""
	}
	id, err := p.add(taskArn, roleType, roleArn, "")
	if err != nil {
		return ""
	}
	return id
}

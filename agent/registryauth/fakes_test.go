package registryauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/logger"
)

// pullAuthSource is the interface the pull path (package dockerclient) declares and consumes.
type pullAuthSource interface {
	Auth(ctx context.Context, image string) (docker.AuthConfiguration, error)
	Invalidate(image string)
}

var _ pullAuthSource = (*Provider)(nil)

// Secrets the fakes hand out; none may ever show up in a log line or an error.
const (
	ecrUser         = "AWS"
	ecrPassword     = "ecr-token-password-d41d8cd98f00"
	imdsSecretKey   = "imds-secret-access-key-8f14e45f"
	imdsSessionTok  = "imds-session-token-c9f0f895fb98"
	envSecretKey    = "env-secret-access-key-45c48cce2e"
	staticSecretKey = "static-secret-access-key-6512bd43"
)

var ecrToken64 = base64.StdEncoding.EncodeToString([]byte(ecrUser + ":" + ecrPassword))

// secrets lists every secret the tests use, in every form they travel in.
var secrets = []string{ecrPassword, ecrToken64, imdsSecretKey, imdsSessionTok, envSecretKey, staticSecretKey}

func assertNoSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range secrets {
		require.NotContains(t, s, secret, "%s leaks a secret", what)
	}
}

// isolateAWS makes the SDK see no AWS configuration from the host: no shared files, no
// credentials, no region, and an IMDS endpoint that refuses connections. Tests then add what they need.
func isolateAWS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-credentials"))
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", closedURL(t))
	for _, k := range []string{
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_ECR",
		"AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_MAX_ATTEMPTS",
		"AWS_RETRY_MODE", "AWS_USE_FIPS_ENDPOINT", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
	} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
}

// setEnvCredentials gives the SDK static credentials through the environment.
func setEnvCredentials(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", envSecretKey)
}

// closedURL returns an http URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// fakeIMDS is an IMDSv2 stand-in serving a region and instance-role credentials.
type fakeIMDS struct {
	srv     *httptest.Server
	region  string
	noRole  atomic.Bool // serve no instance role (credentials unavailable)
	total   atomic.Int64
	regions atomic.Int64
	creds   atomic.Int64
}

const imdsToken = "imds-v2-token"

func newFakeIMDS(t *testing.T, region string) *fakeIMDS {
	t.Helper()
	f := &fakeIMDS{region: region}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f.srv.URL)
	return f
}

func (f *fakeIMDS) serve(w http.ResponseWriter, r *http.Request) {
	f.total.Add(1)
	if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", "21600")
		fmt.Fprint(w, imdsToken)
		return
	}
	if r.Method != http.MethodGet || r.Header.Get("X-aws-ec2-metadata-token") != imdsToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if f.noRole.Load() && strings.Contains(r.URL.Path, "/iam/") {
		http.NotFound(w, r)
		return
	}
	switch r.URL.Path {
	case "/latest/meta-data/placement/region":
		f.regions.Add(1)
		fmt.Fprint(w, f.region)
	case "/latest/meta-data/iam/security-credentials/":
		f.creds.Add(1)
		fmt.Fprint(w, "berth-test-role")
	case "/latest/meta-data/iam/security-credentials/berth-test-role":
		f.creds.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"Code":            "Success",
			"Type":            "AWS-HMAC",
			"AccessKeyId":     "AKIDIMDS",
			"SecretAccessKey": imdsSecretKey,
			"Token":           imdsSessionTok,
			"Expiration":      time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339),
			"LastUpdated":     time.Now().UTC().Format(time.RFC3339),
		})
	default:
		http.NotFound(w, r)
	}
}

// fakeECR is an ECR stand-in answering GetAuthorizationToken in the AWS JSON 1.1 protocol.
type fakeECR struct {
	srv      *httptest.Server
	requests atomic.Int64
	delay    time.Duration

	mu        sync.Mutex
	expiresAt time.Time
	status    int    // 0: success
	errType   string // __type of the error answer
	keyIDs    []string
	regions   []string
	registry  [][]string
	// secrets, when set, makes the fake check each request's SigV4 signature with the secret of its
	// access key (and its session token), as ECR does, and refuse what does not verify.
	secrets map[string]sigv4Key
	checked []string // access key IDs whose signature verified
}

// sigv4Key is what the fake ECR knows of an access key.
type sigv4Key struct{ secret, sessionToken string }

var credentialPattern = regexp.MustCompile(`Credential=([^/]+)/[0-9]+/([^/]+)/`)

func newFakeECR(t *testing.T, expiresAt time.Time) *fakeECR {
	t.Helper()
	f := &fakeECR{expiresAt: expiresAt}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// useAsDefault points the SDK's ECR endpoint (AWS_ENDPOINT_URL_ECR) at f.
func (f *fakeECR) useAsDefault(t *testing.T) *fakeECR {
	t.Setenv("AWS_ENDPOINT_URL_ECR", f.srv.URL)
	return f
}

func (f *fakeECR) fail(status int, errType string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.errType = status, errType
}

func (f *fakeECR) setExpiry(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expiresAt = at
}

// verified returns the access key IDs of the requests whose signature verified.
func (f *fakeECR) verified() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.checked...)
}

// verifySigV4 checks r's AWS SigV4 signature (service ecr) over body with the secret of the access
// key it names, and that its session token is that key's. It returns the access key ID.
func verifySigV4(r *http.Request, body []byte, keys map[string]sigv4Key) (string, error) {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", fmt.Errorf("not signed with SigV4")
	}
	var credential, signed, signature string
	for _, part := range strings.Split(auth, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "Credential":
			credential = value
		case "SignedHeaders":
			signed = value
		case "Signature":
			signature = value
		}
	}
	scope := strings.Split(credential, "/")
	if len(scope) != 5 || scope[3] != "ecr" || scope[4] != "aws4_request" {
		return "", fmt.Errorf("credential scope %q is not for ecr", credential)
	}
	key, ok := keys[scope[0]]
	if !ok {
		return "", fmt.Errorf("unknown access key %s", scope[0])
	}
	if got := r.Header.Get("X-Amz-Security-Token"); got != key.sessionToken {
		return "", fmt.Errorf("session token of %s does not match", scope[0])
	}
	var creq strings.Builder
	creq.WriteString(r.Method + "\n" + r.URL.EscapedPath() + "\n" + r.URL.RawQuery + "\n")
	headers := strings.Split(signed, ";")
	for _, h := range headers {
		v := r.Header.Get(h)
		if h == "host" {
			v = r.Host
		}
		creq.WriteString(h + ":" + strings.TrimSpace(v) + "\n")
	}
	sum := sha256.Sum256(body)
	creq.WriteString("\n" + signed + "\n" + hex.EncodeToString(sum[:]))
	hashed := sha256.Sum256([]byte(creq.String()))
	toSign := "AWS4-HMAC-SHA256\n" + r.Header.Get("X-Amz-Date") + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(hashed[:])
	mac := func(k []byte, data string) []byte {
		h := hmac.New(sha256.New, k)
		h.Write([]byte(data))
		return h.Sum(nil)
	}
	k := mac([]byte("AWS4"+key.secret), scope[1])
	k = mac(k, scope[2])
	k = mac(k, scope[3])
	k = mac(k, "aws4_request")
	if want := hex.EncodeToString(mac(k, toSign)); !hmac.Equal([]byte(want), []byte(signature)) {
		return "", fmt.Errorf("signature of %s does not verify", scope[0])
	}
	return scope[0], nil
}

func (f *fakeECR) accessKeyIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keyIDs...)
}

func (f *fakeECR) serve(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" ||
		r.Header.Get("X-Amz-Target") != "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" {
		http.Error(w, "unexpected request", http.StatusNotFound)
		return
	}
	var in struct {
		RegistryIDs []string `json:"registryIds"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &in)
	f.mu.Lock()
	if f.secrets != nil {
		key, err := verifySigV4(r, body, f.secrets)
		if err != nil {
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"__type":"InvalidSignatureException","message":%q}`, err.Error())
			return
		}
		f.checked = append(f.checked, key)
	}
	if m := credentialPattern.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		f.keyIDs = append(f.keyIDs, m[1])
		f.regions = append(f.regions, m[2])
	}
	f.registry = append(f.registry, in.RegistryIDs)
	status, errType, expiresAt := f.status, f.errType, f.expiresAt
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"__type":%q,"message":"refused by the fake"}`, errType)
		return
	}
	account := "000000000000"
	if len(in.RegistryIDs) > 0 {
		account = in.RegistryIDs[0]
	}
	fmt.Fprintf(w, `{"authorizationData":[{"authorizationToken":%q,"expiresAt":%.3f,"proxyEndpoint":"https://%s.dkr.ecr.us-east-1.amazonaws.com"}]}`,
		ecrToken64, float64(expiresAt.UnixMilli())/1000, account)
}

// logLines returns the lines of buf containing substr (all lines when substr is "").
func logLines(buf *logger.Buffer, substr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l != "" && strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
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

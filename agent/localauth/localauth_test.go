package localauth

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnsureWritesKeysOnceAndKeepsThem(t *testing.T) {
	path := Path(t.TempDir())
	k, err := Ensure(path)
	require.NoError(t, err)
	assert.Len(t, k.AccessKeyID, 20)
	assert.Len(t, k.SecretAccessKey, 40)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), "[berth]\naws_access_key_id = "+k.AccessKeyID+"\naws_secret_access_key = "+k.SecretAccessKey+"\n")

	// Kept across restarts, and the mode narrowed when someone widened it.
	require.NoError(t, os.Chmod(path, 0o644))
	again, err := Ensure(path)
	require.NoError(t, err)
	assert.Equal(t, k, again)
	fi, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	other, err := Ensure(Path(t.TempDir()))
	require.NoError(t, err)
	assert.NotEqual(t, k.AccessKeyID, other.AccessKeyID)
	assert.NotEqual(t, k.SecretAccessKey, other.SecretAccessKey)
}

func TestLoadReadsWhatTheAWSCLIReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds")
	require.NoError(t, os.WriteFile(path, []byte("[default]\naws_access_key_id=A\naws_secret_access_key=B\n\n"+
		"; comment\n[ berth ]\n  aws_access_key_id   =  ID  \naws_secret_access_key=SE=CRET\nregion = x\n"), 0o600))
	k, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, Keys{AccessKeyID: "ID", SecretAccessKey: "SE=CRET"}, k)
}

func TestEnsureRefusesABadFileAndKeepsIt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"no profile": "[default]\naws_access_key_id = a\naws_secret_access_key = b\n",
		"no secret":  "[berth]\naws_access_key_id = a\n",
		"garbage":    "\x00\x01 not an ini file\n",
		"open":       "[berth\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			_, err := Ensure(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), "remove it")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, content, string(data), "a bad file is never replaced")
		})
	}
}

func TestLoadDoesNotBlockOnAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	done := make(chan error, 1)
	go func() { _, err := Load(path); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}
}

var testKeys = Keys{AccessKeyID: "BKIATESTTESTTESTTEST", SecretAccessKey: "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}

// signed builds a request as a client would send it, signed by the AWS SDK's signer.
func signed(t *testing.T, method, url, host string, body []byte, keys Keys, region string, at time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113.ListClusters")
	require.NoError(t, Sign(t.Context(), req, body, keys, region, at))
	// What the server sees: the same request, received.
	srvReq := httptest.NewRequest(method, url, bytes.NewReader(body))
	srvReq.Host = req.Host
	srvReq.Header = req.Header.Clone()
	return srvReq
}

func TestVerify(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v := NewVerifier(testKeys, clockwork.NewFakeClockAt(now))
	body := []byte(`{"maxResults":10}`)
	const api = "http://127.0.0.1:51677/"
	const ws = "http://localhost:51677/ws?clusterArn=arn%3Aaws%3Aecs%3Aus-east-1%3A000000000000%3Acluster%2Fdefault&sendCredentials=true&agentVersion=1.0+beta&seqNum=1"

	ok := map[string]*http.Request{
		"api":                signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now),
		"any region":         signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "eu-west-3", now),
		"websocket query":    signed(t, http.MethodGet, ws, "localhost:51677", nil, testKeys, "us-east-1", now),
		"ipv6 loopback":      signed(t, http.MethodPost, "http://[::1]:51677/", "[::1]:51677", body, testKeys, "us-east-1", now),
		"14 minutes behind":  signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now.Add(-14*time.Minute)),
		"14 minutes ahead":   signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now.Add(14*time.Minute)),
		"loopback, any port": signed(t, http.MethodPost, "http://127.3.2.1/", "127.3.2.1", body, testKeys, "us-east-1", now),
	}
	for name, req := range ok {
		t.Run(name, func(t *testing.T) {
			got := []byte(nil)
			if req.Method == http.MethodPost {
				got = body
			}
			assert.Nil(t, v.Verify(req, got))
		})
	}

	wrongSecret := Keys{AccessKeyID: testKeys.AccessKeyID, SecretAccessKey: "not-the-secret"}
	tamperedQuery := signed(t, http.MethodGet, ws, "localhost:51677", nil, testKeys, "us-east-1", now)
	tamperedQuery.URL.RawQuery = strings.Replace(tamperedQuery.URL.RawQuery, "seqNum=1", "seqNum=2", 1)
	tamperedHeader := signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now)
	tamperedHeader.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113.RunTask")
	unsigned := httptest.NewRequest(http.MethodPost, api, bytes.NewReader(body))
	otherService := signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now)
	otherService.Header.Set("Authorization", strings.Replace(otherService.Header.Get("Authorization"), "/ecs/", "/sts/", 1))
	notHeaderAuth := signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now)
	notHeaderAuth.Header.Set("Authorization", "Basic dXNlcjpwYXNz")

	refused := []struct {
		name     string
		req      *http.Request
		body     []byte
		typ      string
		contains string
	}{
		{"unsigned", unsigned, body, "MissingAuthenticationTokenException", "Missing Authentication Token"},
		{"other keys", signed(t, http.MethodPost, api, "127.0.0.1:51677", body, Keys{AccessKeyID: "AKIAOTHER", SecretAccessKey: "x"}, "us-east-1", now), body,
			"UnrecognizedClientException", "security token"},
		{"wrong secret", signed(t, http.MethodPost, api, "127.0.0.1:51677", body, wrongSecret, "us-east-1", now), body, "InvalidSignatureException", "does not match"},
		{"tampered body", signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now), []byte(`{"maxResults":11}`),
			"InvalidSignatureException", "does not match"},
		{"tampered query", tamperedQuery, nil, "InvalidSignatureException", "does not match"},
		{"tampered header", tamperedHeader, body, "InvalidSignatureException", "does not match"},
		{"16 minutes behind", signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now.Add(-16*time.Minute)), body,
			"InvalidSignatureException", "Signature expired"},
		{"16 minutes ahead", signed(t, http.MethodPost, api, "127.0.0.1:51677", body, testKeys, "us-east-1", now.Add(16*time.Minute)), body,
			"InvalidSignatureException", "Signature expired"},
		{"other service", otherService, body, "InvalidSignatureException", "service"},
		{"not SigV4", notHeaderAuth, body, "InvalidSignatureException", "AWS4-HMAC-SHA256"},
		{"foreign host, validly signed", signed(t, http.MethodPost, "http://evil.example:51677/", "evil.example:51677", body, testKeys, "us-east-1", now), body,
			"AccessDeniedException", `"evil.example:51677" is not a loopback`},
		{"another host's name, validly signed", signed(t, http.MethodPost, "http://cp.example:51677/", "cp.example:51677", body, testKeys, "us-east-1", now), body,
			"AccessDeniedException", "serves its own host only"},
		{"private address", signed(t, http.MethodPost, "http://10.0.0.1:51677/", "10.0.0.1:51677", body, testKeys, "us-east-1", now), body,
			"AccessDeniedException", "not a loopback"},
		{"localhost look-alike", signed(t, http.MethodPost, "http://localhost.evil.example/", "localhost.evil.example", body, testKeys, "us-east-1", now), body,
			"AccessDeniedException", "not a loopback"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			err := v.Verify(c.req, c.body)
			require.NotNil(t, err)
			assert.Equal(t, c.typ, err.Type)
			assert.Contains(t, err.Message, c.contains)
			assert.GreaterOrEqual(t, err.Status, 400)
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for _, h := range []string{"localhost", "LOCALHOST", "localhost.", "127.0.0.1", "127.255.0.9", "::1", "[::1]", "::ffff:127.0.0.1"} {
		assert.True(t, IsLoopback(h), h)
	}
	for _, h := range []string{"", "0.0.0.0", "::", "10.0.0.1", "169.254.170.2", "localhost.example", "example.com", "127.0.0.1.nip.io"} {
		assert.False(t, IsLoopback(h), h)
	}
}

//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
	"github.com/berth-agent/berth/agent/logger"
)

const (
	ecrAccount  = "012345678901"
	ecrRegion   = "us-west-2"
	ecrPassword = "ecr-token-password-f00d"
)

// imdsStandIn speaks enough IMDSv2 for the SDK: a session token, the region and instance-role
// credentials. It counts every request.
type imdsStandIn struct {
	*httptest.Server
	requests atomic.Int64
}

func newIMDS(t *testing.T) *imdsStandIn {
	s := &imdsStandIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			fmt.Fprint(w, "imds-session-token")
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-session-token":
			http.Error(w, "missing token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/placement/region":
			fmt.Fprint(w, ecrRegion)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			fmt.Fprint(w, "berth-test-role")
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/berth-test-role":
			_ = json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "Type": "AWS-HMAC",
				"AccessKeyId": "AKIDEXAMPLE", "SecretAccessKey": "imds-secret-key", "Token": "imds-session",
				"Expiration": time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339), "LastUpdated": time.Now().UTC().Format(time.RFC3339)})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// ecrStandIn answers ecr:GetAuthorizationToken (AWS JSON 1.1) with a token for AWS:ecrPassword.
type ecrStandIn struct {
	*httptest.Server
	requests atomic.Int64
}

func newECR(t *testing.T) *ecrStandIn {
	s := &ecrStandIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.Header.Get("X-Amz-Target") != "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"UnknownOperationException","message":"unexpected target"}`)
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"__type":"MissingAuthenticationTokenException","message":"unsigned"}`)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		token := base64.StdEncoding.EncodeToString([]byte("AWS:" + ecrPassword))
		fmt.Fprintf(w, `{"authorizationData":[{"authorizationToken":%q,"expiresAt":%d,"proxyEndpoint":"https://%s.dkr.ecr.%s.amazonaws.com"}]}`,
			token, time.Now().Add(12*time.Hour).Unix(), ecrAccount, ecrRegion)
	}))
	t.Cleanup(s.Close)
	return s
}

var hostsMu sync.Mutex

// mapHost adds "127.0.0.1 name" to /etc/hosts for each name, for the test, so that the Docker Engine
// resolves an ECR-shaped registry name to a local registry (and, since it resolves to loopback, speaks
// plain HTTP). Go programs, the test's and dockerd, keep /etc/hosts for 5 s once read, so a test maps
// every name it needs in one call, before it resolves any.
func mapHost(t *testing.T, names ...string) {
	t.Helper()
	hostsMu.Lock()
	defer hostsMu.Unlock()
	const hosts = "/etc/hosts"
	orig, err := os.ReadFile(hosts)
	require.NoError(t, err)
	var lines []byte
	for _, name := range names {
		lines = append(lines, "127.0.0.1 "+name+" # berth-integration-test\n"...)
	}
	require.NoError(t, os.WriteFile(hosts, append(bytes.Clone(orig), lines...), 0o644))
	t.Cleanup(func() {
		hostsMu.Lock()
		defer hostsMu.Unlock()
		now, err := os.ReadFile(hosts)
		if err == nil {
			_ = os.WriteFile(hosts, bytes.ReplaceAll(now, lines, nil), 0o644)
		}
	})
	for _, name := range names {
		addrs, err := net.LookupHost(name)
		require.NoError(t, err)
		require.Contains(t, addrs, "127.0.0.1")
	}
}

// awsEnv points the AWS SDK at the stand-ins (or at a closed port) and away from the host's files.
func awsEnv(t *testing.T, imdsURL, ecrURL string, withStaticCreds bool) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imdsURL)
	t.Setenv("AWS_ENDPOINT_URL_ECR", ecrURL)
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if withStaticCreds {
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIDSTATIC")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "static-secret")
	} else {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		os.Unsetenv("AWS_SECRET_ACCESS_KEY")
	}
}

// closedURL returns an http URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func ecrConfig(t *testing.T, env ...string) *config.Result {
	t.Helper()
	res, err := config.Load(config.Sources{Environ: append([]string{"ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null"}, env...)})
	require.NoError(t, err)
	return res
}

// pushImage builds a small image and pushes it to the open local registry.
func pushImage(t *testing.T, dc *docker.Client, repo string) testregistry.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	img, err := testregistry.BuildAndPush(ctx, dc, testregistry.Addr, repo, fmt.Sprintf("run%d", time.Now().UnixNano()), 2, 256<<10)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dc.RemoveImageExtended(img.ID, docker.RemoveImageOptions{Force: true}) })
	return img
}

func dockerFromEnv(t *testing.T) *docker.Client {
	t.Helper()
	dc, err := docker.NewClientFromEnv()
	require.NoError(t, err)
	require.NoError(t, dc.Ping(), "the Docker Engine must answer (make test starts it)")
	return dc
}

// TestIntegrationECREndToEnd: an ECR image whose registry only accepts the password that the token
// from the ECR stand-in decodes to. IMDS gives the region and credentials; the Docker Engine pulls
// with the token; the token is fetched once and cached.
func TestIntegrationECREndToEnd(t *testing.T) {
	dc := dockerFromEnv(t)
	imds, ecr := newIMDS(t), newECR(t)
	awsEnv(t, imds.URL, ecr.URL, false)

	regAddr := testregistry.StartHtpasswd(t, "AWS", ecrPassword)
	_, port, err := net.SplitHostPort(regAddr)
	require.NoError(t, err)
	ecrHost := fmt.Sprintf("%s.dkr.ecr.%s.amazonaws.com", ecrAccount, ecrRegion)
	// The EKS system account's registry resolves to the same password-protected registry, so that
	// the subtest's pull reaches it (no DNS query leaves the host) and is refused at once.
	excludedHost := fmt.Sprintf("602401143452.dkr.ecr.%s.amazonaws.com", ecrRegion)
	mapHost(t, ecrHost, excludedHost)

	src := pushImage(t, dc, "berth-ecr-it")
	image := fmt.Sprintf("%s:%s/berth/app:v1", ecrHost, port)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, testregistry.Copy(ctx, dc, src.Ref, image,
		docker.AuthConfiguration{Username: "AWS", Password: ecrPassword, ServerAddress: ecrHost + ":" + port}))
	t.Cleanup(func() { _ = dc.RemoveImageExtended(image, docker.RemoveImageOptions{Force: true}) })

	var out, logs bytes.Buffer
	require.NoError(t, pull(ctx, ecrConfig(t), image, &out, &logs), "output: %s\nlogs: %s", out.String(), logs.String())
	assert.Contains(t, out.String(), "pulled "+image)
	assert.EqualValues(t, 1, ecr.requests.Load(), "one GetAuthorizationToken")
	assert.Positive(t, imds.requests.Load(), "region and credentials came from the IMDS stand-in")
	_, err = dc.InspectImage(image)
	assert.NoError(t, err, "the engine has the image")
	assert.NotContains(t, logs.String(), ecrPassword, "the token never reaches a log line")
	assert.NotContains(t, out.String(), ecrPassword)

	t.Run("excluded account gets no token request", func(t *testing.T) {
		before := ecr.requests.Load()
		var out, logs bytes.Buffer
		excluded := excludedHost + ":" + port + "/berth/app:v1"
		err := pull(ctx, ecrConfig(t), excluded, &out, &logs)
		require.Error(t, err, "the EKS system account is excluded by default, so the pull is anonymous and refused")
		assert.ErrorIs(t, err, dockerclient.ErrAuthRefused, "refused for want of credentials: %s", out.String())
		assert.Equal(t, 1, strings.Count(out.String(), "attempt "), "an auth refusal is not retried: %s", out.String())
		assert.Equal(t, before, ecr.requests.Load())
	})
}

// TestIntegrationNoAWSNoNoise: no AWS configured and no ECR image: no AWS call, no AWS log line.
func TestIntegrationNoAWSNoNoise(t *testing.T) {
	dc := dockerFromEnv(t)
	imds, ecr := newIMDS(t), newECR(t)
	awsEnv(t, imds.URL, ecr.URL, false)
	img := pushImage(t, dc, "berth-quiet-it")
	require.NoError(t, dc.RemoveImageExtended(img.ID, docker.RemoveImageOptions{Force: true}))

	var out, logs bytes.Buffer
	require.NoError(t, pull(t.Context(), ecrConfig(t, "ECS_LOGLEVEL=debug"), img.Ref, &out, &logs), logs.String())
	assert.Zero(t, imds.requests.Load())
	assert.Zero(t, ecr.requests.Load())
	for _, line := range strings.Split(logs.String(), "\n") {
		lower := strings.ToLower(line)
		for _, word := range []string{"aws", "ecr", "imds", "metadata"} {
			assert.NotContains(t, lower, word, "log line mentions AWS: %s", line)
		}
	}
}

// TestIntegrationAWSUnreachableWarnsOnce: five pulls of ECR-named images with AWS unreachable go on
// anonymously, with exactly one warning for the whole process.
func TestIntegrationAWSUnreachableWarnsOnce(t *testing.T) {
	dc := dockerFromEnv(t)
	ecr := newECR(t)
	awsEnv(t, closedURL(t), ecr.URL, false)
	ecrHost := fmt.Sprintf("%s.dkr.ecr.%s.amazonaws.com", ecrAccount, ecrRegion)
	mapHost(t, ecrHost)
	src := pushImage(t, dc, "berth-unreachable-it")
	_, tag, _ := strings.Cut(strings.TrimPrefix(src.Ref, testregistry.Addr+"/"), ":")
	image := fmt.Sprintf("%s:5000/berth-unreachable-it:%s", ecrHost, tag)
	require.NoError(t, dc.RemoveImageExtended(src.ID, docker.RemoveImageOptions{Force: true}))

	cfg := ecrConfig(t).Config
	var logs bytes.Buffer
	log, err := logger.New(cfg.Log, &logs)
	require.NoError(t, err)
	auth, err := app.NewRegistryAuth(t.Context(), cfg, log)
	require.NoError(t, err)
	client, err := app.NewDockerClient(cfg, log)
	require.NoError(t, err)
	defer client.Close()
	t.Cleanup(func() { _ = dc.RemoveImageExtended(image, docker.RemoveImageOptions{Force: true}) })

	for i := range 5 {
		_, err := client.PullImage(t.Context(), image, auth)
		require.NoError(t, err, "pull %d goes on anonymously from the open registry", i+1)
		require.NoError(t, dc.RemoveImageExtended(image, docker.RemoveImageOptions{Force: true}))
	}
	warnings := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=warn") && strings.Contains(strings.ToLower(line), "ecr") {
			warnings++
		}
	}
	assert.Equal(t, 1, warnings, "logs:\n%s", logs.String())
	assert.Zero(t, ecr.requests.Load())
}

//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/base64"
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
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
	"github.com/berth-agent/berth/agent/introspection"
)

// roleECR answers ecr:GetAuthorizationToken only for requests signed with a role key it knows (the
// access key of the SigV4 credential and its session token both match): with a token for
// AWS:password for an allowed role, AccessDeniedException for a denied one, and
// UnrecognizedClientException for any other key (the host's).
type roleECR struct {
	*httptest.Server
	password string

	mu      sync.Mutex
	allowed map[string]string // access key ID → session token
	denied  map[string]string
	allow   func(key, session string) bool // when set, also allows what it accepts (keys STS issued)
	keys    []string                       // the access key of every request, in order
}

// permit makes ECR answer the key and session token with a token (allowed) or AccessDeniedException.
func (s *roleECR) permit(key, session string, allowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if allowed {
		s.allowed[key] = session
	} else {
		s.denied[key] = session
	}
}

// permitIf makes ECR answer with a token whatever allow accepts.
func (s *roleECR) permitIf(allow func(key, session string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allow = allow
}

var credentialKey = regexp.MustCompile(`Credential=([^/]+)/[0-9]{8}/([^/]+)/ecr/aws4_request`)

func newRoleECR(t *testing.T, password string) *roleECR {
	s := &roleECR{password: password, allowed: map[string]string{}, denied: map[string]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		m := credentialKey.FindStringSubmatch(r.Header.Get("Authorization"))
		if r.Header.Get("X-Amz-Target") != "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" || m == nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"InvalidSignatureException","message":"not a signed GetAuthorizationToken"}`)
			return
		}
		key, session := m[1], r.Header.Get("X-Amz-Security-Token")
		s.mu.Lock()
		s.keys = append(s.keys, key)
		allowed := s.allowed[key] != "" && s.allowed[key] == session || s.allow != nil && s.allow(key, session)
		denied := s.denied[key] != "" && s.denied[key] == session
		s.mu.Unlock()
		switch {
		case allowed:
			token := base64.StdEncoding.EncodeToString([]byte("AWS:" + s.password))
			fmt.Fprintf(w, `{"authorizationData":[{"authorizationToken":%q,"expiresAt":%d,"proxyEndpoint":"https://%s.dkr.ecr.%s.amazonaws.com"}]}`,
				token, time.Now().Add(12*time.Hour).Unix(), ecrAccount, ecrRegion)
		case denied:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"AccessDeniedException","message":"the role may not call ecr:GetAuthorizationToken"}`)
		default:
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *roleECR) requestKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// copyToRegistry pushes the image src, which the engine has, as dst with auth and removes the dst
// name from the engine (src stays: other tests use it), so that the next pull of dst downloads it.
func copyToRegistry(t *testing.T, dc *docker.Client, src, dst string, auth docker.AuthConfiguration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	split := func(ref string) (string, string) { i := strings.LastIndexByte(ref, ':'); return ref[:i], ref[i+1:] }
	if _, err := dc.InspectImage(src); err != nil {
		repo, tag := split(src)
		require.NoError(t, dc.PullImage(docker.PullImageOptions{Context: ctx, Repository: repo, Tag: tag, OutputStream: io.Discard}, docker.AuthConfiguration{}))
	}
	repo, tag := split(dst)
	require.NoError(t, dc.TagImage(src, docker.TagImageOptions{Context: ctx, Repo: repo, Tag: tag}))
	// dockerd's resolver reads /etc/hosts again only once its copy is 5 s old: a name mapped just now
	// may not resolve at once.
	var err error
	require.Eventually(t, func() bool {
		err = dc.PushImage(docker.PushImageOptions{Context: ctx, Name: repo, Tag: tag, OutputStream: io.Discard}, auth)
		return err == nil || !strings.Contains(err.Error(), "no such host")
	}, 30*time.Second, 500*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, dc.RemoveImageExtended(dst, docker.RemoveImageOptions{Context: ctx}))
	t.Cleanup(func() { _ = dc.RemoveImageExtended(dst, docker.RemoveImageOptions{}) })
}

// TestIntegrationExecutionRoleECRPull runs the agent in ecs mode against a stand-in ACS whose payload
// asks for two ECR pulls with the task's execution role (registryAuthentication with
// useExecutionRole): the image lives in a registry on loopback reached by an ECR host name, which
// accepts only the password of the token the ECR stand-in gives to the execution role's key. The
// first task's role is allowed: the image is pulled with its token and the task runs. The second's
// role is refused by ECR: the task stops with a reason naming the image and the role. The host's own
// key is never used, and no secret reaches the log or berth.db.
func TestIntegrationExecutionRoleECRPull(t *testing.T) {
	dc := dockerFromEnv(t)
	password := "exec-ecr-password-" + randomHex(t, 6)
	ecr := newRoleECR(t, password)
	regAddr := testregistry.StartHtpasswd(t, "AWS", password)
	_, port, err := net.SplitHostPort(regAddr)
	require.NoError(t, err)
	ecrHost := fmt.Sprintf("%s.dkr.ecr.%s.amazonaws.com", ecrAccount, ecrRegion)
	mapHost(t, ecrHost)
	image := fmt.Sprintf("%s:%s/berth/exec:%s", ecrHost, port, randomHex(t, 4))
	copyToRegistry(t, dc, testappImage, image, docker.AuthConfiguration{Username: "AWS", Password: password, ServerAddress: ecrHost + ":" + port})

	srv := standInECS(t, "us-east-1")
	standIn := &scriptedACS{cp: srv.Handler(), out: make(chan acswire.Message, 8)}
	t.Cleanup(func() { close(standIn.out) })
	addr := serveLoopback(t, standIn)

	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	allowed := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::" + ecrAccount + ":role/exec",
		AccessKeyID: "ASIAEXEC" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "exec-secret-" + randomHex(t, 8),
		SessionToken: "exec-session-" + randomHex(t, 8), Expiration: expires}
	denied := acswire.IAMRoleCredentials{CredentialsID: randomHex(t, 16), RoleArn: "arn:aws:iam::" + ecrAccount + ":role/no-ecr",
		AccessKeyID: "ASIADENY" + strings.ToUpper(randomHex(t, 4)), SecretAccessKey: "deny-secret-" + randomHex(t, 8),
		SessionToken: "deny-session-" + randomHex(t, 8), Expiration: expires}
	ecr.permit(allowed.AccessKeyID, allowed.SessionToken, true)
	ecr.permit(denied.AccessKeyID, denied.SessionToken, false)

	auth := &acswire.RegistryAuthentication{Type: "ecr", ECRAuthData: &acswire.ECRAuthData{RegistryID: ecrAccount, Region: ecrRegion, UseExecutionRole: true}}
	payloadTask := func(family string, creds acswire.IAMRoleCredentials) *acswire.Task {
		c := creds
		return &acswire.Task{Arn: "arn:aws:ecs:us-east-1:000000000000:task/exec/" + randomHex(t, 16), Family: family, Version: "1",
			DesiredStatus: "RUNNING", ExecutionRoleCredentials: &c,
			Containers: []*acswire.Container{{Name: "app", Image: image, Memory: 16, Command: []string{"sleep"}, RegistryAuthentication: auth}}}
	}
	standIn.out <- &acswire.PayloadMessage{MessageID: "payload-1", SeqNum: 1, Tasks: []*acswire.Task{
		payloadTask("exec-pull", allowed), payloadTask("exec-denied", denied)}}

	env := newRecoveryEnv(t, buildBerth(t))
	logFile := filepath.Join(t.TempDir(), "berth.log")
	agent := env.start("AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://"+addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_ENDPOINT_URL_ECR="+ecr.URL,
		"ECS_IMAGE_PULL_BEHAVIOR=always", "ECS_LOGFILE="+logFile, "ECS_LOGLEVEL=debug")
	ts := agent.waitTasks(2*time.Minute, "one task runs and the other has stopped", func(ts []introspection.TaskResponse) bool {
		return familyRunning("exec-pull", 1)(ts) && familyStopped("exec-denied")(ts)
	})

	for _, tk := range ts {
		switch tk.Family {
		case "exec-pull":
			require.Len(t, tk.Containers, 1)
			assert.Equal(t, image, tk.Containers[0].Image)
			_, err := dc.InspectImage(image)
			assert.NoError(t, err, "the Docker Engine pulled the image with the execution role's token")
		case "exec-denied":
			for _, want := range []string{"CannotPullContainerError", image, denied.RoleArn, "AccessDeniedException"} {
				assert.Contains(t, tk.StoppedReason, want, "the reason names the image, the role and the cause")
			}
			t.Logf("stopped reason: %s", tk.StoppedReason)
		}
	}
	keys := ecr.requestKeys()
	assert.Contains(t, keys, allowed.AccessKeyID, "the allowed role's key asked ECR")
	assert.Contains(t, keys, denied.AccessKeyID, "the denied role's key asked ECR")
	assert.NotContains(t, keys, "berth-test", "the host's own key never asked ECR")
	for _, k := range keys {
		if k == allowed.AccessKeyID {
			assert.Equal(t, 1, count(keys, k), "one token for the allowed role: %v", keys)
		}
	}
	agent.stop()

	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	stateFile, err := os.ReadFile(filepath.Join(env.dataDir, "berth.db"))
	require.NoError(t, err)
	for _, secret := range []string{allowed.SecretAccessKey, allowed.SessionToken, denied.SecretAccessKey, denied.SessionToken,
		password, base64.StdEncoding.EncodeToString([]byte("AWS:" + password))} {
		assert.NotContains(t, string(logged), secret, "the log holds a secret")
		assert.NotContains(t, agent.out.String(), secret, "the console holds a secret")
		assert.False(t, bytes.Contains(stateFile, []byte(secret)), "berth.db holds a secret")
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// TestIntegrationExecutionRoleECRPullLocalMode: in local mode a static task definition with an
// executionRoleArn pulls its ECR image with that role, which the agent assumes with the host's
// credentials (an STS stand-in): the ECR stand-in gives the registry's token only to a key STS issued
// for the execution role, and the task runs. The host's own key never asks ECR.
func TestIntegrationExecutionRoleECRPullLocalMode(t *testing.T) {
	dc := dockerFromEnv(t)
	const execRoleArn = "arn:aws:iam::" + ecrAccount + ":role/exec-local"
	sts := &stsStandIn{issued: map[string]string{}}
	stsServer := &http.Server{Handler: sts}
	stsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stsServer.Serve(stsLn) }()
	t.Cleanup(func() { _ = stsServer.Close() })

	password := "exec-local-password-" + randomHex(t, 6)
	ecr := newRoleECR(t, password)
	ecr.permitIf(func(key, session string) bool { return sts.roleOf(key) == execRoleArn && session == "local-token-"+key })
	regAddr := testregistry.StartHtpasswd(t, "AWS", password)
	_, port, err := net.SplitHostPort(regAddr)
	require.NoError(t, err)
	ecrHost := fmt.Sprintf("%s.dkr.ecr.%s.amazonaws.com", ecrAccount, ecrRegion)
	mapHost(t, ecrHost)
	image := fmt.Sprintf("%s:%s/berth/exec-local:%s", ecrHost, port, randomHex(t, 4))
	copyToRegistry(t, dc, testappImage, image, docker.AuthConfiguration{Username: "AWS", Password: password, ServerAddress: ecrHost + ":" + port})

	env := newRecoveryEnv(t, buildBerth(t))
	def := fmt.Sprintf(`{"family": "exec-local", "executionRoleArn": %q, "containerDefinitions": [{"name": "app", "image": %q, "memory": 16, "command": ["sleep"]}]}`,
		execRoleArn, image)
	require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, "exec-local.json"), []byte(def), 0o600))
	agent := env.start("AWS_ENDPOINT_URL_STS=http://"+stsLn.Addr().String(), "AWS_ACCESS_KEY_ID=AKIAHOSTHOSTHOST0000",
		"AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_ENDPOINT_URL_ECR="+ecr.URL,
		"ECS_IMAGE_PULL_BEHAVIOR=always", "ECS_LOCAL_CONTROL_PLANE_ADDR="+freeAddr(t))
	agent.waitTasks(2*time.Minute, "the task runs", familyRunning("exec-local", 1))

	keys := ecr.requestKeys()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.Equal(t, execRoleArn, sts.roleOf(k), "ECR was asked with a key STS issued for the execution role, not %s", k)
	}
	_, err = dc.InspectImage(image)
	assert.NoError(t, err, "the Docker Engine pulled the image with the execution role's token")
	agent.stop()
	sts.mu.Lock()
	defer sts.mu.Unlock()
	for key := range sts.issued {
		assert.NotContains(t, agent.out.String(), "local-secret-"+key, "no secret in the log")
		assert.NotContains(t, agent.out.String(), "local-token-"+key, "no session token in the log")
	}
	assert.NotContains(t, agent.out.String(), password)
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the fake credentials endpoint hands out; the secret parts must never be printed.
const (
	roleKeyID   = "ASIAROLETESTAPP"
	roleSecret  = "role-secret-9b2f6c1d"
	roleToken   = "role-session-token-4e7a0b3c"
	credsPath   = "/v2/credentials/0123456789abcdef0123456789abcdef"
	callerArn   = "arn:aws:sts::012345678901:assumed-role/app/berth-4f1c2b3a"
	callerAcct  = "012345678901"
	awsIdentArg = "aws-identity"
)

// isolateAWS makes the SDK see no AWS configuration from the host: no shared files, no
// credentials, no region, no instance metadata. Tests then add what they need.
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
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE",
	} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_MAX_ATTEMPTS", "1") // failures answer at once, without the SDK's backoff
}

// fakeEndpoints stands in for the agent's credentials endpoint (the container credentials
// provider's side) and for STS (GetCallerIdentity in the query protocol).
type fakeEndpoints struct {
	creds, sts *httptest.Server

	mu        sync.Mutex
	credsGets int
	stsCalls  []*http.Request
	credsFail bool
	stsFail   bool
}

func newFakeEndpoints(t *testing.T) *fakeEndpoints {
	t.Helper()
	f := &fakeEndpoints{}
	f.creds = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.credsGets++
		fail := f.credsFail
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if fail || r.URL.Path != credsPath {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"code":"InvalidIdInRequest","message":"CredentialsV2Request: Credentials not found","HTTPErrorCode":400}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{
			"RoleArn":         "arn:aws:iam::012345678901:role/app",
			"AccessKeyId":     roleKeyID,
			"SecretAccessKey": roleSecret,
			"Token":           roleToken,
			"Expiration":      time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		})
	}))
	t.Cleanup(f.creds.Close)
	f.sts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		f.mu.Lock()
		f.stsCalls = append(f.stsCalls, r)
		fail := f.stsFail
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		if form.Get("Action") != "GetCallerIdentity" || form.Get("Version") != "2011-06-15" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code><Message>unexpected</Message></Error></ErrorResponse>`)
			return
		}
		if fail || !strings.Contains(r.Header.Get("Authorization"), "Credential="+roleKeyID+"/") ||
			r.Header.Get("X-Amz-Security-Token") != roleToken {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>The security token included in the request is invalid.</Message></Error>
  <RequestId>01234567-89ab-cdef-0123-456789abcdef</RequestId>
</ErrorResponse>`)
			return
		}
		fmt.Fprintf(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult>
    <Arn>%s</Arn>
    <UserId>AROA3XFRBF535PLBIFPI4:berth-4f1c2b3a</UserId>
    <Account>%s</Account>
  </GetCallerIdentityResult>
  <ResponseMetadata><RequestId>01234567-89ab-cdef-0123-456789abcdef</RequestId></ResponseMetadata>
</GetCallerIdentityResponse>`, callerArn, callerAcct)
	}))
	t.Cleanup(f.sts.Close)
	// The SDK allows only 169.254.170.2 for the RELATIVE form; FULL_URI may name a loopback server.
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f.creds.URL+credsPath)
	t.Setenv("AWS_ENDPOINT_URL_STS", f.sts.URL)
	return f
}

func (f *fakeEndpoints) counts() (credsGets, stsCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.credsGets, len(f.stsCalls)
}

func assertNoRoleSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{roleSecret, roleToken} {
		if strings.Contains(s, secret) {
			t.Errorf("%s leaks a secret: %q", what, s)
		}
	}
}

func TestAWSIdentityThroughTheContainerCredentialsProvider(t *testing.T) {
	isolateAWS(t)
	f := newFakeEndpoints(t)
	t.Setenv("AWS_REGION", "eu-west-1")

	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{awsIdentArg}, &stdout, &stderr); code != 0 {
		t.Fatalf("aws-identity exited %d (stderr %q)", code, stderr.String())
	}
	want := "AccessKeyId=" + roleKeyID + "\nCredentialsSource=CredentialsEndpointProvider\n" +
		"Account=" + callerAcct + "\nArn=" + callerArn + "\n"
	if stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	assertNoRoleSecrets(t, "stdout", stdout.String())
	if credsGets, stsCalls := f.counts(); credsGets != 1 || stsCalls != 1 {
		t.Errorf("credentials endpoint asked %d times, STS %d times; want 1 and 1", credsGets, stsCalls)
	}
	if auth := f.stsCalls[0].Header.Get("Authorization"); !strings.Contains(auth, "/eu-west-1/sts/aws4_request") {
		t.Errorf("STS request not signed for AWS_REGION's region: %q", auth)
	}
}

func TestAWSIdentityCredsOnly(t *testing.T) {
	isolateAWS(t)
	f := newFakeEndpoints(t)

	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{awsIdentArg, "-creds-only"}, &stdout, &stderr); code != 0 {
		t.Fatalf("aws-identity -creds-only exited %d (stderr %q)", code, stderr.String())
	}
	if want := "AccessKeyId=" + roleKeyID + "\nCredentialsSource=CredentialsEndpointProvider\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	if _, stsCalls := f.counts(); stsCalls != 0 {
		t.Errorf("-creds-only called STS %d times", stsCalls)
	}
}

func TestAWSIdentityFailures(t *testing.T) {
	for _, tt := range []struct {
		name       string
		args       []string
		setup      func(t *testing.T, f *fakeEndpoints)
		wantStderr string
	}{
		{"credentials endpoint refuses", []string{awsIdentArg},
			func(t *testing.T, f *fakeEndpoints) { f.credsFail = true }, "InvalidIdInRequest"},
		{"credentials endpoint refuses, creds only", []string{awsIdentArg, "-creds-only"},
			func(t *testing.T, f *fakeEndpoints) { f.credsFail = true }, "resolve AWS credentials"},
		{"STS refuses", []string{awsIdentArg},
			func(t *testing.T, f *fakeEndpoints) { f.stsFail = true }, "InvalidClientTokenId"},
		{"no credentials at all", []string{awsIdentArg}, func(t *testing.T, f *fakeEndpoints) {
			os.Unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
		}, "resolve AWS credentials"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			f := newFakeEndpoints(t)
			tt.setup(t, f)
			var stdout, stderr bytes.Buffer
			code := mainExit(tt.args, &stdout, &stderr)
			if code != 1 {
				t.Errorf("exited %d, want 1 (stdout %q, stderr %q)", code, stdout.String(), stderr.String())
			}
			if !strings.HasPrefix(stderr.String(), "testapp: ") || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to say %q", stderr.String(), tt.wantStderr)
			}
			assertNoRoleSecrets(t, "stdout", stdout.String())
			assertNoRoleSecrets(t, "stderr", stderr.String())
		})
	}
}

func TestMetadata(t *testing.T) {
	const token = "/v4/1f0b3c2a-5d4e-4f60-8a7b-9c8d7e6f5a4b"
	var paths []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case token:
			fmt.Fprint(w, `{"Name":"web"}`)
		case token + "/task":
			fmt.Fprint(w, `{"Family":"web"}`)
		case token + "/stats":
			fmt.Fprint(w, `{"id":"abc"}`+"\n")
		case token + "/task/stats":
			fmt.Fprint(w, `{"abc":{"id":"abc"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "%q\n", "V4 container metadata handler: unable to get task arn from request")
		}
	}))
	defer srv.Close()
	t.Setenv(metadataEnv, srv.URL+token)

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"metadata"}, `{"Name":"web"}` + "\n"},
		{[]string{"metadata", "-path", "task"}, `{"Family":"web"}` + "\n"},
		{[]string{"metadata", "-path", "stats"}, `{"id":"abc"}` + "\n"},
		{[]string{"metadata", "-path", "/task/stats"}, `{"abc":{"id":"abc"}}` + "\n"},
	} {
		var stdout, stderr bytes.Buffer
		if code := mainExit(tt.args, &stdout, &stderr); code != 0 || stdout.String() != tt.want {
			t.Errorf("%q: exit %d, stdout %q (stderr %q); want 0 and %q", tt.args, code, stdout.String(), stderr.String(), tt.want)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{"metadata", "-path", "nope"}, &stdout, &stderr); code != 1 ||
		stdout.Len() > 0 || !strings.Contains(stderr.String(), "404") || !strings.Contains(stderr.String(), "unable to get task arn") {
		t.Errorf("a 404: exit %d, stdout %q, stderr %q; want 1, nothing, the status and the body", code, stdout.String(), stderr.String())
	}

	t.Setenv(metadataEnv, "")
	stderr.Reset()
	if code := mainExit([]string{"metadata"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), metadataEnv) {
		t.Errorf("without %s: exit %d, stderr %q; want 1 naming the variable", metadataEnv, code, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{token, token + "/task", token + "/stats", token + "/task/stats", token + "/nope"}; strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("paths asked = %q, want %q", paths, want)
	}
}

// TestOtelECS: otel-ecs prints what OpenTelemetry's detector makes of a v4 endpoint.
func TestOtelECS(t *testing.T) {
	const token = "/v4/abc"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case token:
			fmt.Fprint(w, `{"Name":"web","ContainerARN":"arn:aws:ecs:eu-west-1:111122223333:container/default/t1/c1","LogDriver":"awslogs",
				"LogOptions":{"awslogs-group":"g","awslogs-region":"eu-west-1","awslogs-stream":"s"}}`)
		case token + "/task":
			fmt.Fprint(w, `{"Cluster":"default","TaskARN":"arn:aws:ecs:eu-west-1:111122223333:task/default/t1","Family":"web","Revision":"4","LaunchType":"EC2"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	t.Setenv(metadataEnv, srv.URL+token)
	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{"otel-ecs"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, want := range []string{
		"aws.ecs.container.arn=arn:aws:ecs:eu-west-1:111122223333:container/default/t1/c1",
		"cloud.resource_id=arn:aws:ecs:eu-west-1:111122223333:container/default/t1/c1",
		"aws.ecs.cluster.arn=arn:aws:ecs:eu-west-1:111122223333:cluster/default",
		"aws.ecs.launchtype=ec2",
		"aws.ecs.task.family=web",
		`aws.log.group.names=["g"]`,
		"cloud.account.id=111122223333",
	} {
		if !strings.Contains(stdout.String(), want+"\n") {
			t.Errorf("no %q in\n%s", want, stdout.String())
		}
	}
}

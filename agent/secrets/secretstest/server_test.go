package secretstest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/secrets/secretstest"
)

const auth = "AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-west-2/ssm/aws4_request, SignedHeaders=host, Signature=00"

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func jsonRequest(t *testing.T, s *secretstest.Server, target, body string, signed bool) *http.Request {
	req, err := http.NewRequest(http.MethodPost, s.URL+"/", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	if signed {
		req.Header.Set("Authorization", auth)
	}
	return req
}

func TestUnsignedRequestsAreRefused(t *testing.T) {
	s := secretstest.New(t)
	s.PutObject("bucket", "k", []byte("A=1"))
	status, body := do(t, jsonRequest(t, s, "AmazonSSM.GetParameters", `{"Names":["a"]}`, false))
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `"__type":"MissingAuthenticationTokenException"`)

	req, err := http.NewRequest(http.MethodGet, s.URL+"/bucket/k", nil)
	require.NoError(t, err)
	status, body = do(t, req)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "<Code>AccessDenied</Code>")
	assert.Empty(t, s.AccessKeys())
}

func TestGetParametersWire(t *testing.T) {
	s := secretstest.New(t)
	s.PutParameter("/a", "va")
	status, body := do(t, jsonRequest(t, s, "AmazonSSM.GetParameters", `{"Names":["/a","arn:aws:ssm:us-west-2:123456789012:parameter/a","/b"],"WithDecryption":true}`, true))
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"Name":"/a"`)
	assert.Contains(t, body, `"ARN":"arn:aws:ssm:us-west-2:123456789012:parameter/a"`)
	assert.Contains(t, body, `"Value":"va"`)
	assert.Contains(t, body, `"InvalidParameters":["/b"]`)

	status, body = do(t, jsonRequest(t, s, "AmazonSSM.GetParameters", `{"Names":["1","2","3","4","5","6","7","8","9","10","11"]}`, true))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `"__type":"ValidationException"`)
	assert.Equal(t, []secretstest.Call{
		{Operation: "GetParameters", AccessKeyID: "AKIDTEST", Region: "us-west-2", Names: 3},
		{Operation: "GetParameters", AccessKeyID: "AKIDTEST", Region: "us-west-2", Names: 11},
	}, s.Calls())
}

func TestSecretVersions(t *testing.T) {
	s := secretstest.New(t)
	s.PutSecret("db", "one")
	s.PutSecret("db", "two")
	s.PutSecret("db", "three", "AWSPENDING")
	for stage, want := range map[string]string{"": "two", "AWSCURRENT": "two", "AWSPREVIOUS": "one", "AWSPENDING": "three"} {
		status, body := do(t, jsonRequest(t, s, "secretsmanager.GetSecretValue", `{"SecretId":"db","VersionStage":"`+stage+`"}`, true))
		assert.Equal(t, http.StatusOK, status, stage)
		assert.Contains(t, body, `"SecretString":"`+want+`"`, stage)
		assert.Contains(t, body, `"ARN":"arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf"`)
	}
	status, body := do(t, jsonRequest(t, s, "secretsmanager.GetSecretValue", `{"SecretId":"nope"}`, true))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `"__type":"ResourceNotFoundException"`)
}

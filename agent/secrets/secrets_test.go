package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/secrets"
	"github.com/berth-agent/berth/agent/secrets/secretstest"
)

const taskKey = "AKIDTASKEXECUTION"

var taskCreds = credentials.NewStaticCredentialsProvider(taskKey, "task-secret-access-key", "task-session-token")

// noBackoff makes the SDK's retries immediate.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// setup starts a stand-in, points the SDK at it and shields the test from the host's AWS
// configuration.
func setup(t *testing.T) (*secretstest.Server, *secrets.Fetcher) {
	t.Helper()
	srv := secretstest.New(t)
	srv.PointSDK(t)
	f, err := secrets.New(secrets.Config{Region: "us-east-1", Backoff: noBackoff{}})
	require.NoError(t, err)
	return srv, f
}

// secretErr asserts err is an *Error with code and returns it.
func secretErr(t *testing.T, err error, code string) *secrets.Error {
	t.Helper()
	var e *secrets.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, code, e.Code, "error: %v", err)
	return e
}

func TestResolveSSM(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/app/db", "db-password")
	srv.PutParameter("plain", "plain-value")
	srv.PutParameter("/app/region", "eu-value")

	got, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{
		{Name: "DB_PASS", ValueFrom: "/app/db"},
		{Name: "PLAIN", ValueFrom: "plain", Provider: secrets.ProviderSSM},
		{Name: "FROM_ARN", ValueFrom: "arn:aws:ssm:eu-west-1:123456789012:parameter/app/region"},
		{Name: "PLAIN_AGAIN", ValueFrom: "plain"},
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"DB_PASS": "db-password", "PLAIN": "plain-value", "FROM_ARN": "eu-value", "PLAIN_AGAIN": "plain-value",
	}, got)

	regions := map[string]int{}
	for _, c := range srv.Calls() {
		assert.Equal(t, "GetParameters", c.Operation)
		regions[c.Region] += c.Names
	}
	assert.Equal(t, map[string]int{"us-east-1": 2, "eu-west-1": 1}, regions, "names per region; a repeated valueFrom is asked once")
}

func TestResolveSSMBatches(t *testing.T) {
	srv, f := setup(t)
	var refs []secrets.Ref
	for i := range 25 {
		name := fmt.Sprintf("/batch/p%02d", i)
		srv.PutParameter(name, fmt.Sprintf("value-%02d", i))
		refs = append(refs, secrets.Ref{Name: fmt.Sprintf("P%02d", i), ValueFrom: name})
	}
	got, err := f.Resolve(context.Background(), taskCreds, refs)
	require.NoError(t, err)
	require.Len(t, got, 25)
	assert.Equal(t, "value-24", got["P24"])

	calls := srv.Calls()
	require.Len(t, calls, 3)
	total := 0
	for _, c := range calls {
		assert.LessOrEqual(t, c.Names, 10)
		total += c.Names
	}
	assert.Equal(t, 25, total)
}

func TestResolveSSMNotFound(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/app/db", "db-password-value")

	got, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{
		{Name: "DB_PASS", ValueFrom: "/app/db"},
		{Name: "MISSING", ValueFrom: "/app/missing"},
	})
	assert.Nil(t, got)
	e := secretErr(t, err, secrets.CodeParameterNotFound)
	assert.Equal(t, "secret MISSING (valueFrom /app/missing)", e.Secret)
	assert.True(t, strings.HasPrefix(err.Error(), "secret MISSING (valueFrom /app/missing): ParameterNotFound: "), err.Error())
	assert.NotContains(t, err.Error(), "db-password-value")
	assert.False(t, e.Retry())
	assert.False(t, errdefs.IsRetriable(err))
}

func TestResolveSecretsManager(t *testing.T) {
	srv, f := setup(t)
	const arn = "arn:aws:secretsmanager:us-west-2:123456789012:secret:prod/db-AbCdEf"
	srv.PutSecret(arn, `{"user":"admin","pass":"old-pass","port":5432}`)
	srv.PutSecret(arn, `{"user":"admin","pass":"new-pass","port":5432}`)
	srv.PutSecret(arn, `{"user":"admin","pass":"next-pass"}`, "AWSPENDING")
	srv.PutSecret("plain-secret", "plain-secret-value")
	srv.PutSecret("not-json", "this is not json, it is the-secret-text")

	ok := []struct {
		name, valueFrom, want string
	}{
		{"full ARN", arn, `{"user":"admin","pass":"new-pass","port":5432}`},
		{"name", "plain-secret", "plain-secret-value"},
		{"json-key", arn + ":pass::", "new-pass"},
		{"json-key without the trailing fields", arn + ":user", "admin"},
		{"version-stage", arn + ":pass:AWSPREVIOUS:", "old-pass"},
		{"version-stage without json-key", arn + "::AWSPENDING:", `{"user":"admin","pass":"next-pass"}`},
		{"version-id", arn + ":pass::00000000-0000-4000-8000-000000000001", "old-pass"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "V", ValueFrom: tc.valueFrom, Provider: providerFor(tc.valueFrom)}})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got["V"])
		})
	}

	bad := []struct {
		name, valueFrom, code string
	}{
		{"json-key missing", arn + ":nope::", secrets.CodeJSONKeyNotFound},
		{"json-key not a string", arn + ":port::", secrets.CodeJSONKeyNotString},
		{"not JSON", "arn:aws:secretsmanager:us-east-1:123456789012:secret:not-json-AbCdEf:key::", secrets.CodeNotJSONObject},
		{"no such secret", "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf", "ResourceNotFoundException"},
		{"no such stage", arn + ":pass:NOPE:", "ResourceNotFoundException"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "DB_PASS", ValueFrom: tc.valueFrom}})
			e := secretErr(t, err, tc.code)
			assert.Equal(t, "secret DB_PASS (valueFrom "+tc.valueFrom+")", e.Secret)
			for _, v := range []string{"new-pass", "old-pass", "the-secret-text", "5432"} {
				assert.NotContains(t, err.Error(), v)
			}
			assert.False(t, e.Retry())
		})
	}
}

// providerFor gives names the asm provider and leaves ARNs to be recognised.
func providerFor(valueFrom string) string {
	if strings.HasPrefix(valueFrom, "arn:") {
		return ""
	}
	return secrets.ProviderASM
}

func TestResolveSecretsManagerRegion(t *testing.T) {
	srv, f := setup(t)
	srv.PutSecret("arn:aws:secretsmanager:ap-south-1:123456789012:secret:s-AbCdEf", "v")
	srv.PutSecret("named", "w")
	got, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{
		{Name: "A", ValueFrom: "arn:aws:secretsmanager:ap-south-1:123456789012:secret:s-AbCdEf"},
		{Name: "B", ValueFrom: "named", Provider: secrets.ProviderASM, Region: "ca-central-1"},
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "v", "B": "w"}, got)
	var regions []string
	for _, c := range srv.Calls() {
		regions = append(regions, c.Region)
	}
	assert.ElementsMatch(t, []string{"ap-south-1", "ca-central-1"}, regions)
}

func TestResolveInvalidRefs(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/ok", "ok")
	cases := []struct {
		name string
		refs []secrets.Ref
	}{
		{"empty name", []secrets.Ref{{ValueFrom: "/ok"}}},
		{"name with =", []secrets.Ref{{Name: "A=B", ValueFrom: "/ok"}}},
		{"empty valueFrom", []secrets.Ref{{Name: "A"}}},
		{"valueFrom with a space", []secrets.Ref{{Name: "A", ValueFrom: "/o k"}}},
		{"unknown provider", []secrets.Ref{{Name: "A", ValueFrom: "/ok", Provider: "vault"}}},
		{"short ARN", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:ssm:us-east-1"}}},
		{"ssm provider, Secrets Manager ARN", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:secretsmanager:us-east-1:123456789012:secret:x", Provider: "ssm"}}},
		{"ARN of another service", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:s3:::bucket/key"}}},
		{"asm name with a colon", []secrets.Ref{{Name: "A", ValueFrom: "name:key", Provider: "asm"}}},
		{"asm ARN with five suffix fields", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:secretsmanager:us-east-1:123456789012:secret:x:a:b:c:d"}}},
		{"asm ARN without a name", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:secretsmanager:us-east-1:123456789012:secret::key"}}},
		{"bad region", []secrets.Ref{{Name: "A", ValueFrom: "/ok", Region: "US EAST"}}},
		{"bad ARN region", []secrets.Ref{{Name: "A", ValueFrom: "arn:aws:ssm:Mars:123456789012:parameter/ok"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refs := append([]secrets.Ref{{Name: "OK", ValueFrom: "/ok"}}, tc.refs...)
			_, err := f.Resolve(context.Background(), taskCreds, refs)
			e := secretErr(t, err, secrets.CodeInvalidReference)
			assert.False(t, e.Retry())
		})
	}
	_, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "A", ValueFrom: "/ok"}, {Name: "A", ValueFrom: "/ok"}})
	secretErr(t, err, secrets.CodeDuplicateName)
	assert.Empty(t, srv.Calls(), "nothing is fetched when a ref is invalid")
}

func TestResolveHugeValueFromIsRefusedQuickly(t *testing.T) {
	srv, f := setup(t)
	huge := "/" + strings.Repeat("a", 1<<20)
	start := time.Now()
	for _, r := range []secrets.Ref{
		{Name: "HUGE", ValueFrom: huge},
		{Name: "HUGE", ValueFrom: "arn:aws:secretsmanager:us-east-1:1:secret:" + strings.Repeat("x:", 1<<19)},
		{Name: strings.Repeat("N", 1<<20), ValueFrom: "/ok"},
	} {
		_, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{r})
		secretErr(t, err, secrets.CodeInvalidReference)
		assert.Less(t, len(err.Error()), 512, "the error does not repeat the input")
	}
	_, err := f.EnvFiles(context.Background(), taskCreds, []string{"arn:aws:s3:::bucket/" + strings.Repeat("k", 1<<20)})
	secretErr(t, err, secrets.CodeInvalidReference)
	_, _, err = f.RegistryCredentials(context.Background(), taskCreds, huge, "")
	secretErr(t, err, secrets.CodeInvalidReference)
	assert.Less(t, time.Since(start), time.Second)
	assert.Empty(t, srv.Calls())
}

func TestEnvFiles(t *testing.T) {
	srv, f := setup(t)
	srv.PutObject("my-bucket", "app/one.env", []byte("# first\nA=1\nB=one=two\n\nC=c1\nA=1b\n"))
	srv.PutObject("my-bucket", "app/two.env", []byte("B=from-two\nD=\"quoted\"\r\n"))
	srv.PutObject("my-bucket", "bad.env", []byte("A=1\n# fine\nTHE-SECRET-LINE\n"))

	got, err := f.EnvFiles(context.Background(), taskCreds, []string{
		"arn:aws:s3:::my-bucket/app/one.env",
		"arn:aws-cn:s3:::my-bucket/app/two.env",
	})
	require.NoError(t, err)
	assert.Equal(t, []secrets.KeyValue{
		{Name: "A", Value: "1b"},      // a later line of the same file wins
		{Name: "B", Value: "one=two"}, // the first file wins over the second
		{Name: "C", Value: "c1"},
		{Name: "D", Value: `"quoted"`},
	}, got)

	_, err = f.EnvFiles(context.Background(), taskCreds, []string{"arn:aws:s3:::my-bucket/bad.env"})
	e := secretErr(t, err, secrets.CodeMalformedEnvFile)
	assert.Equal(t, "environment file arn:aws:s3:::my-bucket/bad.env", e.Secret)
	assert.Contains(t, err.Error(), "line 3")
	assert.NotContains(t, err.Error(), "THE-SECRET-LINE")

	_, err = f.EnvFiles(context.Background(), taskCreds, []string{"arn:aws:s3:::my-bucket/app/one.env", "arn:aws:s3:::my-bucket/nope.env"})
	e = secretErr(t, err, "NoSuchKey")
	assert.Equal(t, "environment file arn:aws:s3:::my-bucket/nope.env", e.Secret)
	assert.False(t, e.Retry())

	for _, a := range []string{"arn:aws:s3:::my-bucket", "arn:aws:s3:::my-bucket/", "arn:aws:s3:us-east-1::my-bucket/k", "arn:aws:s3:::B/k", "s3://my-bucket/k"} {
		_, err = f.EnvFiles(context.Background(), taskCreds, []string{a})
		secretErr(t, err, secrets.CodeInvalidReference)
	}
}

func TestRegistryCredentials(t *testing.T) {
	srv, f := setup(t)
	const arn = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:registry-AbCdEf"
	srv.PutSecret(arn, `{"username":"robot","password":"registry-pass"}`)
	srv.PutSecret("no-password", `{"username":"robot"}`)
	srv.PutSecret("number-password", `{"username":"robot","password":1234}`)

	user, pass, err := f.RegistryCredentials(context.Background(), taskCreds, arn, "")
	require.NoError(t, err)
	assert.Equal(t, "robot", user)
	assert.Equal(t, "registry-pass", pass)
	assert.Equal(t, "eu-central-1", srv.Calls()[0].Region)

	user, _, err = f.RegistryCredentials(context.Background(), taskCreds, "registry", "eu-central-1")
	require.NoError(t, err)
	assert.Equal(t, "robot", user)

	for _, p := range []string{"no-password", "number-password"} {
		_, _, err = f.RegistryCredentials(context.Background(), taskCreds, p, "")
		e := secretErr(t, err, secrets.CodeInvalidRegistryCredentials)
		assert.Equal(t, "repository credentials "+p, e.Secret)
	}
	_, _, err = f.RegistryCredentials(context.Background(), taskCreds, arn+":password::", "")
	secretErr(t, err, secrets.CodeInvalidReference)
	_, _, err = f.RegistryCredentials(context.Background(), taskCreds, "gone", "")
	secretErr(t, err, "ResourceNotFoundException")
}

func TestDenied(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/p", "v")
	srv.PutSecret("s", "v")
	srv.PutObject("bucket", "f.env", []byte("A=1\n"))
	srv.Deny("AKIDDENIED")
	denied := credentials.NewStaticCredentialsProvider("AKIDDENIED", "x", "")

	_, err := f.Resolve(context.Background(), denied, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	e := secretErr(t, err, "AccessDeniedException")
	assert.False(t, e.Retry())
	_, err = f.Resolve(context.Background(), denied, []secrets.Ref{{Name: "S", ValueFrom: "s", Provider: "asm"}})
	e = secretErr(t, err, "AccessDeniedException")
	assert.False(t, e.Retry())
	_, err = f.EnvFiles(context.Background(), denied, []string{"arn:aws:s3:::bucket/f.env"})
	e = secretErr(t, err, "AccessDenied")
	assert.False(t, e.Retry())
	assert.True(t, errdefs.IsUnauthorized(err), "the class comes with AWS's code")
	assert.Len(t, srv.Calls(), 3, "refusals are not retried")

	// The same fetcher still works with other credentials.
	_, err = f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	require.NoError(t, err)
}

func TestServerErrorsAreRetried(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/p", "v")
	srv.PutObject("bucket", "f.env", []byte("A=1\n"))

	srv.FailNext(2)
	got, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	require.NoError(t, err, "the third attempt succeeds")
	assert.Equal(t, "v", got["P"])

	srv.FailNext(3)
	_, err = f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	e := secretErr(t, err, "InternalServerError")
	assert.True(t, e.Retry())
	assert.True(t, errdefs.IsRetriable(err))

	srv.FailNext(3)
	_, err = f.EnvFiles(context.Background(), taskCreds, []string{"arn:aws:s3:::bucket/f.env"})
	e = secretErr(t, err, "InternalError")
	assert.True(t, e.Retry())
	assert.Len(t, srv.Calls(), 9)
}

func TestUnreachableIsRetriable(t *testing.T) {
	setup(t)
	t.Setenv("AWS_ENDPOINT_URL_SSM", "http://127.0.0.1:1")
	f, err := secrets.New(secrets.Config{Region: "us-east-1", Backoff: noBackoff{}, CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	e := secretErr(t, err, secrets.CodeRequestFailed)
	assert.True(t, e.Retry(), "%#v", e.Err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.Resolve(ctx, taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	e = secretErr(t, err, secrets.CodeRequestFailed)
	assert.False(t, e.Retry(), "the caller's cancellation is not retried")
}

func TestRequestsAreSignedWithTheGivenCredentials(t *testing.T) {
	srv, f := setup(t)
	srv.PutParameter("/p", "v")
	srv.PutSecret("s", "v")
	srv.PutObject("bucket", "f.env", []byte("A=1\n"))
	other := credentials.NewStaticCredentialsProvider("AKIDOTHERTASK", "y", "")

	_, err := f.Resolve(context.Background(), taskCreds, []secrets.Ref{{Name: "P", ValueFrom: "/p"}, {Name: "S", ValueFrom: "s", Provider: "asm"}})
	require.NoError(t, err)
	_, err = f.EnvFiles(context.Background(), taskCreds, []string{"arn:aws:s3:::bucket/f.env"})
	require.NoError(t, err)
	_, err = f.Resolve(context.Background(), other, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	require.NoError(t, err)
	assert.Equal(t, []string{taskKey, taskKey, taskKey, "AKIDOTHERTASK"}, srv.AccessKeys())
}

func TestNoCredentials(t *testing.T) {
	_, f := setup(t)
	_, err := f.Resolve(context.Background(), nil, []secrets.Ref{{Name: "P", ValueFrom: "/p"}})
	assert.True(t, errdefs.IsInvalidArgument(err))
	var nilCreds aws.CredentialsProvider
	_, err = f.EnvFiles(context.Background(), nilCreds, nil)
	assert.True(t, errdefs.IsInvalidArgument(err))
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, err := secrets.New(secrets.Config{Region: "not a region"})
	assert.True(t, errdefs.IsInvalidArgument(err))
	_, err = secrets.New(secrets.Config{CallTimeout: -time.Second})
	assert.True(t, errdefs.IsInvalidArgument(err))
}

func TestErrorUnwraps(t *testing.T) {
	cause := errors.New("cause")
	e := &secrets.Error{Secret: "secret A (valueFrom /a)", Code: "X", Err: cause}
	assert.ErrorIs(t, e, cause)
	assert.Equal(t, "secret A (valueFrom /a): X: cause", e.Error())
}

// TestFile: a configuration file is fetched as is with the credentials given; a missing object, a
// bad ARN and a file over MaxFileSize are *Error naming the file.
func TestFile(t *testing.T) {
	srv, f := setup(t)
	body := "[INPUT]\n    Name dummy\n\n@INCLUDE other.conf\n"
	srv.PutObject("conf-bucket", "fluent/extra.conf", []byte(body))
	srv.PutObject("conf-bucket", "huge.conf", []byte(strings.Repeat("x", secrets.MaxFileSize+1)))

	got, err := f.File(context.Background(), taskCreds, "firelens configuration file", "arn:aws:s3:::conf-bucket/fluent/extra.conf")
	require.NoError(t, err)
	assert.Equal(t, body, string(got))
	for _, k := range srv.AccessKeys() {
		assert.Equal(t, taskKey, k)
	}

	_, err = f.File(context.Background(), taskCreds, "firelens configuration file", "arn:aws:s3:::conf-bucket/nope.conf")
	e := secretErr(t, err, "NoSuchKey")
	assert.Equal(t, "firelens configuration file arn:aws:s3:::conf-bucket/nope.conf", e.Secret)

	_, err = f.File(context.Background(), taskCreds, "firelens configuration file", "arn:aws:s3:::conf-bucket/huge.conf")
	secretErr(t, err, secrets.CodeFileTooLarge)

	_, err = f.File(context.Background(), taskCreds, "firelens configuration file", "s3://conf-bucket/k")
	secretErr(t, err, secrets.CodeInvalidReference)
}

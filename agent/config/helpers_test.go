package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// secret is a credential the tests put in ECS_ENGINE_AUTH_DATA and look for in every output.
const secret = "s3cr3t-Pa55"

// authData is a valid ECS_ENGINE_AUTH_DATA value holding the secret.
const authData = `{"https://index.docker.io/v1/":{"username":"u","password":"` + secret + `"}}`

// files are an env file and a JSON file in a test's temporary directory, so that the host's /etc/ecs
// is never read.
type files struct {
	dir, env, json string
}

// newFiles writes the env file and the JSON file (either may be empty) into t.TempDir.
func newFiles(t *testing.T, envFile, jsonFile string) files {
	t.Helper()
	dir := t.TempDir()
	f := files{dir: dir, env: filepath.Join(dir, "ecs.config"), json: filepath.Join(dir, "ecs.config.json")}
	require.NoError(t, os.WriteFile(f.env, []byte(envFile), 0o600))
	require.NoError(t, os.WriteFile(f.json, []byte(jsonFile), 0o600))
	return f
}

// environ returns a minimal process environment that points at the test's files, plus kv.
func (f files) environ(kv ...string) []string {
	return append([]string{keyEnvFile + "=" + f.env, keyJSONFile + "=" + f.json}, kv...)
}

// load runs Load on the test's files with a constructed environment.
func (f files) load(flags map[string]string, kv ...string) (*Result, error) {
	return Load(Sources{Environ: f.environ(kv...), Flags: flags})
}

// mustLoad loads and fails the test on an error.
func (f files) mustLoad(t *testing.T, flags map[string]string, kv ...string) *Result {
	t.Helper()
	res, err := f.load(flags, kv...)
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

// flatten returns the errors joined into err (errors.Join), depth first.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// requireConfigErrors checks the contract of every error Load returns: it matches ErrInvalid, and each
// joined error is a *Error that itself matches ErrInvalid. It returns the *Errors.
func requireConfigErrors(t *testing.T, err error) []*Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	var out []*Error
	for _, e := range flatten(err) {
		var ce *Error
		require.ErrorAs(t, e, &ce, "joined error %q is not a *config.Error", e)
		require.ErrorIs(t, e, ErrInvalid)
		require.True(t, errdefs.IsInvalidArgument(e), "joined error %q is not an errdefs.ErrInvalidArgument", e)
		require.False(t, errdefs.IsRetriable(e))
		out = append(out, ce)
	}
	return out
}

// keyError returns the *Error about key, failing the test if there is none.
func keyError(t *testing.T, err error, key string) *Error {
	t.Helper()
	for _, ce := range requireConfigErrors(t, err) {
		if ce.Key == key {
			return ce
		}
	}
	require.Failf(t, "no error for key", "key %s; errors: %v", key, err)
	return nil
}

// warningFor returns the warning about key, or nil.
func warningFor(res *Result, key string) *Warning {
	for i := range res.Warnings {
		if res.Warnings[i].Key == key {
			return &res.Warnings[i]
		}
	}
	return nil
}

// cidrs formats routes for comparison.
func cidrs(routes []cnitypes.IPNet) []string {
	out := make([]string, len(routes))
	for i, r := range routes {
		out[i] = (&net.IPNet{IP: r.IP, Mask: r.Mask}).String()
	}
	return out
}

// requireNoSecret asserts the secret appears in none of Load's outputs: the error, the warnings, Show
// (as JSON), and the Config printed with fmt.
func requireNoSecret(t *testing.T, res *Result, err error) {
	t.Helper()
	if err != nil {
		require.NotContains(t, err.Error(), secret)
		for _, e := range flatten(err) {
			require.NotContains(t, e.Error(), secret)
		}
	}
	if res == nil {
		return
	}
	for _, w := range res.Warnings {
		require.NotContains(t, w.String(), secret)
		require.NotContains(t, w.Msg, secret)
	}
	shown, mErr := json.Marshal(res.Show())
	require.NoError(t, mErr)
	require.NotContains(t, string(shown), secret)
	require.False(t, strings.Contains(sprintAll(res.Config), secret), "Config printed with fmt holds the secret")
}

// errorsAs is errors.As for a target type, for use in table tests.
func errorsAs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// sprintAll prints v in every way a log line might.
func sprintAll(v any) string {
	return fmt.Sprintf("%v|%+v|%#v|%s", v, v, v, v)
}

package execagent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// makeDeps lays out a dependencies directory: the CA bundle (unless noCert) and, for each version,
// the files named (all three binaries when files is nil), executable.
func makeDeps(t *testing.T, noCert bool, versions map[string][]string) string {
	t.Helper()
	deps := t.TempDir()
	if !noCert {
		require.NoError(t, os.MkdirAll(filepath.Join(deps, "certs"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(deps, "certs", "tls-ca-bundle.pem"), []byte("ca"), 0o600))
	}
	for v, files := range versions {
		dir := filepath.Join(deps, "bin", v)
		require.NoError(t, os.MkdirAll(dir, 0o700))
		if files == nil {
			files = []string{"amazon-ssm-agent", "ssm-agent-worker", "ssm-session-worker"}
		}
		for _, f := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/true\n"), 0o700))
		}
	}
	return deps
}

func TestDiscoverNewestCompleteVersion(t *testing.T) {
	deps := makeDeps(t, false, map[string][]string{
		"3.0.236.0":  nil,
		"3.0.1209.0": nil,                                      // newer than 3.0.236.0 by number, older by string
		"3.3":        {"amazon-ssm-agent", "ssm-agent-worker"}, // newest, incomplete
		"latest":     nil,                                      // not a version: skipped
	})
	b, err := Discover(deps)
	require.NoError(t, err)
	assert.Equal(t, Binaries{Version: "3.0.1209.0", Dir: filepath.Join(deps, "bin", "3.0.1209.0"),
		Cert: filepath.Join(deps, "certs", "tls-ca-bundle.pem")}, b)
}

func TestDiscoverNamesTheBrokenFile(t *testing.T) {
	notExec := makeDeps(t, false, map[string][]string{"3.1.0.0": nil})
	require.NoError(t, os.Chmod(filepath.Join(notExec, "bin", "3.1.0.0", "ssm-agent-worker"), 0o600))
	groupWritable := makeDeps(t, false, map[string][]string{"3.1.0.0": nil})
	require.NoError(t, os.Chmod(filepath.Join(groupWritable, "bin", "3.1.0.0", "amazon-ssm-agent"), 0o770))
	worldWritableCA := makeDeps(t, false, map[string][]string{"3.1.0.0": nil})
	require.NoError(t, os.Chmod(filepath.Join(worldWritableCA, "certs", "tls-ca-bundle.pem"), 0o606))
	dirAsFile := makeDeps(t, false, map[string][]string{"3.1.0.0": {"amazon-ssm-agent", "ssm-agent-worker"}})
	require.NoError(t, os.Mkdir(filepath.Join(dirAsFile, "bin", "3.1.0.0", "ssm-session-worker"), 0o700))
	for _, tt := range []struct {
		name, deps, want string
	}{
		{"missing binary", makeDeps(t, false, map[string][]string{"3.1.0.0": {"amazon-ssm-agent", "ssm-agent-worker"}}),
			"bin/3.1.0.0/ssm-session-worker: missing"},
		{"not executable", notExec, "bin/3.1.0.0/ssm-agent-worker: not executable"},
		{"a directory", dirAsFile, "bin/3.1.0.0/ssm-session-worker: not a regular file"},
		{"group-writable binary", groupWritable, "bin/3.1.0.0/amazon-ssm-agent: writable by group or others"},
		{"world-writable CA bundle", worldWritableCA, "certs/tls-ca-bundle.pem: writable by group or others"},
		{"no CA bundle", makeDeps(t, true, map[string][]string{"3.1.0.0": nil}), "certs/tls-ca-bundle.pem: missing"},
		{"no version", makeDeps(t, false, map[string][]string{"x": nil}), "holds no version directory"},
		{"no bin", makeDeps(t, false, nil), "bin: no such file or directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Discover(tt.deps)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrIncomplete), "%v", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestParseAndCompareVersions(t *testing.T) {
	for _, bad := range []string{"", "3.", "a.1", "-1", "3.0.99999999999"} {
		_, ok := parseVersion(bad)
		assert.False(t, ok, bad)
	}
	v := func(s string) []uint64 { p, ok := parseVersion(s); require.True(t, ok, s); return p }
	assert.Equal(t, 0, compareVersions(v("3"), v("3.0.0")))
	assert.Equal(t, -1, compareVersions(v("3.0.236.0"), v("3.0.237.0")))
	assert.Equal(t, 1, compareVersions(v("3"), v("2.0.236")))
}

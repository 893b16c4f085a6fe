//go:build integration

package main

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
)

// standInECS returns an embedded control plane that accepts the tests' keys (berth-test), closed
// when the test ends: the ECS API of the stand-ins for Amazon ECS.
func standInECS(t *testing.T, region string) *localcp.Server {
	t.Helper()
	srv, err := localcp.New(localcp.Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Region: region,
		Keys: localauth.Keys{AccessKeyID: "berth-test", SecretAccessKey: "berth-test"}}, logger.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// serveLoopback serves h on 127.0.0.1 until the test ends and returns its address.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

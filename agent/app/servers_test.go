package app

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// startServer serves a handler that reads whole bodies, with the given limits, and counts the bodies
// it received whole.
func startServer(t *testing.T, l serverLimits) (addr string, whole *atomic.Int64) {
	t.Helper()
	saved := limits
	limits = l
	t.Cleanup(func() { limits = saved })
	whole = new(atomic.Int64)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		whole.Add(1)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, ln, h, "test server", logger.Nop()) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String(), whole
}

var shortLimits = serverLimits{header: time.Second, read: time.Second, write: time.Second, idle: time.Second, maxHeaderBytes: 4 << 10}

// TestTrickledBodyIsCutOff sends a body one byte every 100 ms: the server stops reading it after its
// read limit instead of serving the request whenever the body is complete.
func TestTrickledBodyIsCutOff(t *testing.T) {
	addr, whole := startServer(t, shortLimits)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 60\r\n\r\n")
	require.NoError(t, err)
	go func() {
		for range 60 {
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the trickle itself, not a wait for a condition
		}
	}()
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode)
	} else {
		assert.False(t, isTimeout(err), "the server never answered nor closed: %v", err)
	}
	assert.Less(t, time.Since(start), 5*time.Second, "cut off after about the read limit, not the 6 s the body takes")
	assert.Zero(t, whole.Load(), "the trickled body was never served")
}

// TestIdleConnectionIsClosed keeps a connection open after one request: the server closes it after
// its idle limit.
func TestIdleConnectionIsClosed(t *testing.T) {
	addr, whole := startServer(t, shortLimits)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1, whole.Load())

	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closes the idle connection")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestOversizedHeadersAreRefused sends 64 KiB of headers to a server that takes 4 KiB.
func TestOversizedHeadersAreRefused(t *testing.T) {
	addr, whole := startServer(t, shortLimits)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	assert.Zero(t, whole.Load())
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func TestEndpointInstanceAvailabilityZone(t *testing.T) {
	ec2 := ec2Instance{Identity: imds.Identity{InstanceID: "i-1", AvailabilityZone: "eu-west-3b"}, VPCID: "vpc-0123abcd",
		AvailabilityZoneID: "euw3-az2"}
	cfg := &config.Config{Cluster: "prod"}
	assert.Equal(t, taskendpoint.Instance{Cluster: "prod", AvailabilityZone: "eu-west-3b", AvailabilityZoneID: "euw3-az2", VPCID: "vpc-0123abcd"},
		endpointInstance(cfg, ec2))
	cfg.TaskMetadataAZDisabled = true // ECS_DISABLE_TASK_METADATA_AZ: neither the zone nor its ID, as the ECS agent
	assert.Equal(t, taskendpoint.Instance{Cluster: "prod", VPCID: "vpc-0123abcd"}, endpointInstance(cfg, ec2))
	assert.Equal(t, taskendpoint.Instance{Cluster: "prod"}, endpointInstance(&config.Config{Cluster: "prod"}, ec2Instance{}),
		"off EC2 there is no zone to tell")
}

// Package imdsmock runs AWS's amazon-ec2-metadata-mock (AEMM) for tests: on 127.0.0.1, a free port,
// IMDSv2 only, killed when the test ends. A test that needs it and cannot find it fails, naming the
// command that installs it.
package imdsmock

import (
	"bytes"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Install is how to get the pinned amazon-ec2-metadata-mock (`make test` runs it).
const Install = "go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0"

// Binary returns the path of ec2-metadata-mock: $BERTH_EC2_METADATA_MOCK, else
// $(go env GOPATH)/bin/ec2-metadata-mock. Its absence fails the test.
func Binary(t testing.TB) string {
	t.Helper()
	path := os.Getenv("BERTH_EC2_METADATA_MOCK")
	if path == "" {
		gopath := build.Default.GOPATH
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
			gopath = strings.TrimSpace(string(out))
		}
		path = filepath.Join(strings.Split(gopath, string(filepath.ListSeparator))[0], "bin", "ec2-metadata-mock")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("amazon-ec2-metadata-mock is needed at %s (or set BERTH_EC2_METADATA_MOCK): %v; install it with: %s", path, err, Install)
	}
	return path
}

// syncBuffer is the mock's output, written by exec's copier and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs ec2-metadata-mock with args on 127.0.0.1 and a free port, IMDSv2 only, waits until
// it hands out session tokens, and returns its endpoint. It is killed when the test ends.
func Start(t testing.TB, args ...string) string {
	t.Helper()
	bin := Binary(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	endpoint := "http://" + l.Addr().String()

	args = append(args, "--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--imdsv2")
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no aemm-config.json of the user's
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("ec2-metadata-mock %v output:\n%s", args, out.String())
		}
	})

	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequest(http.MethodPut, endpoint+"/latest/api/token", nil)
		require.NoError(t, err)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Logf("ec2-metadata-mock %v answers at %s", args, endpoint)
				return endpoint
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("ec2-metadata-mock exited: %v\n%s", err, out.String())
		case <-deadline.C:
			t.Fatalf("ec2-metadata-mock did not answer at %s within 15 s\n%s", endpoint, out.String())
		case <-tick.C:
		}
	}
}

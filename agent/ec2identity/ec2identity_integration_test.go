//go:build integration

package ec2identity_test

import (
	"bytes"
	"context"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/ec2identity"
)

// The tests here run against AWS's amazon-ec2-metadata-mock (AEMM), pinned below; the values they
// expect are its defaults at that version.
const mockInstall = "go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0"

// mockBinary returns the path of ec2-metadata-mock: $BERTH_EC2_METADATA_MOCK, else
// $(go env GOPATH)/bin/ec2-metadata-mock. Its absence fails the test.
func mockBinary(t *testing.T) string {
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
		t.Fatalf("amazon-ec2-metadata-mock is needed at %s (or set BERTH_EC2_METADATA_MOCK): %v; install it with: %s", path, err, mockInstall)
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

// startMock runs ec2-metadata-mock with args on 127.0.0.1 and a free port, IMDSv2 only, waits until
// it hands out session tokens, and returns its endpoint. It is killed when the test ends.
func startMock(t *testing.T, args ...string) string {
	t.Helper()
	bin := mockBinary(t)
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

func TestMockIdentity(t *testing.T) {
	endpoint := startMock(t)
	c := ec2identity.New(ec2identity.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	region, err := c.Region(ctx)
	require.NoError(t, err)
	assert.Equal(t, "us-east-1", region)

	id, err := c.Identity(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, id.Signature)
	assert.Contains(t, id.Document, `"instanceId"`)
	assert.Equal(t, "i-1234567890abcdef0", id.InstanceID)
	assert.Equal(t, "us-east-1", id.Region)
	assert.Equal(t, "us-east-1f", id.AvailabilityZone)
	assert.Equal(t, "m4.xlarge", id.InstanceType)
	assert.Equal(t, "ami-0b69ea66ff7391e80", id.ImageID)
	assert.Equal(t, "0123456789", id.AccountID)
	assert.Equal(t, "x86_64", id.Architecture)

	attrs, err := c.Attributes(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		ec2identity.AttrInstanceType:     "m4.xlarge",
		ec2identity.AttrAvailabilityZone: "us-east-1f",
		ec2identity.AttrAMIID:            "ami-0b69ea66ff7391e80",
		ec2identity.AttrCPUArchitecture:  "x86_64",
		ec2identity.AttrVPCID:            "vpc-d295a6a7",
		ec2identity.AttrSubnetID:         "subnet-0ac62554",
	}, attrs, "the mock serves no outpost-arn: a 404 leaves it out")

	tags, err := c.InstanceTags(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"Name": "test-instance", "Test": "test-tag"}, tags)
}

// TestMockSpot: in its spot mode with a delay, the mock answers 404 until the delay passes and then
// serves a terminate notice, which WatchSpot reports once.
func TestMockSpot(t *testing.T) {
	endpoint := startMock(t, "spot", "--mock-delay-sec", "3", "--action", "terminate")
	c := ec2identity.New(ec2identity.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, found, err := c.SpotInstanceAction(ctx)
	require.NoError(t, err)
	assert.False(t, found, "no notice before the mock's delay")

	start := time.Now()
	var notices []ec2identity.SpotAction
	c.WatchSpot(ctx, 200*time.Millisecond, func(a ec2identity.SpotAction) { notices = append(notices, a) })
	require.NoError(t, ctx.Err(), "WatchSpot returned because of the notice, not the deadline")
	require.Len(t, notices, 1)
	assert.Equal(t, "terminate", notices[0].Action)
	assert.False(t, notices[0].Time.IsZero())
	t.Logf("notice after %v: %+v", time.Since(start), notices[0])
}

// TestMockASGLifecycle: the mock's asglifecycle mode serves "InService" and then, after the
// termination delay, "Terminated". (It cannot serve a warm-pool state turning InService; the unit
// tests cover WaitInService's waiting.)
func TestMockASGLifecycle(t *testing.T) {
	endpoint := startMock(t, "asglifecycle", "--asg-termination-delay-sec", "3")
	c := ec2identity.New(ec2identity.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	require.NoError(t, c.WaitInService(ctx, 200*time.Millisecond))

	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		state, err := c.TargetLifecycleState(ctx)
		require.NoError(t, err)
		if state == "Terminated" {
			return
		}
		require.Equal(t, ec2identity.StateInService, state)
		select {
		case <-ctx.Done():
			t.Fatal("the target lifecycle state never turned Terminated")
		case <-tick.C:
		}
	}
}

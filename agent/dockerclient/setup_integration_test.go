//go:build integration

package dockerclient

// Fixtures for the integration tests: the real Docker Engine on
// /var/run/docker.sock (DOCKER_HOST), the local registry on 127.0.0.1:5000
// (scripts/provision.sh starts both), and a multi-layer test image built and
// pushed once per test run. A missing prerequisite fails the tests.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient/faultproxy"
	"github.com/berth-agent/berth/agent/dockerclient/testregistry"
)

const (
	registryAddr = "127.0.0.1:5000"
	itRepo       = "berth-dockerclient-it"
	layerSize    = 2 << 20 // bytes of random data per layer
	layerCount   = 4
)

// imageFixture is the test image, pushed to registryAddr/itRepo:tag.
type imageFixture struct {
	tag    string
	id     string   // image ID (config digest)
	digest string   // manifest digest in the registry
	layers []string // layer blob digests, in order
	bytes  int64    // compressed size of all layers
}

var (
	fixtureOnce sync.Once
	fixture     imageFixture
	fixtureErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.id != "" {
		if dc, err := docker.NewClientFromEnv(); err == nil {
			_ = dc.RemoveImageExtended(fixture.id, docker.RemoveImageOptions{Force: true})
		}
	}
	if fixture.digest != "" {
		// Leave the shared registry as it was.
		req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("http://%s/v2/%s/manifests/%s", registryAddr, itRepo, fixture.digest), nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	os.Exit(code)
}

// engine returns a Client for the real engine, failing the test if it does not answer.
func engine(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.Endpoint = os.Getenv("DOCKER_HOST")
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = c.Version(ctx)
	require.NoError(t, err, "the Docker Engine must answer (run scripts/provision.sh)")
	return c
}

// fixtureImage builds and pushes the test image once per run.
func fixtureImage(t *testing.T) imageFixture {
	t.Helper()
	fixtureOnce.Do(func() { fixture, fixtureErr = buildAndPush() })
	require.NoError(t, fixtureErr)
	return fixture
}

func buildAndPush() (imageFixture, error) {
	dc, err := docker.NewClientFromEnv()
	if err != nil {
		return imageFixture{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag := fmt.Sprintf("run%d", time.Now().UnixNano())
	img, err := testregistry.BuildAndPush(ctx, dc, registryAddr, itRepo, tag, layerCount, layerSize)
	return imageFixture{tag: tag, id: img.ID, digest: img.Digest, layers: img.Layers, bytes: img.Bytes}, err
}

// purge removes the test image from the engine under every name, so that
// the next pull downloads it again.
func purge(t *testing.T, c *Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.docker.RemoveImageExtended(id, docker.RemoveImageOptions{Force: true, Context: ctx})
	if err != nil && !isNoSuchImage(err) {
		require.NoError(t, err, "remove the test image from the engine")
	}
	_, err = c.InspectImage(ctx, id)
	require.ErrorIs(t, err, ErrNotFound, "the engine still has the test image")
}

// proxy starts a fault proxy in front of target (host:port) for one test.
func proxy(t *testing.T, target string, rules ...faultproxy.Rule) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(faultproxy.Config{Target: "http://" + target, Seed: 1, Rules: rules})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// copyImage copies the fixture from the local registry to addr with auth, leaving the engine without it.
func copyImage(t *testing.T, c *Client, fx imageFixture, addr string, auth docker.AuthConfiguration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	src := registryAddr + "/" + itRepo + ":" + fx.tag
	require.NoError(t, testregistry.Copy(ctx, c.docker, src, addr+"/"+itRepo+":"+fx.tag, auth))
	purge(t, c, fx.id)
}

// requestLog renders the proxy's request log for failure messages.
func requestLog(p *faultproxy.Proxy) string {
	var b strings.Builder
	for _, r := range p.Requests() {
		fmt.Fprintf(&b, "%s %s %s %s\n", r.Method, r.Kind, r.Path, r.Fault)
	}
	return b.String()
}

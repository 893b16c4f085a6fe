// Package testregistry stands up what pull tests and benchmarks need around the real Docker Engine: a
// docker-registry process with htpasswd authentication on a loopback port, and multi-layer images
// built FROM scratch and pushed to a registry. Nothing here is pulled from the internet.
package testregistry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"golang.org/x/crypto/bcrypt"
)

// Addr is the open local registry that scripts/provision.sh starts.
const Addr = "127.0.0.1:5000"

// Image is an image pushed to a registry.
type Image struct {
	Ref    string   // registry/repo:tag
	ID     string   // image ID (config digest)
	Digest string   // manifest digest in the registry
	Layers []string // layer blob digests, in order
	Bytes  int64    // compressed size of all layers
}

// CheckRegistry returns an error naming the registry when it does not answer.
func CheckRegistry(addr string) error {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/v2/")
	if err != nil {
		return fmt.Errorf("the registry must answer on %s (run scripts/provision.sh): %w", addr, err)
	}
	resp.Body.Close()
	return nil
}

// BuildAndPush builds an image FROM scratch with the given number of layers of random bytes, tags it
// addr/repo:tag and pushes it to the open registry at addr.
func BuildAndPush(ctx context.Context, dc *docker.Client, addr, repo, tag string, layers, layerSize int) (Image, error) {
	if err := CheckRegistry(addr); err != nil {
		return Image{}, err
	}
	img := Image{Ref: addr + "/" + repo + ":" + tag}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := "FROM scratch\n"
	for i := range layers {
		data := make([]byte, layerSize)
		_, _ = rand.Read(data)
		name := fmt.Sprintf("layer%d.bin", i)
		dockerfile += fmt.Sprintf("COPY %s /%s\n", name, name)
		if err := addFile(tw, name, data); err != nil {
			return img, err
		}
	}
	if err := addFile(tw, "Dockerfile", []byte(dockerfile)); err != nil {
		return img, err
	}
	if err := tw.Close(); err != nil {
		return img, err
	}
	if err := dc.BuildImage(docker.BuildImageOptions{Context: ctx, Name: img.Ref, InputStream: &buf,
		OutputStream: io.Discard, RmTmpContainer: true}); err != nil {
		return img, fmt.Errorf("build test image %s: %w", img.Ref, err)
	}
	inspected, err := dc.InspectImage(img.Ref)
	if err != nil {
		return img, err
	}
	img.ID = inspected.ID
	// Docker wants an X-Registry-Auth header on push even for an open registry.
	if err := dc.PushImage(docker.PushImageOptions{Context: ctx, Name: addr + "/" + repo, Tag: tag, OutputStream: io.Discard},
		docker.AuthConfiguration{ServerAddress: addr}); err != nil {
		return img, fmt.Errorf("push test image %s: %w", img.Ref, err)
	}
	img.Digest, img.Layers, img.Bytes, err = Manifest(addr, repo, tag)
	if err != nil {
		return img, err
	}
	if len(img.Layers) != layers {
		return img, fmt.Errorf("test image has %d layers, want %d", len(img.Layers), layers)
	}
	return img, nil
}

func addFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// Manifest fetches a manifest's digest, layer digests and total layer size from an open registry.
func Manifest(addr, repo, tag string) (digest string, layers []string, size int64, err error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v2/%s/manifests/%s", addr, repo, tag), nil)
	if err != nil {
		return "", nil, 0, err
	}
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, 0, fmt.Errorf("manifest %s/%s:%s: %s", addr, repo, tag, resp.Status)
	}
	var m struct {
		Layers []struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return "", nil, 0, err
	}
	for _, l := range m.Layers {
		layers = append(layers, l.Digest)
		size += l.Size
	}
	return resp.Header.Get("Docker-Content-Digest"), layers, size, nil
}

// StartHtpasswd runs a docker-registry with htpasswd authentication for user/password on a free
// loopback port until the test ends, and returns its address.
func StartHtpasswd(t testing.TB, user, password string) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry must be installed (run scripts/provision.sh): %v", err)
	}
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	config := fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
  secret: berth-integration-test
auth:
  htpasswd:
    realm: berth-test
    path: %s
`, filepath.Join(dir, "data"), addr, filepath.Join(dir, "htpasswd"))
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(15 * time.Second)
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, logs.String())
		}
		select {
		case <-exited:
			t.Fatalf("docker-registry exited: %s", logs.String())
		case <-ticker.C:
		}
	}
}

// Copy pulls src from the open registry and pushes it as dst (registry/repo:tag) with auth, then
// removes both names from the engine so that the next pull downloads it again.
func Copy(ctx context.Context, dc *docker.Client, src, dst string, auth docker.AuthConfiguration) error {
	srcRepo, srcTag := splitRef(src)
	if err := dc.PullImage(docker.PullImageOptions{Context: ctx, Repository: srcRepo, Tag: srcTag, OutputStream: io.Discard}, docker.AuthConfiguration{}); err != nil {
		return fmt.Errorf("pull %s: %w", src, err)
	}
	dstRepo, dstTag := splitRef(dst)
	if err := dc.TagImage(src, docker.TagImageOptions{Context: ctx, Repo: dstRepo, Tag: dstTag}); err != nil {
		return fmt.Errorf("tag %s as %s: %w", src, dst, err)
	}
	if err := dc.PushImage(docker.PushImageOptions{Context: ctx, Name: dstRepo, Tag: dstTag, OutputStream: io.Discard}, auth); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	for _, ref := range []string{dst, src} {
		if err := dc.RemoveImageExtended(ref, docker.RemoveImageOptions{Context: ctx}); err != nil && err != docker.ErrNoSuchImage {
			return fmt.Errorf("remove %s from the engine: %w", ref, err)
		}
	}
	return nil
}

// splitRef splits registry/repo:tag into registry/repo and tag.
func splitRef(ref string) (repo, tag string) {
	slash := bytes.LastIndexByte([]byte(ref), '/')
	colon := bytes.LastIndexByte([]byte(ref), ':')
	if colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, "latest"
}

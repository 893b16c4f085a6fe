package engine

import (
	"context"
	"fmt"
	"strings"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// ImageInspector reads a local image's details; *dockerclient.Client satisfies it.
type ImageInspector interface {
	InspectImage(ctx context.Context, name string) (*docker.Image, error)
}

var _ ImageInspector = (*dockerclient.Client)(nil)

// imageDigest returns the manifest digest of image once it is pulled (or found cached), as the ECS
// agent resolves it (agent/engine/docker_task_engine.go, agent/utils/reference): the digest pinned
// in the reference, else the one of the image's repo digests whose repository is the reference's.
// It returns "" without an error when the image has no repo digest (built or loaded on the host),
// or when the engine has no ImageInspector.
func (e *Engine) imageDigest(ctx context.Context, image string) (string, error) {
	if d := pinnedDigest(image); d != "" {
		return d, nil
	}
	if e.cfg.Images == nil {
		return "", nil
	}
	img, err := e.cfg.Images.InspectImage(ctx, image)
	if err != nil {
		return "", fmt.Errorf("inspect image %q for its digest: %w", image, err)
	}
	if len(img.RepoDigests) == 0 {
		return "", nil
	}
	want := repositoryName(image)
	for _, rd := range img.RepoDigests {
		name, d, ok := strings.Cut(rd, "@")
		if ok && validDigest(d) && repositoryName(name) == want {
			return d, nil
		}
	}
	return "", fmt.Errorf("image %q: none of its repo digests %v is of repository %s", image, img.RepoDigests, want)
}

// pinnedDigest returns the digest of a reference pinned by digest ("repo@sha256:…"), or "".
func pinnedDigest(ref string) string {
	if _, d, ok := strings.Cut(ref, "@"); ok && validDigest(d) {
		return d
	}
	return ""
}

// validDigest reports whether d looks like a content digest, "algorithm:hex".
func validDigest(d string) bool {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok || algo == "" || len(hex) < 32 {
		return false
	}
	for _, r := range hex {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// repositoryName returns a reference's repository as Docker normalises it, without tag or digest:
// "nginx:1.27" is docker.io/library/nginx, "example.com:5000/app@sha256:…" example.com:5000/app. The
// first path component is a registry when it has a "." or ":", is "localhost" or has an upper-case
// letter, as Docker's reference parser decides.
func repositoryName(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	domain, path := "docker.io", name
	if first, rest, ok := strings.Cut(name, "/"); ok &&
		(strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first) {
		domain, path = first, rest
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	return domain + "/" + path
}

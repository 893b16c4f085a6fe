package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/task"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// fakeImages answers InspectImage with the repo digests set for an image reference.
type fakeImages struct {
	mu      sync.Mutex
	digests map[string][]string
	calls   []string
}

var _ ImageInspector = (*fakeImages)(nil)

func (f *fakeImages) InspectImage(_ context.Context, name string) (*docker.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	rd, ok := f.digests[name]
	if !ok {
		return nil, errors.New("no such image: " + name)
	}
	return &docker.Image{ID: "sha256:config", RepoDigests: rd}, nil
}

func (f *fakeImages) inspected() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func TestRepositoryName(t *testing.T) {
	tests := map[string]string{
		"nginx":                           "docker.io/library/nginx",
		"nginx:1.27":                      "docker.io/library/nginx",
		"docker.io/library/nginx:latest":  "docker.io/library/nginx",
		"index.docker.io/library/nginx":   "docker.io/library/nginx",
		"bitnami/redis:7":                 "docker.io/bitnami/redis",
		"localhost/app":                   "localhost/app",
		"localhost:5000/team/app:v1":      "localhost:5000/team/app",
		"example.com:5000/app@" + digestA: "example.com:5000/app",
		"123456789012.dkr.ecr.us-west-2.amazonaws.com/web:prod": "123456789012.dkr.ecr.us-west-2.amazonaws.com/web",
		"Registry/app": "Registry/app",
	}
	for ref, want := range tests {
		if got := repositoryName(ref); got != want {
			t.Errorf("repositoryName(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestImageDigest: the digest is the one pinned in the reference (no inspect), else the repo digest
// of the reference's repository, Docker Hub's short names included; an image without repo digests
// has none, and repo digests of other repositories only are an error.
func TestImageDigest(t *testing.T) {
	images := &fakeImages{digests: map[string][]string{
		"nginx:1.27":                   {"other.example/nginx@" + digestB, "nginx@" + digestA},
		"registry.example:5000/app:v1": {"registry.example:5000/app@" + digestB},
		"built-here:latest":            nil,
		"mirror.example/nginx:1.27":    {"nginx@" + digestA},
	}}
	e := &Engine{cfg: Config{Images: images}}
	tests := []struct {
		image   string
		want    string
		wantErr bool
	}{
		{image: "nginx:1.27", want: digestA},
		{image: "registry.example:5000/app:v1", want: digestB},
		{image: "busybox@" + digestB, want: digestB},
		{image: "built-here:latest", want: ""},
		{image: "mirror.example/nginx:1.27", wantErr: true},
		{image: "missing", wantErr: true},
	}
	for _, tc := range tests {
		got, err := e.imageDigest(context.Background(), tc.image)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("imageDigest(%q) = %q, %v; want %q (error %v)", tc.image, got, err, tc.want, tc.wantErr)
		}
	}
	for _, name := range images.inspected() {
		if name == "busybox@"+digestB {
			t.Error("a reference pinned by digest was inspected")
		}
	}
	noInspector := &Engine{}
	if got, err := noInspector.imageDigest(context.Background(), "nginx:1.27"); got != "" || err != nil {
		t.Errorf("without an ImageInspector: %q, %v; want nothing", got, err)
	}
}

// TestPulledImageDigestSaved: after the pull, each container's ImageDigest is in the task the engine
// saves, so a state change after a restart still carries it; a failed inspect leaves it empty and
// the task runs.
func TestPulledImageDigestSaved(t *testing.T) {
	images := &fakeImages{digests: map[string][]string{"img-web": {"img-web@" + digestA}}}
	cfg := testConfig()
	cfg.Images = images
	h := newHarness(t, cfg)
	const arn = "arn:aws:ecs:us-west-2:1:task/c/digest"
	h.add(newTask(arn, ctr("web"), ctr("side", nonEssential)))
	h.waitStatus(arn, task.TaskRunning)
	h.store.mu.Lock()
	saved := h.store.saved[arn].Clone()
	h.store.mu.Unlock()
	if got := saved.Container("web").ImageDigest; got != digestA {
		t.Errorf("saved web ImageDigest = %q, want %s", got, digestA)
	}
	if got := saved.Container("side").ImageDigest; got != "" {
		t.Errorf("saved side ImageDigest = %q, want none (its inspect failed)", got)
	}
}

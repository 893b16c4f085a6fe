//go:build integration

package imagecleanup

// Integration tests against the real Docker Engine on /var/run/docker.sock (DOCKER_HOST overrides it).
// A missing engine fails the tests. Every image and container they create is labelled and removed.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
)

// itEngine is the real engine under test: Berth's client plus a raw client for building images.
type itEngine struct {
	c   *dockerclient.Client
	raw *docker.Client
	run string // unique per test, in every name and label
}

func newEngine(t *testing.T) *itEngine {
	t.Helper()
	endpoint := os.Getenv("DOCKER_HOST")
	if endpoint == "" {
		endpoint = dockerclient.DefaultEndpoint
	}
	c, err := dockerclient.NewClient(dockerclient.Config{Endpoint: endpoint})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = c.Version(ctx)
	require.NoError(t, err, "the Docker Engine must answer on %s", endpoint)
	raw, err := docker.NewClient(endpoint)
	require.NoError(t, err)
	return &itEngine{c: c, raw: raw, run: fmt.Sprintf("%d", time.Now().UnixNano())}
}

// buildImage builds a tiny FROM-scratch image holding one file with distinct content, tags it
// berth-imagecleanup-it-<name>:<run>, removes it when the test ends and returns its ref and ID.
func (e *itEngine) buildImage(t *testing.T, name string) (ref, id string) {
	t.Helper()
	ref = "berth-imagecleanup-it-" + name + ":" + e.run
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, data string }{
		{"Dockerfile", "FROM scratch\nLABEL berth.it=" + e.run + "\nCOPY content /content\n"},
		{"content", name + " " + e.run + "\n"},
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Now()}))
		_, err := tw.Write([]byte(f.data))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, e.raw.BuildImage(docker.BuildImageOptions{
		Context: t.Context(), Name: ref, InputStream: &buf, OutputStream: io.Discard, RmTmpContainer: true,
	}))
	t.Cleanup(func() { _ = e.c.RemoveImage(context.Background(), ref) })
	img, err := e.c.InspectImage(t.Context(), ref)
	require.NoError(t, err)
	return ref, img.ID
}

// createContainer creates (does not start: a FROM-scratch image has nothing to run) a container from
// ref, removed when the test ends.
func (e *itEngine) createContainer(t *testing.T, ref, role string) string {
	t.Helper()
	ctr, err := e.c.CreateContainer(t.Context(), docker.CreateContainerOptions{
		Name: "berth-imagecleanup-it-" + role + "-" + e.run,
		Config: &docker.Config{Image: ref, Cmd: []string{"/content"},
			Labels: map[string]string{"berth.it": e.run, "berth.it.role": role}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = e.c.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: ctr.ID, Force: true})
	})
	return ctr.ID
}

// exists reports whether the engine still holds the image.
func (e *itEngine) exists(t *testing.T, ref string) bool {
	t.Helper()
	_, err := e.c.InspectImage(t.Context(), ref)
	if errors.Is(err, dockerclient.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// memImages is an in-memory Images.
type memImages struct {
	mu      sync.Mutex
	records map[string]state.ImageRecord
}

func (m *memImages) Images(context.Context) ([]state.ImageRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []state.ImageRecord
	for _, r := range m.records {
		out = append(out, r)
	}
	return out, nil
}

func (m *memImages) DeleteImage(_ context.Context, ref string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.records, ref)
	return nil
}

func (m *memImages) has(ref string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.records[ref]
	return ok
}

// recordingDocker passes removals to the engine and remembers what was asked (and, in the pressure
// test, when the Reclaimer ran).
type recordingDocker struct {
	Docker
	mu    sync.Mutex
	asked []string
}

func (r *recordingDocker) RemoveImage(ctx context.Context, name string) error {
	r.mu.Lock()
	r.asked = append(r.asked, name)
	r.mu.Unlock()
	return r.Docker.RemoveImage(ctx, name)
}

func (r *recordingDocker) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

func TestIntegrationCycle(t *testing.T) {
	e := newEngine(t)
	unused, unusedID := e.buildImage(t, "unused")
	used, usedID := e.buildImage(t, "used")
	require.NotEqual(t, unusedID, usedID)
	e.createContainer(t, used, "task")

	pulled := time.Now().Add(-2 * time.Hour)
	images := &memImages{records: map[string]state.ImageRecord{
		unused: {Ref: unused, ImageID: unusedID, PulledAt: pulled},
		used:   {Ref: used, ImageID: usedID, PulledAt: pulled},
	}}
	var mu sync.Mutex
	reportUsed := true
	inUse := func() (refs, ids set.Set[string]) {
		mu.Lock()
		defer mu.Unlock()
		if reportUsed {
			return set.Of(used), set.Of(usedID)
		}
		return set.Set[string]{}, set.Set[string]{}
	}
	log, buf := debugLog(t)
	d := &recordingDocker{Docker: e.c}
	c := New(Config{}, images, inUse, d, nil, nil, log)

	removed, err := c.Cycle(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{unused}, removed)
	assert.False(t, e.exists(t, unused), "the unused image is gone from the engine")
	assert.True(t, e.exists(t, used), "the image in use stays")
	assert.Equal(t, []string{unused}, d.names(), "an image in use is never even offered to Docker")
	assert.False(t, images.has(unused))
	assert.True(t, images.has(used))

	// Were a task to forget its image, Docker still refuses while a container uses it: kept, no error.
	mu.Lock()
	reportUsed = false
	mu.Unlock()
	removed, err = c.Cycle(t.Context())
	require.NoError(t, err)
	assert.Empty(t, removed)
	assert.True(t, e.exists(t, used))
	assert.True(t, images.has(used))
	assert.Len(t, logLines(buf, "level=debug", "a container uses the image; kept", "image="+used), 1, buf.String())
}

func TestIntegrationPressure(t *testing.T) {
	e := newEngine(t)
	unused, unusedID := e.buildImage(t, "unused")
	used, usedID := e.buildImage(t, "used")
	e.createContainer(t, used, "running-task")
	// A stopped task not yet cleaned up still uses its image; the Reclaimer removes its container early,
	// after which the task no longer counts.
	stopped := e.createContainer(t, unused, "stopped-task")

	usage := StatfsUsage("/var/lib/docker")
	before, err := usage()
	require.NoError(t, err)
	require.Greater(t, before, 0.0)

	now := time.Now() // both images are fresh: pressure ignores MinimumAge
	images := &memImages{records: map[string]state.ImageRecord{
		unused: {Ref: unused, ImageID: unusedID, PulledAt: now},
		used:   {Ref: used, ImageID: usedID, PulledAt: now},
	}}
	var mu sync.Mutex
	stoppedTaskAround := true
	reclaims := 0
	d := &recordingDocker{Docker: e.c}
	inUse := func() (refs, ids set.Set[string]) {
		mu.Lock()
		defer mu.Unlock()
		refs, ids = set.Of(used), set.Of(usedID)
		if stoppedTaskAround {
			refs.Add(unused)
			ids.Add(unusedID)
		}
		return refs, ids
	}
	reclaim := func(ctx context.Context) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		reclaims++
		d.mu.Lock()
		d.asked = append(d.asked, "reclaim") // one sequence of reclaims and removals
		d.mu.Unlock()
		if !stoppedTaskAround {
			return 0, nil
		}
		if err := e.c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: stopped}); err != nil {
			return 0, err
		}
		stoppedTaskAround = false
		return 1, nil
	}
	log, buf := debugLog(t)
	c := New(Config{
		Interval:         time.Hour, // only pressure acts in this test
		HighWater:        before / 2,
		LowWater:         1e-9, // unreachable: remove everything that may go
		PressureInterval: 10 * time.Millisecond,
	}, images, inUse, d, reclaim, usage, log)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		c.Run(ctx)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for images.has(unused) { // the record goes once Docker has confirmed the removal
		require.True(t, time.Now().Before(deadline), "pressure cleanup did not remove the unused image")
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.FailNow()
		}
	}
	cancelled := time.Now()
	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Less(t, time.Since(cancelled), 2*time.Second, "Run returns promptly")

	mu.Lock()
	assert.GreaterOrEqual(t, reclaims, 1)
	assert.False(t, stoppedTaskAround)
	mu.Unlock()
	asked := d.names()
	require.NotEmpty(t, asked)
	assert.Equal(t, "reclaim", asked[0], "the Reclaimer runs first")
	assert.Contains(t, asked, unused)
	_, err = e.c.InspectContainer(t.Context(), stopped)
	require.ErrorIs(t, err, dockerclient.ErrNotFound, "the stopped task's container was reclaimed")
	assert.True(t, e.exists(t, used), "the image in use stays")
	assert.True(t, images.has(used))
	assert.False(t, e.exists(t, unused), "the unused image is gone from the engine")
	assert.NotContains(t, d.names(), used)
	assert.NotEmpty(t, logLines(buf, "level=warn", "disk usage above high water mark"), buf.String())
	assert.NotEmpty(t, logLines(buf, "level=info", "disk pressure cleanup finished", "containers_removed=1", "images_removed=1"), buf.String())
}

// runImagesOnly shows untracked cleanup only this run's images (label berth.it), so the test never
// touches the host's other images; removals and the container list are the real engine's.
type runImagesOnly struct {
	*recordingDocker
	run string
}

func (r runImagesOnly) ListImages(ctx context.Context) ([]docker.APIImages, error) {
	all, err := r.recordingDocker.ListImages(ctx)
	var out []docker.APIImages
	for _, img := range all {
		if img.Labels["berth.it"] == r.run {
			out = append(out, img)
		}
	}
	return out, err
}

func TestIntegrationUntrackedCycle(t *testing.T) {
	e := newEngine(t)
	_, oneID := e.buildImage(t, "one-tag")
	multi, multiID := e.buildImage(t, "multi")
	alias := "berth-imagecleanup-it-alias:" + e.run
	require.NoError(t, e.raw.TagImage(multi, docker.TagImageOptions{Repo: "berth-imagecleanup-it-alias", Tag: e.run}))
	t.Cleanup(func() { _ = e.c.RemoveImage(context.Background(), alias) })
	withCtr, withCtrID := e.buildImage(t, "container")
	e.createContainer(t, withCtr, "not-berths") // created by someone else, never started
	excluded, excludedID := e.buildImage(t, "excluded")
	pulled, pulledID := e.buildImage(t, "pulled")
	dangling, danglingID := e.buildImage(t, "dangling")
	// The name moves to another image (as a new build of it would): the first image loses its tag.
	require.NoError(t, e.raw.TagImage(pulled, docker.TagImageOptions{Repo: strings.Split(dangling, ":")[0], Tag: e.run, Force: true}))
	t.Cleanup(func() { _ = e.c.RemoveImage(context.Background(), danglingID) })
	img, err := e.c.InspectImage(t.Context(), danglingID)
	require.NoError(t, err)
	require.Empty(t, img.RepoTags, "the first dangling build is untagged")

	images := &memImages{records: map[string]state.ImageRecord{
		pulled: {Ref: pulled, ImageID: pulledID, PulledAt: time.Now()}, // too young for the tracked pass
	}}
	inUse := func() (refs, ids set.Set[string]) { return set.Set[string]{}, set.Set[string]{} }
	d := runImagesOnly{recordingDocker: &recordingDocker{Docker: e.c}, run: e.run}
	log, buf := debugLog(t)
	c := New(Config{Untracked: true, UntrackedMinimumAge: -1, PerCycle: 10, Exclude: []string{excluded}}, images, inUse, d, nil, nil, log)

	removed, err := c.Cycle(t.Context())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{oneID, danglingID, multi, alias}, removed)
	for _, id := range []string{oneID, multiID, danglingID} {
		assert.False(t, e.exists(t, id), "untracked image %s is gone", id)
	}
	for _, id := range []string{withCtrID, excludedID, pulledID} {
		assert.True(t, e.exists(t, id), "image %s stays", id)
	}
	assert.NotContains(t, d.names(), withCtr, "an image a container uses is never offered to Docker")
	assert.NotContains(t, d.names(), withCtrID)
	assert.Len(t, logLines(buf, "removed untracked image"), 3, buf.String())
}

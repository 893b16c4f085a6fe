//go:build integration

package dockerclient

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sleeperSource is a container that runs until it is sent SIGTERM.
const sleeperSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
`

// sleeperImage builds a FROM-scratch image running a static Go binary and
// removes it when the test ends.
func sleeperImage(t *testing.T, c *Client, name string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(sleeperSource), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module sleeper\n\ngo 1.22\n"), 0o644))
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", "sleeper", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	bin, err := os.ReadFile(filepath.Join(dir, "sleeper"))
	require.NoError(t, err)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY sleeper /sleeper\nENTRYPOINT [\"/sleeper\"]\n")},
		{"sleeper", 0o755, bin},
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Now()}))
		_, err := tw.Write(f.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, c.docker.BuildImage(docker.BuildImageOptions{
		Context: t.Context(), Name: name, InputStream: &buf, OutputStream: io.Discard, RmTmpContainer: true,
	}))
	t.Cleanup(func() { _ = c.RemoveImage(context.Background(), name) })
}

func TestIntegrationContainerLifecycle(t *testing.T) {
	c := engine(t, Config{})
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	image := "berth-dockerclient-it-sleeper:" + run
	sleeperImage(t, c, image)
	ctx := t.Context()

	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	events, err := c.Events(evCtx, map[string][]string{"type": {"container"}, "label": {"berth.it=" + run}})
	require.NoError(t, err)

	ctr, err := c.CreateContainer(ctx, docker.CreateContainerOptions{
		Name:   "berth-it-" + run,
		Config: &docker.Config{Image: image, Labels: map[string]string{"berth.it": run, "berth.managed": "true"}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.RemoveContainer(context.Background(), docker.RemoveContainerOptions{ID: ctr.ID, Force: true})
	})

	list, err := c.ListContainersByLabel(ctx, map[string]string{"berth.it": run, "berth.managed": ""})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, ctr.ID, list[0].ID)
	list, err = c.ListContainersByLabel(ctx, map[string]string{"berth.it": "someone-else"})
	require.NoError(t, err)
	assert.Empty(t, list)

	require.NoError(t, c.StopContainer(ctx, ctr.ID, time.Second), "stopping a created container is not an error")
	require.NoError(t, c.StartContainer(ctx, ctr.ID))
	require.NoError(t, c.StartContainer(ctx, ctr.ID), "starting a running container is not an error")
	info, err := c.InspectContainer(ctx, ctr.ID)
	require.NoError(t, err)
	assert.True(t, info.State.Running)

	require.NoError(t, c.StopContainer(ctx, ctr.ID, 5*time.Second))
	require.NoError(t, c.StopContainer(ctx, ctr.ID, 5*time.Second), "already stopped")
	info, err = c.InspectContainer(ctx, ctr.ID)
	require.NoError(t, err)
	assert.False(t, info.State.Running)
	assert.Equal(t, 0, info.State.ExitCode)

	require.NoError(t, c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: ctr.ID, RemoveVolumes: true}))
	require.NoError(t, c.RemoveContainer(ctx, docker.RemoveContainerOptions{ID: ctr.ID}), "already gone")
	_, err = c.InspectContainer(ctx, ctr.ID)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, c.StopContainer(ctx, ctr.ID, time.Second), ErrNotFound)
	assert.ErrorIs(t, c.StartContainer(ctx, ctr.ID), ErrNotFound)

	want := []string{"create", "start", "die", "stop", "destroy"}
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-events:
			if ev.ID != ctr.ID {
				continue
			}
			for _, w := range want {
				if ev.Action == w && !contains(got, w) {
					got = append(got, w)
				}
			}
		case <-deadline:
			t.Fatalf("events seen: %v, want %v", got, want)
		}
	}
	stopEvents()
	for range events { // closed after ctx ends
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestIntegrationImageCalls(t *testing.T) {
	c := engine(t, Config{})
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	image := "berth-dockerclient-it-sleeper:" + run
	sleeperImage(t, c, image)
	ctx := t.Context()

	img, err := c.InspectImage(ctx, image)
	require.NoError(t, err)
	assert.Contains(t, img.RepoTags, image)

	var saved bytes.Buffer
	require.NoError(t, c.docker.ExportImages(docker.ExportImagesOptions{Context: ctx, Names: []string{image}, OutputStream: &saved}))
	require.NoError(t, c.RemoveImage(ctx, image))
	require.NoError(t, c.RemoveImage(ctx, image), "already gone")
	_, err = c.InspectImage(ctx, image)
	require.ErrorIs(t, err, ErrNotFound)
	var nf *NotFoundError
	require.ErrorAs(t, err, &nf)
	assert.Equal(t, "image", nf.Kind)

	require.NoError(t, c.LoadImage(ctx, &saved))
	_, err = c.InspectImage(ctx, image)
	require.NoError(t, err)

	err = c.LoadImage(ctx, bytes.NewReader([]byte("not a tarball")))
	assert.Error(t, err)

	_, err = c.CreateContainer(ctx, docker.CreateContainerOptions{Config: &docker.Config{Image: "berth-no-such-image:" + run}})
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestIntegrationRemoveVolume(t *testing.T) {
	c := engine(t, Config{})
	ctx := t.Context()
	name := fmt.Sprintf("berth-dockerclient-it-vol-%d", time.Now().UnixNano())
	_, err := c.docker.CreateVolume(docker.CreateVolumeOptions{Name: name, Context: ctx})
	require.NoError(t, err)
	_, err = c.docker.InspectVolume(name)
	require.NoError(t, err)

	require.NoError(t, c.RemoveVolume(ctx, name))
	_, err = c.docker.InspectVolume(name)
	assert.ErrorIs(t, err, docker.ErrNoSuchVolume)
	assert.NoError(t, c.RemoveVolume(ctx, name), "removing a volume that is gone succeeds")
}

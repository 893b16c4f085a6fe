package imagecleanup

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
)

func TestUntrackedConfigDefaults(t *testing.T) {
	assert.Equal(t, time.Hour, Config{}.withDefaults().UntrackedMinimumAge, "NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE's default")
	assert.Zero(t, Config{UntrackedMinimumAge: -1}.withDefaults().UntrackedMinimumAge, "negative means no minimum age")
}

// untrackedHost is a host with an old tracked image, one image of every kind untracked cleanup must
// keep, and three it may remove: sizes 30 (two tags), 10 (one tag) and 20 (dangling).
func untrackedHost(t *testing.T) *host {
	h := newHost(t, rec("old:1", "sha256:old", 10*time.Hour, 0),
		rec("pulled:1", "sha256:pulled-id", 10*time.Minute, 0)) // too young to remove: a record stays
	h.addUntracked("sha256:two-tags", 30, 5*time.Hour, "tools:1", "tools:latest")
	h.addUntracked("sha256:one-tag", 10, 5*time.Hour, "one:1")
	h.addUntracked("sha256:dangling", 20, 5*time.Hour, "<none>:<none>")

	h.addUntracked("sha256:excluded", 1, 5*time.Hour, "keep:me", "other:tag")
	h.addUntracked("sha256:young", 1, 30*time.Minute, "young:1")
	h.addUntracked("sha256:container", 1, 5*time.Hour, "ctr:1")
	h.containerIDs = []string{"sha256:container"}
	h.addUntracked("sha256:task-id", 1, 5*time.Hour, "task:1")
	h.useID("sha256:task-id")
	h.addUntracked("sha256:task-ref", 1, 5*time.Hour, "task-ref:1")
	h.useRef("task-ref:1")
	h.addUntracked("sha256:pulled-other-tag", 1, 5*time.Hour, "pulled:1", "alias:1") // a tag Berth pulled
	h.addUntracked("pulled-id", 1, 5*time.Hour, "retagged:1")                        // a recorded ID, without the prefix
	return h
}

var keptUntracked = []string{"pulled-id", "sha256:container", "sha256:excluded", "sha256:pulled-other-tag",
	"sha256:task-id", "sha256:task-ref", "sha256:young"}

func TestUntrackedCleanup(t *testing.T) {
	h := untrackedHost(t)
	c := h.cleaner(Config{Untracked: true, PerCycle: 10, Exclude: []string{"keep:me"}}, nil)
	removed, err := c.Cycle(context.Background())
	require.NoError(t, err)

	// The tracked image first, then untracked ones smallest first: by ID with one tag or none, tag by
	// tag with several.
	assert.Equal(t, []string{"old:1", "sha256:one-tag", "sha256:dangling", "tools:1", "tools:latest"}, removed)
	assert.Equal(t, keptUntracked, h.untrackedLeft())
}

func TestUntrackedCleanupSpendsWhatPerCycleLeaves(t *testing.T) {
	h := untrackedHost(t)
	c := h.cleaner(Config{Untracked: true, PerCycle: 2, Exclude: []string{"keep:me"}}, nil)
	removed, err := c.Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"old:1", "sha256:one-tag"}, removed, "one tracked removal leaves one for untracked images")

	removed, err = c.Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"sha256:dangling", "tools:1", "tools:latest"}, removed, "the next cycle goes on, smallest first")
}

func TestUntrackedCleanupOff(t *testing.T) {
	h := untrackedHost(t)
	removed, err := h.cleaner(Config{PerCycle: 10}, nil).Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"old:1"}, removed)
	assert.Zero(t, h.count("list images"), "Docker's images are not even listed")
	assert.Len(t, h.untrackedLeft(), 3+len(keptUntracked))
}

func TestUntrackedMinimumAge(t *testing.T) {
	h := newHost(t)
	h.addUntracked("sha256:a", 1, 3*time.Hour, "a:1")
	h.addUntracked("sha256:b", 1, 90*time.Minute, "b:1")
	removed, err := h.cleaner(Config{Untracked: true, UntrackedMinimumAge: 2 * time.Hour}, nil).Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"sha256:a"}, removed)

	removed, err = h.cleaner(Config{Untracked: true, UntrackedMinimumAge: -1}, nil).Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"sha256:b"}, removed, "no minimum age")
}

func TestExcludeKeepsTrackedImages(t *testing.T) {
	h := newHost(t, rec("keep:me", "sha256:k", 10*time.Hour, 0), rec("drop:me", "sha256:d", 10*time.Hour, 0))
	removed, err := h.cleaner(Config{Exclude: []string{"keep:me"}}, nil).Cycle(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"drop:me"}, removed)
}

func TestUntrackedCleanupFailures(t *testing.T) {
	h := newHost(t)
	h.addUntracked("sha256:a", 1, 3*time.Hour, "a:1")
	h.addUntracked("sha256:b", 2, 3*time.Hour, "b:1")
	h.addUntracked("sha256:c", 3, 3*time.Hour, "c:1")
	h.addUntracked("sha256:d", 4, 3*time.Hour, "d:1")
	h.conflicts.Add("sha256:a") // a container was created from it since the list
	h.removeErrs["sha256:b"] = errEngine
	log, buf := debugLog(t)
	removed, err := h.cleaner(Config{Untracked: true, PerCycle: 2}, log).Cycle(context.Background())
	require.ErrorIs(t, err, errEngine)
	assert.Equal(t, []string{"sha256:c"}, removed, "a conflict costs nothing; a failure costs a removal")
	assert.Len(t, logLines(buf, "untracked image cleanup: remove image", "sha256:b"), 1)
	assert.Len(t, logLines(buf, "image cleanup cycle finished", "untracked_removed=1", "untracked_kept_used_by_container=1", "untracked_failed=1"), 1, buf.String())

	h.imagesErr = fmt.Errorf("list images: %w", errors.New("engine gone"))
	_, err = h.cleaner(Config{Untracked: true}, nil).Cycle(context.Background())
	require.ErrorContains(t, err, "engine gone")
	assert.NotErrorIs(t, err, dockerclient.ErrConflict)
}

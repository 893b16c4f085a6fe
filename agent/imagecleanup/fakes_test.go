package imagecleanup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
)

// now is when the unit tests' fake clocks start.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ago returns now minus d.
func ago(d time.Duration) time.Time { return now.Add(-d) }

// host is a fake of everything a Cleaner talks to: the image records, the tasks' images, Docker's
// images and the stopped tasks' containers. It fails the test if an in-use image is ever removed.
type host struct {
	t  *testing.T
	mu sync.Mutex

	records map[string]state.ImageRecord // the state store
	engine  set.Set[string]              // refs Docker still holds
	refs    set.Set[string]              // in use by tasks
	ids     set.Set[string]

	untracked    map[string]docker.APIImages // Docker's images Berth has no record of, by ID
	containerIDs []string                    // the image IDs of every container on the host
	imagesErr    error                       // ListImages and ContainerImageIDs fail with it

	conflicts  set.Set[string]  // refs Docker refuses to remove (a container uses them)
	removeErrs map[string]error // refs Docker fails to remove
	listErr    error
	deleteErr  error

	containers int // stopped tasks' containers the reclaimer can remove, one per call
	reclaimErr error

	events   []string                  // "reclaim", "rm <ref>", "delete <ref>" in order
	onRemove func(h *host, ref string) // called with mu held after a successful removal
	samples  int
	// usage computes the used fraction from the fake's state; nil means a constant 0.5.
	usage func(h *host) float64
}

func newHost(t *testing.T, records ...state.ImageRecord) *host {
	h := &host{t: t, records: map[string]state.ImageRecord{}, removeErrs: map[string]error{}, untracked: map[string]docker.APIImages{}}
	for _, r := range records {
		h.records[r.Ref] = r
		h.engine.Add(r.Ref)
	}
	return h
}

func (h *host) Images(context.Context) ([]state.ImageRecord, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listErr != nil {
		return nil, h.listErr
	}
	out := make([]state.ImageRecord, 0, len(h.records))
	for _, r := range h.records {
		out = append(out, r)
	}
	return out, nil
}

func (h *host) DeleteImage(_ context.Context, ref string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "delete "+ref)
	if h.deleteErr != nil {
		return h.deleteErr
	}
	delete(h.records, ref)
	return nil
}

func (h *host) inUse() (refs, ids set.Set[string]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return set.Of(h.refs.Values()...), set.Of(h.ids.Values()...)
}

func (h *host) RemoveImage(_ context.Context, ref string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs.Has(ref) {
		h.t.Errorf("removed image %q while a task uses its ref", ref)
	}
	if r, ok := h.records[ref]; ok && r.ImageID != "" && h.ids.Has(r.ImageID) {
		h.t.Errorf("removed image %q while a task uses its ID %q", ref, r.ImageID)
	}
	if h.conflicts.Has(ref) {
		h.events = append(h.events, "conflict "+ref)
		return fmt.Errorf("remove image %q: %w", ref, dockerclient.ErrConflict)
	}
	if err := h.removeErrs[ref]; err != nil {
		h.events = append(h.events, "fail "+ref)
		return err
	}
	h.events = append(h.events, "rm "+ref)
	h.engine.Remove(ref)
	h.removeUntracked(ref)
	if h.onRemove != nil {
		h.onRemove(h, ref)
	}
	return nil
}

// removeUntracked drops an untracked image by ID, or one of its tags (the image with its last tag),
// as Docker does; mu is held.
func (h *host) removeUntracked(name string) {
	for id, img := range h.untracked {
		if (id == name || slices.Contains(img.RepoTags, name)) && (h.ids.Has(id) || slices.Contains(h.containerIDs, id)) {
			h.t.Errorf("removed %s of image %s while a task or container uses it", name, id)
		}
	}
	if img, ok := h.untracked[name]; ok {
		if len(tags(img)) > 1 {
			h.t.Errorf("removed image %s by ID while it has tags %v; Docker refuses without force", name, img.RepoTags)
		}
		delete(h.untracked, name)
		return
	}
	for id, img := range h.untracked {
		if i := slices.Index(img.RepoTags, name); i >= 0 {
			img.RepoTags = slices.Delete(slices.Clone(img.RepoTags), i, i+1)
			h.untracked[id] = img
			if len(img.RepoTags) == 0 {
				delete(h.untracked, id)
			}
		}
	}
}

// addUntracked adds an image Berth did not pull, created createdAgo ago.
func (h *host) addUntracked(id string, size int64, createdAgo time.Duration, tags ...string) {
	h.untracked[id] = docker.APIImages{ID: id, RepoTags: tags, Size: size, Created: ago(createdAgo).Unix()}
}

// untrackedLeft returns the IDs of the untracked images still in Docker, sorted.
func (h *host) untrackedLeft() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id := range h.untracked {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (h *host) ListImages(context.Context) ([]docker.APIImages, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "list images")
	if h.imagesErr != nil {
		return nil, h.imagesErr
	}
	var out []docker.APIImages
	for _, img := range h.untracked {
		out = append(out, img)
	}
	for _, r := range h.records {
		if h.engine.Has(r.Ref) {
			out = append(out, docker.APIImages{ID: r.ImageID, RepoTags: []string{r.Ref}, Created: ago(1000 * time.Hour).Unix()})
		}
	}
	return out, nil
}

func (h *host) ContainerImageIDs(context.Context) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.imagesErr != nil {
		return nil, h.imagesErr
	}
	return slices.Clone(h.containerIDs), nil
}

func (h *host) reclaim(context.Context) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "reclaim")
	if h.reclaimErr != nil {
		return 0, h.reclaimErr
	}
	if h.containers == 0 {
		return 0, nil
	}
	h.containers--
	return 1, nil
}

func (h *host) diskUsage() (float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples++
	if h.usage == nil {
		return 0.5, nil
	}
	return h.usage(h), nil
}

// useRef and useID mark an image in use by tasks.
func (h *host) useRef(ref string) { h.mu.Lock(); h.refs.Add(ref); h.mu.Unlock() }
func (h *host) useID(id string)   { h.mu.Lock(); h.ids.Add(id); h.mu.Unlock() }

// snapshot returns the events, the refs still in the engine and the records left, sorted.
func (h *host) snapshot() (events, engine, records []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.records {
		records = append(records, r)
	}
	slices.Sort(records)
	return slices.Clone(h.events), set.Sorted(h.engine), records
}

func (h *host) count(prefix string) int {
	events, _, _ := h.snapshot()
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// cleaner builds a Cleaner over h; without a clock in cfg it gets a fake clock stopped at now.
func (h *host) cleaner(cfg Config, log *logger.Logger) *Cleaner {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewFakeClockAt(now)
	}
	return New(cfg, h, h.inUse, h, h.reclaim, h.diskUsage, log)
}

// logLines returns the lines of buf that contain every one of the given substrings.
func logLines(buf *logger.Buffer, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		ok := l != ""
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// debugLog returns a debug-level logger writing to a buffer.
func debugLog(t *testing.T) (*logger.Logger, *logger.Buffer) {
	t.Helper()
	var buf logger.Buffer
	l, err := logger.New(logger.Config{Level: "debug"}, &buf)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l, &buf
}

var errEngine = errors.New("engine exploded")

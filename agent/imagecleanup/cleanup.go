// Package imagecleanup removes images Berth pulled that no task uses, the way
// the ECS agent does, and adds a disk-pressure mode the ECS agent lacks.
//
// A normal cycle runs every Config.Interval (never when Config.Disabled):
//
//	records ─▶ drop in use (ref or ID) or excluded ─▶ drop younger than MinimumAge ─▶ oldest first
//	        ─▶ remove up to PerCycle ─▶ delete the record of each image removed
//
// Disk pressure is sampled every Config.PressureInterval (first at once). Above
// HighWater it frees space at once, in rounds:
//
//	┌─▶ Reclaimer: remove stopped tasks' containers
//	│      │ removed some and usage ≤ LowWater? ─yes─▶ done
//	│      ▼
//	│   image pass: up to PerCycle unused images, oldest first
//	│      │ removed some and usage ≤ LowWater? ─yes─▶ done
//	│      ▼
//	└─yes─ freed anything this round? ─no─▶ done (nothing left to remove)
//
// With Config.Untracked, a normal cycle then spends the removals it has left
// on images Berth did not pull (untracked.go), as the ECS agent's
// ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP does. Images named in Config.Exclude are
// never removed, tracked or not.
//
// The image pass under pressure ignores MinimumAge but still removes at most
// PerCycle images per round. With Disabled set, pressure still runs the
// Reclaimer but never removes images.
//
// An image a task uses is never removed: in-use refs and image IDs are read
// before choosing candidates and again just before each removal, and removal
// is never forced, so Docker itself refuses to remove an image a container
// (even a stopped one) still uses. InUse must therefore cover every task not
// yet cleaned up, including tasks still pulling or creating containers.
package imagecleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/state"
)

// Defaults for the zero fields of Config.
const (
	DefaultInterval            = 30 * time.Minute // ECS_IMAGE_CLEANUP_INTERVAL
	DefaultMinimumAge          = time.Hour        // ECS_IMAGE_MINIMUM_CLEANUP_AGE
	DefaultPerCycle            = 5                // ECS_NUM_IMAGES_DELETE_PER_CYCLE
	DefaultHighWater           = 0.85
	DefaultLowWater            = 0.75
	DefaultPressureInterval    = 10 * time.Second
	DefaultUntrackedMinimumAge = time.Hour // NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE
)

// lastTouched is the later of PulledAt and LastUsedAt: the time the age of an image is counted from.
func lastTouched(r state.ImageRecord) time.Time {
	if r.LastUsedAt.After(r.PulledAt) {
		return r.LastUsedAt
	}
	return r.PulledAt
}

// Images is the record of images Berth pulled; state.Store satisfies it. DeleteImage of a missing
// record must succeed.
type Images interface {
	Images(ctx context.Context) ([]state.ImageRecord, error)
	DeleteImage(ctx context.Context, ref string) error
}

// InUse reports the image refs and image IDs that tasks currently use: every task not yet cleaned up,
// running or not, including tasks still pulling. It must be safe to call from any goroutine.
type InUse func() (refs, ids set.Set[string])

// Docker removes images; a missing image must be success, and removal must not be forced. The lists
// are read only for untracked image cleanup: every top-level image, and the image ID of every
// container in any state.
type Docker interface {
	RemoveImage(ctx context.Context, name string) error
	ListImages(ctx context.Context) ([]docker.APIImages, error)
	ContainerImageIDs(ctx context.Context) ([]string, error)
}

var _ Docker = (*dockerclient.Client)(nil)

// Reclaimer frees space other than images (the containers of stopped tasks, oldest first) and reports
// how many containers it removed.
type Reclaimer func(ctx context.Context) (removed int, err error)

// DiskUsage reports the used fraction (0..1) of the filesystem holding Docker's data directory.
type DiskUsage func() (float64, error)

// Config tunes a Cleaner. Zero fields take the Default* values.
type Config struct {
	Interval         time.Duration   // between normal cycles (ECS_IMAGE_CLEANUP_INTERVAL)
	MinimumAge       time.Duration   // images pulled or used more recently are kept; negative = no minimum
	PerCycle         int             // removals (or failed attempts) per cycle; containers' refusals don't count (ECS_NUM_IMAGES_DELETE_PER_CYCLE)
	Disabled         bool            // ECS_DISABLE_IMAGE_CLEANUP: no normal cycles, and pressure never removes images
	HighWater        float64         // used fraction above which pressure cleanup starts
	LowWater         float64         // used fraction pressure cleanup aims for; at most HighWater
	PressureInterval time.Duration   // between disk usage samples
	Clock            clockwork.Clock // images' ages and the cycle and sample tickers; nil is the wall clock

	// Untracked (ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP): normal cycles also remove images Berth did not
	// pull that no container uses, with the removals PerCycle has left.
	Untracked bool
	// UntrackedMinimumAge (NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE): untracked images created more recently
	// are kept; negative = no minimum.
	UntrackedMinimumAge time.Duration
	// Exclude (ECS_EXCLUDE_UNTRACKED_IMAGE and the pause image): image names (name:tag) never removed,
	// tracked or not; an untracked image with any excluded tag is kept whole.
	Exclude []string
}

// withDefaults fills zero fields and clamps LowWater to HighWater.
func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	switch {
	case c.MinimumAge == 0:
		c.MinimumAge = DefaultMinimumAge
	case c.MinimumAge < 0:
		c.MinimumAge = 0
	}
	if c.PerCycle <= 0 {
		c.PerCycle = DefaultPerCycle
	}
	if c.HighWater <= 0 {
		c.HighWater = DefaultHighWater
	}
	if c.LowWater <= 0 {
		c.LowWater = DefaultLowWater
	}
	c.LowWater = min(c.LowWater, c.HighWater)
	if c.PressureInterval <= 0 {
		c.PressureInterval = DefaultPressureInterval
	}
	switch {
	case c.UntrackedMinimumAge == 0:
		c.UntrackedMinimumAge = DefaultUntrackedMinimumAge
	case c.UntrackedMinimumAge < 0:
		c.UntrackedMinimumAge = 0
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Cleaner removes unused images periodically and frees space under disk pressure. Its methods are
// safe for concurrent use; cycles and pressure cleanups run one at a time.
type Cleaner struct {
	cfg     Config
	exclude set.Set[string] // cfg.Exclude
	images  Images
	inUse   InUse
	docker  Docker
	reclaim Reclaimer
	usage   DiskUsage
	log     *logger.Logger

	mu sync.Mutex // held for a whole cycle or pressure cleanup
}

// New returns a Cleaner. images, inUse and docker are required; reclaim may be nil (nothing but images
// is freed), usage may be nil (no disk-pressure mode), log may be nil (no logging).
func New(cfg Config, images Images, inUse InUse, docker Docker, reclaim Reclaimer, usage DiskUsage, log *logger.Logger) *Cleaner {
	if images == nil || inUse == nil || docker == nil {
		panic("imagecleanup.New: images, inUse and docker are required")
	}
	return &Cleaner{
		cfg:     cfg.withDefaults(),
		exclude: set.Of(cfg.Exclude...),
		images:  images,
		inUse:   inUse,
		docker:  docker,
		reclaim: reclaim,
		usage:   usage,
		log:     log,
	}
}

// Run runs a normal cycle every Interval (unless Disabled) and samples disk usage every
// PressureInterval, starting with one sample at once; it returns when ctx is done. Failures are logged.
func (c *Cleaner) Run(ctx context.Context) {
	var cycles, samples <-chan time.Time
	if !c.cfg.Disabled {
		t := c.cfg.Clock.NewTicker(c.cfg.Interval)
		defer t.Stop()
		cycles = t.Chan()
	}
	var st pressureState
	if c.usage != nil {
		t := c.cfg.Clock.NewTicker(c.cfg.PressureInterval)
		defer t.Stop()
		samples = t.Chan()
		c.checkPressure(ctx, &st)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-cycles:
			_, _ = c.Cycle(ctx) // logged by Cycle
		case <-samples:
			c.checkPressure(ctx, &st)
		}
	}
}

// Cycle runs one normal cycle now, even when Disabled, and returns the refs it removed (untracked
// images by the names they were removed by). Every failure is logged and also returned (joined); a
// container still using an image is not a failure.
func (c *Cleaner) Cycle(ctx context.Context) (removed []string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.removeUnused(ctx, false, &set.Set[string]{})
	kv := []any{"removed", len(p.removed), "candidates", p.candidates, "kept_used_by_container", p.conflicts, "failed", p.failed}
	removed = p.removed
	if c.cfg.Untracked {
		u, uerr := c.removeUntracked(ctx, c.cfg.PerCycle-len(p.removed)-p.failed)
		err = errors.Join(err, uerr)
		removed = append(removed, u.removed...)
		kv = append(kv, "untracked_removed", len(u.removed), "untracked_candidates", u.candidates,
			"untracked_kept_used_by_container", u.conflicts, "untracked_failed", u.failed)
	}
	c.log.Info("image cleanup cycle finished", kv...)
	return removed, err
}

// pass is the outcome of one image pass.
type pass struct {
	removed    []string // refs removed from Docker
	candidates int      // unused records old enough to remove
	conflicts  int      // refused by Docker because a container uses them
	failed     int      // other failures
}

// removeUnused removes up to PerCycle unused images, oldest first. Under pressure MinimumAge is
// ignored. Refs in tried are not attempted; every ref attempted and not removed is added to it.
func (c *Cleaner) removeUnused(ctx context.Context, pressure bool, tried *set.Set[string]) (pass, error) {
	var p pass
	records, err := c.images.Images(ctx)
	if err != nil {
		c.log.Warn("image cleanup: list pulled images", "error", err)
		return p, fmt.Errorf("list pulled images: %w", err)
	}
	now := c.cfg.Clock.Now()
	refs, ids := c.inUse()
	var cands []state.ImageRecord
	for _, r := range records {
		switch {
		case r.Ref == "" || tried.Has(r.Ref) || used(r, refs, ids) || c.exclude.Has(r.Ref):
		case !pressure && now.Sub(lastTouched(r)) < c.cfg.MinimumAge:
		default:
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b state.ImageRecord) int {
		return cmp.Or(lastTouched(a).Compare(lastTouched(b)), cmp.Compare(a.Ref, b.Ref))
	})
	p.candidates = len(cands)

	var errs []error
	budget := c.cfg.PerCycle
	for _, r := range cands {
		if budget == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		// A task may have started using the image since the candidates were chosen.
		if refs, ids := c.inUse(); used(r, refs, ids) {
			c.log.Debug("image cleanup: image came into use; kept", "image", r.Ref, "image_id", r.ImageID)
			continue
		}
		if err := c.docker.RemoveImage(ctx, r.Ref); err != nil {
			tried.Add(r.Ref)
			if errors.Is(err, dockerclient.ErrConflict) {
				p.conflicts++
				c.log.Debug("image cleanup: a container uses the image; kept", "image", r.Ref, "image_id", r.ImageID, "error", err)
				continue
			}
			if ctx.Err() != nil { // shutting down: not the image's fault
				errs = append(errs, err)
				break
			}
			budget--
			p.failed++
			c.log.Warn("image cleanup: remove image", "image", r.Ref, "image_id", r.ImageID, "error", err)
			errs = append(errs, err)
			continue
		}
		budget--
		p.removed = append(p.removed, r.Ref)
		c.log.Info("removed unused image", "image", r.Ref, "image_id", r.ImageID,
			"age", now.Sub(lastTouched(r)).Round(time.Second), "disk_pressure", pressure)
		if err := c.images.DeleteImage(ctx, r.Ref); err != nil {
			p.failed++
			c.log.Warn("image cleanup: delete image record", "image", r.Ref, "error", err)
			errs = append(errs, fmt.Errorf("delete image record %q: %w", r.Ref, err))
		}
	}
	return p, errors.Join(errs...)
}

// used reports whether a task uses the record's image, by ref or by image ID (with or without the
// "sha256:" prefix).
func used(r state.ImageRecord, refs, ids set.Set[string]) bool {
	if refs.Has(r.Ref) {
		return true
	}
	return r.ImageID != "" && hasID(ids, r.ImageID)
}

// pressureState is what Run remembers between disk usage samples.
type pressureState struct {
	above       bool // the previous sample was above HighWater
	usageFailed bool // the previous sample failed
}

// checkPressure samples disk usage and frees space when it is above HighWater. Only the first of
// consecutive samples above HighWater (or failed samples) logs at warn; later ones log at debug.
func (c *Cleaner) checkPressure(ctx context.Context, st *pressureState) {
	u, err := c.usage()
	if err != nil {
		c.logAt(!st.usageFailed, "disk pressure: sample disk usage", "error", err)
		st.usageFailed = true
		return
	}
	st.usageFailed = false
	if u <= c.cfg.HighWater {
		if st.above {
			c.log.Info("disk usage back below high water mark", "usage_percent", percent(u))
		}
		st.above = false
		return
	}
	first := !st.above
	st.above = true
	c.relieve(ctx, u, first)
}

// relieve frees space until usage is at most LowWater or a round frees nothing: each round runs the
// Reclaimer, then (unless Disabled) one image pass ignoring MinimumAge.
func (c *Cleaner) relieve(ctx context.Context, before float64, loud bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logAt(loud, "disk usage above high water mark; freeing space",
		"usage_percent", percent(before), "high_water_percent", percent(c.cfg.HighWater),
		"low_water_percent", percent(c.cfg.LowWater))

	after := before
	var containers int
	var images []string
	var tried set.Set[string] // refs attempted and kept, not tried again in this cleanup
	// low samples usage into after and reports whether cleanup is over: low enough, or usage unknown.
	low := func() bool {
		u, err := c.usage()
		if err != nil {
			c.log.Warn("disk pressure: sample disk usage", "error", err)
			return true
		}
		after = u
		return u <= c.cfg.LowWater
	}
	done := false
	for !done && ctx.Err() == nil {
		progress := false
		if c.reclaim != nil {
			n, err := c.reclaim(ctx)
			if err != nil {
				c.log.Warn("disk pressure: remove stopped tasks' containers", "removed", n, "error", err)
			}
			if n > 0 {
				containers += n
				progress = true
				if done = low(); done {
					break
				}
			}
		}
		if !c.cfg.Disabled {
			p, _ := c.removeUnused(ctx, true, &tried) // failures logged by removeUnused
			if len(p.removed) > 0 {
				images = append(images, p.removed...)
				progress = true
				done = low()
			}
		}
		if !progress {
			break
		}
	}

	kv := []any{"containers_removed", containers, "images_removed", len(images),
		"usage_before_percent", percent(before), "usage_after_percent", percent(after)}
	if len(images) > 0 {
		kv = append(kv, "images", strings.Join(images, ","))
	}
	if containers == 0 && len(images) == 0 {
		if ctx.Err() == nil {
			c.logAt(loud, "disk pressure cleanup found nothing to remove", kv...)
		}
		return
	}
	c.log.Info("disk pressure cleanup finished", kv...)
	if ctx.Err() == nil && after > c.cfg.LowWater {
		c.logAt(loud, "disk usage still above low water mark; nothing left to remove",
			"usage_percent", percent(after), "low_water_percent", percent(c.cfg.LowWater))
	}
}

// logAt logs at warn when loud, at debug otherwise.
func (c *Cleaner) logAt(loud bool, msg string, kv ...any) {
	if loud {
		c.log.Warn(msg, kv...)
	} else {
		c.log.Debug(msg, kv...)
	}
}

// percent renders a fraction as a percentage with one decimal.
func percent(f float64) float64 { return math.Round(f*1000) / 10 }

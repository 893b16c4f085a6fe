package imagecleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/set"
)

// removeUntracked removes up to budget images Berth did not pull, smallest first, as the ECS agent's
// untracked image cleanup does. An image is kept when Berth has a record of it, a task uses it, any
// container (running or not, Berth's or not) was created from it, one of its tags is excluded or
// recorded, or it was created less than UntrackedMinimumAge ago. An image with one tag (or none) is
// removed by ID; one with several tags is untagged tag by tag, so Docker deletes it with the last.
func (c *Cleaner) removeUntracked(ctx context.Context, budget int) (pass, error) {
	var p pass
	if budget <= 0 {
		return p, nil
	}
	cands, err := c.untrackedCandidates(ctx)
	if err != nil {
		c.log.Warn("untracked image cleanup: find candidates", "error", err)
		return p, err
	}
	p.candidates = len(cands)
	now := c.cfg.Clock.Now()
	var errs []error
	for _, img := range cands {
		if budget == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if refs, ids := c.inUse(); hasID(ids, img.ID) || slices.ContainsFunc(img.RepoTags, refs.Has) {
			continue // a task started with it since the candidates were chosen
		}
		tagged := tags(img)
		names := tagged
		if len(names) <= 1 {
			names = []string{img.ID}
		}
		var failed error
		for _, name := range names {
			if failed = c.docker.RemoveImage(ctx, name); failed != nil {
				break
			}
		}
		fields := []any{"image_id", img.ID, "tags", strings.Join(tagged, ","), "size_bytes", img.Size}
		switch {
		case failed == nil:
			budget--
			p.removed = append(p.removed, names...)
			c.log.Info("removed untracked image", append(fields, "age", now.Sub(time.Unix(img.Created, 0)).Round(time.Second))...)
		case errors.Is(failed, dockerclient.ErrConflict):
			p.conflicts++
			c.log.Debug("untracked image cleanup: a container uses the image; kept", append(fields, "error", failed)...)
		case ctx.Err() != nil:
			errs = append(errs, failed)
		default:
			budget--
			p.failed++
			c.log.Warn("untracked image cleanup: remove image", append(fields, "error", failed)...)
			errs = append(errs, failed)
		}
	}
	return p, errors.Join(errs...)
}

// untrackedCandidates lists the untracked images removeUntracked may remove, smallest first.
func (c *Cleaner) untrackedCandidates(ctx context.Context) ([]docker.APIImages, error) {
	images, err := c.docker.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	containers, err := c.docker.ContainerImageIDs(ctx)
	if err != nil {
		return nil, err
	}
	records, err := c.images.Images(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pulled images: %w", err)
	}
	refs, ids := c.inUse()
	var keptIDs, keptNames set.Set[string]
	for _, id := range ids.Values() {
		keptIDs.Add(bareID(id))
	}
	for _, r := range records {
		keptNames.Add(r.Ref)
		if r.ImageID != "" {
			keptIDs.Add(bareID(r.ImageID))
		}
	}
	for _, id := range containers {
		keptIDs.Add(bareID(id))
	}
	kept := func(name string) bool { return keptNames.Has(name) || refs.Has(name) || c.exclude.Has(name) }
	now := c.cfg.Clock.Now()
	var out []docker.APIImages
	for _, img := range images {
		switch {
		case keptIDs.Has(bareID(img.ID)), slices.ContainsFunc(tags(img), kept):
		case now.Sub(time.Unix(img.Created, 0)) < c.cfg.UntrackedMinimumAge:
		default:
			out = append(out, img)
		}
	}
	slices.SortFunc(out, func(a, b docker.APIImages) int { return cmp.Or(cmp.Compare(a.Size, b.Size), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// tags returns an image's tags, without the "<none>:<none>" Docker lists for a dangling image.
func tags(img docker.APIImages) []string {
	return slices.DeleteFunc(slices.Clone(img.RepoTags), func(t string) bool { return t == "<none>:<none>" })
}

// bareID is an image ID without its "sha256:" prefix.
func bareID(id string) string { return strings.TrimPrefix(id, "sha256:") }

// hasID reports whether ids holds the image ID, with or without the "sha256:" prefix.
func hasID(ids set.Set[string], id string) bool {
	b := bareID(id)
	return ids.Has(b) || ids.Has("sha256:"+b)
}

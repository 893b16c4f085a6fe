package dockerclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"golang.org/x/sync/semaphore"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
	"github.com/berth-agent/berth/agent/set"
)

// AuthSource supplies registry credentials for a pull (declared here, where it is consumed; implemented by agent/registryauth).
type AuthSource interface {
	// Auth returns credentials for image's registry; the zero value means anonymous. An error that
	// matches errdefs.ErrInvalidArgument says image is not a valid reference: the pull fails with
	// ErrInvalidReference and is not retried.
	Auth(ctx context.Context, image string) (docker.AuthConfiguration, error)
	// Invalidate says the registry refused the credentials Auth returned.
	Invalidate(image string)
}

// Behavior is ECS_IMAGE_PULL_BEHAVIOR: when to pull and when a local copy will do.
type Behavior string

// Pull behaviours.
const (
	// BehaviorDefault pulls; if the pull fails and a local copy exists, it
	// is used and a warning says so.
	BehaviorDefault Behavior = "default"
	// BehaviorAlways pulls; a failed pull is a failure.
	BehaviorAlways Behavior = "always"
	// BehaviorOnce skips the pull when this Puller already pulled the image
	// successfully and it is still present locally. The record is kept in
	// memory only, so a restarted agent pulls each image once more, and holds
	// the last maxPulledRemembered images pulled: one pulled before those is
	// pulled once more too.
	BehaviorOnce Behavior = "once"
	// BehaviorPreferCached uses a local copy when present and pulls otherwise.
	BehaviorPreferCached Behavior = "prefer-cached"
)

// ParseBehavior parses an ECS_IMAGE_PULL_BEHAVIOR value; empty means default.
func ParseBehavior(s string) (Behavior, error) {
	switch b := Behavior(strings.ToLower(strings.TrimSpace(s))); b {
	case "":
		return BehaviorDefault, nil
	case BehaviorDefault, BehaviorAlways, BehaviorOnce, BehaviorPreferCached:
		return b, nil
	}
	return "", fmt.Errorf("image pull behavior %q: want default, always, once or prefer-cached", s)
}

// Pull defaults (the ECS agent's, where it has one).
const (
	DefaultPullAttempts = 5
	// DefaultTransportAttempts bounds the attempts that fail on transport
	// faults (resets, EOF, time-outs, registry 5xx). With 30 % of registry
	// requests failing, about half the attempts meet a fault: 5 attempts
	// lose 1 to 3 pulls in 100, 15 about 1 in 100 000. The waits add up to
	// about a minute, well inside DefaultPullTimeout.
	DefaultTransportAttempts = 15
	DefaultBackoffMin        = 1100 * time.Millisecond
	DefaultBackoffMax        = 5 * time.Second
	DefaultBackoffMultiple   = 2.0
	DefaultBackoffJitter     = 0.2
	DefaultInactivityTimeout = time.Minute
	DefaultPullTimeout       = 2 * time.Hour
	// DefaultMaxConcurrentPulls bounds simultaneous pulls on a host. Docker
	// itself downloads 3 layers at a time per pull; 4 pulls keep a host's
	// link busy without letting a burst of tasks starve each other or
	// trip registry rate limits.
	DefaultMaxConcurrentPulls = 4
	DefaultProgressInterval   = 10 * time.Second
	// DefaultThrottleDelay is the least wait after a 429: Docker does not
	// pass the registry's Retry-After header on, so a floor stands in.
	DefaultThrottleDelay = 10 * time.Second
)

// PullConfig configures a Puller; zero fields take the Default* values.
type PullConfig struct {
	Attempts          int           // a pull stops after this many failed attempts whose error was not a transport fault
	TransportAttempts int           // a pull stops after this many failed attempts whose error was a transport fault (counted apart); at least Attempts
	BackoffMin        time.Duration // first delay between attempts
	BackoffMax        time.Duration // delay cap
	BackoffMultiple   float64       // delay growth per attempt
	BackoffJitter     float64       // +/- fraction of each delay; negative means none
	InactivityTimeout time.Duration // an attempt with no progress for this long is cancelled and retried; negative disables
	PullTimeout       time.Duration // bound on a whole pull, all attempts and waits included
	MaxConcurrent     int           // pulls running at once through this Puller
	Behavior          Behavior
	ProgressInterval  time.Duration // a pull running this long logs progress this often; negative disables
	ThrottleDelay     time.Duration // least wait after the registry throttled a pull

	// Clock drives the watchdog, progress logging and (unless Retrier.Clock
	// is set) backoff waits; nil is the wall clock. The overall PullTimeout
	// is a context deadline on the wall clock.
	Clock clockwork.Clock
	// Retrier runs the attempts; its OnRetry, if set, is called after the
	// Puller's own retry logging.
	Retrier retry.Retrier
	// Logger receives the Puller's records; nil discards them.
	Logger *logger.Logger
}

func (c PullConfig) withDefaults() PullConfig {
	if c.Attempts <= 0 {
		c.Attempts = DefaultPullAttempts
	}
	if c.TransportAttempts <= 0 {
		c.TransportAttempts = DefaultTransportAttempts
	}
	c.TransportAttempts = max(c.TransportAttempts, c.Attempts)
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BackoffMultiple == 0 {
		c.BackoffMultiple = DefaultBackoffMultiple
	}
	if c.BackoffJitter == 0 {
		c.BackoffJitter = DefaultBackoffJitter
	}
	if c.InactivityTimeout == 0 {
		c.InactivityTimeout = DefaultInactivityTimeout
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = DefaultPullTimeout
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrentPulls
	}
	if c.Behavior == "" {
		c.Behavior = BehaviorDefault
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.ThrottleDelay <= 0 {
		c.ThrottleDelay = DefaultThrottleDelay
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Retrier.Clock == nil {
		c.Retrier.Clock = c.Clock
	}
	if c.Logger == nil {
		c.Logger = logger.Nop()
	}
	return c
}

// AttemptResult is the outcome of one pull attempt.
type AttemptResult struct {
	Number   int           // 1-based
	Err      error         // nil for the attempt that succeeded
	Duration time.Duration // from the attempt's start (after it got a pull slot) to its end
	Bytes    int64         // bytes downloaded during the attempt
	Progress Progress      // layers and bytes when the attempt ended
}

// PullResult reports what a Pull did.
type PullResult struct {
	Image    string
	Attempts []AttemptResult // every attempt of the (possibly shared) pull, in order
	Pulled   bool            // a pull succeeded
	Cached   bool            // the local copy is used: no pull was needed, or the pull failed and the default behaviour fell back to it
	Shared   bool            // this caller joined a pull another caller had started
	Bytes    int64           // bytes downloaded over all attempts
	Duration time.Duration   // time this call took
}

// ErrPullerClosed is returned by Pull after Close. An errdefs.ErrFailedPrecondition: not retried.
var ErrPullerClosed = errdefs.New(errdefs.ErrFailedPrecondition, "puller closed")

// errWaitersGone cancels a shared pull nobody waits for any more.
var errWaitersGone = errors.New("every caller of the pull went away")

// Puller pulls images with retries and deduplication; it is safe for
// concurrent use. Use one Puller per host so that MaxConcurrent is a
// host-wide bound.
type Puller struct {
	client *Client
	cfg    PullConfig
	log    *logger.Logger
	sem    *semaphore.Weighted

	mu      sync.Mutex
	flights map[string]*flight // pulls in progress, by image and credentials
	pulled  set.Set[string]    // images this Puller pulled (BehaviorOnce), the last pulledMax of them
	ring    []string           // pulled in the order remembered; ring[next] is forgotten next once full
	next    int
	// pulledMax bounds pulled: images come and go with tasks (a tag per deployment), the agent stays.
	pulledMax int
	closed    bool
	wg        sync.WaitGroup
}

// maxPulledRemembered is how many pulled images BehaviorOnce remembers.
const maxPulledRemembered = 4096

// flight is one shared pull.
type flight struct {
	key, image string
	done       chan struct{}
	cancel     context.CancelCauseFunc
	waiters    int // guarded by Puller.mu

	mu       sync.Mutex
	attempts []AttemptResult
	tracker  *progressTracker // current attempt's, nil between attempts
	number   int              // current attempt
	err      error            // final; read after done is closed
}

// NewPuller returns a Puller pulling through c.
func NewPuller(c *Client, cfg PullConfig) *Puller {
	cfg = cfg.withDefaults()
	return &Puller{
		client:    c,
		cfg:       cfg,
		log:       cfg.Logger,
		sem:       semaphore.NewWeighted(int64(cfg.MaxConcurrent)),
		flights:   map[string]*flight{},
		pulledMax: maxPulledRemembered,
	}
}

// Pull makes image available locally according to the configured Behavior,
// with credentials from auth (nil: anonymous). Concurrent calls for the same
// image and credentials share one pull; a caller whose ctx ends returns at
// once with ctx's error while the pull goes on for the others (it is
// cancelled when no caller is left). A failed pull returns a
// *CannotPullContainerError; PullResult is filled in either case.
func (p *Puller) Pull(ctx context.Context, image string, auth AuthSource) (PullResult, error) {
	start := p.cfg.Clock.Now()
	res, err := p.pull(ctx, image, auth)
	res.Image = image
	res.Duration = p.cfg.Clock.Now().Sub(start)
	return res, err
}

func (p *Puller) pull(ctx context.Context, image string, auth AuthSource) (PullResult, error) {
	switch p.cfg.Behavior {
	case BehaviorPreferCached:
		if p.present(ctx, image) {
			p.log.Debug("using cached image", "image", image, "behavior", p.cfg.Behavior)
			return PullResult{Cached: true}, nil
		}
	case BehaviorOnce:
		if p.wasPulled(image) && p.present(ctx, image) {
			p.log.Debug("image already pulled once", "image", image, "behavior", p.cfg.Behavior)
			return PullResult{Cached: true}, nil
		}
	}

	var creds docker.AuthConfiguration
	var err error
	if auth != nil {
		creds, err = auth.Auth(ctx, image)
		if err != nil {
			err = &CannotPullContainerError{Image: image, Err: classifyAuth(err, p.cfg.ThrottleDelay)}
		}
	}
	var res PullResult
	if err == nil {
		res, err = p.join(ctx, image, creds, auth)
	}
	if err == nil || ctx.Err() != nil || p.cfg.Behavior != BehaviorDefault {
		return res, err
	}
	if p.present(ctx, image) {
		p.log.Warn("image pull failed; using the cached copy", "image", image, "attempts", len(res.Attempts), "error", err)
		res.Cached = true
		return res, nil
	}
	return res, err
}

// present reports whether image exists locally; errors count as absent.
func (p *Puller) present(ctx context.Context, image string) bool {
	_, err := p.client.InspectImage(ctx, image)
	if err != nil && !errors.Is(err, ErrNotFound) {
		p.log.Debug("cannot inspect image; treating it as absent", "image", image, "error", err)
	}
	return err == nil
}

func (p *Puller) wasPulled(image string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pulled.Has(image)
}

// rememberLocked records that image was pulled, forgetting the image remembered longest ago once
// pulledMax are; the caller holds p.mu.
func (p *Puller) rememberLocked(image string) {
	if p.pulled.Has(image) {
		return
	}
	if len(p.ring) < p.pulledMax {
		p.ring = append(p.ring, image)
	} else {
		p.pulled.Remove(p.ring[p.next])
		p.ring[p.next] = image
		p.next = (p.next + 1) % len(p.ring)
	}
	p.pulled.Add(image)
}

// credsKey identifies credentials without keeping them in clear.
func credsKey(c docker.AuthConfiguration) string {
	if c == (docker.AuthConfiguration{}) {
		return "anonymous"
	}
	h := sha256.New()
	for _, s := range []string{c.Username, c.Password, c.Email, c.ServerAddress, c.IdentityToken, c.RegistryToken} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// join attaches the caller to the pull of image with creds, starting it if
// needed, and waits for its end or for ctx.
func (p *Puller) join(ctx context.Context, image string, creds docker.AuthConfiguration, auth AuthSource) (PullResult, error) {
	key := image + "\x00" + credsKey(creds)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return PullResult{}, &CannotPullContainerError{Image: image, Err: ErrPullerClosed}
	}
	f, shared := p.flights[key]
	if !shared {
		f = p.startLocked(ctx, key, image, creds, auth)
	}
	f.waiters++
	p.mu.Unlock()
	defer p.leave(f)

	select {
	case <-f.done:
		res := f.result()
		res.Shared = shared
		return res, f.err
	case <-ctx.Done():
		res := f.result()
		res.Shared = shared
		return res, fmt.Errorf("pull %q: %w", image, context.Cause(ctx))
	}
}

// leave detaches a caller; the last one out cancels the pull.
func (p *Puller) leave(f *flight) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.waiters--
	if f.waiters == 0 {
		if p.flights[f.key] == f {
			delete(p.flights, f.key)
		}
		f.cancel(errWaitersGone)
	}
}

// startLocked registers and starts a flight; p.mu is held.
func (p *Puller) startLocked(ctx context.Context, key, image string, creds docker.AuthConfiguration, auth AuthSource) *flight {
	// The pull outlives the caller that started it: it ends when every
	// caller has gone, at PullTimeout, or at Close.
	fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &flight{key: key, image: image, done: make(chan struct{}), cancel: cancel}
	p.flights[key] = f
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer cancel(nil)
		tctx, stop := context.WithTimeoutCause(fctx, p.cfg.PullTimeout,
			&TimeoutError{Op: fmt.Sprintf("pull %q", image), Limit: p.cfg.PullTimeout})
		defer stop()
		p.run(tctx, f, creds, auth)
	}()
	return f
}

// run performs the shared pull and publishes its outcome.
func (p *Puller) run(ctx context.Context, f *flight, creds docker.AuthConfiguration, auth AuthSource) {
	start := p.cfg.Clock.Now()
	var wg sync.WaitGroup
	reportCtx, stopReport := context.WithCancel(ctx)
	if p.cfg.ProgressInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.report(reportCtx, f, start)
		}()
	}

	backoff := retry.NewExponentialBackoff(p.cfg.BackoffMin, p.cfg.BackoffMax, p.cfg.BackoffJitter, p.cfg.BackoffMultiple)
	budget := attemptBudget{max: p.cfg.Attempts, maxTransport: p.cfg.TransportAttempts}
	r := p.cfg.Retrier
	userOnRetry := r.OnRetry
	r.OnRetry = func(attempt int, err error, delay time.Duration) {
		transport := isTransportFault(err)
		p.log.Warn("image pull attempt failed; retrying", "image", f.image, "attempt", attempt,
			"transport_fault", transport, "max_attempts", budget.limit(transport), "delay", delay, "error", err)
		if userOnRetry != nil {
			userOnRetry(attempt, err, delay)
		}
	}
	refreshed := false
	var spent error // the error of the attempt that used up its budget
	err := r.Retry(ctx, backoff, func() error {
		err := p.attempt(ctx, f, creds)
		if err == nil {
			return nil
		}
		last := budget.spend(err)
		if auth != nil && creds != (docker.AuthConfiguration{}) && errors.Is(err, ErrAuthRefused) {
			auth.Invalidate(f.image)
			if refreshed || last {
				return err
			}
			refreshed = true
			fresh, aerr := auth.Auth(ctx, f.image)
			if aerr != nil || fresh == creds {
				return err // nothing new to try
			}
			p.log.Info("registry refused the credentials; retrying once with fresh ones", "image", f.image)
			creds = fresh
			return errdefs.Transient(err)
		}
		if last && errdefs.IsRetriable(err) {
			spent = err
			return errdefs.Permanent(err) // ends the loop; err itself is returned below
		}
		return err
	})
	if spent != nil && errors.Is(err, spent) {
		err = spent // still retriable: a later pull may succeed
	}
	stopReport()
	wg.Wait()

	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		err = &CannotPullContainerError{Image: f.image, Err: err}
	}

	res := f.result()
	p.mu.Lock()
	if p.flights[f.key] == f {
		delete(p.flights, f.key)
	}
	if err == nil {
		p.rememberLocked(f.image)
	}
	p.mu.Unlock()
	if err == nil {
		p.log.Info("image pulled", "image", f.image, "attempts", len(res.Attempts),
			"bytes", res.Bytes, "duration", p.cfg.Clock.Now().Sub(start).Round(time.Millisecond))
	}
	f.err = err
	close(f.done)
}

// attemptBudget counts a pull's failed attempts in two kinds: transport
// faults (isTransportFault), which say nothing about the image and get the
// larger budget, and every other failure, which may be real.
type attemptBudget struct {
	max, maxTransport int // limits; maxTransport >= max
	n, nTransport     int // failed attempts so far
}

// spend records a failed attempt and reports whether it was the last one its
// kind allows.
func (b *attemptBudget) spend(err error) bool {
	if isTransportFault(err) {
		b.nTransport++
		return b.nTransport >= b.maxTransport
	}
	b.n++
	return b.n >= b.max
}

// limit returns the attempt limit for failures of one kind.
func (b *attemptBudget) limit(transport bool) int {
	if transport {
		return b.maxTransport
	}
	return b.max
}

// attempt runs one pull attempt under the inactivity watchdog and returns
// its classified error.
func (p *Puller) attempt(ctx context.Context, f *flight, creds docker.AuthConfiguration) error {
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return context.Cause(ctx)
	}
	defer p.sem.Release(1)

	tracker := newProgressTracker(p.cfg.Clock)
	n := f.begin(tracker)
	start := p.cfg.Clock.Now()
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	if p.cfg.InactivityTimeout > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.watch(actx, tracker, cancel)
		}()
	}

	repo, tag := splitReference(f.image)
	err := p.client.docker.PullImage(docker.PullImageOptions{
		Repository:    repo,
		Tag:           tag,
		OutputStream:  tracker,
		RawJSONStream: true,
		Context:       actx,
	}, creds)
	cancel(nil)
	wg.Wait()
	tracker.finish()
	if err == nil {
		// With RawJSONStream go-dockerclient does not look inside the stream.
		err = tracker.streamErr()
	}
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), ErrInactivity) {
		err = context.Cause(actx)
	}
	err = classifyPull(err, p.cfg.ThrottleDelay)
	prog := tracker.snapshot()
	f.end(AttemptResult{Number: n, Err: err, Duration: p.cfg.Clock.Now().Sub(start), Bytes: prog.BytesDone, Progress: prog})
	return err
}

// watch cancels the attempt when the stream has not advanced for the
// inactivity timeout.
func (p *Puller) watch(ctx context.Context, t *progressTracker, cancel context.CancelCauseFunc) {
	timeout := p.cfg.InactivityTimeout
	for {
		idle := p.cfg.Clock.Now().Sub(t.idleSince())
		if idle >= timeout {
			cancel(fmt.Errorf("no progress for %v: %w", timeout, ErrInactivity))
			return
		}
		if retry.Sleep(ctx, p.cfg.Clock, timeout-idle) != nil {
			return
		}
	}
}

// report logs the pull's progress every ProgressInterval until ctx ends.
func (p *Puller) report(ctx context.Context, f *flight, start time.Time) {
	for retry.Sleep(ctx, p.cfg.Clock, p.cfg.ProgressInterval) == nil {
		n, t := f.current()
		elapsed := p.cfg.Clock.Now().Sub(start).Round(time.Millisecond)
		if t == nil {
			p.log.Info("image pull waiting", "image", f.image, "attempt", n+1, "elapsed", elapsed)
			continue
		}
		pr := t.snapshot()
		p.log.Info("image pull in progress", "image", f.image, "attempt", n,
			"layers_done", pr.LayersDone, "layers_total", pr.LayersTotal,
			"bytes_done", pr.BytesDone, "bytes_total", pr.BytesTotal,
			"idle", pr.Idle.Round(time.Millisecond), "elapsed", elapsed)
	}
}

// Close cancels every pull in flight, waits for them to end and makes later
// pulls fail with ErrPullerClosed.
func (p *Puller) Close() {
	p.mu.Lock()
	p.closed = true
	for _, f := range p.flights {
		f.cancel(ErrPullerClosed)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (f *flight) begin(t *progressTracker) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.number++
	f.tracker = t
	return f.number
}

func (f *flight) end(a AttemptResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracker = nil
	f.attempts = append(f.attempts, a)
}

func (f *flight) current() (int, *progressTracker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.number, f.tracker
}

// result returns the attempts so far.
func (f *flight) result() PullResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := PullResult{Attempts: append([]AttemptResult(nil), f.attempts...)}
	for _, a := range f.attempts {
		res.Bytes += a.Bytes
	}
	if n := len(f.attempts); n > 0 && f.attempts[n-1].Err == nil {
		res.Pulled = true
	}
	return res
}

// splitReference splits an image reference into the repository and the tag
// or digest Docker's create-image call wants ("latest" when neither is given).
func splitReference(image string) (repo, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		repo, tag = image[:i], image[i+1:]
		if j := strings.LastIndex(repo, ":"); j > strings.LastIndex(repo, "/") {
			repo = repo[:j] // "name:tag@digest": the digest wins
		}
		return repo, tag
	}
	if j := strings.LastIndex(image, ":"); j > strings.LastIndex(image, "/") {
		return image[:j], image[j+1:]
	}
	return image, "latest"
}

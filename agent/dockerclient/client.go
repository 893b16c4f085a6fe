// Package dockerclient is Berth's Docker Engine client, built on
// github.com/fsouza/go-dockerclient. Every call takes a context and also
// applies its own time limit (Timeouts); Docker's error text is turned into
// typed errors here, once (errors.go), so callers use errors.Is/As:
//
//   - ErrNotFound (via *NotFoundError) for a missing container or image;
//   - StopContainer treats "not running" as success, RemoveContainer treats
//     "no such container" and "removal already in progress" as success,
//     RemoveImage treats "no such image" as success (teardown is idempotent);
//   - pulls fail with *CannotPullContainerError wrapping a *PullError whose
//     classes (ErrAuthRefused, ErrNotFound, ErrInvalidReference,
//     ErrTooManyRequests, ErrRegistryUnavailable, ErrConnection,
//     ErrInactivity) say what happened and whether it is retried;
//   - a container call (create, start, stop, remove, inspect, list) whose way to the Engine failed
//     — not dialled, reset, or closed before the answer came — matches ErrConnection: the Engine may
//     or may not have done it;
//   - every class matches an agent/errdefs class too, so callers that only
//     care about the kind ask errdefs.IsNotFound, errdefs.IsRetriable, ….
//
// Image pulls go through a Puller (pull.go): retries with backoff, an
// inactivity watchdog, one overall deadline, shared pulls of one image, a
// bound on concurrent pulls, ECS pull behaviours and progress logging.
// Events (events.go) re-subscribes after a dropped stream and tells the
// consumer with a synthetic event. Exec (exec.go) runs an attached command in a container (ErrNotRunning when
// it is not running) and returns its exit code; ContainerLogs (logs.go) reads
// a container's timestamped output lines (ErrLogsNotReadable when its log
// driver cannot be read back).
package dockerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/retry"
)

// DefaultEndpoint is the Docker Engine socket used when Config.Endpoint is empty.
const DefaultEndpoint = "unix:///var/run/docker.sock"

// Timeouts bounds each Docker call; zero fields take the defaults of
// DefaultTimeouts, which are the ECS agent's.
type Timeouts struct {
	Create      time.Duration // create container (4 m)
	Start       time.Duration // start container (3 m)
	Inspect     time.Duration // inspect container or image (30 s)
	Remove      time.Duration // remove container (5 m)
	StopMargin  time.Duration // added to the container's stop timeout (30 s)
	List        time.Duration // list containers or images (1 m)
	Version     time.Duration // version (30 s)
	LoadImage   time.Duration // load image (10 m)
	RemoveImage time.Duration // remove image (3 m)
}

// DefaultTimeouts returns the ECS agent's time limits.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Create:      4 * time.Minute,
		Start:       3 * time.Minute,
		Inspect:     30 * time.Second,
		Remove:      5 * time.Minute,
		StopMargin:  30 * time.Second,
		List:        time.Minute,
		Version:     30 * time.Second,
		LoadImage:   10 * time.Minute,
		RemoveImage: 3 * time.Minute,
	}
}

// withDefaults fills zero fields from DefaultTimeouts.
func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts()
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.Create, &d.Create}, {&t.Start, &d.Start}, {&t.Inspect, &d.Inspect},
		{&t.Remove, &d.Remove}, {&t.StopMargin, &d.StopMargin}, {&t.List, &d.List},
		{&t.Version, &d.Version}, {&t.LoadImage, &d.LoadImage}, {&t.RemoveImage, &d.RemoveImage},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Config configures a Client.
type Config struct {
	// Endpoint is the Docker Engine address: unix:///path, tcp://host:port
	// or http://host:port (DOCKER_HOST; default DefaultEndpoint). TLS is not supported yet.
	Endpoint string
	// APIVersion pins the Engine API version (e.g. "1.41"); empty uses the Engine's own.
	APIVersion string
	Timeouts   Timeouts
	// Pull configures the Puller behind Client.PullImage.
	Pull PullConfig
	// Events configures re-subscription of the event stream.
	Events EventsConfig
	// Logger receives the client's records; nil discards them.
	Logger *logger.Logger
}

// Client is a Docker Engine client; it is safe for concurrent use.
type Client struct {
	docker  *docker.Client
	baseURL string // where raw requests go ("http://unix.sock" for a socket)
	// dialNetwork and dialAddress are where attached streams (exec) dial: "unix" and the socket's
	// path, or "tcp" and host:port; empty for an endpoint they do not support (https).
	dialNetwork, dialAddress string
	apiPath                  string // "/v1.41" or ""
	timeouts                 Timeouts
	events                   EventsConfig
	log                      *logger.Logger

	puller *Puller
}

// maxIdleConns bounds the idle connections to the Engine kept for reuse.
const maxIdleConns = 64

// NewClient returns a Client for cfg.Endpoint; it does not contact the Engine.
func NewClient(cfg Config) (*Client, error) {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	dc, err := docker.NewVersionedClient(endpoint, cfg.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("docker client for %q: %w", endpoint, err)
	}
	dc.SkipServerVersionCheck = true
	if tr, ok := dc.HTTPClient.Transport.(*http.Transport); ok {
		// Tasks launched together make dozens of calls at once; the library keeps GOMAXPROCS+1 idle
		// connections, so most calls would dial the socket anew.
		tr.MaxIdleConnsPerHost = maxIdleConns
	}
	base, err := rawBaseURL(endpoint)
	if err != nil {
		return nil, err
	}
	c := &Client{
		docker:   dc,
		baseURL:  base,
		timeouts: cfg.Timeouts.withDefaults(),
		events:   cfg.Events.withDefaults(),
		log:      cfg.Logger,
	}
	c.dialNetwork, c.dialAddress = dialNetwork(endpoint)
	if c.log == nil {
		c.log = logger.Nop()
	}
	pullCfg := cfg.Pull
	if pullCfg.Logger == nil {
		pullCfg.Logger = c.log
	}
	c.puller = NewPuller(c, pullCfg)
	if cfg.APIVersion != "" {
		c.apiPath = "/v" + strings.TrimPrefix(cfg.APIVersion, "v")
	}
	return c, nil
}

// rawBaseURL is the URL prefix for requests this package sends itself
// through go-dockerclient's HTTP client (which dials the socket for unix
// endpoints whatever the host).
func rawBaseURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("docker endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		return "http://unix.sock", nil
	case "tcp", "http":
		return "http://" + u.Host, nil
	case "https":
		return "https://" + u.Host, nil
	}
	return "", fmt.Errorf("docker endpoint %q: unsupported scheme %q", endpoint, u.Scheme)
}

// dialNetwork returns the network and address attached streams dial for endpoint, empty for an
// endpoint they do not support (https, and one rawBaseURL refused).
func dialNetwork(endpoint string) (network, address string) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", ""
	}
	switch u.Scheme {
	case "unix":
		return "unix", u.Path
	case "tcp", "http":
		return "tcp", u.Host
	}
	return "", ""
}

// Puller returns the Client's Puller, built from Config.Pull. Use it (not
// a second Puller) so that MaxConcurrent bounds every pull on the host.
func (c *Client) Puller() *Puller { return c.puller }

// PullImage pulls image through the Client's Puller; see Puller.Pull.
func (c *Client) PullImage(ctx context.Context, image string, auth AuthSource) (PullResult, error) {
	return c.puller.Pull(ctx, image, auth)
}

// Close cancels pulls in flight and waits for their goroutines; later
// pulls fail. Other calls keep working.
func (c *Client) Close() { c.puller.Close() }

// withTimeout bounds ctx by d; the cause on expiry is a *TimeoutError naming op.
func withTimeout(ctx context.Context, op string, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &TimeoutError{Op: op, Limit: d})
}

// ctxErr prefers the context's cause over err once ctx is done, so a
// timeout reads as a *TimeoutError rather than a closed connection.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// InspectImage returns the image's details; a missing image is a
// *NotFoundError (errors.Is(err, ErrNotFound)).
func (c *Client) InspectImage(ctx context.Context, name string) (*docker.Image, error) {
	ctx, cancel := withTimeout(ctx, "inspect image", c.timeouts.Inspect)
	defer cancel()
	var img docker.Image
	// go-dockerclient's InspectImage takes no context, so this one request
	// is sent here, through the same HTTP client.
	if err := c.getJSON(ctx, "/images/"+escapePath(name)+"/json", &img); err != nil {
		if isNoSuchImage(err) {
			return nil, &NotFoundError{Kind: "image", Name: name, Err: err}
		}
		return nil, fmt.Errorf("inspect image %q: %w", name, err)
	}
	return &img, nil
}

// escapePath escapes each "/"-separated segment of an image reference.
func escapePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// getJSON GETs path from the Engine and decodes the JSON answer into out;
// a non-2xx answer is a *docker.Error.
func (c *Client) getJSON(ctx context.Context, path string, out any) error {
	resp, err := c.rawGet(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

// rawGet sends GET path to the Engine; the caller closes the body of a 2xx answer.
func (c *Client) rawGet(ctx context.Context, path string) (*http.Response, error) {
	return c.raw(ctx, http.MethodGet, path)
}

// raw sends a request without a body to the Engine; the caller closes the body of a 2xx or 304
// answer. Other statuses come back as a *docker.Error with the Engine's message.
func (c *Client) raw(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+c.apiPath+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.docker.HTTPClient.Do(req)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	if (resp.StatusCode < 200 || resp.StatusCode >= 300) && resp.StatusCode != http.StatusNotModified {
		defer resp.Body.Close()
		return nil, engineError(resp)
	}
	return resp, nil
}

// CreateContainer creates a container (opts.Context is set from ctx); a
// missing image is a *NotFoundError.
func (c *Client) CreateContainer(ctx context.Context, opts docker.CreateContainerOptions) (*docker.Container, error) {
	ctx, cancel := withTimeout(ctx, "create container", c.timeouts.Create)
	defer cancel()
	opts.Context = ctx
	ctr, err := c.docker.CreateContainer(opts)
	if err != nil {
		if errors.Is(err, docker.ErrNoSuchImage) {
			image := ""
			if opts.Config != nil {
				image = opts.Config.Image
			}
			return nil, &NotFoundError{Kind: "image", Name: image, Err: err}
		}
		if errors.Is(err, docker.ErrContainerAlreadyExists) {
			return nil, fmt.Errorf("create container %q: %w", opts.Name, ErrNameInUse)
		}
		return nil, fmt.Errorf("create container %q: %w", opts.Name, callErr(ctx, err))
	}
	return ctr, nil
}

// StartContainer starts a container; starting a running container succeeds. It calls the Engine
// directly: go-dockerclient's start path probes the server version lazily without a lock, a data race
// when containers start concurrently.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	ctx, cancel := withTimeout(ctx, "start container", c.timeouts.Start)
	defer cancel()
	resp, err := c.raw(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start")
	if err == nil {
		resp.Body.Close() // 204 started, 304 already running
		return nil
	}
	var apiErr *docker.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return &NotFoundError{Kind: "container", Name: id, Err: err}
	}
	return fmt.Errorf("start container %q: %w", id, callErr(ctx, err))
}

// StopContainer stops a container, giving it timeout to exit before it is
// killed; the call itself may take timeout plus Timeouts.StopMargin. A
// container that is not running is success; a missing one a *NotFoundError.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	timeout = max(timeout, 0)
	ctx, cancel := withTimeout(ctx, "stop container", timeout+c.timeouts.StopMargin)
	defer cancel()
	secs := uint((timeout + time.Second - 1) / time.Second)
	err := c.docker.StopContainerWithContext(id, secs, ctx)
	var notRunning *docker.ContainerNotRunning
	switch {
	case err == nil, errors.As(err, &notRunning):
		return nil
	case isNoSuchContainer(err):
		return &NotFoundError{Kind: "container", Name: id, Err: err}
	}
	return fmt.Errorf("stop container %q: %w", id, callErr(ctx, err))
}

// RemoveContainer removes a container (opts.Context is set from ctx). It
// is idempotent: a missing container or a removal already in progress is
// success. An Engine that cannot be reached is ErrConnection.
func (c *Client) RemoveContainer(ctx context.Context, opts docker.RemoveContainerOptions) error {
	ctx, cancel := withTimeout(ctx, "remove container", c.timeouts.Remove)
	defer cancel()
	opts.Context = ctx
	err := c.docker.RemoveContainer(opts)
	if err == nil || isNoSuchContainer(err) || isRemovalInProgress(err) {
		return nil
	}
	return fmt.Errorf("remove container %q: %w", opts.ID, callErr(ctx, err))
}

// InspectContainer returns a container's details; a missing container is a
// *NotFoundError.
func (c *Client) InspectContainer(ctx context.Context, id string) (*docker.Container, error) {
	ctx, cancel := withTimeout(ctx, "inspect container", c.timeouts.Inspect)
	defer cancel()
	ctr, err := c.docker.InspectContainerWithOptions(docker.InspectContainerOptions{ID: id, Context: ctx})
	if err != nil {
		if isNoSuchContainer(err) {
			return nil, &NotFoundError{Kind: "container", Name: id, Err: err}
		}
		return nil, fmt.Errorf("inspect container %q: %w", id, callErr(ctx, err))
	}
	return ctr, nil
}

// ListContainersByLabel lists all containers (running or not) carrying
// every given label; an empty value matches any value of that label.
func (c *Client) ListContainersByLabel(ctx context.Context, labels map[string]string) ([]docker.APIContainers, error) {
	ctx, cancel := withTimeout(ctx, "list containers", c.timeouts.List)
	defer cancel()
	var filter []string
	for k, v := range labels {
		if v == "" {
			filter = append(filter, k)
		} else {
			filter = append(filter, k+"="+v)
		}
	}
	opts := docker.ListContainersOptions{All: true, Context: ctx}
	if len(filter) > 0 {
		opts.Filters = map[string][]string{"label": filter}
	}
	list, err := c.docker.ListContainers(opts)
	if err != nil {
		return nil, fmt.Errorf("list containers by label: %w", callErr(ctx, err))
	}
	return list, nil
}

// ListImages lists the Engine's tagged and dangling top-level images (not build intermediates).
func (c *Client) ListImages(ctx context.Context) ([]docker.APIImages, error) {
	ctx, cancel := withTimeout(ctx, "list images", c.timeouts.List)
	defer cancel()
	list, err := c.docker.ListImages(docker.ListImagesOptions{Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", ctxErr(ctx, err))
	}
	return list, nil
}

// ContainerImageIDs returns the image ID of every container, running or not, whoever created it
// (go-dockerclient's container list drops the field).
func (c *Client) ContainerImageIDs(ctx context.Context) ([]string, error) {
	ctx, cancel := withTimeout(ctx, "list containers", c.timeouts.List)
	defer cancel()
	var list []struct{ ImageID string }
	if err := c.getJSON(ctx, "/containers/json?all=1", &list); err != nil {
		return nil, fmt.Errorf("list containers: %w", ctxErr(ctx, err))
	}
	ids := make([]string, 0, len(list))
	for _, ctr := range list {
		ids = append(ids, ctr.ImageID)
	}
	return ids, nil
}

// LoadImage loads an image tarball (docker save format) from r.
func (c *Client) LoadImage(ctx context.Context, r io.Reader) error {
	ctx, cancel := withTimeout(ctx, "load image", c.timeouts.LoadImage)
	defer cancel()
	if err := c.docker.LoadImage(docker.LoadImageOptions{InputStream: r, OutputStream: io.Discard, Context: ctx}); err != nil {
		return fmt.Errorf("load image: %w", ctxErr(ctx, err))
	}
	return nil
}

// RemoveImage removes an image by name or ID; a missing image is success.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	ctx, cancel := withTimeout(ctx, "remove image", c.timeouts.RemoveImage)
	defer cancel()
	err := c.docker.RemoveImageExtended(name, docker.RemoveImageOptions{Context: ctx})
	if err == nil || isNoSuchImage(err) {
		return nil
	}
	var de *docker.Error
	if errors.As(err, &de) && de.Status == http.StatusConflict {
		return fmt.Errorf("remove image %q: %w: %w", name, ErrConflict, err)
	}
	return fmt.Errorf("remove image %q: %w", name, ctxErr(ctx, err))
}

// RemoveVolume removes a named volume; a missing volume is success.
func (c *Client) RemoveVolume(ctx context.Context, name string) error {
	ctx, cancel := withTimeout(ctx, "remove volume", c.timeouts.Remove)
	defer cancel()
	err := c.docker.RemoveVolumeWithOptions(docker.RemoveVolumeOptions{Context: ctx, Name: name})
	if err == nil || errors.Is(err, docker.ErrNoSuchVolume) {
		return nil
	}
	return fmt.Errorf("remove volume %q: %w", name, ctxErr(ctx, err))
}

// RootDir returns the Engine's data directory (DockerRootDir), whose filesystem holds images and
// container layers.
func (c *Client) RootDir(ctx context.Context) (string, error) {
	ctx, cancel := withTimeout(ctx, "docker info", c.timeouts.Version)
	defer cancel()
	var info struct {
		DockerRootDir string
	}
	if err := c.getJSON(ctx, "/info", &info); err != nil {
		return "", fmt.Errorf("docker info: %w", err)
	}
	if info.DockerRootDir == "" {
		return "", errors.New("docker info: no DockerRootDir")
	}
	return info.DockerRootDir, nil
}

// VersionInfo is the part of the Engine's version answer Berth uses.
type VersionInfo struct {
	Version       string
	APIVersion    string
	MinAPIVersion string
	Os            string
	Arch          string
	KernelVersion string
}

// WaitReady returns the Engine's version once it answers, retrying with backoff (1 s, ×2, 10 s cap)
// while it does not: the agent may start before the Engine. onRetry, if set, hears of every failed
// attempt. It returns ctx's error if ctx ends first.
func (c *Client) WaitReady(ctx context.Context, onRetry func(attempt int, err error, delay time.Duration)) (VersionInfo, error) {
	backoff := retry.NewExponentialBackoff(time.Second, 10*time.Second, 0.2, 2)
	var v VersionInfo
	err := retry.Retrier{OnRetry: onRetry}.Retry(ctx, backoff, func() error {
		var err error
		v, err = c.Version(ctx)
		return errdefs.Transient(err)
	})
	return v, err
}

// Version returns the Engine's version; one attempt.
func (c *Client) Version(ctx context.Context) (VersionInfo, error) {
	ctx, cancel := withTimeout(ctx, "docker version", c.timeouts.Version)
	defer cancel()
	env, err := c.docker.VersionWithContext(ctx)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("docker version: %w", ctxErr(ctx, err))
	}
	return VersionInfo{
		Version:       env.Get("Version"),
		APIVersion:    env.Get("ApiVersion"),
		MinAPIVersion: env.Get("MinAPIVersion"),
		Os:            env.Get("Os"),
		Arch:          env.Get("Arch"),
		KernelVersion: env.Get("KernelVersion"),
	}, nil
}

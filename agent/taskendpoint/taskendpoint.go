// Package taskendpoint is the HTTP handler of the endpoints a task's containers call: task role
// credentials, task metadata v2, v3 and v4, and the agent API (ECS_AGENT_URI: task scale-in
// protection), with the paths, JSON shapes, status codes and error bodies of the Amazon ECS agent. The agent serves it on 127.0.0.1:51679, which containers reach as
// 169.254.170.2:80 through a NAT redirect set up elsewhere.
//
//	GET /v1/credentials?id=ID        a task role's credentials (the older form)
//	GET /v2/credentials/ID           a task role's credentials
//	GET /v2/metadata                 the asking task (found by the request's source address)
//	GET /v2/metadataWithTags         the same, with the task's and the container instance's tags
//	GET /v2/metadata/DOCKERID        one container of the asking task
//	GET /v2/stats                    Docker stats of every container of the asking task, by Docker ID
//	GET /v2/stats/DOCKERID           Docker stats of one container of the asking task
//	GET /v3/TOKEN, /v4/TOKEN         the container whose metadata token is TOKEN
//	GET /v{3,4}/TOKEN/task           its task, with every container
//	GET /v{3,4}/TOKEN/taskWithTags   the same, with the task's and the container instance's tags
//	GET /v{3,4}/TOKEN/stats          Docker stats of the container
//	GET /v{3,4}/TOKEN/task/stats     Docker stats of every container of its task, by Docker ID
//	GET /api/TOKEN/task-protection/v1/state   its task's scale-in protection (ECS GetTaskProtection)
//	PUT /api/TOKEN/task-protection/v1/state   {"ProtectionEnabled": bool, "ExpiresInMinutes": n}
//	                                          (ECS UpdateTaskProtection, with the task role's credentials)
//	POST /api/TOKEN/fault/v1/...              fault injection in its task's network (fault.go)
//
// A path that is not clean (dot segments, doubled slashes) is redirected, 301, to its clean form. A
// method a route does not serve (for all but the agent API's, any other than GET) is answered 405 with
// the route's methods in Allow, any other path 404. Every answer carries X-Rate-Limit-Limit and
// X-Rate-Limit-Duration; a caller over its rate (steady requests per second with a burst, the ECS
// agent's ECS_TASK_METADATA_RPS_LIMIT) gets 429. v3, v4 and agent API requests are counted per metadata token,
// credentials requests per credentials ID of a task the agent holds, and the others (v2, and requests
// with a token or ID nobody holds) per source address: no caller can spend another's budget without
// its token or ID. Refused requests are logged at most once a minute, with a count of the rest.
//
// v2 answers the one task that has the request's source address now: a running container's address
// on a Docker network, or an awsvpc task's task-bridge or ENI address. With BindCredentials (a Berth
// extension), the credentials of a task that is not on the host's network are answered only to its
// own current addresses and to the host: a request through the 169.254.170.2 NAT keeps its
// container's source address, so a leaked ID is worthless to the host's other containers.
//
// # Use
//
//	h, err := taskendpoint.New(taskendpoint.Config{
//		Instance:    taskendpoint.Instance{Cluster: "default", AvailabilityZone: "us-west-2a"},
//		RateLimit:   limit, // from taskendpoint.ParseRateLimit(cfg.TaskMetadataRPSLimit); zero: 40,60
//		Tasks:       tasks, // TaskSource
//		Credentials: creds, // CredentialsSource; nil: no task has credentials
//		Stats:       stats, // StatsSource; nil: stats requests fail
//		Tags:        ecs,   // TagSource; nil: /taskWithTags shows no tags
//		Protection:  protection, // ProtectionAPI; nil: the agent API is not served
//		InstanceARN: cp.InstanceArn,
//		Logger:      log,
//	})
//	srv := &http.Server{Addr: "127.0.0.1:51679", Handler: h}
//
// The Handler is safe for concurrent use; it calls its sources from the requests' goroutines, so they
// must be too. It starts no goroutine and holds no resource beyond a bounded map of rate limiters.
//
// Secrets never reach the log: a credentials ID or metadata token is logged by its first 8
// characters (taskcreds.ShortID), and neither keys nor session tokens are logged at all.
package taskendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// CredentialsSource finds task role credentials by their credentials ID (the ID a container has in
// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI); *taskcreds.Chain is the agent's. It must be safe for
// concurrent use.
type CredentialsSource interface {
	// TaskCredentials returns the credentials with this ID. An error of class errdefs.ErrNotFound
	// means there are none (the container is told the ID is invalid); any other error means they
	// cannot be had now, and its text, which must hold no secret, is shown to the container.
	TaskCredentials(ctx context.Context, id string) (taskcreds.Credentials, error)
}

// TaskSource finds the task a request comes from. It must be safe for concurrent use and return
// copies the handler may read without locks.
type TaskSource interface {
	// ByToken returns the task, and the name of its container, whose metadata token (the last part of
	// ECS_CONTAINER_METADATA_URI_V4) is token. It is called once for every v3 and v4 request, before
	// rate limiting, so it should be cheap.
	ByToken(token string) (t *task.Task, container string, ok bool)
	// Tasks returns a copy of every task the agent holds. v2, which has no token, finds the asking
	// task among them by the request's source address.
	Tasks() []*task.Task
}

// StatsSource supplies Docker's stats of a container. It must be safe for concurrent use.
type StatsSource interface {
	// Stats returns the Docker stats JSON object of the container with this Docker ID, as v4 serves it
	// (network_rate_stats included where known); the source caches it, so this is cheap. netns is the
	// network namespace of the container's awsvpc task (/proc/PID/ns/net), whose interfaces are the
	// container's networks; empty for other tasks. An error makes the container's stats unavailable
	// for this request.
	Stats(ctx context.Context, dockerID, netns string) (json.RawMessage, error)
}

// TagSource lists the ECS tags of a task or container instance by its ARN: the ECS API's
// ListTagsForResource (*ecsclient.Client is one, against ECS or the embedded control plane). It must
// be safe for concurrent use. An error is shown in v4's Errors: its text, or, when it wraps the AWS
// SDK's error, the API's error code and message, the HTTP status and the request ID.
type TagSource interface {
	ListTagsForResource(ctx context.Context, arn string) (map[string]string, error)
}

// Instance is what the endpoints say about the host itself. It does not change while the agent runs.
type Instance struct {
	Cluster            string // the cluster's name or ARN, as the task's Cluster field and label
	AvailabilityZone   string // empty: not served
	AvailabilityZoneID string // the zone's ID (usw2-az1), v4's AvailabilityZoneID; empty: not served
	VPCID              string // the instance's VPC, v4's VPCID; empty: not served
}

// Config is what New needs. Tasks is required; the rest may be left zero.
type Config struct {
	Instance    Instance
	RateLimit   RateLimit // zero: DefaultRateLimit()
	Tasks       TaskSource
	Credentials CredentialsSource // nil: every credentials ID is unknown
	// CredentialsTasks finds the task holding a credentials ID: its credentials that have not
	// arrived yet are answered 503, and its task role's are no longer served once it stopped. nil:
	// no ID is held by a task.
	CredentialsTasks CredentialsTasks
	// LogDriverCredentials are credentials only the host itself may have: the execution-role
	// credentials the Docker daemon's awslogs driver asks for (awslogs-credentials-endpoint). They
	// are asked when Credentials knows the ID not, and only for a request from one of the host's
	// own addresses (a container's comes from its bridge address). nil: none.
	LogDriverCredentials CredentialsSource
	// HostAddress reports whether an address is the host's own; nil: the host's interface addresses.
	HostAddress func(netip.Addr) bool
	// BindCredentials answers the credentials of a task that is not on the host's network only to
	// its own containers' current addresses (a Berth extension, ECS_TASK_CREDENTIALS_BIND_TO_TASK);
	// anyone else with the ID is told it is unknown. Requests from the host's own addresses, and the
	// credentials of host-network tasks, are answered as the ECS agent does. It needs
	// CredentialsTasks. false: every caller with the ID is answered, as the ECS agent does.
	BindCredentials bool
	Stats           StatsSource // nil: every stats request fails
	Tags            TagSource   // nil: /taskWithTags shows no tags
	// Protection calls ECS's task scale-in protection operations for the agent API, with the task's
	// role credentials from Credentials. nil: /api/TOKEN/task-protection/v1/state is not served (404).
	Protection ProtectionAPI
	// InstanceARN returns the container instance's ARN, whose tags /taskWithTags shows; "" while the
	// instance is not registered. nil: no instance tags.
	InstanceARN func() string
	Logger      *logger.Logger  // nil: nothing is logged
	Clock       clockwork.Clock // nil: the real clock; it drives the rate limiters
	// Faults applies the fault-injection routes' faults (fault.go); nil: they answer 500.
	Faults FaultInjector
}

// Handler answers the task endpoints. Build it with New; it is safe for concurrent use.
type Handler struct {
	instance Instance
	tasks    TaskSource
	creds    CredentialsSource
	logCreds CredentialsSource
	holders  CredentialsTasks
	bind     bool
	isHost   func(netip.Addr) bool
	stats    StatsSource
	tags     TagSource
	protect  ProtectionAPI
	instARN  func() string
	log      *logger.Logger
	refused  *logger.Summary
	limits   *limiter
	limitHdr string

	faults      FaultInjector
	faultLimits *limiter
}

var _ http.Handler = (*Handler)(nil)

// New returns the handler. It fails with an errdefs.ErrInvalidArgument error when Tasks is nil, the
// rate limit is not valid, or BindCredentials is set without CredentialsTasks.
func New(cfg Config) (*Handler, error) {
	if cfg.Tasks == nil {
		return nil, fmt.Errorf("task endpoint: %w: no TaskSource", errdefs.ErrInvalidArgument)
	}
	rl := cfg.RateLimit
	if rl == (RateLimit{}) {
		rl = DefaultRateLimit()
	}
	if err := rl.validate(); err != nil {
		return nil, fmt.Errorf("task endpoint: %w", err)
	}
	if cfg.BindCredentials && cfg.CredentialsTasks == nil {
		return nil, fmt.Errorf("task endpoint: %w: credentials bound to their task need CredentialsTasks", errdefs.ErrInvalidArgument)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = logger.Nop()
	}
	if cfg.HostAddress == nil {
		cfg.HostAddress = hostAddress
	}
	return &Handler{
		instance: cfg.Instance,
		tasks:    cfg.Tasks,
		creds:    cfg.Credentials,
		logCreds: cfg.LogDriverCredentials,
		holders:  cfg.CredentialsTasks,
		bind:     cfg.BindCredentials,
		isHost:   cfg.HostAddress,
		stats:    cfg.Stats,
		tags:     cfg.Tags,
		protect:  cfg.Protection,
		instARN:  cfg.InstanceARN,
		log:      cfg.Logger,
		refused:  logger.NewSummary(cfg.Logger, cfg.Clock, "task endpoint request refused; further refusals are counted, one line a minute", refusalInterval),
		limits:   newLimiter(rl, cfg.Clock, maxLimiters),
		limitHdr: fmt.Sprintf("%.2f", float64(rl.Steady)),

		faults:      cfg.Faults,
		faultLimits: newFaultLimiter(cfg.Clock),
	}, nil
}

// kind is what a request path asks for.
type kind int

const (
	notFound kind = iota
	credentialsV1
	credentialsV2
	v2Task
	v2TaskWithTags
	v2Container
	v2TaskStats
	v2ContainerStats
	tokenContainer
	tokenTask
	tokenTaskWithTags
	tokenContainerStats
	tokenTaskStats
	agentAPI // /api/TOKEN/SUB: which route SUB is, Handler.agentAPIRoute says
)

// route is a parsed request path.
type route struct {
	kind    kind
	version int    // 3 or 4 for the v3 and v4 token kinds, 1 or 2 for credentials, 2 for the v2 metadata kinds
	arg     string // the token, the credentials ID (v2), or the Docker ID (v2)
	sub     string // agentAPI: what follows /api/TOKEN/
}

// agentAPIRoute is one route of the agent API, under /api/TOKEN/: the methods it serves and its
// handler.
type agentAPIRoute struct {
	name    string // names the route in logs
	methods []string
	serve   func(h *Handler, w http.ResponseWriter, r *http.Request, req apiRequest)
}

// apiRequest is an agent API request as its route's handler is given it: the token of the path, the
// rest of the path after /api/TOKEN/, and the task and container that hold the token (nil and "" when
// none does: the handler answers that as its API does).
type apiRequest struct {
	token, sub string
	task       *task.Task
	container  string
}

// agentAPIRoute returns the route of the agent API path sub (what follows /api/TOKEN/), nil for none.
func (h *Handler) agentAPIRoute(sub string) *agentAPIRoute {
	switch {
	case sub == "task-protection/v1/state" && h.protect != nil:
		return &protectionRoute
	}
	return nil
}

// parse maps a path onto a route in one pass; it never fails, and what it does not know is notFound.
func parse(path string) route {
	switch {
	case path == "/v1/credentials":
		return route{kind: credentialsV1, version: 1}
	case strings.HasPrefix(path, "/v2/credentials/"):
		return route{kind: credentialsV2, version: 2, arg: path[len("/v2/credentials/"):]}
	case path == "/v2/metadata" || path == "/v2/metadata/":
		return route{kind: v2Task, version: 2}
	case path == "/v2/metadataWithTags" || path == "/v2/metadataWithTags/":
		return route{kind: v2TaskWithTags, version: 2}
	case strings.HasPrefix(path, "/v2/metadata/"):
		return route{kind: v2Container, version: 2, arg: path[len("/v2/metadata/"):]}
	case path == "/v2/stats" || path == "/v2/stats/":
		return route{kind: v2TaskStats, version: 2}
	case strings.HasPrefix(path, "/v2/stats/"):
		return route{kind: v2ContainerStats, version: 2, arg: path[len("/v2/stats/"):]}
	}
	if rest, ok := strings.CutPrefix(path, "/api/"); ok {
		token, sub, hasSub := strings.Cut(rest, "/")
		if !hasSub {
			return route{kind: notFound}
		}
		return route{kind: agentAPI, arg: token, sub: sub}
	}
	var version int
	var rest string
	switch {
	case strings.HasPrefix(path, "/v3/"):
		version, rest = 3, path[len("/v3/"):]
	case strings.HasPrefix(path, "/v4/"):
		version, rest = 4, path[len("/v4/"):]
	default:
		return route{kind: notFound}
	}
	token, sub, hasSub := strings.Cut(rest, "/")
	k := notFound
	switch {
	case !hasSub:
		k = tokenContainer
	case sub == "task":
		k = tokenTask
	case sub == "taskWithTags":
		k = tokenTaskWithTags
	case sub == "stats":
		k = tokenContainerStats
	case sub == "task/stats":
		k = tokenTaskStats
	}
	if k == notFound {
		return route{kind: notFound}
	}
	return route{kind: k, version: version, arg: token}
}

// ServeHTTP answers one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Rate-Limit-Limit", h.limitHdr)
	w.Header().Set("X-Rate-Limit-Duration", "1")
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		u := url.URL{Path: clean, RawQuery: r.URL.RawQuery}
		w.Header().Set("Location", u.String())
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	if isFaultPath(r.URL.Path) {
		h.serveFault(w, r)
		return
	}
	rt := parse(r.URL.Path)
	var api *agentAPIRoute
	if rt.kind == agentAPI {
		if api = h.agentAPIRoute(rt.sub); api == nil {
			rt.kind = notFound
		}
	}
	if rt.kind == notFound { // whatever the method, as the ECS agent's router answers a path it has no route for
		http.NotFound(w, r)
		return
	}
	methods := []string{http.MethodGet}
	if api != nil {
		methods = api.methods
	}
	if !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		if api != nil {
			w.WriteHeader(http.StatusMethodNotAllowed) // no body, as the ECS agent's router answers
			return
		}
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	src, srcOK := sourceAddr(r)
	key := "addr " + src.String()
	if !srcOK {
		key = "remote " + r.RemoteAddr
	}
	var tk *task.Task
	var container string
	var found bool
	var credsID string
	var bind binding
	switch {
	case rt.kind >= tokenContainer:
		if tk, container, found = h.tasks.ByToken(rt.arg); found {
			key = "token " + rt.arg
		}
	case rt.kind == credentialsV1 || rt.kind == credentialsV2:
		credsID = rt.arg
		if rt.kind == credentialsV1 {
			credsID = r.URL.Query().Get("id")
		}
		tk, found = h.holder(credsID)
		bind = h.binding(tk, src, srcOK)
		if found && bind == bindServe {
			key = "credentials " + credsID
		}
	}
	pathKind := rt.kind.String()
	if api != nil {
		pathKind = api.name
	}
	if !h.limits.allow(key) {
		h.log.Debug("task endpoint request throttled", "path_kind", pathKind, "source", src.String())
		h.refused.Note(refusedThrottled, "path_kind", pathKind, "source", src.String())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte("You have reached maximum request limit."))
		return
	}
	switch rt.kind {
	case credentialsV1, credentialsV2:
		h.serveCredentials(w, r, rt.version, credsID, tk, bind)
	case v2Task, v2TaskWithTags, v2Container, v2TaskStats, v2ContainerStats:
		h.serveV2(w, r, rt, src, srcOK)
	case agentAPI:
		req := apiRequest{token: rt.arg, sub: rt.sub}
		if found {
			req.task, req.container = tk, container
		}
		api.serve(h, w, r, req)
	default:
		h.serveToken(w, r, rt, tk, container, found)
	}
}

// String names the kind in logs.
func (k kind) String() string {
	switch k {
	case credentialsV1, credentialsV2:
		return "credentials"
	case v2Task, tokenTask:
		return "task"
	case v2Container, tokenContainer:
		return "container"
	case v2TaskStats, tokenTaskStats:
		return "task_stats"
	case v2ContainerStats, tokenContainerStats:
		return "container_stats"
	case tokenTaskWithTags, v2TaskWithTags:
		return "task_with_tags"
	case agentAPI:
		return "agent_api"
	}
	return "not_found"
}

// cleanPath is the path a request is redirected to when its own is not clean: path.Clean's, with
// the trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// sourceAddr returns the request's source IP address, IPv4-mapped addresses unmapped.
func sourceAddr(r *http.Request) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// writeJSON writes v as the JSON body with the given status; a value that does not encode is a 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal("failed to encode the response")
	}
	writeRaw(w, status, b)
}

// writeRaw writes an encoded JSON body with the given status.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

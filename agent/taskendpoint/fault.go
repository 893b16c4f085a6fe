package taskendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// The fault-injection endpoints, as the Amazon ECS agent serves them
// (ecs-agent/tmds/handlers/fault/v1):
//
//	POST /api/TOKEN/fault/v1/network-blackhole-port/{start,stop,status}
//	POST /api/TOKEN/fault/v1/network-latency/{start,stop,status}
//	POST /api/TOKEN/fault/v1/network-packet-loss/{start,stop,status}
//
// TOKEN is a container's metadata token (the last part of ECS_CONTAINER_METADATA_URI_V4); the fault
// goes to that container's task, which must have enableFaultInjection and run in awsvpc or host
// network mode. Every answer is a JSON object, {"Status": "running"|"stopped"|"not-running"} or
// {"Error": "..."}: 400 for a bad request or a task that does not allow faults, 404 for an unknown
// token, 409 for a second network-latency or network-packet-loss fault, 500 when the fault could
// not be applied or checked (a request times out after 5 seconds). Each route takes one request per
// source address every 5 seconds (429 beyond that), as the ECS agent's. Unlike the ECS agent, Berth
// answers a token only to its task's own addresses and the host's (404 to anyone else).

// FaultInjector applies network faults inside a task's network namespace (the host's own for a
// host-mode task); *faultinject.Injector is the agent's. It must be safe for concurrent use, and
// every method returns when ctx ends. An error wrapping context.DeadlineExceeded is a timeout.
type FaultInjector interface {
	// StartBlackholePort drops f's traffic; a black hole with the same port, protocol and traffic
	// type that runs already is left as it is.
	StartBlackholePort(ctx context.Context, t *task.Task, f BlackholePort) error
	// StopBlackholePort removes that black hole; one that does not run is not an error.
	StopBlackholePort(ctx context.Context, t *task.Task, f BlackholePort) error
	// BlackholePortRunning reports whether that black hole runs.
	BlackholePortRunning(ctx context.Context, t *task.Task, f BlackholePort) (bool, error)
	// StartNetem starts a latency or packet-loss fault. It fails with ErrLatencyRunning or
	// ErrPacketLossRunning when either runs already: a task has one of them at a time.
	StartNetem(ctx context.Context, t *task.Task, f Netem) error
	// StopNetem removes the task's fault of this kind; none running is not an error.
	StopNetem(ctx context.Context, t *task.Task, kind NetemKind) error
	// NetemRunning reports which of the two faults runs.
	NetemRunning(ctx context.Context, t *task.Task) (latency, packetLoss bool, err error)
}

// BlackholePort is a network-blackhole-port fault: the task's Protocol traffic to Port, coming in
// (TrafficType ingress) or going out (egress), is dropped, but for the SourcesToFilter addresses.
type BlackholePort struct {
	Port            uint16
	Protocol        string // tcp or udp
	TrafficType     string // ingress or egress
	SourcesToFilter []string
}

// NetemKind is the kind of a tc netem fault.
type NetemKind string

// The two netem faults, named as in their paths.
const (
	NetemLatency    NetemKind = "network-latency"
	NetemPacketLoss NetemKind = "network-packet-loss"
)

// Netem is a network-latency fault (Kind NetemLatency: DelayMilliseconds with JitterMilliseconds)
// or a network-packet-loss fault (LossPercent) on the traffic to Sources, but for SourcesToFilter,
// in FlowsPercent of its flows (1 to 100).
type Netem struct {
	Kind               NetemKind
	DelayMilliseconds  uint64
	JitterMilliseconds uint64
	LossPercent        uint64
	Sources            []string
	SourcesToFilter    []string
	FlowsPercent       int
}

// ErrLatencyRunning and ErrPacketLossRunning are StartNetem's refusals when a fault of either kind
// runs already (errdefs.ErrConflict); their text is the ECS agent's answer.
var (
	ErrLatencyRunning    = errdefs.New(errdefs.ErrConflict, "There is already one network latency fault running")
	ErrPacketLossRunning = errdefs.New(errdefs.ErrConflict, "There is already one network packet loss fault running")
)

// The ECS agent's wording of the fault endpoints' answers.
const (
	faultInternalError      = "internal error"
	faultInvalidModeError   = "%s mode is not supported. Please use either host or awsvpc mode."
	faultNotEnabledError    = "enableFaultInjection is not enabled for task: %s"
	faultTimedOutError      = "%s: request timed out"
	faultMissingFieldError  = "required parameter %s is missing"
	faultMissingBodyError   = "required request body is missing"
	faultZeroDelayError     = "required either DelayMilliseconds or JitterMilliseconds to be non-zero"
	faultInvalidValueError  = "invalid value %s for parameter %s"
	faultRateLimitedMessage = "You have reached maximum request limit"
	// faultNoTargetError, followed by the request's token, is the answer when the task's network
	// (its namespace, or the host's default interface for a host-mode task) cannot be found.
	faultNoTargetError = "failed to get task metadata due to internal server error for container: "
)

// ErrNoFaultTarget is wrapped by a FaultInjector's error when the task's network cannot be found:
// an awsvpc task's namespace, or the host's default-route interface for a host-mode task.
var ErrNoFaultTarget = errors.New("the task's network cannot be found")

// faultRequestTimeout bounds the work of one request, as the ECS agent's requestTimeoutSeconds.
const faultRequestTimeout = 5 * time.Second

// faultBodyLimit bounds a request body; the largest valid one (lists of addresses) is far smaller.
const faultBodyLimit = 64 << 10

// The ECS agent's rate of the fault routes: one request per source address and route every 5
// seconds.
const (
	faultRate  = 0.2
	faultBurst = 1
)

// taskEndpointAddress is the task endpoint's address, which a black hole of egress port 80 leaves
// reachable, as the ECS agent does.
const taskEndpointAddress = "169.254.170.2"

// taskEndpointPort is the port containers reach the task endpoint on.
const taskEndpointPort = 80

// faultResponse is every fault answer's body.
type faultResponse struct {
	Status string `json:"Status,omitempty"`
	Error  string `json:"Error,omitempty"`
}

// The request bodies. Their type and field names are the ECS agent's, and so are the texts of Go's
// JSON errors about them, which are answered as they are.
type (
	// NetworkBlackholePortRequest is the body of every network-blackhole-port request.
	NetworkBlackholePortRequest struct {
		Port            *uint16   `json:"Port"`
		Protocol        *string   `json:"Protocol"`
		TrafficType     *string   `json:"TrafficType"`
		SourcesToFilter []*string `json:"SourcesToFilter,omitempty"`
	}
	// NetworkLatencyRequest is the body of a network-latency start.
	NetworkLatencyRequest struct {
		DelayMilliseconds  *uint64   `json:"DelayMilliseconds"`
		JitterMilliseconds *uint64   `json:"JitterMilliseconds"`
		Sources            []*string `json:"Sources"`
		SourcesToFilter    []*string `json:"SourcesToFilter,omitempty"`
		FlowsPercent       *int      `json:"FlowsPercent"`
	}
	// NetworkPacketLossRequest is the body of a network-packet-loss start.
	NetworkPacketLossRequest struct {
		LossPercent     *uint64   `json:"LossPercent"`
		Sources         []*string `json:"Sources"`
		SourcesToFilter []*string `json:"SourcesToFilter,omitempty"`
		FlowsPercent    *int      `json:"FlowsPercent"`
	}
)

// faultRoute is a parsed fault path.
type faultRoute struct {
	token string
	fault string // network-blackhole-port, network-latency, network-packet-loss
	op    string // start, stop, status
}

// parseFaultPath maps /api/TOKEN/fault/v1/FAULT/OP onto its route; ok is false for any other path.
func parseFaultPath(p string) (faultRoute, bool) {
	rest, ok := strings.CutPrefix(p, "/api/")
	if !ok {
		return faultRoute{}, false
	}
	token, rest, ok := strings.Cut(rest, "/")
	if !ok || token == "" {
		return faultRoute{}, false
	}
	rest, ok = strings.CutPrefix(rest, "fault/v1/")
	if !ok {
		return faultRoute{}, false
	}
	fault, op, ok := strings.Cut(rest, "/")
	if !ok {
		return faultRoute{}, false
	}
	switch fault {
	case "network-blackhole-port", string(NetemLatency), string(NetemPacketLoss):
	default:
		return faultRoute{}, false
	}
	switch op {
	case "start", "stop", "status":
	default:
		return faultRoute{}, false
	}
	return faultRoute{token: token, fault: fault, op: op}, true
}

// isFaultPath reports whether p is one of the fault routes.
func isFaultPath(p string) bool {
	_, ok := parseFaultPath(p)
	return ok
}

// newFaultLimiter returns the fault routes' limiter.
func newFaultLimiter(clock clockwork.Clock) *limiter {
	return &limiter{rate: faultRate, burst: faultBurst, max: maxLimiters, clock: clock,
		buckets: map[string]*bucket{}, lastSweep: clock.Now()}
}

// requestType is the ECS agent's name of the request in its answers: "start network-latency",
// "check status network-blackhole-port".
func (fr faultRoute) requestType() string {
	if fr.op == "status" {
		return "check status " + fr.fault
	}
	return fr.op + " " + fr.fault
}

// serveFault answers a fault route (a clean path parseFaultPath accepts).
func (h *Handler) serveFault(w http.ResponseWriter, r *http.Request) {
	fr, _ := parseFaultPath(r.URL.Path)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		w.WriteHeader(http.StatusMethodNotAllowed) // no body, as the ECS agent's router answers
		return
	}
	src, _ := sourceAddr(r) // an address that does not parse is invalid: no task's and not the host's
	if !h.faultLimits.allow(fr.fault + "/" + fr.op + " " + src.String()) {
		h.refused.Note(refusedThrottled, "path_kind", "fault", "source", src.String())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(faultRateLimitedMessage))
		return
	}
	reqType := fr.requestType()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, faultBodyLimit))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, faultResponse{Error: err.Error()})
		return
	}
	// The ECS agent reads no body for the netem faults' stop and status.
	var bh BlackholePort
	var nm Netem
	if fr.fault == "network-blackhole-port" || fr.op == "start" {
		var msg string
		bh, nm, msg = decodeFault(fr.fault, body)
		if msg != "" {
			writeJSON(w, http.StatusBadRequest, faultResponse{Error: msg})
			return
		}
	}
	t, status, msg := h.faultTask(fr.token, src)
	if msg != "" {
		h.log.Debug("fault request refused", "request", reqType, "token", taskcreds.ShortID(fr.token), "reason", msg)
		writeJSON(w, status, faultResponse{Error: msg})
		return
	}
	if h.faults == nil {
		writeJSON(w, http.StatusInternalServerError, faultResponse{Error: faultInternalError})
		return
	}
	if fr.fault == "network-blackhole-port" && bh.TrafficType == "egress" && bh.Port == taskEndpointPort {
		bh.SourcesToFilter = addSource(bh.SourcesToFilter, taskEndpointAddress)
	}
	ctx, cancel := context.WithTimeout(r.Context(), faultRequestTimeout)
	defer cancel()
	result, err := h.applyFault(ctx, fr, t, bh, nm)
	switch {
	case errors.Is(err, ErrLatencyRunning) || errors.Is(err, ErrPacketLossRunning):
		writeJSON(w, http.StatusConflict, faultResponse{Error: err.Error()})
		return
	case errors.Is(err, ErrNoFaultTarget):
		h.log.Warn("fault request failed", "task_arn", t.Arn, "request", reqType, "error", err)
		writeJSON(w, http.StatusInternalServerError, faultResponse{Error: faultNoTargetError + fr.token})
		return
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		h.log.Warn("fault request timed out", "task_arn", t.Arn, "request", reqType, "error", err)
		writeJSON(w, http.StatusInternalServerError, faultResponse{Error: fmt.Sprintf(faultTimedOutError, reqType)})
		return
	case err != nil:
		h.log.Warn("fault request failed", "task_arn", t.Arn, "request", reqType, "error", err)
		writeJSON(w, http.StatusInternalServerError, faultResponse{Error: faultInternalError})
		return
	}
	if fr.op != "status" {
		h.log.Info("fault "+result, "task_arn", t.Arn, "fault", fr.fault)
	}
	writeJSON(w, http.StatusOK, faultResponse{Status: result})
}

// applyFault does what the route asks and returns the status answered.
func (h *Handler) applyFault(ctx context.Context, fr faultRoute, t *task.Task, bh BlackholePort, nm Netem) (string, error) {
	running := func(on bool, err error) (string, error) {
		if on {
			return "running", err
		}
		return "not-running", err
	}
	kind := NetemKind(fr.fault)
	switch {
	case fr.fault == "network-blackhole-port" && fr.op == "start":
		return "running", h.faults.StartBlackholePort(ctx, t, bh)
	case fr.fault == "network-blackhole-port" && fr.op == "stop":
		return "stopped", h.faults.StopBlackholePort(ctx, t, bh)
	case fr.fault == "network-blackhole-port":
		return running(h.faults.BlackholePortRunning(ctx, t, bh))
	case fr.op == "start":
		return "running", h.faults.StartNetem(ctx, t, nm)
	case fr.op == "stop":
		return "stopped", h.faults.StopNetem(ctx, t, kind)
	}
	latency, loss, err := h.faults.NetemRunning(ctx, t)
	if kind == NetemLatency {
		return running(latency, err)
	}
	return running(loss, err)
}

// faultTask returns the task of the token, or the status and text of the ECS agent's refusal: an
// unknown token, a task without enableFaultInjection, a network mode faults do not apply to. A
// request from neither the task's own addresses nor the host's is answered as an unknown token (a
// Berth addition: a leaked token lets no other task's container break this task's network).
func (h *Handler) faultTask(token string, src netip.Addr) (*task.Task, int, string) {
	t, _, ok := h.tasks.ByToken(token)
	if !ok || !ownsAddress(t, src) && !(src.IsValid() && h.isHost(src)) {
		return nil, http.StatusNotFound, "unable to get task arn from request: unable to get task Arn from v3 endpoint ID: " + token
	}
	if !t.EnableFaultInjection {
		return nil, http.StatusBadRequest, fmt.Sprintf(faultNotEnabledError, t.Arn)
	}
	if t.NetworkMode != task.NetworkAWSVPC && t.NetworkMode != task.NetworkHost {
		return nil, http.StatusBadRequest, fmt.Sprintf(faultInvalidModeError, t.NetworkMode)
	}
	if t.NetworkMode == task.NetworkAWSVPC && t.NetworkNamespace() == "" {
		return nil, http.StatusInternalServerError, faultNoTargetError + token
	}
	return t, 0, ""
}

// decodeFault decodes and validates a body as the ECS agent does, returning its answer's text when
// the body is refused.
func decodeFault(fault string, body []byte) (BlackholePort, Netem, string) {
	var bh BlackholePort
	var nm Netem
	var err error
	switch fault {
	case "network-blackhole-port":
		var req NetworkBlackholePortRequest
		if err = decodeBody(body, &req); err == nil {
			bh, err = req.validate()
		}
	case string(NetemLatency):
		var req NetworkLatencyRequest
		if err = decodeBody(body, &req); err == nil {
			nm, err = req.validate()
		}
	default:
		var req NetworkPacketLossRequest
		if err = decodeBody(body, &req); err == nil {
			nm, err = req.validate()
		}
	}
	if err != nil {
		return bh, nm, err.Error()
	}
	return bh, nm, ""
}

// decodeBody decodes the first JSON value of body into v, as the ECS agent's json.Decoder does
// (unknown fields and what follows the value are ignored); an empty body is refused by name.
func decodeBody(body []byte, v any) error {
	err := json.NewDecoder(strings.NewReader(string(body))).Decode(v)
	if errors.Is(err, io.EOF) {
		return errors.New(faultMissingBodyError)
	}
	return err
}

func (req NetworkBlackholePortRequest) validate() (BlackholePort, error) {
	switch {
	case req.Port == nil:
		return BlackholePort{}, fmt.Errorf(faultMissingFieldError, "Port")
	case req.Protocol == nil || *req.Protocol == "":
		return BlackholePort{}, fmt.Errorf(faultMissingFieldError, "Protocol")
	case req.TrafficType == nil || *req.TrafficType == "":
		return BlackholePort{}, fmt.Errorf(faultMissingFieldError, "TrafficType")
	case *req.Protocol != "tcp" && *req.Protocol != "udp":
		return BlackholePort{}, fmt.Errorf(faultInvalidValueError, *req.Protocol, "Protocol")
	case *req.TrafficType != "ingress" && *req.TrafficType != "egress":
		return BlackholePort{}, fmt.Errorf(faultInvalidValueError, *req.TrafficType, "TrafficType")
	}
	filter, err := addresses(req.SourcesToFilter, "SourcesToFilter")
	if err != nil {
		return BlackholePort{}, err
	}
	return BlackholePort{Port: *req.Port, Protocol: *req.Protocol, TrafficType: *req.TrafficType, SourcesToFilter: filter}, nil
}

func (req NetworkLatencyRequest) validate() (Netem, error) {
	switch {
	case req.DelayMilliseconds == nil:
		return Netem{}, fmt.Errorf(faultMissingFieldError, "DelayMilliseconds")
	case req.JitterMilliseconds == nil:
		return Netem{}, fmt.Errorf(faultMissingFieldError, "JitterMilliseconds")
	case *req.DelayMilliseconds == 0 && *req.JitterMilliseconds == 0:
		return Netem{}, errors.New(faultZeroDelayError)
	}
	n, err := netemTargets(req.Sources, req.SourcesToFilter, req.FlowsPercent)
	n.Kind, n.DelayMilliseconds, n.JitterMilliseconds = NetemLatency, *req.DelayMilliseconds, *req.JitterMilliseconds
	return n, err
}

func (req NetworkPacketLossRequest) validate() (Netem, error) {
	switch {
	case req.LossPercent == nil:
		return Netem{}, fmt.Errorf(faultMissingFieldError, "LossPercent")
	case *req.LossPercent < 1 || *req.LossPercent > 100:
		// The ECS agent prints the value as an int.
		return Netem{}, fmt.Errorf(faultInvalidValueError, strconv.Itoa(int(*req.LossPercent)), "LossPercent")
	}
	n, err := netemTargets(req.Sources, req.SourcesToFilter, req.FlowsPercent)
	n.Kind, n.LossPercent = NetemPacketLoss, *req.LossPercent
	return n, err
}

// netemTargets validates what the two netem requests share, in the ECS agent's order.
func netemTargets(sources, filter []*string, flows *int) (Netem, error) {
	if len(sources) == 0 {
		return Netem{}, fmt.Errorf(faultMissingFieldError, "Sources")
	}
	n := Netem{FlowsPercent: 100}
	var err error
	if n.Sources, err = addresses(sources, "Sources"); err != nil {
		return Netem{}, err
	}
	if n.SourcesToFilter, err = addresses(filter, "SourcesToFilter"); err != nil {
		return Netem{}, err
	}
	if flows != nil {
		if *flows <= 0 || *flows > 100 {
			return Netem{}, fmt.Errorf(faultInvalidValueError, strconv.Itoa(*flows), "flowsPercent")
		}
		n.FlowsPercent = *flows
	}
	return n, nil
}

// addresses checks that each entry is an IPv4 or IPv6 address or CIDR block (a null entry is the
// empty string, refused) and returns them.
func addresses(list []*string, field string) ([]string, error) {
	out := make([]string, 0, len(list))
	for _, p := range list {
		var s string
		if p != nil {
			s = *p
		}
		if net.ParseIP(s) == nil {
			if _, _, err := net.ParseCIDR(s); err != nil {
				return nil, fmt.Errorf(faultInvalidValueError, s, field)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// addSource returns list with s added unless it has it.
func addSource(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

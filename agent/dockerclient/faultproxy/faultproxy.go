// Package faultproxy is a fault-injecting HTTP forwarder placed between a
// Docker Engine and a registry in tests and benchmarks. It listens on
// 127.0.0.1, forwards every request to one target registry, counts requests
// by kind (manifest, blob, other) and, when a Rule matches, answers with an
// error status, resets the connection part-way through the response, or
// stalls.
//
// Rules are checked in order; the first rule that matches a request and
// still has uses left (Times) decides it. A rule with Probability in (0, 1)
// fires on that fraction of matching requests, drawn from a random source
// seeded by Config.Seed so that runs are repeatable.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Kind classifies a registry request by the object it fetches.
type Kind int

// Request kinds; KindAny matches every kind in a Rule.
const (
	KindAny Kind = iota
	KindManifest
	KindBlob
	KindOther
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindManifest:
		return "manifest"
	case KindBlob:
		return "blob"
	case KindOther:
		return "other"
	}
	return "any"
}

var (
	manifestPath = regexp.MustCompile(`^/v2/.+/manifests/[^/]+$`)
	blobPath     = regexp.MustCompile(`^/v2/.+/blobs/[^/]+$`)
)

// Classify returns the kind of a registry API path ("/v2/<name>/manifests/<ref>"
// is a manifest, "/v2/<name>/blobs/<digest>" a blob, anything else other).
func Classify(path string) Kind {
	switch {
	case manifestPath.MatchString(path):
		return KindManifest
	case blobPath.MatchString(path):
		return KindBlob
	}
	return KindOther
}

// FaultType says what a Fault does.
type FaultType int

// Fault types.
const (
	// FaultStatus answers with an HTTP status without contacting the target.
	FaultStatus FaultType = iota + 1
	// FaultReset forwards the request, then resets the TCP connection
	// (SO_LINGER 0) after AfterBytes bytes of the response body.
	FaultReset
	// FaultStall forwards the request and, after AfterBytes bytes of the
	// response body, sends nothing for For (or until Release when For is 0),
	// then continues.
	FaultStall
)

// Fault is one injected failure; build it with Status, Reset or Stall.
type Fault struct {
	Type       FaultType
	Code       int         // FaultStatus: the status code
	Header     http.Header // FaultStatus: extra response headers (e.g. Retry-After)
	Body       string      // FaultStatus: response body; empty means a registry-style JSON error
	AfterBytes int64       // FaultReset, FaultStall: body bytes sent before the fault
	For        time.Duration
}

// Status returns a fault answering with code and a registry-style JSON error body.
func Status(code int) Fault { return Fault{Type: FaultStatus, Code: code} }

// Reset returns a fault resetting the connection after n response body
// bytes; n 0 resets before the response headers are sent. A body shorter
// than n is reset just before its end, so the fault always shows.
func Reset(n int64) Fault { return Fault{Type: FaultReset, AfterBytes: n} }

// Stall returns a fault that goes silent after n response body bytes (n 0:
// before the response headers) for d, or until Proxy.Release when d is 0.
// A stall also ends when the client goes away.
func Stall(n int64, d time.Duration) Fault {
	return Fault{Type: FaultStall, AfterBytes: n, For: d}
}

// String describes the fault for request logs.
func (f Fault) String() string {
	switch f.Type {
	case FaultStatus:
		return fmt.Sprintf("status %d", f.Code)
	case FaultReset:
		return fmt.Sprintf("reset after %d bytes", f.AfterBytes)
	case FaultStall:
		if f.For == 0 {
			return fmt.Sprintf("stall after %d bytes until released", f.AfterBytes)
		}
		return fmt.Sprintf("stall after %d bytes for %v", f.AfterBytes, f.For)
	}
	return "none"
}

// Rule selects requests and the fault injected into them.
type Rule struct {
	Kind   Kind           // KindAny matches all kinds
	Method string         // empty matches all methods
	Path   *regexp.Regexp // nil matches all paths
	// Times limits the rule to the first Times matching requests; 0 means unlimited.
	Times int
	// Probability in (0, 1) fires the rule on that fraction of matching
	// requests; 0 (or >= 1) fires it on every one.
	Probability float64
	// Faults holds the fault to inject; with several, one is chosen at random per request.
	Faults []Fault
}

// Request records one request the proxy received.
type Request struct {
	Method string
	Path   string
	Kind   Kind
	Fault  string // empty when forwarded untouched
}

// Config configures a Proxy.
type Config struct {
	// Target is the registry's base URL, e.g. "http://127.0.0.1:5000".
	Target string
	// Seed seeds the random source used for Probability and for choosing among Faults.
	Seed uint64
	// Rules are installed at start; see SetRules.
	Rules []Rule
}

// Proxy is a running fault-injecting forwarder; it is safe for concurrent use.
type Proxy struct {
	target    *url.URL
	listener  net.Listener
	server    *http.Server
	transport *http.Transport

	mu       sync.Mutex
	rules    []ruleState
	rnd      *rand.Rand
	counts   map[Kind]int
	requests []Request
	release  chan struct{}
}

type ruleState struct {
	Rule
	used int
}

// Start listens on 127.0.0.1:0 and serves until Close.
func Start(cfg Config) (*Proxy, error) {
	target, err := url.Parse(cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", cfg.Target, err)
	}
	if target.Scheme != "http" && target.Scheme != "https" || target.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q: want http(s)://host:port", cfg.Target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		target:    target,
		listener:  ln,
		transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64, Proxy: nil},
		rnd:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		counts:    map[Kind]int{},
		release:   make(chan struct{}),
	}
	p.SetRules(cfg.Rules...)
	p.server = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.server.Serve(ln) }()
	return p, nil
}

// Addr returns the proxy's host:port, usable as an image's registry part.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// URL returns the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Close stops the proxy, releases pending stalls and closes open connections.
func (p *Proxy) Close() error {
	p.Release()
	err := p.server.Close()
	p.transport.CloseIdleConnections()
	return err
}

// SetRules replaces the rules (and their use counts) and re-arms Release.
func (p *Proxy) SetRules(rules ...Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
		p.release = make(chan struct{})
	default:
	}
	p.rules = p.rules[:0]
	for _, r := range rules {
		p.rules = append(p.rules, ruleState{Rule: r})
	}
}

// Release ends every stall waiting for release, now and later (until the
// next SetRules call re-arms it).
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// Count returns how many requests of kind k were received (KindAny: all).
func (p *Proxy) Count(k Kind) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k == KindAny {
		n := 0
		for _, c := range p.counts {
			n += c
		}
		return n
	}
	return p.counts[k]
}

// CountMethod returns how many requests of kind k with the given method were received.
func (p *Proxy) CountMethod(k Kind, method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.requests {
		if (k == KindAny || r.Kind == k) && r.Method == method {
			n++
		}
	}
	return n
}

// Faulted returns how many requests had a fault injected.
func (p *Proxy) Faulted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.requests {
		if r.Fault != "" {
			n++
		}
	}
	return n
}

// Requests returns a copy of the request log, oldest first.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// ResetCounts clears the counters and the request log; rules keep their use counts.
func (p *Proxy) ResetCounts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = map[Kind]int{}
	p.requests = nil
}

// decide records the request and returns the fault to inject, if any.
func (p *Proxy) decide(r *http.Request) (Fault, bool, <-chan struct{}) {
	kind := Classify(r.URL.Path)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[kind]++
	rec := Request{Method: r.Method, Path: r.URL.Path, Kind: kind}
	var (
		fault Fault
		hit   bool
	)
	for i := range p.rules {
		rs := &p.rules[i]
		if !rs.matches(kind, r) || len(rs.Faults) == 0 {
			continue
		}
		if rs.Times > 0 && rs.used >= rs.Times {
			continue
		}
		if rs.Probability > 0 && rs.Probability < 1 && p.rnd.Float64() >= rs.Probability {
			continue
		}
		rs.used++
		fault = rs.Faults[p.rnd.IntN(len(rs.Faults))]
		hit = true
		rec.Fault = fault.String()
		break
	}
	p.requests = append(p.requests, rec)
	return fault, hit, p.release
}

func (rs *ruleState) matches(kind Kind, r *http.Request) bool {
	if rs.Kind != KindAny && rs.Kind != kind {
		return false
	}
	if rs.Method != "" && !strings.EqualFold(rs.Method, r.Method) {
		return false
	}
	if rs.Path != nil && !rs.Path.MatchString(r.URL.Path) {
		return false
	}
	return true
}

// hopHeaders are connection-level headers a forwarder must not copy.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	fault, hit, release := p.decide(r)
	if hit {
		switch fault.Type {
		case FaultStatus:
			writeStatus(w, fault)
			return
		case FaultReset:
			if fault.AfterBytes <= 0 {
				resetConn(w, false)
				return
			}
		case FaultStall:
			if fault.AfterBytes <= 0 && !stall(r.Context(), fault.For, release) {
				return
			}
		}
	}

	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.targetURL(r), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Host = r.Host // the registry builds Location URLs from Host
	out.ContentLength = r.ContentLength
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)

	body := io.Reader(resp.Body)
	if hit && (fault.Type == FaultReset || fault.Type == FaultStall) {
		limit := fault.AfterBytes
		if fault.Type == FaultReset && resp.ContentLength >= 0 && limit >= resp.ContentLength {
			limit = max(resp.ContentLength-1, 0)
		}
		if _, err := copyFlush(w, io.LimitReader(resp.Body, limit)); err != nil {
			return
		}
		if fault.Type == FaultReset {
			resetConn(w, true)
			return
		}
		if !stall(r.Context(), fault.For, release) {
			return
		}
	}
	_, _ = copyFlush(w, body)
}

func (p *Proxy) targetURL(r *http.Request) string {
	u := *p.target
	u.Path = strings.TrimRight(p.target.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	return u.String()
}

// copyFlush copies src to w, flushing after every read so that faults land
// at a precise byte offset on the wire.
func copyFlush(w http.ResponseWriter, src io.Reader) (int64, error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32*1024)
	var n int64
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			if err := rc.Flush(); err != nil {
				return n, err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// stall waits for d (or release when d is 0); it returns false when the
// client went away first.
func stall(ctx context.Context, d time.Duration, release <-chan struct{}) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-timer:
	case <-release:
	}
	return true
}

func writeStatus(w http.ResponseWriter, f Fault) {
	for k, vs := range f.Header {
		w.Header()[k] = vs
	}
	body := f.Body
	if body == "" {
		code := "UNKNOWN"
		switch f.Code {
		case http.StatusServiceUnavailable:
			code = "UNAVAILABLE"
		case http.StatusTooManyRequests:
			code = "TOOMANYREQUESTS"
		case http.StatusUnauthorized:
			code = "UNAUTHORIZED"
		case http.StatusForbidden:
			code = "DENIED"
		}
		body = fmt.Sprintf(`{"errors":[{"code":%q,"message":%q}]}`, code, strings.ToLower(http.StatusText(f.Code)))
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(f.Code)
	_, _ = io.WriteString(w, body)
}

// resetConn takes over the connection and closes it with SO_LINGER 0, so
// the peer sees a TCP RST rather than an orderly close. With flush, what
// was written so far reaches the peer first; without it nothing is sent.
func resetConn(w http.ResponseWriter, flush bool) {
	rc := http.NewResponseController(w)
	if flush {
		_ = rc.Flush()
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection without a response
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

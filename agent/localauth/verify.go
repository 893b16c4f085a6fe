package localauth

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/jonboulle/clockwork"
)

// Service is the signing name of the ECS API and of ACS.
const Service = "ecs"

// MaxSkew is how far a request's X-Amz-Date may be from the control plane's clock, as AWS allows.
const MaxSkew = 15 * time.Minute

const (
	algorithm   = "AWS4-HMAC-SHA256"
	amzDate     = "20060102T150405Z"
	scopeSuffix = "aws4_request"
)

// Error is a refused request in ECS's terms: the exception name, the HTTP status and the message the
// AWS CLI prints.
type Error struct {
	Status  int
	Type    string
	Message string
}

// Error formats the error as "Type: message".
func (e *Error) Error() string { return e.Type + ": " + e.Message }

func missingToken() *Error {
	return &Error{Status: http.StatusForbidden, Type: "MissingAuthenticationTokenException", Message: "Missing Authentication Token"}
}

func unrecognizedClient() *Error {
	return &Error{Status: http.StatusBadRequest, Type: "UnrecognizedClientException",
		Message: "The security token included in the request is invalid."}
}

func invalidSignature(format string, args ...any) *Error {
	return &Error{Status: http.StatusForbidden, Type: "InvalidSignatureException", Message: fmt.Sprintf(format, args...)}
}

// Verifier checks that a request is meant for this host's control plane and signed with its keys.
// The control plane serves its own host only: every other Host header is refused.
type Verifier struct {
	keys  Keys
	clock clockwork.Clock
}

// NewVerifier returns a Verifier for keys. A nil clock is the wall clock.
func NewVerifier(keys Keys, clock clockwork.Clock) *Verifier {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Verifier{keys: keys, clock: clock}
}

// CheckHost refuses a Host header that is not a loopback name or address: a web page that reaches
// the control plane through DNS rebinding names its own host there, and other hosts are not served.
func (v *Verifier) CheckHost(host string) *Error {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	if IsLoopback(name) {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Type: "AccessDeniedException",
		Message: fmt.Sprintf("Host %q is not a loopback name or address: the embedded control plane serves its own host only", host)}
}

// IsLoopback reports whether a host name or address (without port) is "localhost" or a loopback
// address.
func IsLoopback(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if name == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(name)
	return err == nil && a.Unmap().IsLoopback()
}

// VerifyHeaders makes every check of Verify that does not need the body: Host, the Authorization
// header's form and access key, and the request's time. A server calls it before reading a body.
func (v *Verifier) VerifyHeaders(r *http.Request) *Error {
	_, err := v.checkHeaders(r)
	return err
}

// Verify checks the request's Host and its SigV4 signature (Authorization header, any region, the
// ecs service) over body, the whole request body already read. It returns nil when the request may
// proceed. Its work is linear in the size of the request.
func (v *Verifier) Verify(r *http.Request, body []byte) *Error {
	a, err := v.checkHeaders(r)
	if err != nil {
		return err
	}
	stamp := r.Header.Get("X-Amz-Date")
	payload := sha256.Sum256(body)
	creq := canonicalRequest(r, a.signedHeaders, hex.EncodeToString(payload[:]))
	scope := a.date + "/" + a.region + "/" + a.service + "/" + scopeSuffix
	hashed := sha256.Sum256([]byte(creq))
	toSign := algorithm + "\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(hashed[:])
	want := hmacSHA256(signingKey(v.keys.SecretAccessKey, a.date, a.region, a.service), toSign)
	got, herr := hex.DecodeString(a.signature)
	if herr != nil || !hmac.Equal(got, want) {
		return invalidSignature("The request signature we calculated does not match the signature you provided. " +
			"Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")
	}
	return nil
}

func (v *Verifier) checkHeaders(r *http.Request) (authorization, *Error) {
	if err := v.CheckHost(r.Host); err != nil {
		return authorization{}, err
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return authorization{}, missingToken()
	}
	a, err := parseAuthorization(auth)
	if err != nil {
		return a, err
	}
	if !hmac.Equal([]byte(a.accessKeyID), []byte(v.keys.AccessKeyID)) {
		return a, unrecognizedClient()
	}
	if a.service != Service {
		return a, invalidSignature("Credential should be scoped to correct service: '%s'.", Service)
	}
	if !slices.Contains(a.signedHeaders, "host") || !slices.Contains(a.signedHeaders, "x-amz-date") {
		return a, invalidSignature("'Host' and 'X-Amz-Date' must be signed.")
	}
	stamp := r.Header.Get("X-Amz-Date")
	at, perr := time.Parse(amzDate, stamp)
	if perr != nil {
		return a, invalidSignature("X-Amz-Date %q is not in the form %s.", stamp, amzDate)
	}
	if a.date != stamp[:8] {
		return a, invalidSignature("Credential should be scoped to a valid date: '%s' != '%s'.", a.date, stamp[:8])
	}
	if now := v.clock.Now().UTC(); at.Before(now.Add(-MaxSkew)) || at.After(now.Add(MaxSkew)) {
		return a, invalidSignature("Signature expired: %s is more than 15 minutes from the server's time, %s.", stamp, now.Format(amzDate))
	}
	return a, nil
}

// authorization is the parsed Authorization header.
type authorization struct {
	accessKeyID, date, region, service string
	signedHeaders                      []string
	signature                          string
}

func parseAuthorization(h string) (authorization, *Error) {
	var a authorization
	rest, ok := strings.CutPrefix(h, algorithm+" ")
	if !ok {
		return a, invalidSignature("Authorization header requires the %s algorithm.", algorithm)
	}
	var credential, signed string
	for part := range strings.SplitSeq(rest, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "Credential":
			credential = value
		case "SignedHeaders":
			signed = value
		case "Signature":
			a.signature = value
		}
	}
	if credential == "" || signed == "" || a.signature == "" {
		return a, invalidSignature("Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.")
	}
	scope := strings.Split(credential, "/")
	if len(scope) != 5 || scope[4] != scopeSuffix {
		return a, invalidSignature("Credential should be in the form <access key>/<date>/<region>/<service>/%s.", scopeSuffix)
	}
	a.accessKeyID, a.date, a.region, a.service = scope[0], scope[1], scope[2], scope[3]
	a.signedHeaders = strings.Split(signed, ";")
	return a, nil
}

// canonicalRequest builds SigV4's canonical request from what the server received.
func canonicalRequest(r *http.Request, signedHeaders []string, payloadHash string) string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b.WriteString(escape(path, true)) // every service but S3 encodes the path a second time
	b.WriteByte('\n')
	b.WriteString(canonicalQuery(r.URL.RawQuery))
	b.WriteByte('\n')
	for _, name := range signedHeaders {
		b.WriteString(name)
		b.WriteByte(':')
		b.WriteString(headerValue(r, name))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(signedHeaders, ";"))
	b.WriteByte('\n')
	b.WriteString(payloadHash)
	return b.String()
}

// headerValue is a header's canonical value: its values trimmed, inner runs of spaces collapsed,
// joined by commas.
func headerValue(r *http.Request, name string) string {
	var values []string
	switch name {
	case "host":
		values = []string{r.Host}
	case "content-length":
		// Go's server keeps the header; a request built in process has only the field.
		if values = r.Header.Values(name); len(values) == 0 && r.ContentLength >= 0 {
			values = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	default:
		values = r.Header.Values(name)
	}
	for i, v := range values {
		values[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(values, ",")
}

// canonicalQuery sorts the query's parameters by name, then value, each encoded as SigV4 wants.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type param struct{ k, v string }
	var params []param
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		params = append(params, param{escape(k, false), escape(v, false)})
	}
	slices.SortFunc(params, func(a, b param) int {
		return cmp.Or(strings.Compare(a.k, b.k), strings.Compare(a.v, b.v))
	})
	var b strings.Builder
	for i, p := range params {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String()
}

// escape percent-encodes every byte but RFC 3986's unreserved characters (and '/' when keepSlash).
func escape(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~',
			keepSlash && c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, scopeSuffix)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// Sign signs r, whose body is body, with keys as the AWS SDK does, for the ECS API in region at now.
func Sign(ctx context.Context, r *http.Request, body []byte, keys Keys, region string, now time.Time) error {
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: keys.AccessKeyID, SecretAccessKey: keys.SecretAccessKey}
	return v4.NewSigner().SignHTTP(ctx, creds, r, hex.EncodeToString(sum[:]), Service, region, now)
}

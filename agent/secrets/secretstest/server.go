// Package secretstest is a stand-in for SSM Parameter Store, Secrets Manager and S3 for tests: one
// HTTP server on 127.0.0.1 speaking the wire protocols the AWS SDK for Go v2 uses — awsJson1_1
// (POST / with X-Amz-Target AmazonSSM.GetParameters or secretsmanager.GetSecretValue) and S3's REST
// GET /<bucket>/<key> (path style) — with AWS's error shapes. Point the SDK at it with Env.
//
// Every request must carry a SigV4 Authorization header; the signature is not verified, but the
// access key ID and region of its credential scope are recorded. It is safe for concurrent use.
package secretstest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Account is the account ID of the ARNs the stand-in makes up.
const Account = "123456789012"

// Call is one request the stand-in answered.
type Call struct {
	Operation   string // GetParameters, GetSecretValue or GetObject
	AccessKeyID string // from the Authorization header's credential scope
	Region      string // from the Authorization header's credential scope
	Names       int    // GetParameters: how many names were asked
}

// Server is the stand-in. Create it with New.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:<port>.
	URL string

	mu      sync.Mutex
	params  map[string]string  // name → value
	secrets map[string]*secret // by ARN and by name
	objects map[string][]byte  // "<bucket>/<key>" → body
	denied  map[string]bool    // access key IDs
	failing int                // the next failing requests answer 500
	calls   []Call
}

// secret is one Secrets Manager secret and its versions.
type secret struct {
	arn, name string
	versions  []*version
}

type version struct {
	id     string
	value  string
	stages []string
}

// New starts a stand-in that t's clean-up stops.
func New(t testing.TB) *Server {
	s := &Server{
		params:  make(map[string]string),
		secrets: make(map[string]*secret),
		objects: make(map[string][]byte),
		denied:  make(map[string]bool),
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Env returns the SDK's endpoint variables pointing SSM, Secrets Manager and S3 at the stand-in, for
// t.Setenv.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL_SSM":             s.URL,
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": s.URL,
		"AWS_ENDPOINT_URL_S3":              s.URL,
	}
}

// PointSDK points the AWS SDK of a test process at the stand-in (Env) and shields the test from the
// host's AWS configuration: empty config and credentials files, IMDS off, and none of the AWS_*
// variables that choose a profile, an endpoint, a region, retries or keys. t.Setenv restores them.
func (s *Server) PointSDK(t testing.TB) {
	t.Helper()
	for k, v := range s.Env() {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

// PutParameter stores an SSM parameter (its type is reported as SecureString). name is a
// parameter name ("/app/db" or "db"), not an ARN; GetParameters finds it by name and by any
// arn:<partition>:ssm:<region>:<account>:parameter/<name> ARN.
func (s *Server) PutParameter(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.params[name] = value
}

// PutSecret stores a new version of a Secrets Manager secret with the given staging labels (none:
// AWSCURRENT), taking them from older versions; the version that loses AWSCURRENT gets
// AWSPREVIOUS. arnOrName is the secret's ARN
// (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>) or its name, in which
// case its ARN is made up in us-east-1. The secret is found by ARN and by name.
func (s *Server) PutSecret(arnOrName, secretString string, versionStages ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	arn, name := arnOrName, arnOrName
	if rest, ok := strings.CutPrefix(arnOrName, "arn:"); ok {
		f := strings.SplitN(rest, ":", 6)
		name = f[len(f)-1]
		if i := len(name) - 7; i > 0 && name[i] == '-' {
			name = name[:i] // the random suffix AWS adds
		}
	} else {
		arn = "arn:aws:secretsmanager:us-east-1:" + Account + ":secret:" + name + "-AbCdEf"
	}
	sec := s.secrets[arn]
	if sec == nil {
		sec = &secret{arn: arn, name: name}
		s.secrets[arn], s.secrets[name] = sec, sec
	}
	if len(versionStages) == 0 {
		versionStages = []string{"AWSCURRENT"}
	}
	current := slices.Contains(versionStages, "AWSCURRENT")
	for _, v := range sec.versions {
		wasCurrent := slices.Contains(v.stages, "AWSCURRENT")
		v.stages = slices.DeleteFunc(v.stages, func(st string) bool {
			return slices.Contains(versionStages, st) || current && st == "AWSPREVIOUS"
		})
		if current && wasCurrent {
			v.stages = append(v.stages, "AWSPREVIOUS") // as Secrets Manager does when AWSCURRENT moves
		}
	}
	sec.versions = append(sec.versions, &version{
		id:     fmt.Sprintf("00000000-0000-4000-8000-%012d", len(sec.versions)+1),
		value:  secretString,
		stages: slices.Clone(versionStages),
	})
}

// PutObject stores an S3 object.
func (s *Server) PutObject(bucket, key string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[bucket+"/"+key] = slices.Clone(body)
}

// Deny makes requests signed with accessKeyID fail: AccessDeniedException (400) for SSM and
// Secrets Manager, AccessDenied (403) for S3.
func (s *Server) Deny(accessKeyID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.denied[accessKeyID] = true
}

// FailNext makes the next n requests answer 500 (InternalServerError, or S3's InternalError).
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = n
}

// AccessKeys returns the access key IDs of the signed requests, in the order they came.
func (s *Server) AccessKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, len(s.calls))
	for i, c := range s.calls {
		keys[i] = c.AccessKeyID
	}
	return keys
}

// Calls returns the signed requests answered, in the order they came.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// apiError is an error answer in either protocol.
type apiError struct {
	status        int
	code, message string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	isJSON := r.Method == http.MethodPost && target != ""
	fail := func(e apiError) {
		if isJSON {
			writeJSONError(w, e)
		} else {
			writeXMLError(w, e)
		}
	}
	key, region, ok := credentialScope(r.Header.Get("Authorization"))
	if !ok {
		if isJSON {
			fail(apiError{http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token"})
		} else {
			fail(apiError{http.StatusForbidden, "AccessDenied", "Access Denied"})
		}
		return
	}
	op := "GetObject"
	if isJSON {
		_, op, _ = strings.Cut(target, ".")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Operation: op, AccessKeyID: key, Region: region}
	defer func() { s.calls = append(s.calls, call) }()
	switch {
	case s.failing > 0:
		s.failing--
		if isJSON {
			fail(apiError{http.StatusInternalServerError, "InternalServerError", "We encountered an internal error. Please try again."})
		} else {
			fail(apiError{http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again."})
		}
		return
	case s.denied[key] && isJSON:
		fail(apiError{http.StatusBadRequest, "AccessDeniedException", "User: " + key + " is not authorized to perform: " + op})
		return
	case s.denied[key]:
		fail(apiError{http.StatusForbidden, "AccessDenied", "Access Denied"})
		return
	}
	switch {
	case target == "AmazonSSM.GetParameters" && isJSON:
		var in struct {
			Names          []string
			WithDecryption bool
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			fail(apiError{http.StatusBadRequest, "SerializationException", "cannot parse the request body"})
			return
		}
		call.Names = len(in.Names)
		out, e := s.getParameters(in.Names, region)
		if e != nil {
			fail(*e)
			return
		}
		writeJSON(w, out)
	case target == "secretsmanager.GetSecretValue" && isJSON:
		var in struct{ SecretId, VersionId, VersionStage string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			fail(apiError{http.StatusBadRequest, "SerializationException", "cannot parse the request body"})
			return
		}
		out, e := s.getSecretValue(in.SecretId, in.VersionId, in.VersionStage)
		if e != nil {
			fail(*e)
			return
		}
		writeJSON(w, out)
	case isJSON:
		fail(apiError{http.StatusBadRequest, "UnknownOperationException", "the stand-in does not serve " + target})
	case r.Method == http.MethodGet:
		s.getObject(w, r)
	default:
		fail(apiError{http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource."})
	}
}

// credentialScope returns the access key ID and region of a SigV4 Authorization header
// ("AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, …").
func credentialScope(auth string) (key, region string, ok bool) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", "", false
	}
	_, cred, ok := strings.Cut(rest, "Credential=")
	if !ok {
		return "", "", false
	}
	cred, _, _ = strings.Cut(cred, ",")
	f := strings.Split(cred, "/")
	if len(f) != 5 || f[0] == "" || f[4] != "aws4_request" {
		return "", "", false
	}
	return f[0], f[2], true
}

// ssmParameter is types.Parameter on the wire.
type ssmParameter struct {
	ARN, Name, Type, Value, DataType string
	Version                          int64
	LastModifiedDate                 float64
}

func (s *Server) getParameters(names []string, region string) (any, *apiError) {
	if len(names) == 0 || len(names) > 10 {
		return nil, &apiError{http.StatusBadRequest, "ValidationException", fmt.Sprintf("1 validation error detected: Value at 'names' failed to satisfy constraint: Member must have length less than or equal to 10 and greater than or equal to 1 (got %d)", len(names))}
	}
	out := struct {
		Parameters        []ssmParameter
		InvalidParameters []string
	}{Parameters: []ssmParameter{}, InvalidParameters: []string{}}
	for _, asked := range names {
		name, arn := asked, ""
		if rest, ok := strings.CutPrefix(asked, "arn:"); ok {
			f := strings.SplitN(rest, ":", 5)
			res, _ := strings.CutPrefix(f[len(f)-1], "parameter")
			arn, name = asked, res
			if _, ok := s.params[name]; !ok {
				name = strings.TrimPrefix(name, "/") // parameter/db is the ARN of "db"
			}
		}
		v, ok := s.params[name]
		if !ok {
			out.InvalidParameters = append(out.InvalidParameters, asked)
			continue
		}
		if arn == "" {
			arn = "arn:aws:ssm:" + region + ":" + Account + ":parameter/" + strings.TrimPrefix(name, "/")
		}
		out.Parameters = append(out.Parameters, ssmParameter{
			ARN: arn, Name: name, Type: "SecureString", Value: v, DataType: "text", Version: 1,
			LastModifiedDate: float64(time.Now().Unix()),
		})
	}
	return out, nil
}

func (s *Server) getSecretValue(id, versionID, stage string) (any, *apiError) {
	notFound := &apiError{http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret."}
	sec := s.secrets[id]
	if sec == nil {
		return nil, notFound
	}
	if versionID == "" && stage == "" {
		stage = "AWSCURRENT"
	}
	for _, v := range sec.versions {
		if (versionID == "" || v.id == versionID) && (stage == "" || slices.Contains(v.stages, stage)) {
			return struct {
				ARN, Name, VersionId, SecretString string
				VersionStages                      []string
				CreatedDate                        float64
			}{sec.arn, sec.name, v.id, v.value, v.stages, float64(time.Now().Unix())}, nil
		}
	}
	notFound.message = "Secrets Manager can't find the specified secret value for VersionId: " + versionID + ", VersionStage: " + stage
	return nil, notFound
}

func (s *Server) getObject(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, _, _ := strings.Cut(path, "/")
	body, ok := s.objects[path]
	if !ok {
		e := apiError{http.StatusNotFound, "NoSuchKey", "The specified key does not exist."}
		if !s.hasBucket(bucket) {
			e = apiError{http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist."}
		}
		writeXMLError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Header().Set("ETag", fmt.Sprintf(`"%d"`, len(body)))
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	w.Header().Set("x-amz-request-id", "0000000000000000")
	_, _ = w.Write(body)
}

// hasBucket reports whether some object is in bucket.
func (s *Server) hasBucket(bucket string) bool {
	for k := range s.objects {
		if strings.HasPrefix(k, bucket+"/") {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", "00000000-0000-0000-0000-000000000000")
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", "00000000-0000-0000-0000-000000000000")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.code, "message": e.message})
}

func writeXMLError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", "0000000000000000")
	w.WriteHeader(e.status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string
		Message   string
		RequestID string `xml:"RequestId"`
	}{Code: e.code, Message: e.message, RequestID: "0000000000000000"})
}

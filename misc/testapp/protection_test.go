package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestProtection: protection GETs or PUTs $ECS_AGENT_URI/task-protection/v1/state and prints the
// status and body, a refusal too (exit 1 then).
func TestProtection(t *testing.T) {
	const token = "/api/1f0b3c2a5d4e4f608a7b9c8d7e6f5a4b"
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "refuse") {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"Code":"AccessDeniedException"}}`)
			return
		}
		fmt.Fprint(w, `{"protection":{"ProtectionEnabled":true}}`)
	}))
	defer srv.Close()
	t.Setenv(agentURIEnv, srv.URL+token)

	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{"protection"}, &stdout, &stderr); code != 0 ||
		stdout.String() != "status=200\n"+`{"protection":{"ProtectionEnabled":true}}`+"\n" {
		t.Errorf("GET: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := mainExit([]string{"protection", "-put", `{"ProtectionEnabled":true}`}, &stdout, &stderr); code != 0 {
		t.Errorf("PUT: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := mainExit([]string{"protection", "-put", `{"refuse":1}`}, &stdout, &stderr); code != 1 ||
		stdout.String() != "status=403\n"+`{"error":{"Code":"AccessDeniedException"}}`+"\n" || !strings.Contains(stderr.String(), "403") {
		t.Errorf("a 403: exit %d, stdout %q, stderr %q; want 1 with the status and body on stdout", code, stdout.String(), stderr.String())
	}
	mu.Lock()
	want := []string{"GET " + token + "/task-protection/v1/state ", "PUT " + token + `/task-protection/v1/state {"ProtectionEnabled":true}`,
		"PUT " + token + `/task-protection/v1/state {"refuse":1}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("requests = %q, want %q", got, want)
	}
	mu.Unlock()

	t.Setenv(agentURIEnv, "")
	stderr.Reset()
	if code := mainExit([]string{"protection"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), agentURIEnv) {
		t.Errorf("without %s: exit %d, stderr %q; want 1 naming the variable", agentURIEnv, code, stderr.String())
	}
}

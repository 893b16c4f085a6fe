package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The fault mode POSTs its body to the task's fault route (from ECS_AGENT_URI, or derived from the
// metadata URI), prints the status and body, and exits by -want.
func TestFaultMode(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		if strings.HasSuffix(r.URL.Path, "/start") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"Error":"internal error"}`))
			return
		}
		_, _ = w.Write([]byte(`{"Status":"running"}`))
	}))
	defer srv.Close()
	t.Setenv(agentURIEnv, srv.URL+"/api/tok1")

	var stdout, stderr bytes.Buffer
	if code := mainExit([]string{"fault", "-fault", "network-blackhole-port", "-op", "status", "-body", `{"Port":80}`}, &stdout, &stderr); code != 0 ||
		stdout.String() != "200 {\"Status\":\"running\"}\n" {
		t.Errorf("status: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := mainExit([]string{"fault", "-fault", "network-latency", "-op", "start"}, &stdout, &stderr); code != 1 ||
		stdout.String() != "500 {\"Error\":\"internal error\"}\n" {
		t.Errorf("a 500 when 200 is wanted: exit %d, stdout %q", code, stdout.String())
	}
	t.Setenv(agentURIEnv, srv.URL+"/api/tok2")
	stdout.Reset()
	if code := mainExit([]string{"fault", "-fault", "network-latency", "-op", "start", "-want", "500"}, &stdout, &stderr); code != 0 {
		t.Errorf("a 500 wanted: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	want := []string{
		"POST /api/tok1/fault/v1/network-blackhole-port/status {\"Port\":80}",
		"POST /api/tok1/fault/v1/network-latency/start ",
		"POST /api/tok2/fault/v1/network-latency/start ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests = %q, want %q", got, want)
	}
	t.Setenv(agentURIEnv, "")
	stderr.Reset()
	if code := mainExit([]string{"fault", "-fault", "x", "-op", "start"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), agentURIEnv) {
		t.Errorf("outside a task: exit %d, stderr %q", code, stderr.String())
	}
	if code := mainExit([]string{"fault", "-op", "start"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("without -fault: exit %d, want 2", code)
	}
}

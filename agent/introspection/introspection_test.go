package introspection

import (
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fixedMetadata Metadata

func (f fixedMetadata) Metadata() Metadata { return Metadata(f) }

func TestIntrospection(t *testing.T) {
	arn := "arn:aws:ecs:us-west-2:012345678901:container-instance/default/abc"
	v := "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d)"
	tests := []struct {
		name       string
		meta       Metadata
		method     string
		path       string
		wantStatus int
		wantType   string
		wantBody   string
	}{
		{"metadata before registration", Metadata{Cluster: "default", Version: v}, "GET", "/v1/metadata", http.StatusOK, "application/json",
			`{"Cluster":"default","ContainerInstanceArn":null,"Version":"` + v + `"}`},
		{"metadata after registration", Metadata{Cluster: "prod", ContainerInstanceArn: &arn, Version: v}, "GET", "/v1/metadata", http.StatusOK,
			"application/json", `{"Cluster":"prod","ContainerInstanceArn":"` + arn + `","Version":"` + v + `"}`},
		{"any method", Metadata{Cluster: "prod", Version: v}, "POST", "/v1/metadata", http.StatusOK, "application/json",
			`{"Cluster":"prod","ContainerInstanceArn":null,"Version":"` + v + `"}`},
		{"berth's extensions", Metadata{Cluster: "prod", Version: v, StateSaveError: "disk full", EC2InstanceID: "i-0abc", AvailabilityZone: "us-west-2a"},
			"GET", "/v1/metadata", http.StatusOK, "application/json",
			`{"Cluster":"prod","ContainerInstanceArn":null,"Version":"` + v + `","StateSaveError":"disk full","EC2InstanceID":"i-0abc","AvailabilityZone":"us-west-2a"}`},
		{"host NAT missing", Metadata{Cluster: "prod", Version: v, HostNATError: "no rule"}, "GET", "/v1/metadata", http.StatusOK, "application/json",
			`{"Cluster":"prod","ContainerInstanceArn":null,"Version":"` + v + `","HostNATError":"no rule"}`},
		{"root lists the routes", Metadata{}, "GET", "/", http.StatusOK, "text/plain; charset=utf-8",
			`{"AvailableCommands":["/v1/metadata","/v1/tasks","/license"]}`},
		{"any other path lists the routes", Metadata{}, "DELETE", "/v1/nope", http.StatusOK, "text/plain; charset=utf-8",
			`{"AvailableCommands":["/v1/metadata","/v1/tasks","/license"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewIntrospection(fixedMetadata(tt.meta), fixedTasks(nil), nil).ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			require.Equal(t, tt.wantStatus, rec.Code)
			assert.Equal(t, tt.wantType, rec.Header().Get("Content-Type"))
			assert.Equal(t, tt.wantBody, rec.Body.String())
		})
	}
}

func TestIntrospectionMetrics(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("berth_up 1\n")) })
	h := NewIntrospection(fixedMetadata{}, fixedTasks(nil), metrics)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	assert.Equal(t, "berth_up 1\n", rec.Body.String())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, `{"AvailableCommands":["/v1/metadata","/v1/tasks","/license","/metrics"]}`, rec.Body.String())
}

func TestLicense(t *testing.T) {
	rec := httptest.NewRecorder()
	NewIntrospection(fixedMetadata{}, fixedTasks(nil), nil).ServeHTTP(rec, httptest.NewRequest("GET", "/license", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/plain", rec.Header().Get("Content-Type"))
	body := rec.Body.String()
	notice, modules, ok := strings.Cut(body, "\n"+strings.Repeat("=", 80)+"\n")
	require.True(t, ok, "the sections are parted as the ECS agent parts them")
	assert.True(t, strings.HasPrefix(notice, "Berth\nLicensed under the Apache License, Version 2.0"), notice)
	assert.Contains(t, notice, "Berth is not the Amazon ECS container agent. It speaks the wires of Amazon ECS agent v1.105.1.")
	assert.True(t, strings.HasPrefix(modules, "Third-party Go modules in this build, each under its own license:\n"), modules)

	build := &debug.BuildInfo{Deps: []*debug.Module{{Path: "github.com/jonboulle/clockwork", Version: "v0.5.0"},
		{Path: "go.etcd.io/bbolt", Version: "v1.4.0"}}}
	_, modules, _ = strings.Cut(licenseText(build), "\n"+strings.Repeat("=", 80)+"\n")
	assert.Equal(t, "Third-party Go modules in this build, each under its own license:\n"+
		"github.com/jonboulle/clockwork v0.5.0\ngo.etcd.io/bbolt v1.4.0\n", modules, "the modules compiled in")
}

package introspection

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fixedMetadata Metadata

func (f fixedMetadata) Metadata() Metadata { return Metadata(f) }

func TestIntrospection(t *testing.T) {
	arn := "arn:aws:ecs:us-west-2:012345678901:container-instance/default/abc"
	tests := []struct {
		name       string
		meta       Metadata
		method     string
		path       string
		wantStatus int
		wantBody   string
	}{
		{name: "metadata before registration", meta: Metadata{Cluster: "default", Version: "v1"}, method: "GET", path: "/v1/metadata",
			wantStatus: http.StatusOK, wantBody: `{"Cluster":"default","ContainerInstanceArn":null,"Version":"v1"}`},
		{name: "metadata after registration", meta: Metadata{Cluster: "prod", ContainerInstanceArn: &arn, Version: "v1"}, method: "GET", path: "/v1/metadata",
			wantStatus: http.StatusOK, wantBody: `{"Cluster":"prod","ContainerInstanceArn":"` + arn + `","Version":"v1"}`},
		{name: "unknown path", method: "GET", path: "/v1/nope", wantStatus: http.StatusNotFound, wantBody: `{"error":"no such endpoint: /v1/nope"}`},
		{name: "wrong method", method: "POST", path: "/v1/metadata", wantStatus: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewIntrospection(fixedMetadata(tt.meta), fixedTasks(nil), nil).ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			require.Equal(t, tt.wantStatus, rec.Code)
			if tt.wantBody != "" {
				assert.JSONEq(t, tt.wantBody, rec.Body.String())
				assert.True(t, json.Valid(rec.Body.Bytes()))
				assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			}
		})
	}
}

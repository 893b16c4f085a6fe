// Package introspection serves the agent's introspection API on loopback: /v1/metadata, /v1/tasks and
// /metrics. Response shapes follow the ECS agent's.
package introspection

import (
	"encoding/json"
	"net/http"
)

// Metadata is the body of GET /v1/metadata, in the ECS agent's shape. ContainerInstanceArn is null
// until the agent has registered.
type Metadata struct {
	Cluster              string  `json:"Cluster"`
	ContainerInstanceArn *string `json:"ContainerInstanceArn"`
	Version              string  `json:"Version"`
	// StateSaveError (Berth extension) is set while saving task state fails (a full disk): the
	// affected tasks wait, and `berth healthcheck` reports the agent unhealthy.
	StateSaveError string `json:"StateSaveError,omitempty"`
	// EC2InstanceID and AvailabilityZone (Berth extension) name the EC2 instance in ecs mode, from
	// its instance identity document; absent off EC2 and in local mode.
	EC2InstanceID    string `json:"EC2InstanceID,omitempty"`
	AvailabilityZone string `json:"AvailabilityZone,omitempty"`
}

// MetadataSource supplies the agent's current metadata. It must be safe for concurrent use.
type MetadataSource interface {
	Metadata() Metadata
}

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error string `json:"error"`
}

// NewIntrospection returns the introspection API's handler: /v1/metadata, /v1/tasks and, when metrics
// is not nil, /metrics.
func NewIntrospection(meta MetadataSource, tasks TaskSource, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/metadata", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, meta.Metadata())
	})
	mux.HandleFunc("GET /v1/tasks", serveTasks(tasks))
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no such endpoint: " + r.URL.Path})
	})
	return mux
}

// writeJSON writes v as the JSON response body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

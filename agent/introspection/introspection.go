// Package introspection serves the agent's introspection API on loopback: /v1/metadata, /v1/tasks
// and /license with the paths, JSON shapes, status codes and bodies of the Amazon ECS agent's
// (docs/parity/INTROSPECTION.md), and Berth's /metrics. Any other path is answered the list of
// routes, as the ECS agent answers it; every route answers any method.
package introspection

import (
	"encoding/json"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/berth-agent/berth/agent/version"
)

// Metadata is the body of GET /v1/metadata, in the ECS agent's shape. ContainerInstanceArn is null
// until the agent has registered.
type Metadata struct {
	Cluster              string  `json:"Cluster"`
	ContainerInstanceArn *string `json:"ContainerInstanceArn"`
	Version              string  `json:"Version"` // AgentVersion's form
	// StateSaveError (Berth extension) is set while saving task state fails (a full disk): the
	// affected tasks wait, and `berth healthcheck` reports the agent unhealthy.
	StateSaveError string `json:"StateSaveError,omitempty"`
	// HostNATError (Berth extension) is set while the host NAT that takes containers' requests to
	// 169.254.170.2 to the task endpoint is not in place: tasks with a role wait, and `berth
	// healthcheck` reports the agent unhealthy.
	HostNATError string `json:"HostNATError,omitempty"`
	// EC2InstanceID and AvailabilityZone (Berth extension) name the EC2 instance in ecs mode, from
	// its instance identity document; absent off EC2 and in local mode.
	EC2InstanceID    string `json:"EC2InstanceID,omitempty"`
	AvailabilityZone string `json:"AvailabilityZone,omitempty"`
}

// MetadataSource supplies the agent's current metadata. It must be safe for concurrent use.
type MetadataSource interface {
	Metadata() Metadata
}

// licenseNotice opens /license; the modules of the build follow it.
const licenseNotice = `Berth
Licensed under the Apache License, Version 2.0 (the "License"); you may not use this software except
in compliance with the License. You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software distributed under the License is
distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or
implied. See the License for the specific language governing permissions and limitations under the
License.

Berth is not the Amazon ECS container agent. It speaks the wires of Amazon ECS agent v` + version.ECSAgentVersion + `.
`

// licenseSeparator parts the sections of /license, as the ECS agent parts its LICENSE, NOTICE and
// THIRD-PARTY texts.
var licenseSeparator = "\n" + strings.Repeat("=", 80) + "\n"

// licenseText is the body of GET /license: Berth's notice, then the third-party modules compiled
// into the binary, one "path version" a line, from its build information (nil: none known).
func licenseText(build *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString(licenseNotice)
	b.WriteString(licenseSeparator)
	b.WriteString("Third-party Go modules in this build, each under its own license:\n")
	if build != nil {
		for _, m := range build.Deps {
			b.WriteString(m.Path + " " + m.Version + "\n")
		}
	}
	return b.String()
}

// NewIntrospection returns the introspection API's handler: /v1/metadata, /v1/tasks, /license and,
// when metrics is not nil, /metrics; any other path lists them.
func NewIntrospection(meta MetadataSource, tasks TaskSource, metrics http.Handler) http.Handler {
	paths := []string{"/v1/metadata", "/v1/tasks", "/license"}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/metadata", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, meta.Metadata())
	})
	mux.HandleFunc("/v1/tasks", serveTasks(tasks))
	build, _ := debug.ReadBuildInfo()
	license := licenseText(build)
	mux.HandleFunc("/license", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(license))
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
		paths = append(paths, "/metrics")
	}
	commands, _ := json.Marshal(struct{ AvailableCommands []string }{paths})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(commands)
	})
	return mux
}

// writeJSON writes v as the JSON response body with the given status, without a trailing newline,
// as the ECS agent writes it.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Package version reports the build's version. The Makefile sets Version and GitHash with -ldflags -X;
// they are never written at run time.
package version

import "runtime"

// Version is the release version of this build.
var Version = "0.1.0-dev"

// GitHash is the commit this build was made from.
var GitHash = "unknown"

// ECSAgentVersion is the release of the Amazon ECS agent whose wires (ACS, TCS, the ECS API, the task
// endpoints, introspection) this build speaks, as docs/parity records them. Clients and the control
// plane that gate features on the agent's version read this one, not Berth's own.
const ECSAgentVersion = "1.105.1"

// Info is the version information `berth version` prints and the agent reports.
type Info struct {
	Version   string `json:"version"`
	GitHash   string `json:"gitHash"`
	GoVersion string `json:"goVersion"`
}

// Get returns this build's version information.
func Get() Info {
	return Info{Version: Version, GitHash: GitHash, GoVersion: runtime.Version()}
}

// String formats the information as one line.
func (i Info) String() string {
	return "berth " + i.Version + " (" + i.GitHash + ", " + i.GoVersion + ")"
}

// ECSAgentString is the agent's version in the ECS agent's form, "Amazon ECS Agent - v<version>
// (<commit>)", as /v1/metadata's Version and the User-Agent of ECS API calls carry it: the version is
// ECSAgentVersion, which version-gated clients parse, and the parentheses, where the ECS agent puts
// its commit, hold Berth's own version and commit, e.g.
// "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d)".
func (i Info) ECSAgentString() string {
	return "Amazon ECS Agent - v" + ECSAgentVersion + " (berth " + i.Version + " " + i.GitHash + ")"
}

package execagent

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The files of the SSM agent under the dependencies directory, as the ECS agent finds them
// (agent/engine/execcmd, agent/app/agent_capability_unix.go): each version's binaries in
// bin/<version>/, the CA bundle in certs/.
const (
	SSMAgentBin      = "amazon-ssm-agent"
	SSMAgentWorker   = "ssm-agent-worker"
	SessionWorkerBin = "ssm-session-worker"
	CertFile         = "certs/tls-ca-bundle.pem"
)

// requiredBinaries are the binaries every version needs, in the order they are checked.
var requiredBinaries = []string{SSMAgentBin, SSMAgentWorker, SessionWorkerBin}

// ErrIncomplete: no version of the SSM agent under the dependencies directory has every required
// file, or the CA bundle is missing. Its message names the first file missing or unusable.
var ErrIncomplete = errors.New("no complete SSM agent")

// Binaries is the SSM agent version to run: its directory holds every required binary.
type Binaries struct {
	Version string // "3.3.1142.0"
	Dir     string // <deps>/bin/<Version>
	Cert    string // <deps>/certs/tls-ca-bundle.pem
}

// Discover returns the newest complete version of the SSM agent under depsDir: the highest version
// directory of bin/ (names of dot-separated numbers; others are skipped) whose required binaries are
// all regular, executable files, with the CA bundle present as a regular file; every one of those
// files owned by the agent's own user (root) and writable by nobody else, as what the agent runs as
// root in containers must be root's alone. When none is complete
// the error wraps ErrIncomplete and names the first missing or unusable file of the newest version
// (or the bin directory, or the CA bundle). It reads only directory entries, file modes and owners.
func Discover(depsDir string) (Binaries, error) {
	cert := filepath.Join(depsDir, CertFile)
	if err := usable(cert, false); err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	binDir := filepath.Join(depsDir, "bin")
	entries, err := os.ReadDir(binDir)
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	type version struct {
		name  string
		parts []uint64
	}
	var versions []version
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if parts, ok := parseVersion(e.Name()); ok {
			versions = append(versions, version{e.Name(), parts})
		}
	}
	if len(versions) == 0 {
		return Binaries{}, fmt.Errorf("%w: %s holds no version directory", ErrIncomplete, binDir)
	}
	slices.SortFunc(versions, func(a, b version) int { return -compareVersions(a.parts, b.parts) })
	var newestErr error
	for _, v := range versions {
		dir := filepath.Join(binDir, v.name)
		err := completeDir(dir)
		if err == nil {
			return Binaries{Version: v.name, Dir: dir, Cert: cert}, nil
		}
		newestErr = cmp.Or(newestErr, err)
	}
	return Binaries{}, fmt.Errorf("%w: %w", ErrIncomplete, newestErr)
}

// completeDir checks that dir holds every required binary.
func completeDir(dir string) error {
	for _, name := range requiredBinaries {
		if err := usable(filepath.Join(dir, name), true); err != nil {
			return err
		}
	}
	return nil
}

// usable checks that path is a regular file (following symbolic links), executable by its owner
// when exec is set, owned by the agent's user and not writable by group or others. The error names
// the path.
func usable(path string, exec bool) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: missing", path)
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: not a regular file", path)
	case exec && fi.Mode().Perm()&0o100 == 0:
		return fmt.Errorf("%s: not executable", path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s: writable by group or others (chmod go-w)", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not by the agent's user (chown root)", path, st.Uid)
	}
	return nil
}

// parseVersion parses a version directory's name: numbers separated by dots ("3.0.236.0").
func parseVersion(name string) ([]uint64, bool) {
	var parts []uint64
	for p := range strings.SplitSeq(name, ".") {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, false
		}
		parts = append(parts, n)
	}
	return parts, true
}

// compareVersions compares versions part by part, a missing part counting as 0 ("3" == "3.0").
func compareVersions(a, b []uint64) int {
	for i := range max(len(a), len(b)) {
		var x, y uint64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
)

// runFileMax bounds what is read of a run file.
const runFileMax = 64 << 10

// agentLookup is how a command found the running agent it talks to.
type agentLookup struct {
	// path is the run file read; "" when ECS_DATADIR was configured and the run file was not read.
	path string
	// pid is the agent's that the run file named, when it was used.
	pid int
	// why says why the run file was not used, when it was read and was not.
	why string
}

// hint says, for an error, where the command looked for the agent: the run file's agent, or why
// no agent was found in it; "" when the configuration named the agent (ECS_DATADIR).
func (l agentLookup) hint() string {
	switch {
	case l.path == "":
		return ""
	case l.pid != 0:
		return fmt.Sprintf(" (the agent with pid %d, from %s)", l.pid, l.path)
	}
	return fmt.Sprintf(" (no running agent found in %s: %s)", l.path, l.why)
}

// fixDataDir is what to do when the command cannot find the running agent by itself.
const fixDataDir = "set ECS_DATADIR to the running agent's data directory (make run's is .run/data in the checkout)"

// Configuration keys the run file stands in for while they are not configured.
const (
	keyDataDir   = "ECS_DATADIR"
	keyIntroAddr = "ECS_INTROSPECTION_ADDR"
	keyLocalCP   = "ECS_LOCAL_CONTROL_PLANE_ADDR"
	keyCluster   = "ECS_CLUSTER"
	keyAWSRegion = "AWS_DEFAULT_REGION"
)

// locateAgent points res's configuration at the running agent. When ECS_DATADIR is configured
// (flag, environment or a file), that is the agent, and the run file is not read. Otherwise the
// run file (app.RunFilePath) gives the data directory, and the introspection and embedded control
// plane addresses, the cluster, the mode and the region wherever those are not configured either.
// A run file that is not there leaves the configuration as it is; one that is stale or not to be
// trusted too, with a note on stderr.
func locateAgent(res *config.Result, environ []string, stderr io.Writer) agentLookup {
	if res.Origins[keyDataDir].Kind != config.SourceDefault {
		return agentLookup{}
	}
	path := app.RunFilePath(environ)
	info, err := readRunFile(path)
	if err != nil {
		if !errors.Is(err, errNoRunFile) {
			fmt.Fprintf(stderr, "berth: ignoring %s: %v\n", path, err)
		}
		return agentLookup{path: path, why: err.Error()}
	}
	cfg, unset := res.Config, func(key string) bool { return res.Origins[key].Kind == config.SourceDefault }
	cfg.DataDir = info.DataDir
	if info.IntrospectionAddr != "" && unset(keyIntroAddr) {
		cfg.IntrospectionAddr = info.IntrospectionAddr
	}
	if info.LocalControlPlaneAddr != "" && unset(keyLocalCP) {
		cfg.LocalControlPlaneAddr = info.LocalControlPlaneAddr
	}
	if unset(keyCluster) && info.Cluster != "" && (info.Mode == config.ModeLocal || info.Mode == config.ModeECS) {
		cfg.Cluster, cfg.Mode, cfg.ModeReason = info.Cluster, info.Mode, "the running agent's mode, from "+path
	}
	if info.Region != "" && unset(keyAWSRegion) {
		cfg.AWSRegion = info.Region
	}
	return agentLookup{path: path, pid: info.PID}
}

// errNoRunFile is readRunFile's error when there is no run file.
var errNoRunFile = errors.New("it does not exist")

// readRunFile reads the run file at path; errNoRunFile when there is none. It refuses a run file
// that someone other than root could have written (its owner or its directory's is not root, or
// either is writable by group or others, or it is a symbolic link), since it says which keys to sign
// with and where to send them, and one whose agent is no longer running.
func readRunFile(path string) (app.RunInfo, error) {
	var info app.RunInfo
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return info, errNoRunFile
	case errors.Is(err, syscall.ELOOP):
		return info, errors.New("it is a symbolic link, which the agent never writes")
	case err != nil:
		return info, err
	}
	defer f.Close()
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return info, err
	}
	if err := rootOnly(st, "its directory "+dir); err != nil {
		return info, err
	}
	if st, err = f.Stat(); err != nil {
		return info, err
	}
	if !st.Mode().IsRegular() {
		return info, errors.New("it is not a regular file")
	}
	if err := rootOnly(st, "it"); err != nil {
		return info, err
	}
	if err := json.NewDecoder(io.LimitReader(f, runFileMax)).Decode(&info); err != nil {
		return info, fmt.Errorf("it does not parse: %w", err)
	}
	switch {
	case info.PID <= 0:
		return info, fmt.Errorf("its pid %d is not a process ID", info.PID)
	case !filepath.IsAbs(info.DataDir):
		return info, fmt.Errorf("its dataDir %q is not an absolute path", info.DataDir)
	case !alive(info.PID):
		return info, fmt.Errorf("its agent (pid %d) is not running: the file is stale, left by an agent that did not exit cleanly", info.PID)
	}
	return info, nil
}

// rootOnly refuses a file (what names it in the error) that is not root's or that group or others
// may write.
func rootOnly(st fs.FileInfo, what string) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return fmt.Errorf("%s has no owner to check", what)
	case sys.Uid != 0:
		return fmt.Errorf("%s is owned by uid %d, not root (only root may write the run file and its directory)", what, sys.Uid)
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o; only root may write the run file and its directory)", what, st.Mode().Perm())
	}
	return nil
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

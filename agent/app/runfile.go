package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-agent/berth/agent/atomicfile"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/logger"
)

// DefaultRunFile is where the running agent says where it is, for the commands on its host
// (berth run, stop, drain, ps, exec, logs, healthcheck).
const DefaultRunFile = "/run/berth/agent.json"

// RunFileEnv names the environment variable that moves the run file away from DefaultRunFile; tests
// set it so that the agents they start do not overwrite each other's (or the host's) run file.
const RunFileEnv = "BERTH_RUN_FILE"

// RunFilePath returns the run file's path for the environment environ (KEY=VALUE strings, as
// os.Environ returns them): BERTH_RUN_FILE when it is set and not empty, else DefaultRunFile. A later
// BERTH_RUN_FILE wins, as config.Load reads the environment.
func RunFilePath(environ []string) string {
	path := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, RunFileEnv+"="); ok {
			path = v
		}
	}
	if path == "" {
		return DefaultRunFile
	}
	return path
}

// RunInfo is what the run file holds: how the commands on this host reach the running agent. It
// holds no secret: the embedded control plane's keys stay in the data directory, readable by root
// only.
type RunInfo struct {
	// PID is the agent's process ID; a run file whose process is gone is stale.
	PID int `json:"pid"`
	// DataDir is the agent's ECS_DATADIR, absolute.
	DataDir string `json:"dataDir"`
	// Mode is the control plane the agent talks to, with Cluster its cluster and, in ecs mode,
	// Region its region.
	Mode    config.Mode `json:"mode"`
	Cluster string      `json:"cluster"`
	Region  string      `json:"region,omitempty"`
	// IntrospectionAddr is the introspection API's listen address.
	IntrospectionAddr string `json:"introspectionAddr"`
	// LocalControlPlaneAddr is the embedded control plane's listen address, in local mode only.
	LocalControlPlaneAddr string `json:"localControlPlaneAddr,omitempty"`
	// TaskEndpointAddr is where the task endpoint (task metadata, credentials, the agent API)
	// listens on the host; containers reach it as 169.254.170.2:80.
	TaskEndpointAddr string `json:"taskEndpointAddr"`
}

// publishRunFile writes the run file of this agent, whose listeners s serves, and returns the
// function that removes it at exit if it is still this agent's. A run file that cannot be written
// is logged, not fatal: the commands then find the agent only with ECS_DATADIR set.
func publishRunFile(cfg *config.Config, s *servers, log *logger.Logger) (remove func()) {
	path := RunFilePath(os.Environ())
	info, err := runInfo(cfg, s)
	if err == nil {
		err = writeRunFile(path, info)
	}
	if err != nil {
		log.Warn("the run file cannot be written: berth run, stop, drain and ps find this agent only with its ECS_DATADIR set",
			"path", path, "error", err)
		return func() {}
	}
	log.Info("run file written: the berth commands on this host find the agent through it", "path", path)
	return func() {
		if err := removeRunFile(path, info.PID); err != nil {
			log.Warn("the run file cannot be removed", "path", path, "error", err)
		}
	}
}

// runInfo is the run file of this process, with the configuration cfg and the listeners of s.
func runInfo(cfg *config.Config, s *servers) (RunInfo, error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return RunInfo{}, fmt.Errorf("ECS_DATADIR %q: %w", cfg.DataDir, err)
	}
	info := RunInfo{PID: os.Getpid(), DataDir: dataDir, Mode: cfg.Mode, Cluster: cfg.Cluster,
		IntrospectionAddr: s.introspection.Addr().String(), TaskEndpointAddr: s.taskEndpoint.Addr().String()}
	if cfg.Mode == config.ModeECS {
		info.Region = cfg.AWSRegion
	}
	if s.local != nil {
		info.LocalControlPlaneAddr = s.local.Addr().String()
	}
	return info, nil
}

// writeRunFile writes info to path atomically: a temporary file in the same directory, mode 0644,
// renamed over path, so that a reader sees the old file or the new one, never a part of one. A
// missing directory is created 0755, whatever the umask.
func writeRunFile(path string, info RunInfo) error {
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil { // the umask narrowed it
			return err
		}
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}

// removeRunFile removes the run file at path if it is still process pid's: another agent may have
// replaced it since. A run file already gone is not an error.
func removeRunFile(path string, pid int) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var info RunInfo
	if err := json.Unmarshal(data, &info); err != nil || info.PID != pid {
		return nil // not this agent's: leave it to its writer
	}
	return os.Remove(path)
}

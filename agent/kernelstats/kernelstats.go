// Package kernelstats reads a running container's stats from the kernel — its cgroup's counter
// files and its network namespace's /proc/PID/net/dev — and gives them in the shape of the Docker
// Engine's stats object, so that Berth can sample many containers without asking the Engine for a
// stream each. It starts no goroutines and makes no Docker API calls.
//
// A Reader knows the host's cgroup hierarchies (New); a Handle is one container, resolved once
// from its init process (Reader.Open) and read as often as needed (Reader.Read) until the
// container stops, when reads fail with ErrGone.
//
// What is read, and how it maps to Docker's members, follows the Engine (moby daemon/stats_unix.go)
// and the containerd cgroups library it reads through:
//
//	cgroup v1 (per-controller mounts, possibly co-mounted)
//	  cpu_stats.cpu_usage     cpuacct.usage, cpuacct.usage_percpu, cpuacct.stat (USER_HZ ticks → ns)
//	  cpu_stats.throttling    cpu.stat nr_periods, nr_throttled, throttled_time
//	  memory_stats            memory.usage_in_bytes, .max_usage_in_bytes, .failcnt, .limit_in_bytes,
//	                          memory.stat (the 32 keys Docker passes on, zero when absent)
//	  blkio_stats             the CFQ blkio.*_recursive files when they exist and hold entries, else
//	                          blkio.throttle.io_serviced and .io_service_bytes; every list is [] when
//	                          empty
//	  pids_stats              pids.current, pids.max ("max" is no limit: 0, left out)
//	cgroup v2 (the unified mount)
//	  cpu_stats               cpu.stat usage_usec, user_usec, system_usec, nr_periods, nr_throttled,
//	                          throttled_usec (µs → ns); no percpu_usage
//	  memory_stats            memory.current, memory.max, memory.stat (the 31 keys Docker passes on),
//	                          failcnt from memory.events "oom"; no max_usage
//	  blkio_stats             io.stat rbytes and wbytes as io_service_bytes_recursive "read" and
//	                          "write" entries; the other lists are null
//	  pids_stats              pids.current, pids.max ("max" is 2^64-1, as Docker reports it)
//	both
//	  system_cpu_usage        /proc/stat: the first seven fields of the "cpu" line, ticks → ns
//	  online_cpus             /proc/stat: the number of "cpuN" lines
//	  memory_stats.limit      the host's memory (MemTotal of /proc/meminfo) when the cgroup's limit
//	                          is above it (no limit)
//	  networks                /proc/PID/net/dev, every interface but "lo" and those left out
//
// A file that does not exist contributes nothing (its counters stay zero, its list empty), as
// Docker ignores missing files; a file that does not parse is an error naming it.
//
// A Handle keeps its files open and reads them again from offset 0 (cgroupfs and procfs generate
// a file's content on each read), which costs a fraction of opening them anew: /proc/PID/net/dev
// is opened once, through the process's /proc directory, and so keeps reading the network
// namespace the container had then (as Docker reads its sandbox's). Every read ends by asking
// whether that process still lives (pidfd_send_signal with signal 0 on the /proc directory), so
// a reused PID is never followed.
package kernelstats

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
)

// ErrGone: the container's init process or its cgroup no longer exists (the container stopped).
// It is a finer kind of dockerclient.ErrNotRunning, so errdefs.ErrFailedPrecondition: not
// retriable; open the new process's handle instead.
var ErrGone = errdefs.New(dockerclient.ErrNotRunning, "container gone")

// Config says where the Reader finds the kernel's files.
type Config struct {
	// ProcRoot is where procfs is mounted ("" is "/proc").
	ProcRoot string
	// MountInfo is the mountinfo file read by New ("" is ProcRoot/self/mountinfo).
	MountInfo string
}

// controller is a cgroup hierarchy a Handle reads from (or, for procStat, /proc itself).
type controller uint8

// The controllers: the v1 ones Docker's stats come from, the v2 unified hierarchy, and procfs.
const (
	ctlCPU controller = iota
	ctlCPUAcct
	ctlMemory
	ctlBlkio
	ctlPids
	ctlUnified
	ctlProc
	numControllers
)

// v1Names are the v1 controllers' names, as in mountinfo's super options and /proc/PID/cgroup.
var v1Names = [...]string{ctlCPU: "cpu", ctlCPUAcct: "cpuacct", ctlMemory: "memory", ctlBlkio: "blkio", ctlPids: "pids"}

// mount is where a cgroup hierarchy is mounted: the mount point, and the cgroup mounted there (the
// root field of mountinfo; not "/" when this process runs in a container).
type mount struct {
	root, point string
}

// Reader reads containers' counters on this host. It is safe for concurrent use; it holds no
// open files.
type Reader struct {
	procRoot string
	// v2 is true on a host where the v1 controllers Docker reads are not mounted but the unified
	// hierarchy is (Docker's cgroup v2 mode); a hybrid host reads v1, as Docker does.
	v2 bool
	// mounts are each controller's mounts, in mountinfo's order.
	mounts [numControllers][]mount
	// machineMemory is the host's memory in bytes, Docker's memory limit for a cgroup without one.
	machineMemory uint64
}

// New finds the host's cgroup hierarchies from cfg.MountInfo and its memory from
// ProcRoot/meminfo. An error names the file that is missing or malformed, or says that no
// cgroup hierarchy Docker reads is mounted.
func New(cfg Config) (*Reader, error) {
	r := &Reader{procRoot: cfg.ProcRoot}
	if r.procRoot == "" {
		r.procRoot = "/proc"
	}
	mi := cfg.MountInfo
	if mi == "" {
		mi = filepath.Join(r.procRoot, "self", "mountinfo")
	}
	b, err := os.ReadFile(mi)
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	if err := r.parseMountInfo(mi, b); err != nil {
		return nil, err
	}
	meminfo := filepath.Join(r.procRoot, "meminfo")
	if b, err = os.ReadFile(meminfo); err != nil {
		return nil, fmt.Errorf("host memory: %w", err)
	}
	if r.machineMemory, err = parseMemTotal(meminfo, b); err != nil {
		return nil, err
	}
	return r, nil
}

// CgroupV2 reports whether the Reader reads the v2 unified hierarchy (and so gives Docker's v2
// members) rather than v1 controllers.
func (r *Reader) CgroupV2() bool { return r.v2 }

// parseMountInfo records the cgroup mounts listed in b, the content of the mountinfo file path:
// lines "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS".
func (r *Reader) parseMountInfo(path string, b []byte) error {
	for n, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+4 {
			return fmt.Errorf("%s line %d: want \"ID PARENT DEV ROOT POINT OPTIONS ... - TYPE SOURCE SUPEROPTIONS\", got %q", path, n+1, clip([]byte(line)))
		}
		fsType := f[sep+1]
		if fsType != "cgroup" && fsType != "cgroup2" {
			continue
		}
		root, err := unescapeMountField(f[3])
		if err == nil {
			var point string
			point, err = unescapeMountField(f[4])
			if err == nil {
				r.addMount(fsType, f[sep+3], mount{root: root, point: point})
				continue
			}
		}
		return fmt.Errorf("%s line %d: %w", path, n+1, err)
	}
	for c := range ctlUnified {
		if len(r.mounts[c]) > 0 {
			return nil // v1 (or hybrid: the unified mount beside the v1 controllers)
		}
	}
	if len(r.mounts[ctlUnified]) == 0 {
		return fmt.Errorf("%s: no cgroup mount of cpu, cpuacct, memory, blkio or pids (v1) nor of cgroup2", path)
	}
	r.v2 = true
	return nil
}

// addMount records mount m of a cgroup filesystem: of every controller Docker reads that its
// super options name (v1), or of the unified hierarchy (v2).
func (r *Reader) addMount(fsType, superOptions string, m mount) {
	if fsType == "cgroup2" {
		r.mounts[ctlUnified] = append(r.mounts[ctlUnified], m)
		return
	}
	for _, opt := range strings.Split(superOptions, ",") {
		for c, name := range v1Names {
			if opt == name {
				r.mounts[c] = append(r.mounts[c], m)
			}
		}
	}
}

// unescapeMountField decodes a path of mountinfo, where the kernel writes space, tab, newline and
// backslash as \ooo octal escapes.
func unescapeMountField(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("path %q: truncated escape", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("path %q: bad escape %q", s, s[i:i+4])
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// parseMemTotal returns MemTotal of meminfo content b (the file path), in bytes.
func parseMemTotal(path string, b []byte) (uint64, error) {
	for n := 1; len(b) > 0; n++ {
		var line []byte
		line, b = nextLine(b)
		key, rest := nextField(line)
		if string(key) != "MemTotal:" {
			continue
		}
		num, rest := nextField(rest)
		unit, rest := nextField(rest)
		extra, _ := nextField(rest)
		v, err := parseUint(num)
		if err != nil || string(unit) != "kB" || len(extra) != 0 || v > (1<<64-1)/1024 {
			return 0, fmt.Errorf("%s line %d: want \"MemTotal: N kB\", got %q", path, n, clip(line))
		}
		return v * 1024, nil
	}
	return 0, fmt.Errorf("%s: no MemTotal line", path)
}

// clip returns b for an error message, cut to a readable length.
func clip(b []byte) []byte {
	const max = 120
	if len(b) > max {
		return append(bytes.Clone(b[:max]), "..."...)
	}
	return b
}

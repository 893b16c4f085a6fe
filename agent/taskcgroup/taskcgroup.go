// Package taskcgroup gives a task with task-level CPU or memory its own cgroup, <root>/<taskID>, with
// the limits set, so that Docker can create the task's containers under it (HostConfig.CgroupParent),
// as the ECS agent does with ECS_ENABLE_TASK_CPU_MEM_LIMIT. It works on cgroup v1 (one hierarchy
// per controller, as Docker's cgroupfs driver uses them) and on cgroup v2 (the unified hierarchy).
//
// Limits, as the ECS agent sets them:
//
//	task cpu set     CFS quota = cpu/1024 × period (at least 1000µs)   v1 cpu.cfs_period_us, cpu.cfs_quota_us; v2 cpu.max
//	task cpu unset   shares = max(containers' cpu, 2)                   v1 cpu.shares; v2 cpu.weight (runc's conversion)
//	task memory set  hard limit = memory MiB × 2^20                     v1 memory.limit_in_bytes; v2 memory.max
//	pids limit set   the number of processes (ECS_TASK_PIDS_LIMIT)     pids.max (v1: the pids hierarchy)
//
// The shared root (<root> itself, and on v2 the controllers enabled in its ancestors) is created
// when needed and never removed: other tasks use it.
package taskcgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Defaults and bounds of Config.
const (
	// DefaultFS is the cgroup filesystem mount the Manager uses when Config.FS is empty.
	DefaultFS = "/sys/fs/cgroup"
	// DefaultCPUPeriod is the CFS period when Config.CPUPeriod is zero, as the ECS agent's.
	DefaultCPUPeriod = 100 * time.Millisecond
	// MinCPUPeriod is the shortest Config.CPUPeriod, as for ECS_CGROUP_CPU_PERIOD.
	MinCPUPeriod = 8 * time.Millisecond
	// MaxCPUPeriod is the longest Config.CPUPeriod, as for ECS_CGROUP_CPU_PERIOD.
	MaxCPUPeriod = 100 * time.Millisecond
)

const (
	// minQuotaMicros is the smallest CFS quota the kernel accepts (1ms).
	minQuotaMicros = 1000
	// minShares and maxShares are the kernel's bounds on cpu.shares.
	minShares = 2
	maxShares = 262144
	// defaultShares and defaultWeight are the kernel's defaults, written when a reused cgroup goes
	// from shares to a quota.
	defaultShares = 1024
	defaultWeight = 100
)

// The cgroup v2 controllers enabled for the task cgroups: the ones whose limits Docker sets.
var v2Controllers = []string{"cpu", "memory", "pids"}

// ErrBusy is the class of a Remove that failed because a task cgroup still holds processes (or a
// child cgroup that does); Remove may succeed once they have exited. It is an errdefs.ErrConflict,
// and Remove marks the error retriable (errdefs.IsRetriable).
var ErrBusy = errdefs.New(errdefs.ErrConflict, "cgroup busy")

// Limits are a task's resource limits in ECS units.
type Limits struct {
	// CPUUnits is the task cpu in ECS units (1024 = 1 vCPU); 0: unset, so ContainerCPUUnits
	// gives the task cgroup's CPU shares.
	CPUUnits int
	// MemoryMiB is the task memory hard limit in MiB; 0: unset (no limit).
	MemoryMiB int
	// ContainerCPUUnits is the sum of the task's containers' cpu, used for the shares when CPUUnits
	// is 0.
	ContainerCPUUnits int
	// PIDs is the most processes the task's containers may have together; 0: unset (no limit).
	PIDs int
}

// Config configures a Manager.
type Config struct {
	// Root is the cgroup under which task cgroups are made, e.g. "/ecs" (the ECS agent's fixed
	// task cgroup prefix): absolute, clean, not "/".
	Root string
	// CPUPeriod is the CFS period of a task with task cpu (ECS_CGROUP_CPU_PERIOD): MinCPUPeriod to
	// MaxCPUPeriod, a whole number of microseconds; 0: DefaultCPUPeriod.
	CPUPeriod time.Duration
	// FS is where the cgroup filesystem is mounted (the ECS agent's ECS_CGROUP_PATH); "":
	// DefaultFS.
	FS string
	// PIDs is the pids limit of every task (ECS_TASK_PIDS_LIMIT), used where Limits.PIDs is 0; 0:
	// none. With it every task gets a cgroup (EveryTask).
	PIDs int
}

// Manager creates and removes task cgroups. It holds no mutable state: its methods may be called
// concurrently, for different tasks.
type Manager struct {
	root     string // Config.Root
	periodUS int64  // CFS period in µs
	fs       string // Config.FS
	pids     int    // Config.PIDs
	version  int    // 1 or 2
	// hierarchies are, on v1, the directories under fs of every mounted hierarchy Docker's cgroupfs
	// driver joins (hybrid mode's cgroup2 one too), sorted; on v2, just fs.
	hierarchies []string
	cpuDir      string // where cpu.* files live: fs/cpu on v1, fs on v2
	memoryDir   string // where memory.* files live: fs/memory on v1, fs on v2
	pidsDir     string // where pids.* files live: fs/pids on v1 ("" when not mounted), fs on v2
	ops         ops
}

// ops are the operations on the cgroup filesystem whose behaviour a plain directory does not have,
// so that the unit tests can run the same code on a temporary directory.
type ops interface {
	// fsType returns the filesystem magic of the filesystem path is on.
	fsType(path string) (int64, error)
	// mkdir makes a cgroup directory (the kernel fills in its interface files).
	mkdir(path string) error
	// rmdir removes an empty cgroup directory (interface files do not count).
	rmdir(path string) error
}

// kernel is ops on the real cgroup filesystem.
type kernel struct{}

var _ ops = kernel{}

func (kernel) fsType(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}

func (kernel) mkdir(path string) error { return unix.Mkdir(path, 0o755) }
func (kernel) rmdir(path string) error { return unix.Rmdir(path) }

// New returns a Manager for cfg. It detects cgroup v2 (FS is a cgroup2 filesystem) or v1 (FS holds
// the per-controller hierarchies; at least cpu and memory must be mounted) and writes nothing. A
// bad cfg gives an errdefs.ErrInvalidArgument naming the field.
func New(cfg Config) (*Manager, error) {
	return newManager(cfg, kernel{})
}

func newManager(cfg Config, o ops) (*Manager, error) {
	if cfg.Root == "" || !path.IsAbs(cfg.Root) || path.Clean(cfg.Root) != cfg.Root || cfg.Root == "/" {
		return nil, fmt.Errorf("taskcgroup Config.Root %q: must be an absolute, clean path other than \"/\": %w",
			cfg.Root, errdefs.ErrInvalidArgument)
	}
	period := cfg.CPUPeriod
	if period == 0 {
		period = DefaultCPUPeriod
	}
	if period < MinCPUPeriod || period > MaxCPUPeriod || period%time.Microsecond != 0 {
		return nil, fmt.Errorf("taskcgroup Config.CPUPeriod (ECS_CGROUP_CPU_PERIOD) %s: must be a whole number of microseconds from %s to %s: %w",
			period, MinCPUPeriod, MaxCPUPeriod, errdefs.ErrInvalidArgument)
	}
	fs := cfg.FS
	if fs == "" {
		fs = DefaultFS
	}
	if !filepath.IsAbs(fs) {
		return nil, fmt.Errorf("taskcgroup Config.FS (ECS_CGROUP_PATH) %q: must be an absolute path: %w",
			fs, errdefs.ErrInvalidArgument)
	}
	fs, err := filepath.EvalSymlinks(fs)
	if err != nil {
		return nil, fmt.Errorf("taskcgroup Config.FS (ECS_CGROUP_PATH): %w", err)
	}
	m := &Manager{root: cfg.Root, periodUS: period.Microseconds(), fs: fs, pids: cfg.PIDs, ops: o}

	magic, err := o.fsType(fs)
	if err != nil {
		return nil, fmt.Errorf("taskcgroup: statfs %s: %w", fs, err)
	}
	if magic == unix.CGROUP2_SUPER_MAGIC {
		m.version = 2
		m.hierarchies = []string{fs}
		m.cpuDir, m.memoryDir, m.pidsDir = fs, fs, fs
		return m, nil
	}
	if magic == unix.CGROUP_SUPER_MAGIC {
		return nil, fmt.Errorf("taskcgroup Config.FS (ECS_CGROUP_PATH) %s: is one cgroup v1 hierarchy, not the directory that holds them: %w",
			fs, errdefs.ErrInvalidArgument)
	}
	m.version = 1
	entries, err := os.ReadDir(fs)
	if err != nil {
		return nil, fmt.Errorf("taskcgroup: list cgroup hierarchies: %w", err)
	}
	for _, e := range entries {
		// A co-mounted hierarchy ("cpu,cpuacct") also has symbolic links ("cpu", "cpuacct") to it:
		// take the directory once.
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(fs, e.Name())
		magic, err := o.fsType(dir)
		if err != nil {
			return nil, fmt.Errorf("taskcgroup: statfs %s: %w", dir, err)
		}
		// The v1 hierarchies, and in hybrid mode the cgroup2 one ("unified"), which holds no
		// controllers but in which runc's cgroupfs driver makes the container's cgroup (and so
		// the task's, which would outlive the task if Remove did not remove it).
		if magic == unix.CGROUP_SUPER_MAGIC || magic == unix.CGROUP2_SUPER_MAGIC {
			m.hierarchies = append(m.hierarchies, dir)
		}
	}
	for _, c := range []string{"cpu", "memory"} {
		dir := filepath.Join(fs, c)
		real, err := filepath.EvalSymlinks(dir)
		if err == nil && slices.Contains(m.hierarchies, real) {
			continue
		}
		return nil, fmt.Errorf("taskcgroup: cgroup v1 controller %s is not mounted at %s: %w",
			c, dir, errdefs.ErrFailedPrecondition)
	}
	m.cpuDir, m.memoryDir = filepath.Join(fs, "cpu"), filepath.Join(fs, "memory")
	if real, err := filepath.EvalSymlinks(filepath.Join(fs, "pids")); err == nil && slices.Contains(m.hierarchies, real) {
		m.pidsDir = filepath.Join(fs, "pids")
	}
	return m, nil
}

// Version returns the cgroup version in use, 1 or 2.
func (m *Manager) Version() int { return m.version }

// EveryTask reports whether every task gets a cgroup, not only those with task-level cpu or memory:
// a pids limit (Config.PIDs) applies to all of them.
func (m *Manager) EveryTask() bool { return m.pids > 0 }

// taskIDPattern is what a task ID may be: ECS task IDs are 32 hex digits or UUID-like.
var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func checkTaskID(taskID string) error {
	if !taskIDPattern.MatchString(taskID) {
		return fmt.Errorf("task ID %q: must be 1 to 64 of A-Z, a-z, 0-9, _ and -: %w", taskID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Path returns the cgroupfs directory of the task's memory (v1) or unified (v2) cgroup, where its
// limits can be read back. It does not check that the cgroup exists; a bad task ID gives an
// errdefs.ErrInvalidArgument.
func (m *Manager) Path(taskID string) (string, error) {
	if err := checkTaskID(taskID); err != nil {
		return "", err
	}
	return filepath.Join(m.memoryDir, m.root, taskID), nil
}

// write is one interface file to write, relative to a controller directory.
type write struct {
	dir   string // m.cpuDir or m.memoryDir
	file  string
	value string
}

// Create makes the task's cgroup and sets its limits, and returns the value for Docker's
// HostConfig.CgroupParent (Root/taskID). It is idempotent: an existing cgroup is reused and its
// limits rewritten (a limit unset in l is reset to the kernel's default). On v1 the cgroup is made in
// every mounted hierarchy (and hybrid mode's cgroup2 one); on v2 the cpu, memory and pids controllers are enabled in the
// cgroup.subtree_control of each ancestor. If it fails, it removes the task cgroup directories it
// made (not Root). A bad task ID or limit gives an errdefs.ErrInvalidArgument; a failed write names
// the file and the value.
func (m *Manager) Create(taskID string, l Limits) (parent string, err error) {
	if err := checkTaskID(taskID); err != nil {
		return "", err
	}
	if l.PIDs == 0 {
		l.PIDs = m.pids
	}
	if err := checkLimits(l); err != nil {
		return "", fmt.Errorf("task %s: %w", taskID, err)
	}
	if l.PIDs > 0 && m.pidsDir == "" {
		return "", fmt.Errorf("task %s: a pids limit needs the cgroup v1 pids controller, which is not mounted in %s: %w",
			taskID, m.fs, errdefs.ErrFailedPrecondition)
	}

	var made []string // task cgroup directories this call made, to undo
	defer func() {
		if err == nil {
			return
		}
		for _, dir := range slices.Backward(made) {
			if rmErr := m.ops.rmdir(dir); rmErr != nil && !errors.Is(rmErr, syscall.ENOENT) {
				err = errors.Join(err, fmt.Errorf("roll back: remove %s: %w", dir, rmErr))
			}
		}
	}()

	existed := map[string]bool{} // hierarchy → the task cgroup was there already
	for _, h := range m.hierarchies {
		if err := m.makeRoot(h); err != nil {
			return "", fmt.Errorf("create cgroup for task %s: %w", taskID, err)
		}
		dir := filepath.Join(h, m.root, taskID)
		made1, err := m.mkdir(dir)
		if err != nil {
			return "", fmt.Errorf("create cgroup for task %s: %w", taskID, err)
		}
		if made1 {
			made = append(made, dir)
		}
		existed[h] = !made1
		if err := m.fillCpuset(h, dir); err != nil {
			return "", fmt.Errorf("create cgroup for task %s: %w", taskID, err)
		}
	}

	for _, w := range m.limitWrites(l, existed) {
		file := filepath.Join(w.dir, m.root, taskID, w.file)
		if err := writeFile(file, w.value); err != nil {
			return "", fmt.Errorf("set limits of task %s: %w", taskID, err)
		}
	}
	return path.Join(m.root, taskID), nil
}

// checkLimits refuses limits that no cgroup value stands for.
func checkLimits(l Limits) error {
	switch {
	case l.CPUUnits < 0:
		return fmt.Errorf("task cpu %d: must not be negative: %w", l.CPUUnits, errdefs.ErrInvalidArgument)
	case l.MemoryMiB < 0:
		return fmt.Errorf("task memory %d MiB: must not be negative: %w", l.MemoryMiB, errdefs.ErrInvalidArgument)
	case l.ContainerCPUUnits < 0:
		return fmt.Errorf("containers' cpu %d: must not be negative: %w", l.ContainerCPUUnits, errdefs.ErrInvalidArgument)
	case l.PIDs < 0:
		return fmt.Errorf("pids limit %d: must not be negative: %w", l.PIDs, errdefs.ErrInvalidArgument)
	case int64(l.MemoryMiB) > math.MaxInt64>>20:
		return fmt.Errorf("task memory %d MiB: too large to express in bytes: %w", l.MemoryMiB, errdefs.ErrInvalidArgument)
	case int64(l.CPUUnits) > math.MaxInt64/MaxCPUPeriod.Microseconds():
		return fmt.Errorf("task cpu %d: too large: %w", l.CPUUnits, errdefs.ErrInvalidArgument)
	}
	return nil
}

// quotaMicros is the CFS quota of a task cpu of units, for a period of periodUS: units/1024 of
// the period, rounded down, and at least the kernel's minimum of 1000µs.
func quotaMicros(units int, periodUS int64) int64 {
	return max(int64(units)*periodUS/1024, minQuotaMicros)
}

// shares is the cpu.shares of a task without task cpu: its containers' cpu, within the kernel's
// bounds (at least 2, as the ECS agent).
func shares(containerUnits int) int64 {
	return min(max(int64(containerUnits), minShares), maxShares)
}

// sharesToWeight converts cpu.shares to cgroup v2 cpu.weight the way runc and crun do, mapping
// [2, 262144] onto [1, 10000].
func sharesToWeight(s int64) int64 {
	return 1 + ((s-2)*9999)/262142
}

// limitWrites returns the interface files to write for l, in order. A limit that is unset in l is
// left alone on a new cgroup and reset to the default on a reused one (existed, by hierarchy).
func (m *Manager) limitWrites(l Limits, existed map[string]bool) []write {
	cpuExisted := existed[m.hierarchyOf(m.cpuDir)]
	memExisted := existed[m.hierarchyOf(m.memoryDir)]
	var ws []write
	switch {
	case m.pidsDir == "":
	case l.PIDs > 0:
		ws = append(ws, write{m.pidsDir, "pids.max", strconv.Itoa(l.PIDs)})
	case existed[m.hierarchyOf(m.pidsDir)]:
		ws = append(ws, write{m.pidsDir, "pids.max", "max"})
	}
	if m.version == 2 {
		if l.CPUUnits > 0 {
			q := quotaMicros(l.CPUUnits, m.periodUS)
			ws = append(ws, write{m.cpuDir, "cpu.max", fmt.Sprintf("%d %d", q, m.periodUS)})
			if cpuExisted {
				ws = append(ws, write{m.cpuDir, "cpu.weight", strconv.Itoa(defaultWeight)})
			}
		} else {
			if cpuExisted {
				ws = append(ws, write{m.cpuDir, "cpu.max", "max"})
			}
			w := sharesToWeight(shares(l.ContainerCPUUnits))
			ws = append(ws, write{m.cpuDir, "cpu.weight", strconv.FormatInt(w, 10)})
		}
		if l.MemoryMiB > 0 {
			ws = append(ws, write{m.memoryDir, "memory.max", strconv.FormatInt(int64(l.MemoryMiB)<<20, 10)})
		} else if memExisted {
			ws = append(ws, write{m.memoryDir, "memory.max", "max"})
		}
		return ws
	}
	if l.CPUUnits > 0 {
		q := quotaMicros(l.CPUUnits, m.periodUS)
		ws = append(ws,
			write{m.cpuDir, "cpu.cfs_period_us", strconv.FormatInt(m.periodUS, 10)},
			write{m.cpuDir, "cpu.cfs_quota_us", strconv.FormatInt(q, 10)})
		if cpuExisted {
			ws = append(ws, write{m.cpuDir, "cpu.shares", strconv.Itoa(defaultShares)})
		}
	} else {
		if cpuExisted {
			ws = append(ws, write{m.cpuDir, "cpu.cfs_quota_us", "-1"})
		}
		ws = append(ws, write{m.cpuDir, "cpu.shares", strconv.FormatInt(shares(l.ContainerCPUUnits), 10)})
	}
	if l.MemoryMiB > 0 {
		ws = append(ws, write{m.memoryDir, "memory.limit_in_bytes", strconv.FormatInt(int64(l.MemoryMiB)<<20, 10)})
	} else if memExisted {
		ws = append(ws, write{m.memoryDir, "memory.limit_in_bytes", "-1"})
	}
	return ws
}

// hierarchyOf returns the hierarchy directory that dir (fs/cpu, perhaps a symbolic link) is.
func (m *Manager) hierarchyOf(dir string) string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return dir
}

// makeRoot makes the shared root cgroup in hierarchy h, level by level, and on v2 enables the task
// controllers in h and in each level of the root.
func (m *Manager) makeRoot(h string) error {
	dir := h
	if m.version == 2 {
		if err := enableControllers(dir); err != nil {
			return err
		}
	}
	for _, name := range strings.Split(strings.TrimPrefix(m.root, "/"), "/") {
		dir = filepath.Join(dir, name)
		if _, err := m.mkdir(dir); err != nil {
			return err
		}
		if err := m.fillCpuset(h, dir); err != nil {
			return err
		}
		if m.version == 2 {
			if err := enableControllers(dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// mkdir makes the cgroup directory dir and reports whether it made it; an existing one is fine.
func (m *Manager) mkdir(dir string) (bool, error) {
	err := m.ops.mkdir(dir)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EEXIST):
		return false, nil
	default:
		return false, fmt.Errorf("make cgroup %s: %w", dir, err)
	}
}

// enableControllers enables the task controllers in dir's cgroup.subtree_control, writing only
// those that are not enabled yet.
func enableControllers(dir string) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	on := strings.Fields(string(b))
	var add []string
	for _, c := range v2Controllers {
		if !slices.Contains(on, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeFile(file, strings.Join(add, " "))
}

// fillCpuset gives a new cpuset cgroup dir its parent's cpus and mems when it has none (the kernel
// leaves them empty on v1, and a cgroup without them cannot hold a process). Other hierarchies
// need nothing.
func (m *Manager) fillCpuset(h, dir string) error {
	if m.version != 1 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(h, "cpuset.cpus")); err != nil {
		return nil // not the cpuset hierarchy
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		file := filepath.Join(dir, f)
		cur, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if strings.TrimSpace(string(cur)) != "" {
			continue
		}
		from := filepath.Join(filepath.Dir(dir), f)
		val, err := os.ReadFile(from)
		if err != nil {
			return fmt.Errorf("read %s: %w", from, err)
		}
		if err := writeFile(file, strings.TrimSpace(string(val))); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes value to the existing interface file; like the kernel's cgroupfs, it never
// creates a file.
func writeFile(file, value string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, file, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, file, err)
	}
	return nil
}

// Remove deletes the task's cgroup, and any empty child cgroups left in it, in every hierarchy. It
// is idempotent: a cgroup already gone is success. A cgroup that still holds processes gives an
// error matching ErrBusy (marked retriable when nothing else failed); the other hierarchies are
// still cleaned up.
func (m *Manager) Remove(taskID string) error {
	if err := checkTaskID(taskID); err != nil {
		return err
	}
	var errs []error
	allBusy := true
	for _, h := range m.hierarchies {
		if err := m.removeTree(filepath.Join(h, m.root, taskID)); err != nil {
			errs = append(errs, err)
			allBusy = allBusy && errors.Is(err, ErrBusy)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	err := fmt.Errorf("remove cgroup of task %s: %w", taskID, errors.Join(errs...))
	if allBusy {
		return errdefs.Transient(err)
	}
	return err
}

// removeTree removes the cgroup dir and its child cgroups, deepest first.
func (m *Manager) removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := m.removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	err = m.ops.rmdir(dir)
	switch {
	case err == nil, errors.Is(err, syscall.ENOENT):
		return nil
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("remove %s: %w: %w", dir, ErrBusy, err)
	default:
		return fmt.Errorf("remove %s: %w", dir, err)
	}
}

// TaskIDs returns, sorted, the IDs of the task cgroups under Root in any hierarchy (for clean-up
// after a crash). A missing Root means none.
func (m *Manager) TaskIDs() ([]string, error) {
	var ids []string
	for _, h := range m.hierarchies {
		dir := filepath.Join(h, m.root)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list task cgroups in %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() && taskIDPattern.MatchString(e.Name()) && !slices.Contains(ids, e.Name()) {
				ids = append(ids, e.Name())
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

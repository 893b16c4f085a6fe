package kernelstats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// OpenOptions say what of a container a Handle reads besides its cgroup.
type OpenOptions struct {
	// Networks: read the interfaces of the process's network namespace (bridge mode, awsvpc).
	// false for network mode host/none/container:… where Docker reports no networks (nil).
	Networks bool
	// IgnoreInterfaces are left out of Networks besides "lo" (awsvpc: the task bridge veth).
	IgnoreInterfaces []string
}

// slot is a counter file a Handle may read; each is opened the first time it is read and kept
// open, then re-read from offset 0 (cgroupfs and procfs generate their content on every read).
type slot uint8

// The files, by hierarchy; the v1 blkio CFQ files are kept in blkioCFQ's order.
const (
	v1CPUAcctUsage slot = iota
	v1CPUAcctPercpu
	v1CPUAcctStat
	v1CPUStat
	v1MemUsage
	v1MemStat
	v1MemMaxUsage
	v1MemFailcnt
	v1MemLimit
	v1BlkioSectors
	v1BlkioServiceBytes
	v1BlkioServiced
	v1BlkioQueued
	v1BlkioServiceTime
	v1BlkioWaitTime
	v1BlkioMerged
	v1BlkioTime
	v1ThrottleServiced
	v1ThrottleServiceBytes
	v1PidsCurrent
	v1PidsMax
	v2CPUStat
	v2MemCurrent
	v2MemStat
	v2MemMax
	v2MemEvents
	v2IOStat
	v2PidsCurrent
	v2PidsMax
	procStat
	numSlots
)

// slotFile is where a slot's file is: its hierarchy and its name in the container's cgroup
// directory (for procStat: in ProcRoot).
type slotFile struct {
	ctl  controller
	name string
}

// slotFiles are the slots' files; read-only.
var slotFiles = [numSlots]slotFile{
	v1CPUAcctUsage:         {ctlCPUAcct, "cpuacct.usage"},
	v1CPUAcctPercpu:        {ctlCPUAcct, "cpuacct.usage_percpu"},
	v1CPUAcctStat:          {ctlCPUAcct, "cpuacct.stat"},
	v1CPUStat:              {ctlCPU, "cpu.stat"},
	v1MemUsage:             {ctlMemory, "memory.usage_in_bytes"},
	v1MemStat:              {ctlMemory, "memory.stat"},
	v1MemMaxUsage:          {ctlMemory, "memory.max_usage_in_bytes"},
	v1MemFailcnt:           {ctlMemory, "memory.failcnt"},
	v1MemLimit:             {ctlMemory, "memory.limit_in_bytes"},
	v1BlkioSectors:         {ctlBlkio, "blkio.sectors_recursive"},
	v1BlkioServiceBytes:    {ctlBlkio, "blkio.io_service_bytes_recursive"},
	v1BlkioServiced:        {ctlBlkio, "blkio.io_serviced_recursive"},
	v1BlkioQueued:          {ctlBlkio, "blkio.io_queued_recursive"},
	v1BlkioServiceTime:     {ctlBlkio, "blkio.io_service_time_recursive"},
	v1BlkioWaitTime:        {ctlBlkio, "blkio.io_wait_time_recursive"},
	v1BlkioMerged:          {ctlBlkio, "blkio.io_merged_recursive"},
	v1BlkioTime:            {ctlBlkio, "blkio.time_recursive"},
	v1ThrottleServiced:     {ctlBlkio, "blkio.throttle.io_serviced"},
	v1ThrottleServiceBytes: {ctlBlkio, "blkio.throttle.io_service_bytes"},
	v1PidsCurrent:          {ctlPids, "pids.current"},
	v1PidsMax:              {ctlPids, "pids.max"},
	v2CPUStat:              {ctlUnified, "cpu.stat"},
	v2MemCurrent:           {ctlUnified, "memory.current"},
	v2MemStat:              {ctlUnified, "memory.stat"},
	v2MemMax:               {ctlUnified, "memory.max"},
	v2MemEvents:            {ctlUnified, "memory.events"},
	v2IOStat:               {ctlUnified, "io.stat"},
	v2PidsCurrent:          {ctlUnified, "pids.current"},
	v2PidsMax:              {ctlUnified, "pids.max"},
	procStat:               {ctlProc, "stat"},
}

// file is an open counter file.
type file struct {
	path string
	// fd is the open file; -1 when the file (or its controller) does not exist, which the reading
	// skips as Docker does.
	fd int
}

// maxFileSize bounds what a Handle reads of one file.
const maxFileSize = 1 << 20

// Handle is one container's counter files, resolved by Reader.Open. It is safe for concurrent
// use; reads of one Handle take turns. Its files stay open until Close — 6 for reads without
// detail (cgroup v1; 5 on v2), and 10 more once it has been read with detail (18 with the CFQ
// blkio files; 6 on v2) — and so does the container's network namespace, which its net/dev
// holds: close a Handle once its reads fail with ErrGone.
type Handle struct {
	id  string
	pid int
	// v2: the cgroup is of the unified hierarchy.
	v2 bool
	// dirs are the container's cgroup directory in each hierarchy ("" when the hierarchy is not
	// mounted), and ProcRoot for ctlProc.
	dirs [numControllers]string
	// cfq: the v1 blkio controller has the CFQ scheduler's files, which Docker prefers.
	cfq bool
	// networks and ignore are the OpenOptions.
	networks bool
	ignore   map[string]bool

	mu sync.Mutex
	// proc is the open directory /proc/PID, -1 once closed. Its entries stop resolving once
	// that process has exited, even when the PID is reused.
	proc int
	// pidfd: proc answers pidfd_send_signal, the cheaper way to learn whether the process lives
	// (a real procfs, with the permission to signal it); else alive looks up an entry of proc.
	pidfd bool
	// netDev is the process's net/dev, opened through proc (when networks): it reads the network
	// namespace the process was in then, as Docker reads the container's sandbox.
	netDev file
	files  [numSlots]file
	opened [numSlots]bool
	// buf holds the last file read.
	buf []byte
	// cache is the page cache figure of the last read of cgroup v1's memory.stat, at cacheRead
	// (see cacheMaxAge).
	cache     uint64
	cacheRead time.Time
}

// Open resolves the container whose init process is pid and whose Docker ID is id (its full
// 64-hex-digit form): it reads /proc/PID/cgroup, maps each controller's path to a directory under
// the mounts New found (honouring each mount's root, so that it works inside a container whose
// mounted cgroup root is not "/"), and checks that the path names the container's ID (Docker's
// cgroupfs driver: .../<id>; systemd driver: .../docker-<id>.scope), so that a reused PID is never
// read as the container. The Handle keeps /proc/PID open, opens net/dev through it, and checks
// on every read that this process still lives, so that once it exits reads fail with ErrGone
// rather than follow a new process with the same PID. An error names pid, id and what is
// missing; it matches ErrGone when the process has exited.
func (r *Reader) Open(pid int, id string, opts OpenOptions) (*Handle, error) {
	h, err := r.open(pid, id, opts)
	if err != nil {
		return nil, fmt.Errorf("stats of container %s (pid %d): %w", id, pid, err)
	}
	return h, nil
}

func (r *Reader) open(pid int, id string, opts OpenOptions) (*Handle, error) {
	if pid <= 0 {
		return nil, errors.New("not a process ID")
	}
	if !isDockerID(id) {
		return nil, errors.New("not a full Docker container ID (64 hex digits)")
	}
	h := &Handle{id: id, pid: pid, v2: r.v2, networks: opts.Networks, ignore: map[string]bool{}, proc: -1, netDev: file{fd: -1}}
	for i := range h.files {
		h.files[i].fd = -1
	}
	for _, name := range opts.IgnoreInterfaces {
		h.ignore[name] = true
	}
	procDir := filepath.Join(r.procRoot, strconv.Itoa(pid))
	fd, err := unix.Open(procDir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("no process %s: %w", procDir, ErrGone)
		}
		return nil, fmt.Errorf("open %s: %w", procDir, err)
	}
	h.proc = fd
	if err := h.resolve(r, procDir); err != nil {
		gone := !h.alive()
		h.Close()
		if gone {
			return nil, fmt.Errorf("%w: %w", ErrGone, err)
		}
		return nil, err
	}
	return h, nil
}

// isDockerID reports whether id is a full Docker container ID.
func isDockerID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// resolve finds the container's cgroup directories from procDir/cgroup, read through h.proc, and
// opens the files a reading without detail needs.
func (h *Handle) resolve(r *Reader, procDir string) error {
	cgFile := filepath.Join(procDir, "cgroup")
	b, err := h.readProcFile("cgroup", cgFile)
	if err != nil {
		return err
	}
	paths, unified, err := parseProcCgroup(cgFile, b)
	if err != nil {
		return err
	}
	h.dirs[ctlProc] = r.procRoot
	ctls := []controller{ctlUnified}
	if !r.v2 {
		ctls = []controller{ctlCPU, ctlCPUAcct, ctlMemory, ctlBlkio, ctlPids}
	}
	for _, c := range ctls {
		if len(r.mounts[c]) == 0 {
			continue // not mounted: Docker has no stats of it either
		}
		name, p, ok := "unified", unified, unified != ""
		if c != ctlUnified {
			name = v1Names[c]
			p, ok = paths[name]
		}
		if !ok {
			return fmt.Errorf("%s has no %s cgroup", cgFile, name)
		}
		cp, err := containerCgroup(p, h.id)
		if err != nil {
			return fmt.Errorf("%s: %s cgroup: %w", cgFile, name, err)
		}
		dir, ok := underMount(r.mounts[c], cp)
		if !ok {
			return fmt.Errorf("%s: %s cgroup %s is under none of its mounts (%s)", cgFile, name, cp, mountList(r.mounts[c]))
		}
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("%s cgroup: %w", name, err)
		}
		h.dirs[c] = dir
	}
	if !r.v2 && h.dirs[ctlBlkio] != "" {
		_, err := os.Lstat(filepath.Join(h.dirs[ctlBlkio], slotFiles[v1BlkioServiced].name))
		h.cfq = err == nil
	}
	for _, s := range h.baseSlots() {
		if err := h.openSlot(s); err != nil {
			return err
		}
	}
	if h.networks {
		h.netDev.path = filepath.Join(procDir, "net", "dev")
		if h.netDev.fd, err = openat(h.proc, "net/dev"); err != nil {
			return fmt.Errorf("open %s: %w", h.netDev.path, err)
		}
	}
	h.pidfd = unix.PidfdSendSignal(h.proc, 0, nil, 0) == nil
	if !h.alive() {
		return errExited
	}
	return nil
}

// baseSlots are the files a reading without detail reads.
func (h *Handle) baseSlots() []slot {
	if h.v2 {
		return []slot{v2CPUStat, v2MemCurrent, v2IOStat}
	}
	bytesSlot := v1ThrottleServiceBytes
	if h.cfq {
		bytesSlot = v1BlkioServiceBytes
	}
	return []slot{v1CPUAcctUsage, v1MemUsage, v1MemStat, bytesSlot}
}

// parseProcCgroup parses /proc/PID/cgroup (content b of path: lines "ID:CONTROLLERS:PATH") into
// each v1 controller's path and the unified hierarchy's ("" when there is none).
func parseProcCgroup(path string, b []byte) (v1 map[string]string, unified string, err error) {
	v1 = map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		hier, rest, ok1 := strings.Cut(line, ":")
		ctls, p, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || hier == "" || !strings.HasPrefix(p, "/") {
			return nil, "", fmt.Errorf("%s line %d: want \"ID:CONTROLLERS:/PATH\", got %q", path, n+1, clip([]byte(line)))
		}
		if hier == "0" && ctls == "" {
			unified = p
			continue
		}
		for _, c := range strings.Split(ctls, ",") {
			v1[c] = p
		}
	}
	return v1, unified, nil
}

// containerCgroup returns the part of cgroup path p that ends with the container's own cgroup:
// its deepest element that names the container, id (cgroupfs driver) or docker-<id>.scope (systemd
// driver). A process in a cgroup that does not name the container is another process than its
// init (a reused PID), so that is an error, and so is a path outside this process's cgroup
// namespace ("..").
func containerCgroup(p, id string) (string, error) {
	end, scope := -1, "docker-"+id+".scope"
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i:], '/')
		if j < 0 {
			j = len(p) - i
		}
		switch elem := p[i : i+j]; elem {
		case "..":
			return "", fmt.Errorf("%s is outside this process's cgroup namespace", p)
		case id, scope:
			end = i + j
		}
		i += j + 1
	}
	if end < 0 {
		return "", fmt.Errorf("%s does not name container %s", p, id)
	}
	return p[:end], nil
}

// underMount returns the directory of cgroup p under the first of mounts whose root holds it.
func underMount(mounts []mount, p string) (string, bool) {
	for _, m := range mounts {
		switch {
		case m.root == "/":
			return filepath.Join(m.point, p), true
		case p == m.root:
			return m.point, true
		case strings.HasPrefix(p, m.root+"/"):
			return filepath.Join(m.point, p[len(m.root):]), true
		}
	}
	return "", false
}

// mountList describes mounts for an error message.
func mountList(mounts []mount) string {
	s := make([]string, len(mounts))
	for i, m := range mounts {
		s[i] = fmt.Sprintf("root %s at %s", m.root, m.point)
	}
	return strings.Join(s, ", ")
}

// openSlot opens s's file unless it was opened before; a file or hierarchy that does not exist
// is recorded as missing.
func (h *Handle) openSlot(s slot) error {
	if h.opened[s] {
		return nil
	}
	sf := slotFiles[s]
	dir := h.dirs[sf.ctl]
	if dir == "" {
		h.opened[s] = true
		return nil
	}
	f := file{path: filepath.Join(dir, sf.name), fd: -1}
	fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		f.fd = fd
	case !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("open %s: %w", f.path, err)
	}
	h.files[s], h.opened[s] = f, true
	return nil
}

// readSlot returns the content of s's file, valid until the next read of h, and false when the
// file does not exist.
func (h *Handle) readSlot(s slot) ([]byte, bool, error) {
	if err := h.openSlot(s); err != nil {
		return nil, false, err
	}
	f := h.files[s]
	if f.fd < 0 {
		return nil, false, nil
	}
	b, err := h.readFD(f.fd, f.path, true)
	return b, err == nil, err
}

// readFD reads the file open as fd (named path) from offset 0 into h.buf. A file that is one
// record (whole says so: every cgroup file, /proc/stat, /proc/PID/cgroup, and regular files) is
// whole after a read that does not fill the buffer; one of many records (/proc/PID/net/dev, whose
// reads end at a page's worth of records) is read until the end.
func (h *Handle) readFD(fd int, path string, whole bool) ([]byte, error) {
	if h.buf == nil {
		h.buf = make([]byte, 8<<10)
	}
	off := 0
	for {
		if off == len(h.buf) {
			if len(h.buf) >= maxFileSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
			}
			h.buf = append(h.buf, make([]byte, len(h.buf))...)
			if whole {
				off = 0 // read the record again, into a buffer it fits
			}
		}
		n, err := unix.Pread(fd, h.buf[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		off += n
		if n == 0 || whole && off < len(h.buf) {
			return h.buf[:off], nil
		}
	}
}

// readProcFile reads the entry name of the process's /proc directory (path, for errors), opened
// through h.proc so that it is that process's.
func (h *Handle) readProcFile(name, path string) ([]byte, error) {
	fd, err := openat(h.proc, name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	return h.readFD(fd, path, true)
}

// openat opens the file name under the directory dir.
func openat(dir int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// alive reports whether the process of h.proc still exists.
func (h *Handle) alive() bool {
	if h.proc < 0 {
		return false
	}
	if h.pidfd {
		return unix.PidfdSendSignal(h.proc, 0, nil, 0) == nil
	}
	var st unix.Stat_t
	return unix.Fstatat(h.proc, "cgroup", &st, 0) == nil
}

// Close closes the Handle's files. It is idempotent; reads of a closed Handle fail.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for i := range h.files {
		if h.files[i].fd >= 0 {
			if err := unix.Close(h.files[i].fd); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", h.files[i].path, err))
			}
			h.files[i].fd = -1
		}
		h.opened[i] = true
	}
	if h.netDev.fd >= 0 {
		if err := unix.Close(h.netDev.fd); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", h.netDev.path, err))
		}
		h.netDev.fd = -1
	}
	if h.proc >= 0 {
		if err := unix.Close(h.proc); err != nil {
			errs = append(errs, fmt.Errorf("close /proc/%d: %w", h.pid, err))
		}
		h.proc = -1
	}
	return errors.Join(errs...)
}

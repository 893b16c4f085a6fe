package kernelstats

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// errExited: the process of a Handle has exited (its /proc entries no longer resolve).
var errExited = errors.New("the process exited")

// Read reads h's counters once. detail=false reads only what telemetry needs, from as few files
// as possible: CPU total usage (ns), memory usage and the page cache figure ECS subtracts
// (MemoryStats.Cache), block I/O bytes (BlkioStats.IoServiceBytesRecursive) and networks.
// detail=true reads everything Docker's stats object has.
//
// It fails with an error matching ErrGone when the process or its cgroup is gone (the container
// stopped); other errors name the file. It does not panic on any file content, and parses in time
// linear in it.
func (r *Reader) Read(h *Handle, detail bool) (Reading, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc < 0 {
		return Reading{}, fmt.Errorf("stats of container %s (pid %d): %w", h.id, h.pid, os.ErrClosed)
	}
	rd := Reading{Read: time.Now(), Detail: detail}
	if err := r.read(h, &rd, detail); err != nil {
		if isGone(err) || !h.alive() {
			return Reading{}, fmt.Errorf("stats of container %s (pid %d): %w: %w", h.id, h.pid, ErrGone, err)
		}
		return Reading{}, fmt.Errorf("stats of container %s (pid %d): %w", h.id, h.pid, err)
	}
	return rd, nil
}

// isGone reports whether err says a file of the container is gone: a removed cgroup's open files
// read ENODEV; an exited process's /proc files ESRCH.
func isGone(err error) bool {
	return errors.Is(err, errExited) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ESRCH)
}

func (r *Reader) read(h *Handle, rd *Reading, detail bool) error {
	var err error
	if h.v2 {
		err = h.readV2(rd, detail, r.machineMemory)
	} else {
		err = h.readV1(rd, detail, r.machineMemory)
	}
	if err != nil {
		return err
	}
	if detail {
		b, ok, err := h.readSlot(procStat)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s does not exist", filepath.Join(h.dirs[ctlProc], slotFiles[procStat].name))
		}
		if rd.CPU.SystemUsage, rd.CPU.OnlineCPUs, err = parseProcStat(h.files[procStat].path, b); err != nil {
			return err
		}
	}
	if h.networks {
		b, err := h.readFD(h.netDev.fd, h.netDev.path, false)
		if err != nil {
			return err
		}
		if rd.Networks, err = parseNetDev(h.netDev.path, b, h.ignore); err != nil {
			return err
		}
	}
	// Last, so that the counters are of a process that lived after they were read.
	if !h.alive() {
		return errExited
	}
	return nil
}

// value reads the one-counter file of s into *dst, leaving it alone when the file does not exist.
// "max" is maxValue, as the containerd library Docker reads through has it: 0 on cgroup v1, 2^64-1
// on v2.
func (h *Handle) value(s slot, maxValue uint64, dst *uint64) error {
	b, ok, err := h.readSlot(s)
	if !ok {
		return err
	}
	*dst, err = parseValue(h.files[s].path, b, maxValue)
	return err
}

// kv reads the "KEY VALUE" file of s and calls fn with each line; it reports whether the file
// exists.
func (h *Handle) kv(s slot, fn func(key []byte, v uint64)) (bool, error) {
	b, ok, err := h.readSlot(s)
	if !ok {
		return false, err
	}
	return true, parseKV(h.files[s].path, b, fn)
}

// blkio reads the v1 blkio statistics file of s; nil when it does not exist.
func (h *Handle) blkio(s slot) ([]BlkioStatEntry, error) {
	b, ok, err := h.readSlot(s)
	if !ok {
		return nil, err
	}
	return parseBlkio(h.files[s].path, b)
}

// memoryStats reads memory.stat (slot s) into Docker's keys (each present, zero when the file
// lacks it) and returns the map, nil when the file does not exist; cache gets the "cache" line.
func (h *Handle) memoryStats(s slot, keys []string, cache *uint64) (map[string]uint64, error) {
	var vals [len(v1MemoryKeys)]uint64
	ok, err := h.kv(s, func(k []byte, v uint64) {
		if i := keyIndex(keys, k); i >= 0 {
			vals[i] = v
		}
		if string(k) == "cache" {
			*cache = v
		}
	})
	if !ok || err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(keys))
	for i, k := range keys {
		m[k] = vals[i]
	}
	return m, nil
}

// limitOrHost is Docker's memory limit: the cgroup's, or the host's memory when that is less (the
// cgroup has no limit).
func limitOrHost(limit, machineMemory uint64) uint64 {
	if limit > machineMemory && machineMemory > 0 {
		return machineMemory
	}
	return limit
}

// cacheMaxAge is how long a reading without detail reuses the page cache figure of cgroup v1's
// memory.stat instead of reading the file again: the kernel sums the whole file, about a third of
// such a reading's cost, for one figure that moves slowly; memory usage itself is read every time.
const cacheMaxAge = 5 * time.Second

func (h *Handle) readV1(rd *Reading, detail bool, machineMemory uint64) error {
	cpu, mem := &rd.CPU, &rd.Memory
	if err := h.value(v1CPUAcctUsage, 0, &cpu.CPUUsage.TotalUsage); err != nil {
		return err
	}
	var err error
	switch {
	case detail:
		if mem.Stats, err = h.memoryStats(v1MemStat, v1MemoryKeys[:], &mem.Cache); err != nil {
			return err
		}
		h.cache, h.cacheRead = mem.Cache, rd.Read
	case !h.cacheRead.IsZero() && rd.Read.Sub(h.cacheRead) < cacheMaxAge:
		mem.Cache = h.cache
	default:
		if _, err := h.kv(v1MemStat, func(k []byte, v uint64) {
			if string(k) == "cache" {
				mem.Cache = v
			}
		}); err != nil {
			return err
		}
		h.cache, h.cacheRead = mem.Cache, rd.Read
	}
	if err := h.value(v1MemUsage, 0, &mem.Usage); err != nil {
		return err
	}
	if err := h.readV1Blkio(&rd.Blkio, detail); err != nil {
		return err
	}
	if !detail {
		return nil
	}
	if err := h.readCPUAcctStat(&cpu.CPUUsage); err != nil {
		return err
	}
	if b, ok, err := h.readSlot(v1CPUAcctPercpu); err != nil {
		return err
	} else if ok {
		if cpu.CPUUsage.PercpuUsage, err = parseUints(h.files[v1CPUAcctPercpu].path, b); err != nil {
			return err
		}
	}
	if _, err := h.kv(v1CPUStat, func(k []byte, v uint64) {
		switch string(k) {
		case "nr_periods":
			cpu.ThrottlingData.Periods = v
		case "nr_throttled":
			cpu.ThrottlingData.ThrottledPeriods = v
		case "throttled_time":
			cpu.ThrottlingData.ThrottledTime = v
		}
	}); err != nil {
		return err
	}
	for _, f := range []struct {
		s   slot
		dst *uint64
	}{{v1MemMaxUsage, &mem.MaxUsage}, {v1MemFailcnt, &mem.Failcnt}, {v1MemLimit, &mem.Limit}, {v1PidsCurrent, &rd.Pids.Current}, {v1PidsMax, &rd.Pids.Limit}} {
		if err := h.value(f.s, 0, f.dst); err != nil {
			return err
		}
	}
	mem.Limit = limitOrHost(mem.Limit, machineMemory)
	return nil
}

// readCPUAcctStat reads cpuacct.stat's user and system time (USER_HZ ticks) into u, in ns.
func (h *Handle) readCPUAcctStat(u *CPUUsage) error {
	var user, system uint64
	var seen int
	ok, err := h.kv(v1CPUAcctStat, func(k []byte, v uint64) {
		switch string(k) {
		case "user":
			user, seen = v, seen|1
		case "system":
			system, seen = v, seen|2
		}
	})
	if !ok || err != nil {
		return err
	}
	if seen != 3 {
		return fmt.Errorf("%s: want \"user\" and \"system\" lines", h.files[v1CPUAcctStat].path)
	}
	u.UsageInUsermode, u.UsageInKernelmode = ticksToNanos(user), ticksToNanos(system)
	return nil
}

// blkioCFQ are the CFQ scheduler's files, which Docker reads when they exist and hold entries.
var blkioCFQ = [...]slot{v1BlkioSectors, v1BlkioServiceBytes, v1BlkioServiced, v1BlkioQueued,
	v1BlkioServiceTime, v1BlkioWaitTime, v1BlkioMerged, v1BlkioTime}

// readV1Blkio reads the blkio controller's statistics as Docker does: the CFQ files when they
// exist and hold entries, else the throttle files; every list is [] (not null) when empty.
func (h *Handle) readV1Blkio(st *BlkioStats, detail bool) error {
	if h.dirs[ctlBlkio] == "" {
		return nil
	}
	cfq := [len(blkioCFQ)]*[]BlkioStatEntry{&st.SectorsRecursive, &st.IoServiceBytesRecursive,
		&st.IoServicedRecursive, &st.IoQueuedRecursive, &st.IoServiceTimeRecursive,
		&st.IoWaitTimeRecursive, &st.IoMergedRecursive, &st.IoTimeRecursive}
	found := false
	if h.cfq {
		for i, s := range blkioCFQ {
			if !detail && s != v1BlkioServiceBytes {
				continue
			}
			var err error
			if *cfq[i], err = h.blkio(s); err != nil {
				return err
			}
			found = found || len(*cfq[i]) > 0
		}
	}
	if !found {
		var err error
		if st.IoServiceBytesRecursive, err = h.blkio(v1ThrottleServiceBytes); err != nil {
			return err
		}
		if detail {
			if st.IoServicedRecursive, err = h.blkio(v1ThrottleServiced); err != nil {
				return err
			}
		}
	}
	for _, l := range cfq {
		if *l == nil {
			*l = []BlkioStatEntry{}
		}
	}
	return nil
}

func (h *Handle) readV2(rd *Reading, detail bool, machineMemory uint64) error {
	cpu, mem := &rd.CPU, &rd.Memory
	if _, err := h.kv(v2CPUStat, func(k []byte, v uint64) {
		switch string(k) {
		case "usage_usec":
			cpu.CPUUsage.TotalUsage = v * 1000
		case "user_usec":
			cpu.CPUUsage.UsageInUsermode = v * 1000
		case "system_usec":
			cpu.CPUUsage.UsageInKernelmode = v * 1000
		case "nr_periods":
			cpu.ThrottlingData.Periods = v
		case "nr_throttled":
			cpu.ThrottlingData.ThrottledPeriods = v
		case "throttled_usec":
			cpu.ThrottlingData.ThrottledTime = v * 1000
		}
	}); err != nil {
		return err
	}
	if err := h.value(v2MemCurrent, math.MaxUint64, &mem.Usage); err != nil {
		return err
	}
	if b, ok, err := h.readSlot(v2IOStat); err != nil {
		return err
	} else if ok {
		if rd.Blkio.IoServiceBytesRecursive, err = parseIOStat(h.files[v2IOStat].path, b); err != nil {
			return err
		}
	}
	if !detail {
		return nil
	}
	var cache uint64 // memory.stat of v2 has no "cache": Cache stays 0
	stats, err := h.memoryStats(v2MemStat, v2MemoryKeys[:], &cache)
	if err != nil {
		return err
	}
	if stats == nil {
		stats = make(map[string]uint64, len(v2MemoryKeys))
		for _, k := range v2MemoryKeys {
			stats[k] = 0
		}
	}
	mem.Stats = stats
	if err := h.value(v2MemMax, math.MaxUint64, &mem.Limit); err != nil {
		return err
	}
	mem.Limit = limitOrHost(mem.Limit, machineMemory)
	if _, err := h.kv(v2MemEvents, func(k []byte, v uint64) {
		if string(k) == "oom" {
			mem.Failcnt = v
		}
	}); err != nil {
		return err
	}
	if err := h.value(v2PidsCurrent, math.MaxUint64, &rd.Pids.Current); err != nil {
		return err
	}
	return h.value(v2PidsMax, math.MaxUint64, &rd.Pids.Limit)
}

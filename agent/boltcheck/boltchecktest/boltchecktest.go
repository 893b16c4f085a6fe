// Package boltchecktest sweeps damage over a bbolt file for tests: every page-aligned truncation, a
// change of every page header field of every page, and seeded random single-byte changes, each
// opened in a child process (the test binary run again) under a deadline and a memory limit.
// A child must either open the file with its data consistent or report the damage; a signal, a
// timeout, running out of memory or any other error fails the sweep.
package boltchecktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envFile names the file a child opens; its presence makes the process a child.
const envFile = "BERTH_BOLTCHECK_SWEEP_FILE"

// Exit codes of a child.
const (
	exitOpened  = 0
	exitDamaged = 3
	exitFailed  = 4
)

// Open is what a child runs on one damaged copy: it opens the file at path, reads and writes it, and
// returns a digest of its data. An error that wraps the damaged sentinel given to Child means the
// open reported the damage; any other error is a failure.
type Open func(path string) (digest string, err error)

// Child makes the running test binary a sweep child when the environment says so: it limits its
// data (RLIMIT_DATA: the heap and every private writable mapping; RLIMIT_AS would not do, the Go
// runtime reserves over a GiB of address space it never uses) to limit bytes, runs open on the file named there, prints the digest and exits with
// the outcome. Otherwise it returns at once. Call it first in the test that calls Run.
func Child(limit uint64, damaged error, open Open) {
	path := os.Getenv(envFile)
	if path == "" {
		return
	}
	if raceEnabled {
		// The race detector's memory costs several times the program's: watch the resident set.
		go watchRSS(raceOverhead * limit)
	} else if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(exitFailed)
	}
	digest, err := open(path)
	switch {
	case errors.Is(err, damaged):
		fmt.Fprintln(os.Stdout, err)
		os.Exit(exitDamaged)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitFailed)
	}
	fmt.Fprint(os.Stdout, digest)
	os.Exit(exitOpened)
}

// raceSample is how many cases a sweep under the race detector runs.
const raceSample = 60

// spread returns n of cases, evenly spaced, in order; all of them when there are no more than n.
func spread[T any](cases []T, n int) []T {
	if len(cases) <= n {
		return cases
	}
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, cases[i*len(cases)/n])
	}
	return out
}

// raceOverhead is how many times more memory a child under the race detector may hold.
const raceOverhead = 8

// watchRSS ends the process, as a failure, once its resident memory passes limit bytes; it checks
// every 10 ms, so a runaway allocation is caught within a small multiple of the limit.
func watchRSS(limit uint64) {
	page := uint64(os.Getpagesize())
	for {
		if b, err := os.ReadFile("/proc/self/statm"); err == nil {
			fields := strings.Fields(string(b))
			if len(fields) > 1 {
				if pages, err := strconv.ParseUint(fields[1], 10, 64); err == nil && pages*page > limit {
					fmt.Fprintf(os.Stderr, "resident memory %d bytes over the limit of %d\n", pages*page, limit)
					os.Exit(exitFailed)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Sweep describes one sweep.
type Sweep struct {
	Test        string        // the name of the test that calls Child and Run
	File        []byte        // the undamaged file
	PageSize    int           // the file's page size
	RandomFlips int           // how many random single-byte changes to try, besides the header fields
	Seed        uint64        // seeds the random changes
	Deadline    time.Duration // how long one child may take
	MaxFailures int           // the sweep stops after this many failed cases
}

// damage is one damaged copy of the file: its first size bytes, with the byte at flip XORed with
// xor when xor is not 0.
type damage struct {
	name string
	size int
	flip int
	xor  byte
}

// truncated reports whether d is a truncation, which, when it opens, must read the undamaged data.
func (d damage) truncated() bool { return d.xor == 0 }

// Run tries every damage of s in a child process, NumCPU at a time, and fails t for each child that
// neither opened the file consistently nor reported the damage. The undamaged file must open, and a
// truncated file that opens must read the same data as the undamaged one.
func Run(t *testing.T, s Sweep) {
	t.Helper()
	dir := scratch(t)
	control := child(dir, s, damage{name: "undamaged", size: len(s.File)})
	if control.code != exitOpened {
		t.Fatalf("the undamaged file does not open: %s", control)
	}
	cases := damages(s)
	if raceEnabled {
		// A child under the race detector costs about twenty times one without: the race build
		// (make test) runs an evenly spread sample; `go test` without -race runs every case.
		cases = spread(cases, raceSample)
	}
	var (
		mu       sync.Mutex
		failures int
		counts   = map[int]int{}
		next     = make(chan damage)
		wg       sync.WaitGroup
	)
	for range runtime.NumCPU() {
		wg.Go(func() {
			for d := range next {
				r := child(dir, s, d)
				mu.Lock()
				counts[r.code]++
				bad := r.code != exitOpened && r.code != exitDamaged
				if r.code == exitOpened && d.truncated() && r.stdout != control.stdout {
					bad = true
					r.err = errors.New("opened, but its data differ from the undamaged file's")
				}
				if bad {
					failures++
					t.Errorf("%s: %s", d.name, r)
				}
				mu.Unlock()
			}
		})
	}
	for _, d := range cases {
		mu.Lock()
		stop := failures >= s.MaxFailures
		mu.Unlock()
		if stop {
			t.Errorf("stopped after %d failed cases", failures)
			break
		}
		next <- d
	}
	close(next)
	wg.Wait()
	t.Logf("%d damaged copies of a %d-byte file (%d pages): %d opened consistently, %d reported as damaged", len(cases), len(s.File), len(s.File)/s.PageSize,
		counts[exitOpened], counts[exitDamaged])
}

// scratch returns a directory for the damaged copies, removed after the test: in /dev/shm when the
// host has that tmpfs, so that the children's fsyncs cost nothing.
func scratch(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "boltcheck-sweep-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// damages lists the damaged copies of s.File: every page-aligned truncation, every header field of
// every page bbolt wrote changed (the low byte of each, and the high byte of the count and the
// overflow count), and s.RandomFlips random bytes
// changed.
func damages(s Sweep) []damage {
	var out []damage
	for n := 0; n < len(s.File); n += s.PageSize {
		out = append(out, damage{name: fmt.Sprintf("truncated to %d bytes", n), size: n})
	}
	flip := func(name string, off int, xor byte) {
		out = append(out, damage{name: fmt.Sprintf("%s (byte %d ^ %#x)", name, off, xor), size: len(s.File), flip: off, xor: xor})
	}
	fields := []struct {
		name  string
		bytes []int // the field's low byte changes it by one; its high byte, by a lot
	}{{"id", []int{0}}, {"flags", []int{8}}, {"count", []int{10, 11}}, {"overflow", []int{12, 15}}}
	for page := 0; (page+1)*s.PageSize <= len(s.File); page++ {
		if !slices.ContainsFunc(s.File[page*s.PageSize:page*s.PageSize+16], func(b byte) bool { return b != 0 }) {
			continue // never written: bbolt grew the file past its pages
		}
		for _, f := range fields {
			for i, b := range f.bytes {
				flip(fmt.Sprintf("page %d's %s", page, f.name), page*s.PageSize+b, byte(0x01)<<(7*i))
			}
		}
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed))
	for range s.RandomFlips {
		flip("random byte", rng.IntN(len(s.File)), byte(1+rng.IntN(255)))
	}
	return out
}

// result is how one child ended.
type result struct {
	code   int    // its exit code, or -1 when it did not exit on its own
	stdout string // the digest, or the damage reported
	err    error  // why it failed, when it did
}

func (r result) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("exit %d: %s", r.code, r.stdout)
}

// child writes d to a file of its own in dir and opens it in a child process.
func child(dir string, s Sweep, d damage) result {
	f, err := os.CreateTemp(dir, "case-*.db")
	if err != nil {
		return result{code: -1, err: err}
	}
	path := f.Name()
	defer os.Remove(path)
	content := s.File[:d.size]
	if d.xor != 0 {
		content = bytes.Clone(content)
		content[d.flip] ^= d.xor
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return result{code: -1, err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+s.Test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envFile+"="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String()}
	switch {
	case ctx.Err() != nil:
		r.err = fmt.Errorf("no answer within %s (a hang)", s.Deadline)
	case r.code == exitOpened || r.code == exitDamaged:
	case err != nil:
		r.err = fmt.Errorf("%w: %s", err, firstLines(stderr.String(), 3))
	}
	return r
}

// firstLines returns the first n lines of a child's stderr that say why it ended.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

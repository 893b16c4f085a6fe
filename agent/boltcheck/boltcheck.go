// Package boltcheck opens bbolt files that may be damaged. bbolt trusts its pages: a truncated file
// makes it read past the end of its memory map (a SIGBUS that kills the process, whichever goroutine
// faults), and a damaged page header can make it loop or allocate without bound. Open therefore
// locks the file and checks its whole structure with plain reads, in the calling goroutine, before
// bbolt maps it; bbolt never sees a file the check rejected.
//
// The check follows what bbolt itself will read: it picks the meta page bbolt picks (the valid one
// with the highest transaction id, validated by its checksum), then requires every page id, overflow
// count, element offset and key and value length to lie within the file and below the high-water
// mark; every tree page to be a branch or leaf page that names its own id; every page below the
// high-water mark to be in use exactly once or free exactly once; keys ordered in every page and
// within the bounds their parent pages give them, and each branch key equal to its child's first key
// (which bbolt relies on when it writes); and inline buckets to be well-formed leaf pages.
// Each page is read at most once, so the check takes time and memory linear in the file's size.
//
// What it cannot see is a value's contents: a changed byte inside a stored value leaves the file
// well-formed, and is for the value's decoder to report.
package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged is wrapped by Open's error when the file is not a whole, well-formed bbolt database.
var ErrDamaged = errors.New("damaged bbolt file")

// Open opens the bbolt file at path read-write (creating it, 0600, if missing) once its structure
// passed the check in the package doc. It waits up to timeout for the file lock (0 waits forever) and
// then fails with an error wrapping bbolt's ErrTimeout. A file that exists but is empty, or fails the
// check, is an error wrapping ErrDamaged; other errors are the operating system's or bbolt's.
func Open(path string, timeout time.Duration) (*bbolt.DB, error) {
	return bbolt.Open(path, 0o600, &bbolt.Options{Timeout: timeout,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			return openChecked(name, flag, mode, timeout)
		}})
}

// openChecked is bbolt's OpenFile: it opens the file, takes the exclusive lock bbolt would take (bbolt
// taking it again on the same open file is a no-op) and checks the file under it.
func openChecked(name string, flag int, mode os.FileMode, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(name, flag|os.O_EXCL, mode)
	created := err == nil
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(name, flag&^os.O_CREATE, mode)
	}
	if err != nil {
		return nil, err
	}
	if err := lock(f, timeout); err != nil {
		_ = f.Close()
		return nil, err
	}
	info, err := f.Stat()
	if err == nil && !(created && info.Size() == 0) {
		err = check(f, info.Size())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// lockRetry is how often lock tries again while another process holds the lock.
const lockRetry = 50 * time.Millisecond

// lock takes an exclusive flock on f, waiting up to timeout (0: forever) while another process holds
// it; waiting longer fails with bbolt's ErrTimeout.
func lock(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if timeout != 0 && time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		<-time.After(lockRetry)
	}
}

// The on-disk layout bbolt writes (go.etcd.io/bbolt/internal/common), in the machine's byte order.
const (
	pageHeaderSize = 16 // id uint64, flags uint16, count uint16, overflow uint32
	elementSize    = 16 // leaf: flags, pos, ksize, vsize uint32; branch: pos, ksize uint32, pgid uint64
	bucketHeader   = 16 // root pgid uint64, sequence uint64
	metaSize       = 64 // magic, version, pageSize, flags uint32; root, sequence, freelist, pgid, txid, checksum uint64

	branchPage   = 0x01
	leafPage     = 0x02
	freelistPage = 0x10
	bucketLeaf   = 0x01

	magic       = 0xED0CDAED
	version     = 2
	noFreelist  = ^uint64(0)
	minPageSize = 1024
	maxPageSize = 1 << 24 // the largest page size bbolt looks for its second meta page at
)

var order = binary.NativeEndian

// meta is the part of a meta page the check uses.
type meta struct {
	pageSize uint64
	root     uint64
	freelist uint64
	hwm      uint64 // the high-water mark: pages at or above it are not part of the file yet
	txid     uint64
}

// parseMeta decodes the meta of the page at the start of buf, and reports whether bbolt would accept
// it: magic, version and checksum right.
func parseMeta(buf []byte) (meta, bool) {
	if len(buf) < pageHeaderSize+metaSize {
		return meta{}, false
	}
	m := buf[pageHeaderSize : pageHeaderSize+metaSize]
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	if order.Uint32(m[0:]) != magic || order.Uint32(m[4:]) != version || order.Uint64(m[56:]) != h.Sum64() {
		return meta{}, false
	}
	return meta{pageSize: uint64(order.Uint32(m[8:])), root: order.Uint64(m[16:]), freelist: order.Uint64(m[32:]),
		hwm: order.Uint64(m[40:]), txid: order.Uint64(m[48:])}, true
}

// checker walks one file; claimed marks the pages below the high-water mark found in use or free.
type checker struct {
	r        io.ReaderAt
	size     uint64
	pageSize uint64
	hwm      uint64
	claimed  []uint64
}

func damaged(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrDamaged)
}

// check checks the size bytes of r as described in the package doc.
func check(r io.ReaderAt, size int64) error {
	if size <= 0 {
		return damaged("the file is empty")
	}
	c := &checker{r: r, size: uint64(size)}
	m, err := c.meta()
	if err != nil {
		return err
	}
	c.hwm = m.hwm
	if m.hwm < 2 || m.hwm > c.size/c.pageSize {
		return damaged("the file is %d bytes, too short for the %d pages of %d bytes its meta page counts (truncated?)", size, m.hwm, c.pageSize)
	}
	c.claimed = make([]uint64, (m.hwm+63)/64)
	_ = c.claim(0, 1)
	if m.freelist != noFreelist {
		if err := c.freelist(m.freelist); err != nil {
			return err
		}
	}
	if _, err := c.walk(m.root, nil, nil); err != nil {
		return err
	}
	for id := range m.hwm {
		if c.claimed[id/64]&(1<<(id%64)) == 0 {
			return damaged("page %d is neither in use nor free", id)
		}
	}
	return nil
}

// meta returns the meta page bbolt will use, finding the page size as bbolt does: from the first
// meta page, else from the second one looked for at each possible page size, else the OS's.
func (c *checker) meta() (meta, error) {
	buf := make([]byte, 0x1000)
	n, err := c.r.ReadAt(buf, 0)
	readable := err == nil && n == len(buf)
	m0, ok := parseMeta(buf)
	if readable && ok {
		c.pageSize = m0.pageSize
	}
	for shift := 0; c.pageSize == 0 && shift <= 14; shift++ {
		pos := uint64(1024) << shift
		if pos+1024 >= c.size {
			break
		}
		clear(buf)
		n, err := c.r.ReadAt(buf, int64(pos))
		if (err == nil && n == len(buf)) || (err == io.EOF && uint64(n) == c.size-pos) {
			readable = true
			if m1, ok := parseMeta(buf); ok {
				c.pageSize = m1.pageSize
			}
		}
	}
	if c.pageSize == 0 && readable {
		c.pageSize = uint64(os.Getpagesize())
	}
	if c.pageSize < minPageSize || c.pageSize > maxPageSize || c.pageSize&(c.pageSize-1) != 0 {
		return meta{}, damaged("no valid meta page")
	}
	if c.size < 2*c.pageSize {
		return meta{}, damaged("the file is %d bytes, shorter than its two meta pages", c.size)
	}
	metas := [2]meta{}
	valid := [2]bool{}
	for i := range metas {
		page := make([]byte, pageHeaderSize+metaSize)
		if _, err := c.r.ReadAt(page, int64(uint64(i)*c.pageSize)); err != nil {
			return meta{}, fmt.Errorf("read meta page %d: %w", i, err)
		}
		metas[i], valid[i] = parseMeta(page)
	}
	newer, older := 0, 1
	if metas[1].txid > metas[0].txid {
		newer, older = 1, 0
	}
	var m meta
	switch {
	case valid[newer]:
		m = metas[newer]
	case valid[older]:
		m = metas[older]
	default:
		return meta{}, damaged("no valid meta page")
	}
	if m.pageSize != c.pageSize {
		return meta{}, damaged("the meta page's page size %d is not the file's %d", m.pageSize, c.pageSize)
	}
	return m, nil
}

// claim marks pages first..last as found, failing for a page outside [0, hwm) or found before.
func (c *checker) claim(first, last uint64) error {
	if first > last || last >= c.hwm {
		return damaged("pages %d to %d are not below the high-water mark %d", first, last, c.hwm)
	}
	for id := first; id <= last; id++ {
		w, bit := &c.claimed[id/64], uint64(1)<<(id%64)
		if *w&bit != 0 {
			return damaged("page %d is claimed twice (in use twice, or both in use and free)", id)
		}
		*w |= bit
	}
	return nil
}

// page reads page id and its overflow pages after checking its header: it names id, is a freelist
// page (freelist) or else a branch or leaf page, and ends below the high-water mark. Its pages are
// claimed.
func (c *checker) page(id uint64, freelist bool) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, damaged("page %d is not between 2 and the high-water mark %d", id, c.hwm)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := c.r.ReadAt(hdr, int64(id*c.pageSize)); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	if got := order.Uint64(hdr); got != id {
		return nil, damaged("page %d names itself page %d", id, got)
	}
	switch f := order.Uint16(hdr[8:]); {
	case freelist && f != freelistPage:
		return nil, damaged("page %d has flags %#x, not those of a freelist page", id, f)
	case !freelist && f != branchPage && f != leafPage:
		return nil, damaged("page %d has flags %#x, not those of a branch or leaf page", id, f)
	}
	overflow := uint64(order.Uint32(hdr[12:]))
	if overflow >= c.hwm-id {
		return nil, damaged("page %d overflows by %d pages, past the high-water mark %d", id, overflow, c.hwm)
	}
	if err := c.claim(id, id+overflow); err != nil {
		return nil, err
	}
	buf := make([]byte, (overflow+1)*c.pageSize)
	if _, err := c.r.ReadAt(buf, int64(id*c.pageSize)); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	return buf, nil
}

// freelist checks the freelist page id and claims the pages it lists as free.
func (c *checker) freelist(id uint64) error {
	p, err := c.page(id, true)
	if err != nil {
		return err
	}
	ids := p[pageHeaderSize:]
	count := uint64(order.Uint16(p[10:]))
	if count == 0xFFFF { // the count is in the first element
		count = order.Uint64(ids)
		ids = ids[8:]
	}
	if count > uint64(len(ids))/8 {
		return damaged("freelist page %d lists %d pages, more than it holds", id, count)
	}
	for i := range count {
		free := order.Uint64(ids[i*8:])
		if free < 2 {
			return damaged("freelist page %d lists meta page %d as free", id, free)
		}
		if err := c.claim(free, free); err != nil {
			return fmt.Errorf("freelist page %d: %w", id, err)
		}
	}
	return nil
}

// walk checks the tree rooted at page id, whose keys must lie in [lo, hi) (nil: unbounded), and
// returns the page's first key.
func (c *checker) walk(id uint64, lo, hi []byte) ([]byte, error) {
	p, err := c.page(id, false)
	if err != nil {
		return nil, err
	}
	if order.Uint16(p[8:]) == leafPage {
		first, err := c.leaf(p, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("leaf page %d: %w", id, err)
		}
		return first, nil
	}
	count := int(order.Uint16(p[10:]))
	if count == 0 {
		return nil, damaged("branch page %d is empty", id)
	}
	keys := make([][]byte, count)
	children := make([]uint64, count)
	for i := range count {
		e, err := element(p, i)
		if err != nil {
			return nil, fmt.Errorf("branch page %d: %w", id, err)
		}
		pos, ksize := uint64(order.Uint32(e)), uint64(order.Uint32(e[4:]))
		if keys[i], err = span(p, i, pos, ksize); err != nil {
			return nil, fmt.Errorf("branch page %d: %w", id, err)
		}
		if err := inOrder(keys, i, lo, hi); err != nil {
			return nil, fmt.Errorf("branch page %d: %w", id, err)
		}
		children[i] = order.Uint64(e[8:])
	}
	for i, child := range children {
		next := hi
		if i+1 < count {
			next = keys[i+1]
		}
		first, err := c.walk(child, keys[i], next)
		if err != nil {
			return nil, err
		}
		// bbolt finds a child's entry by the child's first key when it writes the child back: any
		// other key there makes it add a second entry, and the file references a page twice.
		if first == nil || !bytes.Equal(first, keys[i]) {
			return nil, damaged("branch page %d: key %d is not the first key of its child page %d", id, i, child)
		}
	}
	return keys[0], nil
}

// leaf checks the elements of the leaf page p (a page of the file or an inline bucket's), walks the
// buckets it holds, and returns its first key (nil when it is empty).
func (c *checker) leaf(p []byte, lo, hi []byte) ([]byte, error) {
	count := int(order.Uint16(p[10:]))
	keys := make([][]byte, count)
	for i := range count {
		e, err := element(p, i)
		if err != nil {
			return nil, err
		}
		flags, pos := order.Uint32(e), uint64(order.Uint32(e[4:]))
		ksize, vsize := uint64(order.Uint32(e[8:])), uint64(order.Uint32(e[12:]))
		kv, err := span(p, i, pos, ksize+vsize)
		if err != nil {
			return nil, err
		}
		keys[i] = kv[:ksize]
		if err := inOrder(keys, i, lo, hi); err != nil {
			return nil, err
		}
		switch flags {
		case 0:
		case bucketLeaf:
			if err := c.bucket(kv[ksize:]); err != nil {
				return nil, fmt.Errorf("bucket %q: %w", keys[i], err)
			}
		default:
			return nil, damaged("element %d has flags %#x", i, flags)
		}
	}
	if count == 0 {
		return nil, nil
	}
	return keys[0], nil
}

// bucket checks a bucket's value: its header, then its root page or its inline page.
func (c *checker) bucket(v []byte) error {
	if len(v) < bucketHeader {
		return damaged("its value is %d bytes, shorter than a bucket header", len(v))
	}
	if root := order.Uint64(v); root != 0 {
		_, err := c.walk(root, nil, nil)
		return err
	}
	inline := v[bucketHeader:]
	if len(inline) < pageHeaderSize {
		return damaged("its inline page is %d bytes, shorter than a page header", len(inline))
	}
	if id, flags, overflow := order.Uint64(inline), order.Uint16(inline[8:]), order.Uint32(inline[12:]); id != 0 || flags != leafPage || overflow != 0 {
		return damaged("its inline page has id %d, flags %#x and overflow %d, not those of an inline leaf", id, flags, overflow)
	}
	_, err := c.leaf(inline, nil, nil)
	return err
}

// element returns element i of page p.
func element(p []byte, i int) ([]byte, error) {
	start := pageHeaderSize + i*elementSize
	if start+elementSize > len(p) {
		return nil, damaged("element %d lies past the end of its page", i)
	}
	return p[start : start+elementSize], nil
}

// span returns the n bytes at offset pos from the start of element i of page p.
func span(p []byte, i int, pos, n uint64) ([]byte, error) {
	start := uint64(pageHeaderSize+i*elementSize) + pos
	if start > uint64(len(p)) || n > uint64(len(p))-start {
		return nil, damaged("element %d's key or value lies past the end of its page", i)
	}
	return p[start : start+n], nil
}

// inOrder checks that keys[i] lies in [lo, hi) and after keys[i-1].
func inOrder(keys [][]byte, i int, lo, hi []byte) error {
	k := keys[i]
	switch {
	case i == 0 && lo != nil && bytes.Compare(k, lo) < 0:
		return damaged("key %d sorts before the bound its parent page gives", i)
	case i > 0 && bytes.Compare(keys[i-1], k) >= 0:
		return damaged("key %d does not sort after key %d", i, i-1)
	case hi != nil && bytes.Compare(k, hi) >= 0:
		return damaged("key %d does not sort before the bound its parent page gives", i)
	}
	return nil
}

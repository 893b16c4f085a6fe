package taskcgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeFS is ops on a temporary directory laid out as a cgroup filesystem, with the kernel's
// behaviour that a plain directory lacks: the filesystem type of each mount, mkdir filling in the
// interface files (those of the parent, empty), and rmdir ignoring them but refusing a cgroup with
// processes or children (EBUSY).
type fakeFS struct {
	magic    map[string]int64 // mount point → filesystem magic; anything else is tmpfs
	rmdirErr map[string]error // cgroup directory → the error rmdir fails with
}

var _ ops = (*fakeFS)(nil)

func (f *fakeFS) fsType(path string) (int64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	if m, ok := f.magic[path]; ok {
		return m, nil
	}
	return unix.TMPFS_MAGIC, nil
}

func (f *fakeFS) mkdir(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := os.WriteFile(filepath.Join(path, e.Name()), nil, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeFS) rmdir(path string) error {
	if err, ok := f.rmdirErr[path]; ok {
		return &fs.PathError{Op: "rmdir", Path: path, Err: err}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return &fs.PathError{Op: "rmdir", Path: path, Err: syscall.EBUSY}
		}
	}
	procs, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err == nil && strings.TrimSpace(string(procs)) != "" {
		return &fs.PathError{Op: "rmdir", Path: path, Err: syscall.EBUSY}
	}
	return os.RemoveAll(path)
}

// layout is a fake cgroup filesystem: its root and its ops.
type layout struct {
	fs  string
	ops *fakeFS
}

// writeFiles creates the files (name → content) in dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// v1Layout returns a fake cgroup v1 filesystem like this machine's: a tmpfs with one hierarchy per
// controller, a name=systemd hierarchy, and hybrid mode's cgroup2 "unified".
func v1Layout(t *testing.T) layout {
	t.Helper()
	root := tempDir(t)
	f := &fakeFS{magic: map[string]int64{}}
	common := map[string]string{"cgroup.procs": "", "tasks": "", "notify_on_release": "0"}
	hierarchies := map[string]map[string]string{
		"cpu":     {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"},
		"cpuacct": {"cpuacct.usage": "0"},
		"cpuset":  {"cpuset.cpus": "0-3", "cpuset.mems": "0"},
		"memory":  {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "0"},
		"pids":    {"pids.max": "max"},
		"devices": {"devices.list": "a *:* rwm"},
		"systemd": {},
	}
	for name, files := range hierarchies {
		dir := filepath.Join(root, name)
		writeFiles(t, dir, common)
		writeFiles(t, dir, files)
		f.magic[dir] = unix.CGROUP_SUPER_MAGIC
	}
	unified := filepath.Join(root, "unified")
	writeFiles(t, unified, map[string]string{"cgroup.controllers": "", "cgroup.subtree_control": "", "cgroup.procs": ""})
	f.magic[unified] = unix.CGROUP2_SUPER_MAGIC
	return layout{fs: root, ops: f}
}

// v2Layout returns a fake cgroup v2 filesystem: the unified hierarchy's root cgroup.
func v2Layout(t *testing.T) layout {
	t.Helper()
	root := tempDir(t)
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc",
		"cgroup.subtree_control": "",
		"cgroup.procs":           "",
		"cpu.max":                "",
		"cpu.weight":             "",
		"memory.max":             "",
		"pids.max":               "",
	})
	return layout{fs: root, ops: &fakeFS{magic: map[string]int64{root: unix.CGROUP2_SUPER_MAGIC}}}
}

// tempDir returns t.TempDir with symbolic links resolved, as New resolves Config.FS.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// manager returns a Manager for the layout with root "/ecs" and the default period.
func (l layout) manager(t *testing.T) *Manager {
	t.Helper()
	m, err := newManager(Config{Root: "/ecs", FS: l.fs}, l.ops)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// read returns the trimmed content of the file at the path under the layout's root.
func (l layout) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.fs, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// exists reports whether the path under the layout's root exists.
func (l layout) exists(t *testing.T, rel string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(l.fs, rel))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

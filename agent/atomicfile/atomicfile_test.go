package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteReplacesWholeWithItsMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	require.NoError(t, Write(path, []byte("new content"), 0o644))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "new content", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "the mode asked for, whatever the umask")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

func TestWriteFailureLeavesTheFileAndNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, os.Mkdir(path, 0o755)) // a directory cannot be renamed over
	require.NoError(t, os.WriteFile(filepath.Join(path, "inside"), nil, 0o600))
	err := Write(path, []byte("x"), 0o600)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the directory: the temporary file is removed")

	err = Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600)
	assert.ErrorContains(t, err, filepath.Join(dir, "missing", "f"))
}

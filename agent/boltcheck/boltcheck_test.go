package boltcheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	berrors "go.etcd.io/bbolt/errors"
)

// A missing file is created and opens; an existing empty one (a file truncated to nothing) is damaged,
// not silently a new database.
func TestOpenNewAndEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	db, err := Open(path, time.Second)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(path, time.Second)
	require.NoError(t, err, "a file bbolt made opens again")

	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = Open(empty, time.Second)
	assert.ErrorIs(t, err, ErrDamaged)
}

// Open waits for another holder of the lock and then fails with bbolt's ErrTimeout, before reading
// the file.
func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := Open(path, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = Open(path, 100*time.Millisecond)
	assert.ErrorIs(t, err, berrors.ErrTimeout)
}

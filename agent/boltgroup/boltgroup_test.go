package boltgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "test.db"), 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("b"))
		return err
	}))
	return db
}

func put(key string) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(key), []byte("v")) }
}

func keys(t *testing.T, db *bolt.DB) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("b")).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	}))
	return out
}

// A lone write commits at once: it does not wait for company as bbolt's Batch does (10 ms).
func TestLoneWriteDoesNotWait(t *testing.T) {
	db := openDB(t)
	db.NoSync = true // so the time measured is the committer's, not the disk's
	c := New(db)
	start := time.Now()
	for i := range 20 {
		require.NoError(t, c.Update(put(fmt.Sprint(i))))
	}
	took := time.Since(start)
	assert.Less(t, took, 20*db.MaxBatchDelay, "20 writes one after another took %s", took)
	assert.EqualValues(t, 20, c.Commits())
	assert.Len(t, keys(t, db), 20)
}

// Writes that arrive while a transaction commits share the next one, and each is durable.
func TestConcurrentWritesShareTransactions(t *testing.T) {
	db := openDB(t)
	c := New(db)
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { assert.NoError(t, c.Update(put(fmt.Sprintf("%03d", i)))) })
	}
	wg.Wait()
	t.Logf("%d concurrent writes in %d transactions", n, c.Commits())
	assert.Less(t, c.Commits(), int64(n/2))
	assert.Len(t, keys(t, db), n)
}

// A write that fails fails alone: the writes it shared a transaction with are committed.
func TestFailingWriteFailsAlone(t *testing.T) {
	db := openDB(t)
	c := New(db)
	bad := errors.New("bad write")
	inside, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	// The first write holds the transaction open until the others are queued behind it.
	wg.Go(func() {
		assert.NoError(t, c.Update(func(tx *bolt.Tx) error {
			close(inside)
			<-release
			return put("first")(tx)
		}))
	})
	<-inside
	results := make([]error, 3)
	for i, fn := range []func(tx *bolt.Tx) error{put("a"), func(*bolt.Tx) error { return bad }, put("c")} {
		wg.Go(func() { results[i] = c.Update(fn) })
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 3
	}, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.NoError(t, results[0])
	assert.ErrorIs(t, results[1], bad)
	assert.NoError(t, results[2])
	assert.ElementsMatch(t, []string{"first", "a", "c"}, keys(t, db))
}

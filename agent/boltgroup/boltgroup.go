// Package boltgroup commits concurrent bbolt writes together without waiting for company: a write
// that finds no transaction being committed commits at once; writes that arrive while one is being
// committed share the next transaction, and so its fsync. bbolt's own Batch waits up to
// MaxBatchDelay (10 ms) for company before it commits, which a lone write pays in full.
//
// A write whose function fails fails alone: when a shared transaction fails, each of its writes runs
// again in a transaction of its own, so a function may run more than once and must read what it
// changes afresh each time, as with bbolt's Batch.
package boltgroup

import (
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Committer group-commits the writes of one bbolt database. Its zero value is not usable; use New.
type Committer struct {
	db *bolt.DB

	mu      sync.Mutex
	queue   []*write // writes waiting for the next transaction
	leading bool     // a goroutine is committing queued writes
	commits atomic.Int64
}

type write struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

// New returns a Committer for db.
func New(db *bolt.DB) *Committer { return &Committer{db: db} }

// Update runs fn in a read-write transaction, perhaps shared with other writes of c, and returns
// once that transaction is durable, with fn's error or the commit's. fn must touch only what it
// owns, since the writes it shares a transaction with see its changes.
func (c *Committer) Update(fn func(tx *bolt.Tx) error) error {
	w := &write{fn: fn, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, w)
	if c.leading {
		c.mu.Unlock()
		return <-w.done
	}
	c.leading = true
	for len(c.queue) > 0 {
		group := c.queue
		c.queue = nil
		c.mu.Unlock()
		c.commit(group)
		c.mu.Lock()
	}
	c.leading = false
	c.mu.Unlock()
	return <-w.done
}

// Commits returns how many transactions c has committed or tried.
func (c *Committer) Commits() int64 { return c.commits.Load() }

// commit runs group in one transaction; when that fails and the group has more than one write, each
// runs again alone, so that only a write that fails by itself fails.
func (c *Committer) commit(group []*write) {
	c.commits.Add(1)
	err := c.db.Update(func(tx *bolt.Tx) error {
		for _, w := range group {
			if err := w.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(group) == 1 {
		for _, w := range group {
			w.done <- err
		}
		return
	}
	for _, w := range group {
		c.commits.Add(1)
		w.done <- c.db.Update(w.fn)
	}
}

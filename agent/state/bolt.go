// Package state persists what the agent must not lose: its registration, every task with its
// containers' desired, known and sent status, and image records. Bolt keeps them in one bbolt file
// (ECS_DATADIR/berth.db); Memory keeps them in memory when ECS_CHECKPOINT=false. Both pass the same
// contract tests.
//
// # bbolt schema (SchemaVersion 2)
//
// Every value is JSON except the schema version. Keys are UTF-8 strings.
//
//	meta                      bucket
//	  schema_version          decimal string, e.g. "2"
//	  registration            JSON of Registration (absent until the agent has registered)
//	  acs_seq_num             decimal string: the seqNum of the last ACS payload handled (absent: 0)
//	tasks                     bucket
//	  <task ARN>              JSON of task.Task; its "arn" field equals the key
//	images                    bucket
//	  <image ref>             JSON of ImageRecord; its "ref" field equals the key
//	sent                      bucket (version 2): what the control plane was told, owned by the reporter
//	  <task ARN>              JSON of SentRecord; its "taskArn" field equals the key
//
// Version 2 moved each task's and container's "sentStatus" out of the task records into the sent
// bucket, so that the engine, which writes task records, and the reporter, which writes sent records,
// never write the same record.
// A file without a schema version (new, or written before versions existed) is version 0. Opening a
// file of version N < SchemaVersion runs upgrades[N], upgrades[N+1], … in one transaction and then
// writes SchemaVersion; opening a file newer than SchemaVersion fails and leaves it untouched. To
// change the schema: bump SchemaVersion, append one step to upgrades, add a golden file of the new
// version (see TestGolden), and update this comment.
//
// Writes are group-committed (agent/boltgroup): a write that arrives while another transaction is
// being committed waits for it and then shares one transaction (and one fsync) with every other write
// that waited, so N workers saving at once cost about two fsyncs, not N, and a lone write waits for
// nothing. A write that fails fails alone.
//
// A record that does not decode, or whose key does not match its ARN or ref, is reported as a
// *RecordError and skipped; the other records still load.
package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/berth-agent/berth/agent/boltcheck"
	"github.com/berth-agent/berth/agent/boltgroup"
	"github.com/berth-agent/berth/agent/task"
)

// SchemaVersion is the version of the bbolt schema this code reads and writes.
const SchemaVersion = 2

// upgrades[v] upgrades a file from schema version v to v+1; len(upgrades) == SchemaVersion.
var upgrades = []func(tx *bbolt.Tx) error{
	0: func(tx *bbolt.Tx) error {
		for _, name := range []string{bucketMeta, bucketTasks, bucketImages} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %q: %w", name, err)
			}
		}
		return nil
	},
	1: moveSentStatus,
}

// moveSentStatus is the upgrade from version 1 to 2: it creates the sent bucket and moves the sent
// statuses found in task records into it. A task record that does not decode is left for Tasks to
// report.
func moveSentStatus(tx *bbolt.Tx) error {
	sent, err := tx.CreateBucketIfNotExists([]byte(bucketSent))
	if err != nil {
		return fmt.Errorf("create bucket %q: %w", bucketSent, err)
	}
	tasks, err := bucket(tx, bucketTasks)
	if err != nil {
		return err
	}
	return tasks.ForEach(func(k, v []byte) error {
		var old struct {
			SentStatus task.TaskStatus `json:"sentStatus"`
			Containers []struct {
				Name       string               `json:"name"`
				SentStatus task.ContainerStatus `json:"sentStatus"`
			} `json:"containers"`
		}
		if json.Unmarshal(v, &old) != nil {
			return nil
		}
		r := SentRecord{TaskArn: string(k), Task: old.SentStatus}
		for _, c := range old.Containers {
			if c.SentStatus != task.ContainerNone {
				if r.Containers == nil {
					r.Containers = map[string]task.ContainerStatus{}
				}
				r.Containers[c.Name] = c.SentStatus
			}
		}
		if r.Task == task.TaskNone && r.Containers == nil {
			return nil
		}
		data, err := encodeSent(r)
		if err != nil {
			return err
		}
		return sent.Put(k, data)
	})
}

var _ Store = (*Bolt)(nil)

// Bolt is the Store kept in a bbolt file. It is safe for concurrent use; each Save is one fsynced
// transaction.
type Bolt struct {
	db     *bbolt.DB
	path   string
	writes *boltgroup.Committer // every write, group-committed
}

// lockedError is OpenBolt's error when another process holds the file lock.
type lockedError struct{ path string }

func (e *lockedError) Error() string {
	return fmt.Sprintf("state file %s is locked by another process (is another berth agent running?)", e.path)
}

func (e *lockedError) Unwrap() error { return ErrLocked }

// OpenBolt opens the state file at path, creating it (0600) and its directory if missing, making an
// existing file 0600 too, and
// upgrades its schema to SchemaVersion. It waits up to timeout for the file lock (0 waits forever);
// when another process holds it the error wraps ErrLocked; when the file is not a whole bbolt
// database of this schema (empty, truncated, any page damaged: see package boltcheck, which checks it
// before bbolt maps it, in time and memory linear in its size) it wraps ErrCorrupt; when the file's
// schema is newer than SchemaVersion it says so. Every error names the path.
func OpenBolt(path string, timeout time.Duration) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create directory of state file %s: %w", path, err)
	}
	db, err := boltcheck.Open(path, timeout)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, &lockedError{path: path}
	case errors.Is(err, boltcheck.ErrDamaged):
		return nil, fmt.Errorf("open state file %s: %w: %w", path, err, ErrCorrupt)
	case err != nil:
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil { // a file made by someone else may be readable by all
		_ = db.Close()
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if err := db.Update(upgrade); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if err := db.View(hasBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open state file %s: damaged: %w: %w", path, err, ErrCorrupt)
	}
	return &Bolt{db: db, path: path, writes: boltgroup.New(db)}, nil
}

// hasBuckets checks that every bucket of the schema is there, as the upgrades leave them: a file
// that lacks one lost it to damage (a changed byte in its name, say).
func hasBuckets(tx *bbolt.Tx) error {
	for _, name := range []string{bucketMeta, bucketTasks, bucketImages, bucketSent} {
		if _, err := bucket(tx, name); err != nil {
			return err
		}
	}
	return nil
}

// upgrade brings the schema from the file's version up to SchemaVersion.
func upgrade(tx *bbolt.Tx) error {
	from, err := schemaVersion(tx)
	if err != nil {
		return err
	}
	if from > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than version %d, the newest this agent knows; refusing to downgrade", from, SchemaVersion)
	}
	if from == SchemaVersion {
		return nil
	}
	for v := from; v < SchemaVersion; v++ {
		if err := upgrades[v](tx); err != nil {
			return fmt.Errorf("upgrade schema from version %d to %d: %w", v, v+1, err)
		}
	}
	meta := tx.Bucket([]byte(bucketMeta))
	if meta == nil {
		return fmt.Errorf("upgrade schema: bucket %q missing after upgrade", bucketMeta)
	}
	return meta.Put([]byte(keySchemaVersion), []byte(strconv.Itoa(SchemaVersion)))
}

// schemaVersion reads the file's schema version; a file without one is version 0.
func schemaVersion(tx *bbolt.Tx) (int, error) {
	meta := tx.Bucket([]byte(bucketMeta))
	if meta == nil {
		return 0, nil
	}
	raw := meta.Get([]byte(keySchemaVersion))
	if raw == nil {
		return 0, nil
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("schema version %q is not a non-negative decimal number", raw)
	}
	return v, nil
}

// LastGoodSuffix names the copy SaveLastGood writes beside the state file.
const LastGoodSuffix = ".last-good"

// SaveLastGood writes a consistent copy of the state file to its path plus LastGoodSuffix (0600),
// replacing the previous copy only once the new one is complete and synced. The agent calls it at
// each start, after OpenBolt found the file intact, so a file damaged later can be replaced by it.
func (b *Bolt) SaveLastGood() error {
	dst := b.path + LastGoodSuffix
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the last good copy of %s: %w", b.path, err)
	}
	err = b.db.View(func(tx *bbolt.Tx) error {
		_, err := tx.WriteTo(f)
		return err
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write the last good copy of %s: %w", b.path, err)
	}
	return nil
}

// Path returns the path of the state file.
func (b *Bolt) Path() string { return b.path }

// update runs fn in a read-write transaction, after checking ctx, and returns once it is durable. fn
// may share its transaction with other writes (see the package doc), so it must only touch its own
// keys, and may run again alone when another write of a shared transaction fails.
func (b *Bolt) update(ctx context.Context, what string, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return b.wrap(what, b.writes.Update(fn))
}

// view runs fn in one read-only transaction, after checking ctx.
func (b *Bolt) view(ctx context.Context, what string, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return b.wrap(what, b.db.View(fn))
}

func (b *Bolt) wrap(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("%s: %w", what, ErrClosed)
	default:
		return fmt.Errorf("%s in %s: %w", what, b.path, err)
	}
}

// bucket returns the named bucket, or an error when the file lacks it.
func bucket(tx *bbolt.Tx, name string) (*bbolt.Bucket, error) {
	bk := tx.Bucket([]byte(name))
	if bk == nil {
		return nil, fmt.Errorf("bucket %q missing", name)
	}
	return bk, nil
}

// SaveTask stores t, replacing any earlier version with the same ARN; durable when it returns.
func (b *Bolt) SaveTask(ctx context.Context, t *task.Task) error {
	data, err := encodeTask(t)
	if err != nil {
		return err
	}
	return b.update(ctx, fmt.Sprintf("save task %q", t.Arn), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketTasks)
		if err != nil {
			return err
		}
		return bk.Put([]byte(t.Arn), data)
	})
}

// DeleteTask removes a task; deleting an unknown ARN is a no-op.
func (b *Bolt) DeleteTask(ctx context.Context, arn string) error {
	return b.update(ctx, fmt.Sprintf("delete task %q", arn), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketTasks)
		if err != nil {
			return err
		}
		return bk.Delete([]byte(arn))
	})
}

// Tasks returns every stored task ordered by ARN, plus one joined *RecordError per bad record.
func (b *Bolt) Tasks(ctx context.Context) ([]*task.Task, error) {
	return list(ctx, b, "list tasks", bucketTasks, decodeTask)
}

// list decodes every record of a bucket in key order; records that do not decode are skipped and
// their errors joined.
func list[T any](ctx context.Context, b *Bolt, what, name string, decode func(key string, data []byte) (T, error)) ([]T, error) {
	out := []T{}
	var errs []error
	err := b.view(ctx, what, func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, name)
		if err != nil {
			return err
		}
		return bk.ForEach(func(k, v []byte) error {
			r, err := decode(string(k), v)
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, errors.Join(errs...)
}

// SaveRegistration replaces the agent's registration; durable when it returns.
func (b *Bolt) SaveRegistration(ctx context.Context, r Registration) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("save registration: encode: %w", err)
	}
	return b.update(ctx, "save registration", func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		return bk.Put([]byte(keyRegistration), data)
	})
}

// Registration returns the saved registration, or false when none has been saved. A registration
// that does not decode is reported as a *RecordError.
func (b *Bolt) Registration(ctx context.Context) (Registration, bool, error) {
	var (
		r     Registration
		found bool
	)
	err := b.view(ctx, "load registration", func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		data := bk.Get([]byte(keyRegistration))
		if data == nil {
			return nil
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return &RecordError{Bucket: bucketMeta, Key: keyRegistration, Err: err}
		}
		found = true
		return nil
	})
	if err != nil {
		return Registration{}, false, err
	}
	return r, found, nil
}

// SaveSeqNum records the last ACS sequence number handled; durable when it returns.
func (b *Bolt) SaveSeqNum(ctx context.Context, seq int64) error {
	return b.update(ctx, "save ACS sequence number", func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		return bk.Put([]byte(keySeqNum), []byte(strconv.FormatInt(seq, 10)))
	})
}

// SeqNum returns the saved ACS sequence number, 0 when none was saved. One that does not decode is a
// *RecordError.
func (b *Bolt) SeqNum(ctx context.Context) (int64, error) {
	var seq int64
	err := b.view(ctx, "load ACS sequence number", func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		data := bk.Get([]byte(keySeqNum))
		if data == nil {
			return nil
		}
		if seq, err = strconv.ParseInt(string(data), 10, 64); err != nil {
			return &RecordError{Bucket: bucketMeta, Key: keySeqNum, Err: err}
		}
		return nil
	})
	return seq, err
}

// SaveImage stores img, replacing any earlier record with the same Ref; durable when it returns.
func (b *Bolt) SaveImage(ctx context.Context, img ImageRecord) error {
	data, err := encodeImage(img)
	if err != nil {
		return err
	}
	return b.update(ctx, fmt.Sprintf("save image %q", img.Ref), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketImages)
		if err != nil {
			return err
		}
		return bk.Put([]byte(img.Ref), data)
	})
}

// DeleteImage removes an image record; deleting an unknown ref is a no-op.
func (b *Bolt) DeleteImage(ctx context.Context, ref string) error {
	return b.update(ctx, fmt.Sprintf("delete image %q", ref), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketImages)
		if err != nil {
			return err
		}
		return bk.Delete([]byte(ref))
	})
}

// Images returns every image record ordered by Ref, plus one joined *RecordError per bad record.
func (b *Bolt) Images(ctx context.Context) ([]ImageRecord, error) {
	return list(ctx, b, "list images", bucketImages, decodeImage)
}

// SaveSent stores r, replacing any earlier record of the same task; durable when it returns.
func (b *Bolt) SaveSent(ctx context.Context, r SentRecord) error {
	data, err := encodeSent(r)
	if err != nil {
		return err
	}
	return b.update(ctx, fmt.Sprintf("save sent record %q", r.TaskArn), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketSent)
		if err != nil {
			return err
		}
		return bk.Put([]byte(r.TaskArn), data)
	})
}

// DeleteSent removes a task's sent record; deleting an unknown ARN is a no-op.
func (b *Bolt) DeleteSent(ctx context.Context, taskArn string) error {
	return b.update(ctx, fmt.Sprintf("delete sent record %q", taskArn), func(tx *bbolt.Tx) error {
		bk, err := bucket(tx, bucketSent)
		if err != nil {
			return err
		}
		return bk.Delete([]byte(taskArn))
	})
}

// SentRecords returns every sent record ordered by task ARN, plus one joined *RecordError per bad
// record.
func (b *Bolt) SentRecords(ctx context.Context) ([]SentRecord, error) {
	return list(ctx, b, "list sent records", bucketSent, decodeSent)
}

// Close closes the file and releases its lock; later calls fail with ErrClosed. Calling it again is
// a no-op.
func (b *Bolt) Close() error {
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close state file %s: %w", b.path, err)
	}
	return nil
}

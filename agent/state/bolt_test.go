package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
)

func openTestBolt(t *testing.T, path string) *Bolt {
	t.Helper()
	b, err := OpenBolt(path, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestBoltContract(t *testing.T) {
	testStoreContract(t, func(t *testing.T) Store {
		return openTestBolt(t, filepath.Join(t.TempDir(), "berth.db"))
	})
}

func TestUpgradeTableCoversEveryVersion(t *testing.T) {
	assert.Len(t, upgrades, SchemaVersion)
}

// rawFile builds a bbolt file directly, bypassing OpenBolt, for tests of what OpenBolt finds.
func rawFile(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// rawRead reads one key of a closed state file directly; nil when the bucket or key is missing.
func rawRead(t *testing.T, path, bucketName, key string) []byte {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var out []byte
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		if bk := tx.Bucket([]byte(bucketName)); bk != nil {
			out = bytes.Clone(bk.Get([]byte(key)))
		}
		return nil
	}))
	return out
}

func TestBoltCreatesDirectoryAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "lib", "ecs", "data", "berth.db")
	b, err := OpenBolt(path, time.Second)
	require.NoError(t, err)
	assert.Equal(t, path, b.Path())
	require.NoError(t, b.Close())

	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	assert.Equal(t, strconv.Itoa(SchemaVersion), string(rawRead(t, path, "meta", "schema_version")), "a fresh file gets the current schema version")
}

func TestBoltPersistsAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "berth.db")
	t0 := time.Date(2025, 6, 7, 8, 9, 10, 11, time.UTC)
	reg := Registration{Cluster: "prod", ContainerInstanceArn: "arn:aws:ecs:eu-west-1:1:container-instance/prod/abc"}
	imgs := []ImageRecord{
		{Ref: "busybox:latest", ImageID: "sha256:bb", PulledAt: t0},
		{Ref: "nginx:1.27", ImageID: "sha256:aa", PulledAt: t0, LastUsedAt: t0.Add(time.Hour)},
	}

	b, err := OpenBolt(path, time.Second)
	require.NoError(t, err)
	require.NoError(t, b.SaveTask(ctx, fullTask("arn:1")))
	require.NoError(t, b.SaveTask(ctx, fullTask("arn:2")))
	require.NoError(t, b.SaveTask(ctx, fullTask("arn:gone")))
	require.NoError(t, b.DeleteTask(ctx, "arn:gone"))
	require.NoError(t, b.SaveRegistration(ctx, reg))
	for _, img := range imgs {
		require.NoError(t, b.SaveImage(ctx, img))
	}
	require.NoError(t, b.SaveImage(ctx, ImageRecord{Ref: "gone:1"}))
	require.NoError(t, b.DeleteImage(ctx, "gone:1"))
	require.NoError(t, b.SaveSeqNum(ctx, 7))
	require.NoError(t, b.Close())

	b = openTestBolt(t, path)
	tasks, err := b.Tasks(ctx)
	require.NoError(t, err)
	assert.Equal(t, []*task.Task{fullTask("arn:1"), fullTask("arn:2")}, tasks)
	gotReg, ok, err := b.Registration(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, reg, gotReg)
	gotImgs, err := b.Images(ctx)
	require.NoError(t, err)
	assert.Equal(t, imgs, gotImgs)
	seq, err := b.SeqNum(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(7), seq)
}

func TestBoltLockedByAnotherHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	openTestBolt(t, path)

	start := time.Now()
	second, err := OpenBolt(path, 200*time.Millisecond)
	elapsed := time.Since(start)
	if second != nil {
		_ = second.Close()
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "locked by another process")
	assert.Less(t, elapsed, time.Second)
	assert.GreaterOrEqual(t, elapsed, 100*time.Millisecond, "it waited for the lock")
}

func TestBoltLockReleasedOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	first, err := OpenBolt(path, time.Second)
	require.NoError(t, err)
	require.NoError(t, first.Close())
	openTestBolt(t, path)
}

func TestBoltBadRecords(t *testing.T) {
	ctx := context.Background()
	garbage := []byte("\x00\xffSECRET-GARBAGE{")
	mismatchedJSON, err := encodeTask(&task.Task{Arn: "arn:other"})
	require.NoError(t, err)
	badStatus := []byte(`{"arn":"arn:status","knownStatus":"SECRET-BOGUS"}`)

	path := filepath.Join(t.TempDir(), "berth.db")
	b := openTestBolt(t, path)
	require.NoError(t, b.SaveTask(ctx, fullTask("arn:a")))
	require.NoError(t, b.SaveTask(ctx, fullTask("arn:z")))
	require.NoError(t, b.SaveImage(ctx, ImageRecord{Ref: "good:1", ImageID: "sha256:1"}))
	require.NoError(t, b.db.Update(func(tx *bbolt.Tx) error {
		tasks, images := tx.Bucket([]byte("tasks")), tx.Bucket([]byte("images"))
		return errors.Join(
			tasks.Put([]byte("arn:garbage"), garbage),
			tasks.Put([]byte("arn:mismatch"), mismatchedJSON),
			tasks.Put([]byte("arn:status"), badStatus),
			images.Put([]byte("bad:1"), garbage),
		)
	}))

	tasks, err := b.Tasks(ctx)
	assert.Equal(t, []*task.Task{fullTask("arn:a"), fullTask("arn:z")}, tasks, "every good record still loads")
	require.Error(t, err)
	var re *RecordError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "tasks", re.Bucket)
	assert.NotContains(t, err.Error(), "GARBAGE", "the error names the key, not the contents")
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *RecordError
		require.ErrorAs(t, e, &re)
		assert.Equal(t, "tasks", re.Bucket)
		assert.Contains(t, e.Error(), re.Key)
		keys = append(keys, re.Key)
	}
	assert.Equal(t, []string{"arn:garbage", "arn:mismatch", "arn:status"}, keys)

	imgs, err := b.Images(ctx)
	assert.Equal(t, []ImageRecord{{Ref: "good:1", ImageID: "sha256:1"}}, imgs)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, RecordError{Bucket: "images", Key: "bad:1", Err: re.Err}, *re)

	require.NoError(t, b.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("registration"), garbage)
	}))
	_, ok, err := b.Registration(ctx)
	assert.False(t, ok)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "meta", re.Bucket)
	assert.Equal(t, "registration", re.Key)
}

func TestBoltSchemaVersions(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(tx *bbolt.Tx) error // nil: no file at all
		wantErr []string                 // substrings of the error; nil: opens and ends at SchemaVersion
	}{
		{name: "fresh file"},
		{
			name:    "empty bbolt file without version",
			prepare: func(tx *bbolt.Tx) error { return nil },
		},
		{
			name: "version 0 without buckets",
			prepare: func(tx *bbolt.Tx) error {
				meta, err := tx.CreateBucket([]byte("meta"))
				if err != nil {
					return err
				}
				return meta.Put([]byte("schema_version"), []byte("0"))
			},
		},
		{
			name: "current version",
			prepare: func(tx *bbolt.Tx) error {
				for _, up := range upgrades {
					if err := up(tx); err != nil {
						return err
					}
				}
				return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte(strconv.Itoa(SchemaVersion)))
			},
		},
		{
			name: "newer version",
			prepare: func(tx *bbolt.Tx) error {
				meta, err := tx.CreateBucket([]byte("meta"))
				if err != nil {
					return err
				}
				return meta.Put([]byte("schema_version"), []byte(strconv.Itoa(SchemaVersion+1)))
			},
			wantErr: []string{fmt.Sprintf("schema version %d", SchemaVersion+1), fmt.Sprintf("version %d", SchemaVersion), "refusing to downgrade"},
		},
		{
			name: "unreadable version",
			prepare: func(tx *bbolt.Tx) error {
				meta, err := tx.CreateBucket([]byte("meta"))
				if err != nil {
					return err
				}
				return meta.Put([]byte("schema_version"), []byte("one"))
			},
			wantErr: []string{`schema version "one"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "berth.db")
			if tt.prepare != nil {
				rawFile(t, path, tt.prepare)
			}
			before := rawReadIfExists(t, path)

			b, err := OpenBolt(path, time.Second)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.Nil(t, b)
				assert.Contains(t, err.Error(), path)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				assert.Equal(t, before, rawReadIfExists(t, path), "a refused file is left as it was")
				return
			}
			require.NoError(t, err)
			require.NoError(t, b.SaveTask(ctx, &task.Task{Arn: "arn:a"}), "every bucket exists after opening")
			require.NoError(t, b.SaveImage(ctx, ImageRecord{Ref: "r"}))
			require.NoError(t, b.SaveRegistration(ctx, Registration{Cluster: "c"}))
			require.NoError(t, b.SaveSent(ctx, SentRecord{TaskArn: "arn:a"}))
			require.NoError(t, b.Close())
			assert.Equal(t, strconv.Itoa(SchemaVersion), string(rawRead(t, path, "meta", "schema_version")))
		})
	}
}

// rawReadIfExists returns the schema version stored in path, or nil when there is no file.
func rawReadIfExists(t *testing.T, path string) []byte {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return rawRead(t, path, "meta", "schema_version")
}

func TestBoltNotABoltFile(t *testing.T) {
	big := bytes.Repeat([]byte("not a bbolt database, just text. "), 1000)
	tests := []struct {
		name    string
		content []byte
	}{
		{name: "short text", content: []byte("hello\n")},
		{name: "a page of garbage", content: big[:4096]},
		{name: "many pages of garbage", content: big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "berth.db")
			require.NoError(t, os.WriteFile(path, tt.content, 0o600))
			b, err := OpenBolt(path, time.Second)
			require.Error(t, err)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), path)
		})
	}
}

// A version 1 file kept sent statuses inside the task records; opening it moves them into the sent
// bucket and leaves the rest of each task as it was.
func TestBoltUpgradeMovesSentStatus(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "berth.db")
	v1 := map[string]string{
		"arn:sent":   `{"arn":"arn:sent","family":"web","knownStatus":"RUNNING","sentStatus":"RUNNING","containers":[{"name":"app","knownStatus":"RUNNING","sentStatus":"RUNNING"},{"name":"side","knownStatus":"CREATED","sentStatus":"NONE"}]}`,
		"arn:unsent": `{"arn":"arn:unsent","family":"web","knownStatus":"PULLED","sentStatus":"NONE","containers":[{"name":"app","sentStatus":"NONE"}]}`,
		"arn:bad":    `{not json`,
	}
	rawFile(t, path, func(tx *bbolt.Tx) error {
		if err := upgrades[0](tx); err != nil {
			return err
		}
		for k, v := range v1 {
			if err := tx.Bucket([]byte("tasks")).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("1"))
	})

	b := openTestBolt(t, path)
	sent, err := b.SentRecords(ctx)
	require.NoError(t, err)
	assert.Equal(t, []SentRecord{{TaskArn: "arn:sent", Task: task.TaskRunning,
		Containers: map[string]task.ContainerStatus{"app": task.ContainerRunning}}}, sent, "only what was sent moves; the bad record is left alone")
	tasks, err := b.Tasks(ctx)
	var recErr *RecordError
	require.ErrorAs(t, err, &recErr, "the bad record is still reported by Tasks")
	assert.Equal(t, []string{"arn:sent", "arn:unsent"}, arns(tasks))
	assert.Equal(t, task.TaskRunning, tasks[0].KnownStatus)
}

// Writes that arrive while a transaction commits share the next one: N concurrent saves cost far
// fewer than N transactions, and each save is still durable when it returns.
func TestBoltGroupCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "berth.db")
	b := openTestBolt(t, path)
	const n = 64
	txBefore := b.writes.Commits()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			assert.NoError(t, b.SaveTask(ctx, fullTask(fmt.Sprintf("arn:%03d", i))))
		})
	}
	wg.Wait()
	txs := b.writes.Commits() - txBefore
	t.Logf("%d concurrent saves in %d transactions", n, txs)
	assert.Less(t, txs, int64(n/2), "concurrent saves share transactions")
	assert.GreaterOrEqual(t, txs, int64(1))

	require.NoError(t, b.Close())
	reopened := openTestBolt(t, path)
	got, err := reopened.Tasks(ctx)
	require.NoError(t, err)
	assert.Len(t, got, n, "every grouped save is durable")
}

// A state file someone made readable by all is narrowed to 0600 when it is opened.
func TestBoltNarrowsAnExistingFileTo0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	b := openTestBolt(t, path)
	require.NoError(t, b.Close())
	require.NoError(t, os.Chmod(path, 0o644))
	openTestBolt(t, path)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

// A state file damaged on disk (truncated, zeroed, pages scrambled) never panics the agent: OpenBolt
// fails with ErrCorrupt naming the file.
func TestBoltDamagedFileIsCorruptNotAPanic(t *testing.T) {
	ctx := context.Background()
	good := filepath.Join(t.TempDir(), "berth.db")
	b := openTestBolt(t, good)
	for i := range 200 {
		require.NoError(t, b.SaveTask(ctx, fullTask(fmt.Sprintf("arn:%03d", i))))
	}
	require.NoError(t, b.Close())
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	require.Greater(t, len(data), 16*4096)

	scrambled := bytes.Clone(data)
	for i := 2 * 4096; i < len(scrambled); i++ { // keep the meta pages, scramble every other page
		scrambled[i] = byte(i*7919 + i>>3)
	}
	freelist := bytes.Clone(data)
	for i := 2 * 4096; i < 3*4096; i++ {
		freelist[i] = 0xff
	}
	tests := map[string][]byte{
		"truncated to half":      data[:len(data)/2],
		"truncated to its metas": data[:2*4096+100],
		"zeroed":                 make([]byte, len(data)),
		"pages scrambled":        scrambled,
		"page 2 scrambled":       freelist,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "berth.db")
			require.NoError(t, os.WriteFile(path, content, 0o600))
			var (
				opened *Bolt
				err    error
			)
			assert.NotPanics(t, func() { opened, err = OpenBolt(path, time.Second) })
			if err == nil { // opening may succeed when the damage is in pages the open does not read
				defer opened.Close()
				assert.NotPanics(t, func() { _, err = opened.Tasks(ctx) })
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), path)
		})
	}
}

package state

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/boltcheck/boltchecktest"
	"github.com/berth-agent/berth/agent/task"
)

// sweepMemoryLimit is the memory a sweep child may use: the Go runtime's own reservations and
// a few times the file, far below what a runaway open reaches (RLIMIT_DATA, see boltchecktest.Child).
const sweepMemoryLimit = 256 << 20

// Every page-aligned truncation and every single-byte change of a churned state file (every page
// header field of every page, and random bytes) either opens with its data readable and writable,
// or fails with ErrCorrupt: never a signal, a hang or unbounded memory. Each case runs in a child
// process with a deadline and a memory limit.
func TestBoltDamageSweep(t *testing.T) {
	boltchecktest.Child(sweepMemoryLimit, ErrCorrupt, sweepOpen)
	if testing.Short() {
		t.Skip("the sweep runs hundreds of child processes")
	}
	path := filepath.Join(t.TempDir(), "berth.db")
	churn(t, path)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	boltchecktest.Run(t, boltchecktest.Sweep{Test: "TestBoltDamageSweep", File: data, PageSize: os.Getpagesize(),
		RandomFlips: 300, Seed: 21, Deadline: 10 * time.Second, MaxFailures: 10})
}

// churn builds a state file through the Store as an agent would over time: 900 task saves, every
// 25th task big enough to span pages, and 600 deletes, with sent records, images, the registration
// and the sequence number in between.
func churn(t *testing.T, path string) {
	ctx := context.Background()
	b, err := OpenBolt(path, time.Second)
	require.NoError(t, err)
	b.db.NoSync = true // the sweep damages the file itself; durability is not what it tests
	require.NoError(t, b.SaveRegistration(ctx, Registration{Cluster: "default", ContainerInstanceArn: "arn:aws:ecs:instance/1"}))
	var live []string
	for i := range 900 {
		tk := churnTask(i)
		require.NoError(t, b.SaveTask(ctx, tk))
		live = append(live, tk.Arn)
		if i%5 == 0 {
			require.NoError(t, b.SaveSent(ctx, SentRecord{TaskArn: tk.Arn, Task: task.TaskRunning}))
		}
		if i%7 == 0 {
			require.NoError(t, b.SaveImage(ctx, ImageRecord{Ref: fmt.Sprintf("registry.example/app:%d", i), ImageID: "sha256:feed"}))
		}
		if i%3 != 0 {
			require.NoError(t, b.DeleteTask(ctx, live[0]))
			require.NoError(t, b.DeleteSent(ctx, live[0]))
			live = live[1:]
		}
		require.NoError(t, b.SaveSeqNum(ctx, int64(i)))
	}
	require.NoError(t, b.Close())
}

// churnTask is the i-th task churn saves: one container, and every 25th with an environment big
// enough to span three pages.
func churnTask(i int) *task.Task {
	c := &task.Container{Name: "app", Image: "nginx:1.27", Essential: true, DesiredStatus: task.ContainerRunning,
		KnownStatus: task.ContainerRunning, DockerID: fmt.Sprintf("%064d", i), Environment: []task.KeyValue{{Name: "N", Value: strconv.Itoa(i)}}}
	if i%25 == 0 {
		c.Environment = append(c.Environment, task.KeyValue{Name: "BIG", Value: strings.Repeat("x", 9000)})
	}
	return &task.Task{Arn: fmt.Sprintf("arn:aws:ecs:us-east-1:123456789012:task/default/%08d", i), Family: "web", Revision: 1,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning, Containers: []*task.Container{c}}
}

// sweepOpen is a sweep child: it opens the file, reads everything (records that do not decode are
// reported, not fatal), writes, and checks that the file reopens whole with the write in it. It
// returns a digest of what it read.
func sweepOpen(path string) (string, error) {
	ctx := context.Background()
	b, err := OpenBolt(path, time.Second)
	if err != nil {
		return "", err
	}
	b.db.NoSync = true // what is written here need not survive a crash, only a reopen
	digest, err := readAll(ctx, b)
	if err != nil {
		_ = b.Close()
		return "", err
	}
	if err := b.SaveTask(ctx, fullTask("arn:written-after-open")); err != nil {
		return "", err
	}
	if err := b.DeleteTask(ctx, "arn:aws:ecs:us-east-1:123456789012:task/default/00000899"); err != nil {
		return "", err
	}
	if err := b.Close(); err != nil {
		return "", err
	}
	again, err := OpenBolt(path, time.Second)
	if err != nil {
		return "", fmt.Errorf("reopen after writing: %v", err) // %v: damage now is a failure, not a report
	}
	defer again.Close()
	tasks, err := again.Tasks(ctx)
	if !onlyRecordErrors(err) {
		return "", fmt.Errorf("tasks after reopening: %v", err)
	}
	for _, tk := range tasks {
		if tk.Arn == "arn:written-after-open" {
			return digest, nil
		}
	}
	return "", errors.New("the task written after opening is gone after reopening")
}

// readAll reads every record of b and digests them, with the errors of the records that do not
// decode; any other error is returned.
func readAll(ctx context.Context, b *Bolt) (string, error) {
	var all struct {
		Tasks  []*task.Task
		Images []ImageRecord
		Sent   []SentRecord
		Reg    Registration
		Seq    int64
		Errs   []string
	}
	keep := func(what string, err error) error {
		if !onlyRecordErrors(err) {
			return fmt.Errorf("%s: %v", what, err)
		}
		if err != nil {
			all.Errs = append(all.Errs, err.Error())
		}
		return nil
	}
	var err error
	all.Tasks, err = b.Tasks(ctx)
	if err := keep("tasks", err); err != nil {
		return "", err
	}
	all.Images, err = b.Images(ctx)
	if err := keep("images", err); err != nil {
		return "", err
	}
	all.Sent, err = b.SentRecords(ctx)
	if err := keep("sent records", err); err != nil {
		return "", err
	}
	all.Reg, _, err = b.Registration(ctx)
	if err := keep("registration", err); err != nil {
		return "", err
	}
	all.Seq, err = b.SeqNum(ctx)
	if err := keep("sequence number", err); err != nil {
		return "", err
	}
	data, err := json.Marshal(all)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sha256.Sum256(data)), nil
}

// onlyRecordErrors reports whether err is nil or made only of *RecordError.
func onlyRecordErrors(err error) bool {
	if err == nil {
		return true
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !onlyRecordErrors(e) {
				return false
			}
		}
		return true
	}
	var rec *RecordError
	return errors.As(err, &rec)
}

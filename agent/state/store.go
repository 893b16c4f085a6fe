package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
)

// Store is what the agent persists. Every method is safe for concurrent use; a Save is durable
// (fsynced, for the bbolt store) when it returns. Every method checks ctx before it writes and returns
// an error wrapping ErrClosed once the store is closed.
type Store interface {
	// SaveTask inserts t or replaces the task with the same ARN. The store keeps its own copy.
	SaveTask(ctx context.Context, t *task.Task) error
	// DeleteTask removes the task with the given ARN; an unknown ARN is a no-op.
	DeleteTask(ctx context.Context, arn string) error
	// Tasks returns every task, ordered by ARN. Records that do not decode are skipped and reported
	// in the error (one *RecordError each, joined) alongside the good tasks.
	Tasks(ctx context.Context) ([]*task.Task, error)
	// SaveRegistration replaces the agent's registration.
	SaveRegistration(ctx context.Context, r Registration) error
	// Registration returns the saved registration, or false when none has been saved.
	Registration(ctx context.Context) (Registration, bool, error)
	// SaveSeqNum records the sequence number of the last ACS payload handled.
	SaveSeqNum(ctx context.Context, seq int64) error
	// SeqNum returns the saved ACS sequence number, 0 when none has been saved.
	SeqNum(ctx context.Context) (int64, error)
	// SaveImage inserts img or replaces the record with the same Ref.
	SaveImage(ctx context.Context, img ImageRecord) error
	// DeleteImage removes the record with the given ref; an unknown ref is a no-op.
	DeleteImage(ctx context.Context, ref string) error
	// Images returns every image record, ordered by Ref, reporting bad records as Tasks does.
	Images(ctx context.Context) ([]ImageRecord, error)
	// SaveSent inserts r or replaces the record with the same TaskArn.
	SaveSent(ctx context.Context, r SentRecord) error
	// DeleteSent removes the record of a task; an unknown ARN is a no-op.
	DeleteSent(ctx context.Context, taskArn string) error
	// SentRecords returns every record of what the control plane was told, ordered by TaskArn,
	// reporting bad records as Tasks does.
	SentRecords(ctx context.Context) ([]SentRecord, error)
	// SaveLastGood keeps a copy of the store as it is now, known to be whole, for an operator to
	// restore when the store is later found damaged; a store with nothing on disk keeps none.
	SaveLastGood() error
	// Close releases the store; calling it again is a no-op.
	Close() error
}

// Registration is the agent's registration with ECS.
type Registration struct {
	Cluster              string `json:"cluster"`
	ContainerInstanceArn string `json:"containerInstanceArn"`
}

// InstanceARN returns the container instance ARN saved for cluster: the ARN this host registered
// under, which the next registration in that cluster keeps. It is "" before the first registration,
// for another cluster's, and when the registration cannot be read.
func InstanceARN(ctx context.Context, s Store, cluster string) string {
	r, ok, err := s.Registration(ctx)
	if err != nil || !ok || r.Cluster != cluster {
		return ""
	}
	return r.ContainerInstanceArn
}

// ImageRecord is what the agent knows of one image it pulled, keyed by Ref.
type ImageRecord struct {
	Ref        string    `json:"ref"`
	ImageID    string    `json:"imageId"`
	PulledAt   time.Time `json:"pulledAt,omitzero"`
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
}

// SentRecord is what the control plane has been told of one task: the last task and container
// statuses it accepted. Its owner is the state-change reporter; the engine never reads or writes it.
type SentRecord struct {
	TaskArn    string                          `json:"taskArn"`
	Task       task.TaskStatus                 `json:"task"`
	Containers map[string]task.ContainerStatus `json:"containers,omitempty"`
	// Report, when set, is a STOPPED report of a task the engine never took (one rejected when it
	// arrived): it is delivered from this record alone and the record is deleted once it is.
	Report *task.Task `json:"report,omitempty"`
}

var (
	// ErrLocked is wrapped by OpenBolt's error when another process holds the state file. An
	// errdefs.ErrConflict: the file is in use by another process (another agent on the same data
	// directory), and trying again will not help while that process runs.
	ErrLocked = errdefs.New(errdefs.ErrConflict, "state file is locked")
	// ErrCorrupt is wrapped by OpenBolt's error when the state file is not a whole bbolt database. An
	// errdefs.ErrFailedPrecondition: the file on disk, not the request, is wrong, until an operator
	// moves it away.
	ErrCorrupt = errdefs.New(errdefs.ErrFailedPrecondition, "state file is corrupt")
	// ErrClosed is wrapped by the error of every Store call made after Close. An
	// errdefs.ErrFailedPrecondition.
	ErrClosed = errdefs.New(errdefs.ErrFailedPrecondition, "state store is closed")
)

// RecordError reports one stored record that could not be decoded. Its text names the bucket and
// key, never the record's contents: Err, which may quote them (a time that does not parse, a status
// name), is described by its kind only.
type RecordError struct {
	Bucket string
	Key    string
	Err    error
}

// Error names the bucket and key and the kind of decoding error, never the record's contents.
func (e *RecordError) Error() string {
	return fmt.Sprintf("bad %s record %q: %s", e.Bucket, e.Key, describeDecodeError(e.Err))
}

// describeDecodeError says what kind of decoding error err is without quoting the input.
func describeDecodeError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	var ne *strconv.NumError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want %s", te.Field, te.Type)
	case errors.As(err, &pe):
		return "a time is not in RFC 3339 format"
	case errors.As(err, &ne):
		return "not an integer in range"
	case errors.Is(err, errKeyMismatch):
		return err.Error()
	default:
		return "a value does not decode"
	}
}

// errKeyMismatch is wrapped by the RecordError of a record whose key is not its ARN or ref.
var errKeyMismatch = errors.New("key does not match")

// Unwrap returns the decoding error.
func (e *RecordError) Unwrap() error { return e.Err }

// Bucket names, shared by the bbolt schema and the in-memory store's error reports.
const (
	bucketMeta   = "meta"
	bucketTasks  = "tasks"
	bucketImages = "images"
	bucketSent   = "sent"

	keySchemaVersion = "schema_version"
	keyRegistration  = "registration"
	keySeqNum        = "acs_seq_num"
)

func encodeTask(t *task.Task) ([]byte, error) {
	if t == nil {
		return nil, errors.New("save task: nil task")
	}
	if t.Arn == "" {
		return nil, errors.New("save task: empty ARN")
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("save task %q: encode: %w", t.Arn, err)
	}
	return b, nil
}

func decodeTask(key string, data []byte) (*task.Task, error) {
	var t task.Task
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, &RecordError{Bucket: bucketTasks, Key: key, Err: err}
	}
	if t.Arn != key {
		return nil, &RecordError{Bucket: bucketTasks, Key: key, Err: fmt.Errorf("%w the task's ARN", errKeyMismatch)}
	}
	return &t, nil
}

func encodeImage(img ImageRecord) ([]byte, error) {
	if img.Ref == "" {
		return nil, errors.New("save image: empty ref")
	}
	b, err := json.Marshal(img)
	if err != nil {
		return nil, fmt.Errorf("save image %q: encode: %w", img.Ref, err)
	}
	return b, nil
}

func decodeImage(key string, data []byte) (ImageRecord, error) {
	var img ImageRecord
	if err := json.Unmarshal(data, &img); err != nil {
		return ImageRecord{}, &RecordError{Bucket: bucketImages, Key: key, Err: err}
	}
	if img.Ref != key {
		return ImageRecord{}, &RecordError{Bucket: bucketImages, Key: key, Err: fmt.Errorf("%w the image's ref", errKeyMismatch)}
	}
	return img, nil
}

func encodeSent(r SentRecord) ([]byte, error) {
	if r.TaskArn == "" {
		return nil, errors.New("save sent record: empty task ARN")
	}
	if r.Report != nil && r.Report.Arn != r.TaskArn {
		return nil, fmt.Errorf("save sent record %q: its report is of task %q", r.TaskArn, r.Report.Arn)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("save sent record %q: encode: %w", r.TaskArn, err)
	}
	return b, nil
}

func decodeSent(key string, data []byte) (SentRecord, error) {
	var r SentRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return SentRecord{}, &RecordError{Bucket: bucketSent, Key: key, Err: err}
	}
	if r.TaskArn != key {
		return SentRecord{}, &RecordError{Bucket: bucketSent, Key: key, Err: fmt.Errorf("%w the record's task ARN", errKeyMismatch)}
	}
	return r, nil
}

package localcp

// The control plane keeps its state in its own bbolt file (Config.DBPath), separate from the agent's.
// Every value is one JSON record; every write happens in one bbolt transaction with the change it
// belongs to, before the API call returns or a payload is sent.
//
//	meta/
//	  schemaVersion          → "1" (decimal); a newer version than this code knows is refused
//	  seqNum                 → decimal sequence number of the last ACS PayloadMessage sent
//	clusters/
//	  <cluster name>         → clusterRecord
//	taskdefs/
//	  <family>/<%010d rev>   → taskDefRecord (keys sort by family, then revision)
//	tasks/
//	  <task ARN>             → taskRecord (its effective definition, overrides, statuses, containers)
//	instances/
//	  <container inst. ARN>  → instanceRecord
//
// Task and container statuses (lastStatus, desiredStatus, ackedDesired) are stored by their ECS
// names, PENDING, RUNNING and STOPPED, and held in memory as the task model's statuses.
//
// A record that does not decode is reported (logged) and skipped; it does not fail the whole read.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/boltcheck"
	"github.com/berth-agent/berth/agent/task"
)

// schemaVersion is the version of the layout above that this code writes.
const schemaVersion = 1

var (
	bucketMeta      = []byte("meta")
	bucketClusters  = []byte("clusters")
	bucketTaskDefs  = []byte("taskdefs")
	bucketTasks     = []byte("tasks")
	bucketInstances = []byte("instances")

	keySchemaVersion = []byte("schemaVersion")
	keySeqNum        = []byte("seqNum")

	allBuckets = [][]byte{bucketMeta, bucketClusters, bucketTaskDefs, bucketTasks, bucketInstances}
)

// clusterRecord is one cluster.
type clusterRecord struct {
	Name      string    `json:"name"`
	Arn       string    `json:"arn"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// taskDefRecord is one revision of a task definition family.
type taskDefRecord struct {
	Family         string          `json:"family"`
	Revision       int             `json:"revision"`
	Status         string          `json:"status"` // ACTIVE or INACTIVE
	RegisteredAt   time.Time       `json:"registeredAt"`
	DeregisteredAt time.Time       `json:"deregisteredAt,omitzero"`
	Digest         string          `json:"digest"`
	Definition     json.RawMessage `json:"definition"` // taskdef.Canonical, revision included
}

// taskRecord is one task and everything reported about it.
type taskRecord struct {
	Arn                  string          `json:"arn"`
	ID                   string          `json:"id"`
	ClusterName          string          `json:"clusterName"`
	TaskDefinitionArn    string          `json:"taskDefinitionArn"`
	Family               string          `json:"family"`
	Revision             int             `json:"revision"`
	Definition           json.RawMessage `json:"definition"` // effective definition: overrides applied
	Overrides            *taskOverride   `json:"overrides,omitempty"`
	ContainerInstanceArn string          `json:"containerInstanceArn,omitempty"` // empty until placed
	StartedBy            string          `json:"startedBy,omitempty"`
	Group                string          `json:"group"`
	CPU                  int             `json:"cpu,omitempty"`    // task or summed container CPU units
	Memory               int             `json:"memory,omitempty"` // task or summed container MiB
	TaskCPU              int             `json:"taskCpu,omitempty"`
	TaskMemory           int             `json:"taskMemory,omitempty"`
	Version              int64           `json:"version"`

	// The statuses are stored by their ECS names (see MarshalJSON).
	LastStatus    task.TaskStatus `json:"-"`
	DesiredStatus task.TaskStatus `json:"-"`
	// AckedDesired is the desired status the agent acknowledged receiving (TaskNone before the first
	// ack). A task whose DesiredStatus differs from it is (re)sent over ACS.
	AckedDesired  task.TaskStatus `json:"-"`
	StoppedReason string          `json:"stoppedReason,omitempty"`
	StopCode      string          `json:"stopCode,omitempty"`

	CreatedAt          time.Time `json:"createdAt"`
	StartedAt          time.Time `json:"startedAt,omitzero"`
	StoppingAt         time.Time `json:"stoppingAt,omitzero"`
	StoppedAt          time.Time `json:"stoppedAt,omitzero"`
	PullStartedAt      time.Time `json:"pullStartedAt,omitzero"`
	PullStoppedAt      time.Time `json:"pullStoppedAt,omitzero"`
	ExecutionStoppedAt time.Time `json:"executionStoppedAt,omitzero"`

	Containers []containerRecord `json:"containers"`

	// LaunchType is the launch type RunTask named (EC2 when it named none), Tags the tags it gave.
	LaunchType string `json:"launchType,omitempty"`
	Tags       []tag  `json:"tags,omitempty"`
}

// containerRecord is one container of a task as reported by the agent.
type containerRecord struct {
	Arn             string               `json:"arn"`
	Name            string               `json:"name"`
	Image           string               `json:"image"`
	CPU             int                  `json:"cpu,omitempty"`
	Memory          int                  `json:"memory,omitempty"`
	Essential       bool                 `json:"essential"`
	LastStatus      task.ContainerStatus `json:"-"` // stored by its ECS name (see MarshalJSON)
	RuntimeID       string               `json:"runtimeId,omitempty"`
	ImageDigest     string               `json:"imageDigest,omitempty"`
	ExitCode        *int                 `json:"exitCode,omitempty"`
	Reason          string               `json:"reason,omitempty"`
	NetworkBindings []networkBinding     `json:"networkBindings,omitempty"`
}

// MarshalJSON stores the record with its statuses by ECS name: "lastStatus" and "desiredStatus"
// PENDING, RUNNING or STOPPED, "ackedDesired" RUNNING or STOPPED, absent before the first ack.
func (t taskRecord) MarshalJSON() ([]byte, error) {
	type fields taskRecord // the same fields, without these methods
	v := struct {
		fields
		LastStatus    string `json:"lastStatus"`
		DesiredStatus string `json:"desiredStatus"`
		AckedDesired  string `json:"ackedDesired,omitempty"`
	}{fields: fields(t), LastStatus: taskStatusName(t.LastStatus), DesiredStatus: taskStatusName(t.DesiredStatus)}
	if t.AckedDesired != task.TaskNone {
		v.AckedDesired = taskStatusName(t.AckedDesired)
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads a record that MarshalJSON wrote; a status that is not an ECS name is an error.
func (t *taskRecord) UnmarshalJSON(b []byte) error {
	type fields taskRecord
	v := struct {
		*fields
		LastStatus    string `json:"lastStatus"`
		DesiredStatus string `json:"desiredStatus"`
		AckedDesired  string `json:"ackedDesired"`
	}{fields: (*fields)(t)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var err error
	if t.LastStatus, err = parseTaskStatus(v.LastStatus); err != nil {
		return fmt.Errorf("lastStatus: %w", err)
	}
	if t.DesiredStatus, err = parseTaskStatus(v.DesiredStatus); err != nil {
		return fmt.Errorf("desiredStatus: %w", err)
	}
	t.AckedDesired = task.TaskNone
	if v.AckedDesired != "" {
		if t.AckedDesired, err = parseTaskStatus(v.AckedDesired); err != nil {
			return fmt.Errorf("ackedDesired: %w", err)
		}
	}
	return nil
}

// MarshalJSON stores the record with its "lastStatus" by ECS name: PENDING, RUNNING or STOPPED.
func (c containerRecord) MarshalJSON() ([]byte, error) {
	type fields containerRecord // the same fields, without these methods
	return json.Marshal(struct {
		fields
		LastStatus string `json:"lastStatus"`
	}{fields(c), containerStatusName(c.LastStatus)})
}

// UnmarshalJSON reads a record that MarshalJSON wrote; a status that is not an ECS name is an error.
func (c *containerRecord) UnmarshalJSON(b []byte) error {
	type fields containerRecord
	v := struct {
		*fields
		LastStatus string `json:"lastStatus"`
	}{fields: (*fields)(c)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s, err := parseContainerStatus(v.LastStatus)
	if err != nil {
		return fmt.Errorf("container %q: lastStatus: %w", c.Name, err)
	}
	c.LastStatus = s
	return nil
}

// instanceRecord is one registered container instance.
type instanceRecord struct {
	Arn                 string       `json:"arn"`
	ClusterName         string       `json:"clusterName"`
	Status              string       `json:"status"` // ACTIVE or DRAINING
	RegisteredAt        time.Time    `json:"registeredAt"`
	Version             int64        `json:"version"`
	Attributes          []attribute  `json:"attributes,omitempty"`
	RegisteredResources []resource   `json:"registeredResources,omitempty"`
	VersionInfo         *versionInfo `json:"versionInfo,omitempty"`
	Tags                []tag        `json:"tags,omitempty"`
}

// ErrCorrupt is wrapped by New's error when the control plane's bbolt file is damaged (empty,
// truncated, a page changed: see package boltcheck); New never lets bbolt read such a file.
var ErrCorrupt = errors.New("the embedded control plane's state file is corrupt")

// openDB opens (creating if needed) the bbolt file once boltcheck found it whole, 0600 even when it
// existed, and brings its schema to schemaVersion.
func openDB(path string) (*bolt.DB, error) {
	db, err := boltcheck.Open(path, 5*time.Second)
	if errors.Is(err, boltcheck.ErrDamaged) {
		return nil, fmt.Errorf("open %s: %w: %w", path, err, ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := wholeOrNew(tx); err != nil {
			return err
		}
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keySchemaVersion)
		if v == nil {
			return meta.Put(keySchemaVersion, []byte(strconv.Itoa(schemaVersion)))
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return fmt.Errorf("schema version %q: %w", v, err)
		}
		return upgrade(tx, n)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// wholeOrNew checks that the file is new (no bucket yet) or has every bucket and a schema version, as
// the first open leaves it in one transaction; anything between lost a name to damage.
func wholeOrNew(tx *bolt.Tx) error {
	found := 0
	for _, name := range allBuckets {
		if tx.Bucket(name) != nil {
			found++
		}
	}
	switch {
	case found == 0:
		return nil
	case found < len(allBuckets):
		return fmt.Errorf("damaged: %d of its %d buckets are missing: %w", len(allBuckets)-found, len(allBuckets), ErrCorrupt)
	case tx.Bucket(bucketMeta).Get(keySchemaVersion) == nil:
		return fmt.Errorf("damaged: its schema version is missing: %w", ErrCorrupt)
	}
	return nil
}

// upgrade brings a database written with schema version from up to schemaVersion. There has been
// only one version so far; a future layout change adds its step here.
func upgrade(tx *bolt.Tx, from int) error {
	switch {
	case from == schemaVersion:
		return nil
	case from > schemaVersion:
		return fmt.Errorf("schema version %d is newer than this build understands (%d)", from, schemaVersion)
	default:
		return fmt.Errorf("unknown schema version %d", from)
	}
}

// errNoRecord is returned by get when the key is absent.
var errNoRecord = errors.New("no such record")

// get decodes the record at key in bucket into v.
func get(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b := tx.Bucket(bucket).Get([]byte(key))
	if b == nil {
		return errNoRecord
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return nil
}

// put encodes v and stores it at key in bucket.
func put(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	if err := tx.Bucket(bucket).Put([]byte(key), b); err != nil {
		return fmt.Errorf("store %s/%s: %w", bucket, key, err)
	}
	return nil
}

// each decodes every record of bucket whose key starts with prefix and calls fn with it, in key
// order. A record that does not decode is passed to bad and skipped. fn returning an error stops.
func each[T any](tx *bolt.Tx, bucket []byte, prefix string, bad func(key string, err error), fn func(*T) error) error {
	c := tx.Bucket(bucket).Cursor()
	p := []byte(prefix)
	for k, v := c.Seek(p); k != nil && hasPrefix(k, p); k, v = c.Next() {
		rec := new(T)
		if err := json.Unmarshal(v, rec); err != nil {
			bad(string(k), err)
			continue
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

func hasPrefix(b, p []byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }

// nextSeqNum increments and returns the stored ACS sequence number.
func nextSeqNum(tx *bolt.Tx) (int64, error) {
	meta := tx.Bucket(bucketMeta)
	var n int64
	if v := meta.Get(keySeqNum); v != nil {
		var err error
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("decode seqNum %q: %w", v, err)
		}
	}
	n++
	if err := meta.Put(keySeqNum, []byte(strconv.FormatInt(n, 10))); err != nil {
		return 0, fmt.Errorf("store seqNum: %w", err)
	}
	return n, nil
}

func taskDefKey(family string, rev int) string { return fmt.Sprintf("%s/%010d", family, rev) }

package localcp

// The control plane keeps its state in its own bbolt file (Config.DBPath), separate from the agent's.
// Every value is one JSON record; every write happens in one bbolt transaction with the change it
// belongs to, before the API call returns or a payload is sent.
//
//	meta/
//	  schemaVersion          → "2" (decimal); a newer version than this code knows is refused
//	  seqNum                 → decimal sequence number of the last ACS PayloadMessage sent
//	clusters/
//	  <cluster name>         → clusterRecord
//	taskdefs/
//	  <family>/<%010d rev>   → taskDefRecord (keys sort by family, then revision)
//	tasks/
//	  <task ARN>             → taskRecord (its effective definition, overrides, statuses, containers,
//	                           and until when it is protected from scale-in: protectedUntil)
//	live/
//	  <task ARN>             → "" for every task not STOPPED: what delivery, placement, the task
//	                           counts and ListTasks of RUNNING or PENDING tasks read
//	taskIDs/
//	  <task ID>              → task ARN
//	expiry/
//	  <%020d unix ns>/task/<task ARN>             → "": a STOPPED task, forgotten then
//	  <%020d unix ns>/token/<cluster>/<token>     → "": a client token, forgotten then
//	clientTokens/
//	  <cluster>/<client token>                    → clientTokenRecord
//	instances/
//	  <container inst. ARN>  → instanceRecord
//
// live, taskIDs and expiry are indexes of tasks/, written in the same transaction as the task (see
// saveTask), so that no call on the RunTask, StopTask or delivery path reads every task ever run. A
// task is forgotten stoppedTaskRetention after it stopped, as ECS forgets stopped tasks; a client
// token after clientTokenTTL, or with the first of its tasks.
//
// Task and container statuses (lastStatus, desiredStatus, ackedDesired) are stored by their ECS
// names, PENDING, RUNNING and STOPPED, and held in memory as the task model's statuses.
//
// A record that does not decode is reported (logged) and skipped; it does not fail the whole read.
//
// Version 1 had no indexes and no client tokens; its upgrade builds the indexes from tasks/.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/boltcheck"
	"github.com/berth-agent/berth/agent/task"
)

// schemaVersion is the version of the layout above that this code writes.
const schemaVersion = 2

// stoppedTaskRetention is how long a stopped task stays visible: ECS documents that stopped tasks
// appear in DescribeTasks results for at least one hour.
const stoppedTaskRetention = time.Hour

// clientTokenTTL is how long a RunTask or StartTask client token is remembered at most, as in ECS.
const clientTokenTTL = 24 * time.Hour

// expireBatch bounds how many expired entries one write transaction removes, so that a backlog never
// makes one API call slow; every write removes some, and New removes all.
const expireBatch = 128

var (
	bucketMeta         = []byte("meta")
	bucketClusters     = []byte("clusters")
	bucketTaskDefs     = []byte("taskdefs")
	bucketTasks        = []byte("tasks")
	bucketLive         = []byte("live")
	bucketTaskIDs      = []byte("taskIDs")
	bucketExpiry       = []byte("expiry")
	bucketClientTokens = []byte("clientTokens")
	bucketInstances    = []byte("instances")

	keySchemaVersion = []byte("schemaVersion")
	keySeqNum        = []byte("seqNum")

	allBuckets = [][]byte{bucketMeta, bucketClusters, bucketTaskDefs, bucketTasks, bucketLive, bucketTaskIDs,
		bucketExpiry, bucketClientTokens, bucketInstances}
	// schema1Buckets are the buckets of schema 1, which every later schema keeps.
	schema1Buckets = [][]byte{bucketMeta, bucketClusters, bucketTaskDefs, bucketTasks, bucketInstances}
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
	// ClientToken is the client token of the call that started the task, if any.
	ClientToken string `json:"clientToken,omitempty"`
	// EnableExecuteCommand: RunTask asked for ECS Exec; every container gets its managed agent.
	EnableExecuteCommand bool `json:"enableExecuteCommand,omitempty"`
	// ProtectedUntil is when the task's scale-in protection lapses (UpdateTaskProtection); zero or
	// past: not protected. Records written before it existed read as not protected.
	ProtectedUntil time.Time `json:"protectedUntil,omitzero"`
}

// clientTokenRecord is what a RunTask or StartTask with a client token answered, to answer a retry.
type clientTokenRecord struct {
	Op        string          `json:"op"`
	Digest    string          `json:"digest"` // of the operation and its parameters, the token aside
	TaskArns  []string        `json:"taskArns"`
	Response  json.RawMessage `json:"response"` // the first call's answer, as sent
	CreatedAt time.Time       `json:"createdAt"`
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
	// ManagedAgents are the container's managed agents (ECS Exec's) as the agent last reported them.
	ManagedAgents []managedAgentRecord `json:"managedAgents,omitempty"`
}

// managedAgentRecord is a managed agent's state: its last reported status and reason, and when it
// was last reported RUNNING.
type managedAgentRecord struct {
	Name          string    `json:"name"`
	LastStatus    string    `json:"lastStatus"`
	Reason        string    `json:"reason,omitempty"`
	LastStartedAt time.Time `json:"lastStartedAt,omitzero"`
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
// existed, and brings its schema to schemaVersion. A record the upgrade cannot decode is passed to
// bad and skipped.
func openDB(path string, bad func(key string, err error)) (*bolt.DB, error) {
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
		return upgrade(tx, n, bad)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// wholeOrNew checks that the file is new (no bucket yet) or has every bucket of schema 1 (which
// every later version keeps) and a schema version, as the first open leaves it in one transaction;
// anything between lost a name to damage.
func wholeOrNew(tx *bolt.Tx) error {
	found := 0
	for _, name := range schema1Buckets {
		if tx.Bucket(name) != nil {
			found++
		}
	}
	switch {
	case found == 0:
		return nil
	case found < len(schema1Buckets):
		return fmt.Errorf("damaged: %d of its %d buckets are missing: %w", len(schema1Buckets)-found, len(schema1Buckets), ErrCorrupt)
	case tx.Bucket(bucketMeta).Get(keySchemaVersion) == nil:
		return fmt.Errorf("damaged: its schema version is missing: %w", ErrCorrupt)
	}
	return nil
}

// upgrade brings a database written with schema version from up to schemaVersion, one step at a
// time.
func upgrade(tx *bolt.Tx, from int, bad func(key string, err error)) error {
	switch {
	case from == schemaVersion:
		return nil
	case from > schemaVersion:
		return fmt.Errorf("schema version %d is newer than this build understands (%d)", from, schemaVersion)
	case from == 1:
		// Version 2 adds the task indexes: build them from the tasks.
		if err := each(tx, bucketTasks, "", bad, func(t *taskRecord) error { return indexTask(tx, t) }); err != nil {
			return fmt.Errorf("upgrade from schema version 1: %w", err)
		}
		if err := tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("2")); err != nil {
			return fmt.Errorf("upgrade from schema version 1: %w", err)
		}
		return upgrade(tx, 2, bad)
	default:
		return fmt.Errorf("unknown schema version %d", from)
	}
}

// saveTask stores t and its indexes.
func saveTask(tx *bolt.Tx, t *taskRecord) error {
	if err := put(tx, bucketTasks, t.Arn, t); err != nil {
		return err
	}
	return indexTask(tx, t)
}

// indexTask writes t's entries in the live, taskIDs and expiry indexes.
func indexTask(tx *bolt.Tx, t *taskRecord) error {
	arn := []byte(t.Arn)
	if err := tx.Bucket(bucketTaskIDs).Put([]byte(t.ID), arn); err != nil {
		return fmt.Errorf("index task %s: %w", t.Arn, err)
	}
	live := tx.Bucket(bucketLive)
	if t.LastStatus != task.TaskStopped {
		if err := live.Put(arn, nil); err != nil {
			return fmt.Errorf("index task %s: %w", t.Arn, err)
		}
		return nil
	}
	if err := live.Delete(arn); err != nil {
		return fmt.Errorf("index task %s: %w", t.Arn, err)
	}
	stopped := t.StoppedAt
	if stopped.IsZero() {
		stopped = t.CreatedAt
	}
	if err := tx.Bucket(bucketExpiry).Put(expiryKey(stopped.Add(stoppedTaskRetention), expireTask, t.Arn), nil); err != nil {
		return fmt.Errorf("index task %s: %w", t.Arn, err)
	}
	return nil
}

// Kinds of expiry entries.
const (
	expireTask  = "task"
	expireToken = "token"
)

// expiryKey is the expiry index key of what (a task ARN, or a "<cluster>/<token>" key) of kind, due
// at due: keys sort by due time.
func expiryKey(due time.Time, kind, what string) []byte {
	return fmt.Appendf(nil, "%020d/%s/%s", max(due.UnixNano(), 0), kind, what)
}

// eachLive decodes every task that is not STOPPED and calls fn with it, in ARN order. A record that
// does not decode is passed to bad and skipped; fn returning an error stops.
func eachLive(tx *bolt.Tx, bad func(key string, err error), fn func(*taskRecord) error) error {
	tasks := tx.Bucket(bucketTasks)
	c := tx.Bucket(bucketLive).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		v := tasks.Get(k)
		if v == nil {
			continue
		}
		t := &taskRecord{}
		if err := decode(v, t); err != nil {
			bad(string(k), err)
			continue
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// taskArnByID returns the ARN of the task with ID id, or errNoRecord.
func taskArnByID(tx *bolt.Tx, id string) (string, error) {
	v := tx.Bucket(bucketTaskIDs).Get([]byte(id))
	if v == nil {
		return "", errNoRecord
	}
	return string(v), nil
}

// expire forgets what is due by now: stopped tasks past their retention and client tokens past their
// TTL, at most limit entries (all, when limit is negative). It returns how many entries it removed.
func expire(tx *bolt.Tx, now time.Time, limit int) (int, error) {
	bound := fmt.Appendf(nil, "%020d/", max(now.UnixNano(), 0))
	var due [][]byte
	c := tx.Bucket(bucketExpiry).Cursor()
	for k, _ := c.First(); k != nil && string(k) < string(bound) && (limit < 0 || len(due) < limit); k, _ = c.Next() {
		due = append(due, slices.Clone(k))
	}
	for _, k := range due {
		_, rest, _ := strings.Cut(string(k), "/")
		kind, what, _ := strings.Cut(rest, "/")
		var err error
		switch kind {
		case expireTask:
			err = deleteTask(tx, what)
		case expireToken:
			err = tx.Bucket(bucketClientTokens).Delete([]byte(what))
		}
		if err != nil {
			return 0, fmt.Errorf("expire %s: %w", k, err)
		}
		if err := tx.Bucket(bucketExpiry).Delete(k); err != nil {
			return 0, fmt.Errorf("expire %s: %w", k, err)
		}
	}
	return len(due), nil
}

// deleteTask removes the task at arn, its indexes and the client token that started it. A task that
// is gone already is not an error.
func deleteTask(tx *bolt.Tx, arn string) error {
	tasks := tx.Bucket(bucketTasks)
	v := tasks.Get([]byte(arn))
	if v == nil {
		return nil
	}
	t := &taskRecord{}
	if err := decode(v, t); err == nil {
		if ids := tx.Bucket(bucketTaskIDs); string(ids.Get([]byte(t.ID))) == arn {
			if err := ids.Delete([]byte(t.ID)); err != nil {
				return err
			}
		}
		if t.ClientToken != "" {
			if err := tx.Bucket(bucketClientTokens).Delete([]byte(tokenKey(t.ClusterName, t.ClientToken))); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bucketLive).Delete([]byte(arn)); err != nil {
		return err
	}
	return tasks.Delete([]byte(arn))
}

// tokenKey is the clientTokens key of token in cluster: tokens are scoped to a cluster, as in ECS.
func tokenKey(cluster, token string) string { return cluster + "/" + token }

// errNoRecord is returned by get when the key is absent.
var errNoRecord = errors.New("no such record")

// get decodes the record at key in bucket into v.
func get(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b := tx.Bucket(bucket).Get([]byte(key))
	if b == nil {
		return errNoRecord
	}
	if err := decode(b, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return nil
}

// decode decodes the JSON record b into v. A record type with its own UnmarshalJSON (taskRecord) is
// handed b directly: json.Unmarshal would first scan the whole record only to hand it the same bytes,
// which its UnmarshalJSON then scans again; DescribeTasks decodes every task it is asked about.
func decode(b []byte, v any) error {
	if u, ok := v.(json.Unmarshaler); ok {
		return u.UnmarshalJSON(b)
	}
	return json.Unmarshal(b, v)
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
		if err := decode(v, rec); err != nil {
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

package ecsagentdata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

const instanceArn = "arn:aws:ecs:eu-west-1:012345678901:container-instance/prod/0123456789abcdef0123456789abcdef"

// writeBolt writes an agent.db as the ECS agent's data client does: a metadata bucket of JSON strings.
func writeBolt(t *testing.T, dir string, metadata map[string]string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, BoltFile), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"images", "containers", "tasks", "eniattachments", "metadata"} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		b := tx.Bucket([]byte("metadata"))
		for k, v := range metadata {
			raw, err := json.Marshal(v)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(k), raw); err != nil {
				return err
			}
		}
		return nil
	}))
}

func TestReadBolt(t *testing.T) {
	dir := t.TempDir()
	writeBolt(t, dir, map[string]string{"cluster-name": "prod", "container-instance-arn": instanceArn,
		"ec2-instance-id": "i-0123456789abcdef0", "agent-version": "1.89.0"})
	inst, found, err := Read(dir)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, Instance{Cluster: "prod", ContainerInstanceArn: instanceArn, EC2InstanceID: "i-0123456789abcdef0",
		AgentVersion: "1.89.0", File: filepath.Join(dir, BoltFile)}, inst)
}

func TestReadJSON(t *testing.T) {
	dir := t.TempDir()
	doc := `{"Data": {"Cluster": "prod", "ContainerInstanceArn": "` + instanceArn + `", "EC2InstanceID": "i-1",
		"TaskEngine": {"Tasks": []}}, "Version": 28}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, JSONFile), []byte(doc), 0o600))
	inst, found, err := Read(dir)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, Instance{Cluster: "prod", ContainerInstanceArn: instanceArn, EC2InstanceID: "i-1", File: filepath.Join(dir, JSONFile)}, inst)
}

func TestBoltWinsOverJSON(t *testing.T) {
	dir := t.TempDir()
	writeBolt(t, dir, map[string]string{"cluster-name": "new", "container-instance-arn": instanceArn})
	require.NoError(t, os.WriteFile(filepath.Join(dir, JSONFile), []byte(`{"Data": {"Cluster": "old", "ContainerInstanceArn": "arn:old"}}`), 0o600))
	inst, found, err := Read(dir)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "new", inst.Cluster)
}

func TestNothingToRead(t *testing.T) {
	for name, prepare := range map[string]func(dir string){
		"no file":                 func(string) {},
		"agent.db without it":     func(dir string) { writeBolt(t, dir, map[string]string{"agent-version": "1.89.0"}) },
		"JSON state without it":   func(dir string) { _ = os.WriteFile(filepath.Join(dir, JSONFile), []byte(`{"Data": {}}`), 0o600) },
		"agent.db without bucket": func(dir string) { db, _ := bolt.Open(filepath.Join(dir, BoltFile), 0o600, nil); _ = db.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			prepare(dir)
			_, found, err := Read(dir)
			require.NoError(t, err)
			assert.False(t, found)
		})
	}
}

// TestDamagedFilesAreNamed: a file that cannot be read gives an error naming it, never a panic and
// never its contents.
func TestDamagedFilesAreNamed(t *testing.T) {
	tests := map[string]struct {
		file, content, want string
	}{
		"garbage agent.db":      {BoltFile, "not a bolt database at all, just text", "cannot be opened"},
		"JSON that is not JSON": {JSONFile, `{"Data": {"Cluster": "secret-ish`, "is not JSON"},
		"JSON of another shape": {JSONFile, `{"Data": "a string"}`, "does not have the ECS agent's shape"},
		"metadata not a string": {"", "", "is not a JSON string"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tt.file)
			if tt.file == "" {
				path = filepath.Join(dir, BoltFile)
				db, err := bolt.Open(path, 0o600, nil)
				require.NoError(t, err)
				require.NoError(t, db.Update(func(tx *bolt.Tx) error {
					b, err := tx.CreateBucket([]byte("metadata"))
					if err != nil {
						return err
					}
					return b.Put([]byte("container-instance-arn"), []byte("{not json"))
				}))
				require.NoError(t, db.Close())
			} else {
				require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			}
			_, found, err := Read(dir)
			require.Error(t, err)
			assert.False(t, found)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "secret-ish")
		})
	}
}

// TestLockedByARunningECSAgent: an agent.db another process holds open for writing is reported in
// about a second, saying to stop the ECS agent.
func TestLockedByARunningECSAgent(t *testing.T) {
	dir := t.TempDir()
	writeBolt(t, dir, map[string]string{"container-instance-arn": instanceArn})
	db, err := bolt.Open(filepath.Join(dir, BoltFile), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	start := time.Now()
	_, found, err := Read(dir)
	require.Error(t, err)
	assert.False(t, found)
	assert.Contains(t, err.Error(), "is the ECS agent still running")
	assert.Less(t, time.Since(start), 5*time.Second)
}

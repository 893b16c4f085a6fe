// Package ecsagentdata reads what the Amazon ECS agent saved about its container instance, so that a
// host moving from the ECS agent to Berth keeps its container instance (and with it its place in the
// cluster, its tasks' history and its attributes) instead of registering a new one.
//
// Two formats are read, both in the data directory the two agents share (ECS_DATADIR,
// /var/lib/ecs/data):
//
//   - agent.db: the bbolt database of the ECS agent versions that keep their state in bbolt (the
//     agent/data package): bucket "metadata", keys "cluster-name", "container-instance-arn",
//     "ec2-instance-id" and "agent-version", each value a JSON string.
//   - ecs_agent_data.json: the JSON state file of older ECS agents:
//     {"Data": {"Cluster", "ContainerInstanceArn", "EC2InstanceID", …}, "Version": N}.
//
// agent.db wins when both are there. The files are only read: agent.db is opened read-only, and a
// running ECS agent holding its lock makes Read fail rather than wait.
package ecsagentdata

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The files Read looks for, in order.
const (
	BoltFile = "agent.db"
	JSONFile = "ecs_agent_data.json"
)

// maxJSONFile bounds the JSON state file read; the ECS agent's holds its tasks too, so it can be
// large, but not this large.
const maxJSONFile = 64 << 20

// Instance is the ECS agent's container instance as it saved it.
type Instance struct {
	Cluster              string
	ContainerInstanceArn string
	EC2InstanceID        string
	AgentVersion         string
	File                 string // the file it was read from
}

// Read returns the container instance the ECS agent saved in dataDir. found is false, with no error,
// when neither file exists or the one there names no container instance. An error names the file and
// says what is wrong with it (unreadable, damaged, locked by a running ECS agent); it is never fatal
// to the caller, who registers anew.
func Read(dataDir string) (inst Instance, found bool, err error) {
	boltPath := filepath.Join(dataDir, BoltFile)
	if _, statErr := os.Stat(boltPath); statErr == nil {
		return readBolt(boltPath)
	} else if !errors.Is(statErr, os.ErrNotExist) {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s: %w", boltPath, statErr)
	}
	jsonPath := filepath.Join(dataDir, JSONFile)
	if _, statErr := os.Stat(jsonPath); statErr != nil {
		if errors.Is(statErr, os.ErrNotExist) {
			return Instance{}, false, nil
		}
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s: %w", jsonPath, statErr)
	}
	return readJSON(jsonPath)
}

func readBolt(path string) (Instance, bool, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s is locked: is the ECS agent still running? Stop it (systemctl stop ecs) before Berth takes over", path)
	}
	if err != nil {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s cannot be opened: %w", path, err)
	}
	defer db.Close()
	inst := Instance{File: path}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("metadata"))
		if b == nil {
			return nil
		}
		for key, dst := range map[string]*string{"cluster-name": &inst.Cluster, "container-instance-arn": &inst.ContainerInstanceArn,
			"ec2-instance-id": &inst.EC2InstanceID, "agent-version": &inst.AgentVersion} {
			raw := b.Get([]byte(key))
			if raw == nil {
				continue
			}
			if err := json.Unmarshal(raw, dst); err != nil {
				return fmt.Errorf("metadata %q is not a JSON string", key)
			}
		}
		return nil
	})
	if err != nil {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s: %w", path, err)
	}
	return inst, inst.ContainerInstanceArn != "", nil
}

func readJSON(path string) (Instance, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJSONFile+1))
	if err != nil {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s: %w", path, err)
	}
	if len(data) > maxJSONFile {
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s is over %d MiB", path, maxJSONFile>>20)
	}
	var doc struct {
		Data struct {
			Cluster              string `json:"Cluster"`
			ContainerInstanceArn string `json:"ContainerInstanceArn"`
			EC2InstanceID        string `json:"EC2InstanceID"`
		} `json:"Data"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Instance{}, false, fmt.Errorf("the ECS agent's state %s is not JSON (at byte %d)", path, se.Offset)
		}
		return Instance{}, false, fmt.Errorf("the ECS agent's state %s does not have the ECS agent's shape", path)
	}
	inst := Instance{Cluster: doc.Data.Cluster, ContainerInstanceArn: doc.Data.ContainerInstanceArn, EC2InstanceID: doc.Data.EC2InstanceID, File: path}
	return inst, inst.ContainerInstanceArn != "", nil
}

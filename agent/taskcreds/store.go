package taskcreds

import (
	"context"
	"fmt"
	"sync"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Stored is one set of credentials in a Store: the task and role type it is kept for.
type Stored struct {
	TaskArn     string
	RoleType    string // RoleTypeTaskApplication or RoleTypeTaskExecution
	Credentials Credentials
}

// Store keeps the task role credentials the control plane sends, by credentials ID. A task has at
// most one set per role type: a set is served, past its expiration too, until the control plane
// replaces it with the task's next set of that role type or the task is removed, as the ECS agent
// serves them, so the store is bounded by the live tasks. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	byID   map[string]Stored
	byTask map[string]map[string]string // task ARN → role type → credentials ID
}

var _ Source = (*Store)(nil)

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{byID: map[string]Stored{}, byTask: map[string]map[string]string{}}
}

// Put stores a task role's credentials under id, replacing the task's earlier set of the same role
// type. It fails, storing nothing, for an empty id; the error never contains a secret.
func (s *Store) Put(taskArn, roleType, id string, c Credentials) error {
	if id == "" {
		return fmt.Errorf("credentials of task %s (%s): no credentialsId", taskArn, roleType)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byTask[taskArn][roleType]; ok {
		s.dropLocked(old)
	}
	s.byID[id] = Stored{TaskArn: taskArn, RoleType: roleType, Credentials: c}
	if s.byTask[taskArn] == nil {
		s.byTask[taskArn] = map[string]string{}
	}
	s.byTask[taskArn][roleType] = id
	return nil
}

// Get returns the credentials with the given ID, expired or not.
func (s *Store) Get(id string) (Stored, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.byID[id]
	return sc, ok
}

// ErrNoCredentials is what the Store answers for an ID it does not serve: unknown, replaced, of a
// removed task, or of the other role type. An errdefs.ErrNotFound.
var ErrNoCredentials = errdefs.New(errdefs.ErrNotFound, "no such task role credentials")

// TaskCredentials serves the task endpoint: the task role credentials with this ID. Execution role
// credentials are the agent's own and are never served to containers.
func (s *Store) TaskCredentials(_ context.Context, id string) (Credentials, error) {
	sc, ok := s.Get(id)
	if !ok || sc.RoleType != RoleTypeTaskApplication {
		return Credentials{}, ErrNoCredentials
	}
	return sc.Credentials, nil
}

// ExecutionRoleCredentials serves the agent's own calls for a task with its execution role: the
// execution role credentials with this ID. An ID that is unknown, replaced, of a removed task or of
// a task role is ErrNoCredentials (errdefs.ErrNotFound).
func (s *Store) ExecutionRoleCredentials(_ context.Context, id string) (Credentials, error) {
	sc, ok := s.Get(id)
	if !ok || sc.RoleType != RoleTypeTaskExecution {
		return Credentials{}, fmt.Errorf("execution role credentials %s: %w", ShortID(id), ErrNoCredentials)
	}
	return sc.Credentials, nil
}

// TaskRemoved drops every set of the task's credentials. It is idempotent.
func (s *Store) TaskRemoved(taskArn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byTask[taskArn] {
		delete(s.byID, id)
	}
	delete(s.byTask, taskArn)
}

// Len returns how many sets of credentials the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// dropLocked removes one set; the caller holds s.mu.
func (s *Store) dropLocked(id string) {
	sc, ok := s.byID[id]
	if !ok {
		return
	}
	delete(s.byID, id)
	if roles := s.byTask[sc.TaskArn]; roles != nil && roles[sc.RoleType] == id {
		delete(roles, sc.RoleType)
		if len(roles) == 0 {
			delete(s.byTask, sc.TaskArn)
		}
	}
}

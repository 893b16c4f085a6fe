package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// TaskCredentials are the credentials of one task role, as the control plane sent them.
type TaskCredentials struct {
	TaskArn     string
	RoleType    string // acswire.RoleTypeTaskApplication or acswire.RoleTypeTaskExecution
	Credentials acswire.IAMRoleCredentials
	Expiration  time.Time // zero when the control plane gave none
}

// CredentialsStore keeps the task role credentials the control plane sends, by credentials ID, for
// the task credentials endpoint. A task has at most one set per role type (a refresh replaces the
// old set); a set is dropped when it expires or when the engine removes its task, so the store is
// bounded by the live tasks. It is safe for concurrent use.
type CredentialsStore struct {
	clock clockwork.Clock

	mu     sync.Mutex
	byID   map[string]TaskCredentials
	byTask map[string]map[string]string // task ARN → role type → credentials ID
}

// NewCredentialsStore returns an empty store; a nil clock means the real one.
func NewCredentialsStore(clock clockwork.Clock) *CredentialsStore {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &CredentialsStore{clock: clock, byID: map[string]TaskCredentials{}, byTask: map[string]map[string]string{}}
}

// Put stores a task role's credentials, replacing the task's earlier set of the same role type, and
// drops every set that has expired. It fails, storing nothing, for credentials without an ID or with
// an expiration that is not RFC 3339; the error never contains a secret.
func (s *CredentialsStore) Put(taskArn, roleType string, c acswire.IAMRoleCredentials) error {
	if c.CredentialsID == "" {
		return fmt.Errorf("credentials of task %s (%s): no credentialsId", taskArn, roleType)
	}
	var exp time.Time
	if c.Expiration != "" {
		var err error
		if exp, err = time.Parse(time.RFC3339, c.Expiration); err != nil {
			return fmt.Errorf("credentials %s of task %s: expiration %q is not RFC 3339", c.CredentialsID, taskArn, c.Expiration)
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, tc := range s.byID {
		if expired(tc, now) {
			s.dropLocked(id)
		}
	}
	if old, ok := s.byTask[taskArn][roleType]; ok {
		s.dropLocked(old)
	}
	s.byID[c.CredentialsID] = TaskCredentials{TaskArn: taskArn, RoleType: roleType, Credentials: c, Expiration: exp}
	if s.byTask[taskArn] == nil {
		s.byTask[taskArn] = map[string]string{}
	}
	s.byTask[taskArn][roleType] = c.CredentialsID
	return nil
}

// Get returns the unexpired credentials with the given ID.
func (s *CredentialsStore) Get(id string) (TaskCredentials, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tc, ok := s.byID[id]
	if !ok {
		return TaskCredentials{}, false
	}
	if expired(tc, s.clock.Now()) {
		s.dropLocked(id)
		return TaskCredentials{}, false
	}
	return tc, true
}

// ErrNoCredentials is what TaskCredentials answers for an ID it does not serve: unknown, expired, of a
// removed task, or of an execution role. An errdefs.ErrNotFound.
var ErrNoCredentials = errdefs.New(errdefs.ErrNotFound, "no such task role credentials")

// TaskCredentials serves the task endpoint: the unexpired task role credentials with this ID.
// Execution role credentials are the agent's own and are never served to containers.
func (s *CredentialsStore) TaskCredentials(_ context.Context, id string) (taskendpoint.Credentials, error) {
	tc, ok := s.Get(id)
	if !ok || tc.RoleType != acswire.RoleTypeTaskApplication {
		return taskendpoint.Credentials{}, ErrNoCredentials
	}
	c := tc.Credentials
	return taskendpoint.Credentials{RoleArn: c.RoleArn, AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey,
		SessionToken: c.SessionToken, Expiration: tc.Expiration}, nil
}

// ExecutionRoleCredentials serves the pulls of a task with its execution role
// (registryauth.RoleCredentials): the unexpired execution role credentials with this ID. An ID that
// is unknown, expired, of a removed task or of a task role is ErrNoCredentials (errdefs.ErrNotFound).
func (s *CredentialsStore) ExecutionRoleCredentials(_ context.Context, id string) (aws.Credentials, error) {
	tc, ok := s.Get(id)
	if !ok || tc.RoleType != acswire.RoleTypeTaskExecution {
		return aws.Credentials{}, fmt.Errorf("execution role credentials %s: %w", shortID(id), ErrNoCredentials)
	}
	c := tc.Credentials
	return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken,
		Source: "ACS", CanExpire: !tc.Expiration.IsZero(), Expires: tc.Expiration}, nil
}

// shortID returns the part of a credentials ID that may be logged or shown.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// TaskRemoved drops every set of the task's credentials.
func (s *CredentialsStore) TaskRemoved(taskArn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byTask[taskArn] {
		delete(s.byID, id)
	}
	delete(s.byTask, taskArn)
}

// Len returns how many sets of credentials the store holds.
func (s *CredentialsStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// dropLocked removes one set; the caller holds s.mu.
func (s *CredentialsStore) dropLocked(id string) {
	tc, ok := s.byID[id]
	if !ok {
		return
	}
	delete(s.byID, id)
	if roles := s.byTask[tc.TaskArn]; roles != nil && roles[tc.RoleType] == id {
		delete(roles, tc.RoleType)
		if len(roles) == 0 {
			delete(s.byTask, tc.TaskArn)
		}
	}
}

func expired(tc TaskCredentials, now time.Time) bool {
	return !tc.Expiration.IsZero() && !now.Before(tc.Expiration)
}

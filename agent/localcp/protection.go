package localcp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Task scale-in protection: GetTaskProtection and UpdateTaskProtection as ECS answers them. A task's
// protection is its record's ProtectedUntil (see store.go), so it is forgotten with the task; a
// protection past that time reads as not enabled, as ECS resets protectionEnabled once it lapses.
//
// ECS protects only tasks of a service and answers TASK_NOT_VALID for a standalone task; this control
// plane has no services, so it protects any task it knows but a static task, which gets
// TASK_NOT_VALID: its host keeps it running whatever a control plane says.

// The bounds of UpdateTaskProtection's expiresInMinutes, and its default: 1 minute to 48 hours, 2
// hours when not given.
const (
	minProtectionMinutes     = 1
	maxProtectionMinutes     = 2880
	defaultProtectionMinutes = 120
)

// The most tasks one call may name, as ECS documents them.
const (
	maxGetProtectionTasks    = 100
	maxUpdateProtectionTasks = 10
)

type getTaskProtectionRequest struct {
	Cluster string   `json:"cluster"`
	Tasks   []string `json:"tasks"`
}

type updateTaskProtectionRequest struct {
	Cluster           string   `json:"cluster"`
	Tasks             []string `json:"tasks"`
	ProtectionEnabled *bool    `json:"protectionEnabled"`
	ExpiresInMinutes  *int64   `json:"expiresInMinutes"`
}

// protectedTaskOut is one task's protection on the wire; expirationDate only while it is enabled.
type protectedTaskOut struct {
	TaskArn           string    `json:"taskArn"`
	ProtectionEnabled bool      `json:"protectionEnabled"`
	ExpirationDate    timestamp `json:"expirationDate,omitzero"`
}

type taskProtectionResponse struct {
	ProtectedTasks []protectedTaskOut `json:"protectedTasks"`
	Failures       []failure          `json:"failures"`
}

// protectionOf is t's protection as of now.
func protectionOf(t *taskRecord, now time.Time) protectedTaskOut {
	if now.Before(t.ProtectedUntil) {
		return protectedTaskOut{TaskArn: t.Arn, ProtectionEnabled: true, ExpirationDate: ts(t.ProtectedUntil)}
	}
	return protectedTaskOut{TaskArn: t.Arn}
}

// missingTask is the failure of a task ref (an ARN or an ID) names in cluster that is not known there.
func (s *Server) missingTask(cluster, ref string) failure {
	arn := ref
	if !strings.HasPrefix(arn, "arn:") {
		arn = s.arn(fmt.Sprintf("task/%s/%s", cluster, ref))
	}
	return failure{Arn: arn, Reason: "MISSING"}
}

// unprotectable is the failure of a task ref names that is not one of this control plane's: a static
// task's TASK_NOT_VALID, else MISSING.
func (s *Server) unprotectable(static []StaticTask, cluster, ref string) failure {
	if st := findStatic(static, ref); st != nil {
		return s.staticProtectionFailure(st)
	}
	return s.missingTask(cluster, ref)
}

func (s *Server) getTaskProtection(r *http.Request, req *getTaskProtectionRequest) (any, error) {
	if len(req.Tasks) > maxGetProtectionTasks {
		return nil, invalidParameter("Tasks can have at most %d entries.", maxGetProtectionTasks)
	}
	out := taskProtectionResponse{ProtectedTasks: []protectedTaskOut{}, Failures: []failure{}}
	now := s.clock.Now()
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		for _, ref := range req.Tasks {
			t, err := s.findTask(tx, cl.Name, ref)
			if errors.Is(err, errNoRecord) {
				out.Failures = append(out.Failures, s.unprotectable(static, cl.Name, ref))
				continue
			}
			if err != nil {
				return err
			}
			out.ProtectedTasks = append(out.ProtectedTasks, protectionOf(t, now))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Server) updateTaskProtection(r *http.Request, req *updateTaskProtectionRequest) (any, error) {
	switch {
	case req.ProtectionEnabled == nil:
		return nil, invalidParameter("protectionEnabled is required.")
	case len(req.Tasks) == 0:
		return nil, invalidParameter("Tasks cannot be empty.")
	case len(req.Tasks) > maxUpdateProtectionTasks:
		return nil, invalidParameter("Tasks can have at most %d entries.", maxUpdateProtectionTasks)
	}
	minutes := int64(defaultProtectionMinutes)
	if req.ExpiresInMinutes != nil {
		minutes = *req.ExpiresInMinutes
	}
	if *req.ProtectionEnabled && (minutes < minProtectionMinutes || minutes > maxProtectionMinutes) {
		return nil, invalidParameter("expiresInMinutes must be between %d and %d.", minProtectionMinutes, maxProtectionMinutes)
	}
	out := taskProtectionResponse{ProtectedTasks: []protectedTaskOut{}, Failures: []failure{}}
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.Update(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		if _, err := expire(tx, now, expireBatch); err != nil {
			return err
		}
		for _, ref := range req.Tasks {
			t, err := s.findTask(tx, cl.Name, ref)
			if errors.Is(err, errNoRecord) {
				out.Failures = append(out.Failures, s.unprotectable(static, cl.Name, ref))
				continue
			}
			if err != nil {
				return err
			}
			t.ProtectedUntil = time.Time{}
			if *req.ProtectionEnabled {
				t.ProtectedUntil = now.Add(time.Duration(minutes) * time.Minute)
			}
			if err := saveTask(tx, t); err != nil {
				return err
			}
			out.ProtectedTasks = append(out.ProtectedTasks, protectionOf(t, now))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

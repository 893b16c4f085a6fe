package localcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// Clusters.

type createClusterRequest struct {
	ClusterName string `json:"clusterName"`
}

type describeClustersRequest struct {
	Clusters []string `json:"clusters"`
}

// ensureCluster returns the named cluster, creating it when absent. A record that does not decode
// (a damaged file) is logged and written anew, so a damaged cluster never stops the control plane.
func (s *Server) ensureCluster(tx *bolt.Tx, name string) (*clusterRecord, error) {
	rec, err := s.clusterAt(tx, name)
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, errNoRecord):
		s.log.Info("cluster created", "cluster", name)
	case errors.Is(err, errBadRecord):
		s.log.Info("cluster record rewritten", "cluster", name)
	default:
		return nil, err
	}
	rec = s.newCluster(name)
	if err := put(tx, bucketClusters, name, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// cluster returns the cluster named by a name or ARN ("" is the default cluster), or a
// ClusterNotFoundException. A record that does not decode stands for the cluster it is the record
// of: the cluster is logged and served as new until ensureCluster rewrites it.
func (s *Server) cluster(tx *bolt.Tx, nameOrArn string) (*clusterRecord, error) {
	name := clusterName(nameOrArn)
	rec, err := s.clusterAt(tx, name)
	switch {
	case errors.Is(err, errNoRecord):
		return nil, clusterNotFound()
	case errors.Is(err, errBadRecord):
		return s.newCluster(name), nil
	}
	return rec, err
}

// errBadRecord is clusterAt's error for a record that does not decode.
var errBadRecord = errors.New("record does not decode")

// clusterAt reads the cluster record of name: errNoRecord when there is none, errBadRecord (logged)
// when it does not decode.
func (s *Server) clusterAt(tx *bolt.Tx, name string) (*clusterRecord, error) {
	rec := &clusterRecord{}
	err := get(tx, bucketClusters, name, rec)
	if err != nil && !errors.Is(err, errNoRecord) {
		s.badRecord(string(bucketClusters)+"/"+name, err)
		return nil, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	return rec, err
}

// newCluster is a new ACTIVE cluster's record.
func (s *Server) newCluster(name string) *clusterRecord {
	return &clusterRecord{Name: name, Arn: s.clusterArn(name), Status: "ACTIVE", CreatedAt: s.clock.Now()}
}

func validName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (s *Server) createCluster(r *http.Request, req *createClusterRequest) (any, error) {
	name := clusterName(req.ClusterName)
	if !validName(name) {
		return nil, invalidParameter("Cluster name can contain up to 255 letters (uppercase and lowercase), numbers, hyphens, and underscores.")
	}
	var out clusterOut
	static := s.staticTasks(r.Context(), name)
	err := s.db.Update(func(tx *bolt.Tx) error {
		rec, err := s.ensureCluster(tx, name)
		if err != nil {
			return err
		}
		out = s.clusterOut(tx, rec, static)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"cluster": out}, nil
}

// clusterOut renders a cluster with its counts, the static tasks in it (among static) included.
func (s *Server) clusterOut(tx *bolt.Tx, rec *clusterRecord, static []StaticTask) clusterOut {
	l := staticLoad(inCluster(static, rec.Name), "")
	out := clusterOut{ClusterArn: rec.Arn, ClusterName: rec.Name, Status: rec.Status, RunningTasksCount: l.running, PendingTasksCount: l.pending}
	_ = each(tx, bucketInstances, "", s.badRecord, func(ci *instanceRecord) error {
		if ci.ClusterName == rec.Name {
			out.RegisteredContainerInstancesCount++
		}
		return nil
	})
	_ = eachLive(tx, s.badRecord, func(t *taskRecord) error {
		if t.ClusterName != rec.Name {
			return nil
		}
		switch {
		case t.LastStatus == task.TaskRunning:
			out.RunningTasksCount++
		case t.LastStatus < task.TaskRunning:
			out.PendingTasksCount++
		}
		return nil
	})
	return out
}

func (s *Server) describeClusters(r *http.Request, req *describeClustersRequest) (any, error) {
	names := req.Clusters
	if len(names) == 0 {
		names = []string{DefaultCluster}
	}
	clusters, failures := []clusterOut{}, []failure{}
	static := s.allStatic(r.Context())
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, n := range names {
			rec, err := s.cluster(tx, n)
			var apiErr *APIError
			if errors.As(err, &apiErr) {
				arn := n
				if !strings.HasPrefix(arn, "arn:") {
					arn = s.clusterArn(n)
				}
				failures = append(failures, failure{Arn: arn, Reason: "MISSING"})
				continue
			}
			if err != nil {
				return err
			}
			clusters = append(clusters, s.clusterOut(tx, rec, static))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"clusters": clusters, "failures": failures}, nil
}

func (s *Server) listClusters(_ *http.Request, _ *struct{}) (any, error) {
	arns := []string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return each(tx, bucketClusters, "", s.badRecord, func(c *clusterRecord) error {
			arns = append(arns, c.Arn)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"clusterArns": arns}, nil
}

// badRecord reports a stored record that does not decode; the caller skips it.
func (s *Server) badRecord(key string, err error) {
	s.log.Warn("skipping unreadable control plane record", "key", key, "error", err)
}

// Task definitions.

// registerTaskDefinition validates the request with taskdef.Parse: the request body is the task
// definition as register-task-definition takes it. Fields Berth ignores are logged, not stored.
func (s *Server) registerTaskDefinition(_ *http.Request, body []byte) (any, error) {
	def, err := taskdef.Parse(body)
	if err != nil {
		if errors.Is(err, taskdef.ErrInvalid) {
			return nil, clientError("Invalid task definition: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		return nil, err
	}
	var rec *taskDefRecord
	err = s.db.Update(func(tx *bolt.Tx) error {
		last := 0
		if err := each(tx, bucketTaskDefs, def.Family+"/", s.badRecord, func(r *taskDefRecord) error {
			last = max(last, r.Revision)
			return nil
		}); err != nil {
			return err
		}
		def.Revision = last + 1
		canon, err := taskdef.Canonical(def)
		if err != nil {
			return err
		}
		digest, err := def.Digest()
		if err != nil {
			return err
		}
		rec = &taskDefRecord{Family: def.Family, Revision: def.Revision, Status: "ACTIVE", RegisteredAt: s.clock.Now(), Digest: digest, Definition: canon}
		return put(tx, bucketTaskDefs, taskDefKey(def.Family, def.Revision), rec)
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("task definition registered", "task_definition", s.taskDefArn(rec.Family, rec.Revision))
	out, err := s.taskDefOut(rec)
	if err != nil {
		return nil, err
	}
	return map[string]any{"taskDefinition": out, "tags": []tag{}}, nil
}

// taskDefOut renders a stored revision the way describe-task-definition prints it.
func (s *Server) taskDefOut(rec *taskDefRecord) (map[string]any, error) {
	out := map[string]any{}
	if err := json.Unmarshal(rec.Definition, &out); err != nil {
		return nil, fmt.Errorf("decode task definition %s:%d: %w", rec.Family, rec.Revision, err)
	}
	out["taskDefinitionArn"] = s.taskDefArn(rec.Family, rec.Revision)
	out["revision"] = rec.Revision
	out["status"] = rec.Status
	out["registeredAt"] = ts(rec.RegisteredAt)
	if !rec.DeregisteredAt.IsZero() {
		out["deregisteredAt"] = ts(rec.DeregisteredAt)
	}
	if _, ok := out["networkMode"]; !ok {
		out["networkMode"] = "bridge"
	}
	if _, ok := out["volumes"]; !ok {
		out["volumes"] = []any{}
	}
	out["compatibilities"] = []string{"EXTERNAL", "EC2"}
	out["requiresAttributes"] = []any{}
	out["placementConstraints"] = []any{}
	return out, nil
}

// parseTaskDefRef splits "family", "family:rev" or a task definition ARN; rev is 0 when absent.
func parseTaskDefRef(ref string) (family string, rev int, err error) {
	if strings.HasPrefix(ref, "arn:") {
		_, after, ok := strings.Cut(ref, ":task-definition/")
		if !ok {
			return "", 0, clientError("Invalid revision number. Number: %s", ref)
		}
		ref = after
	}
	family, revText, hasRev := strings.Cut(ref, ":")
	if hasRev {
		rev, err = strconv.Atoi(revText)
		if err != nil || rev < 1 {
			return "", 0, clientError("Invalid revision number. Number: %s", revText)
		}
	}
	if family == "" {
		return "", 0, clientError("Task definition family is required.")
	}
	return family, rev, nil
}

// findTaskDef returns the revision ref names: the given revision, or the latest ACTIVE one. A
// missing one is a ClientException with ECS's message for the operation.
func (s *Server) findTaskDef(tx *bolt.Tx, ref, notFound string) (*taskDefRecord, error) {
	family, rev, err := parseTaskDefRef(ref)
	if err != nil {
		return nil, err
	}
	if rev > 0 {
		rec := &taskDefRecord{}
		if err := get(tx, bucketTaskDefs, taskDefKey(family, rev), rec); err != nil {
			if errors.Is(err, errNoRecord) {
				return nil, clientError("%s", notFound)
			}
			return nil, err
		}
		return rec, nil
	}
	var latest *taskDefRecord
	if err := each(tx, bucketTaskDefs, family+"/", s.badRecord, func(r *taskDefRecord) error {
		if r.Status == "ACTIVE" {
			latest = r
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if latest == nil {
		return nil, clientError("%s", notFound)
	}
	return latest, nil
}

type taskDefRefRequest struct {
	TaskDefinition string `json:"taskDefinition"`
}

func (s *Server) describeTaskDefinition(_ *http.Request, req *taskDefRefRequest) (any, error) {
	var rec *taskDefRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		rec, err = s.findTaskDef(tx, req.TaskDefinition, "Unable to describe task definition.")
		return err
	})
	if err != nil {
		return nil, err
	}
	out, err := s.taskDefOut(rec)
	if err != nil {
		return nil, err
	}
	return map[string]any{"taskDefinition": out, "tags": []tag{}}, nil
}

type listTaskDefinitionsRequest struct {
	FamilyPrefix string `json:"familyPrefix"`
	Status       string `json:"status"`
	Sort         string `json:"sort"`
}

func (s *Server) listTaskDefinitions(_ *http.Request, req *listTaskDefinitionsRequest) (any, error) {
	status := strings.ToUpper(req.Status)
	if status == "" {
		status = "ACTIVE"
	}
	var recs []*taskDefRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return each(tx, bucketTaskDefs, "", s.badRecord, func(r *taskDefRecord) error {
			if strings.HasPrefix(r.Family, req.FamilyPrefix) && (status == "ALL" || r.Status == status) {
				recs = append(recs, r)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(recs, func(a, b *taskDefRecord) int {
		if c := strings.Compare(a.Family, b.Family); c != 0 {
			return c
		}
		return a.Revision - b.Revision
	})
	if strings.EqualFold(req.Sort, "DESC") {
		slices.Reverse(recs)
	}
	arns := make([]string, 0, len(recs))
	for _, r := range recs {
		arns = append(arns, s.taskDefArn(r.Family, r.Revision))
	}
	return map[string]any{"taskDefinitionArns": arns}, nil
}

func (s *Server) listTaskDefinitionFamilies(_ *http.Request, req *listTaskDefinitionsRequest) (any, error) {
	status := strings.ToUpper(req.Status)
	if status == "" {
		status = "ACTIVE"
	}
	active := map[string]bool{}
	var order []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return each(tx, bucketTaskDefs, req.FamilyPrefix, s.badRecord, func(r *taskDefRecord) error {
			if _, seen := active[r.Family]; !seen {
				order = append(order, r.Family)
			}
			active[r.Family] = active[r.Family] || r.Status == "ACTIVE"
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	families := []string{}
	for _, f := range order {
		if status == "ALL" || (status == "ACTIVE") == active[f] {
			families = append(families, f)
		}
	}
	slices.Sort(families)
	return map[string]any{"families": families}, nil
}

func (s *Server) deregisterTaskDefinition(_ *http.Request, req *taskDefRefRequest) (any, error) {
	family, rev, err := parseTaskDefRef(req.TaskDefinition)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		return nil, clientError("Invalid revision number. Number: %s", req.TaskDefinition)
	}
	rec := &taskDefRecord{}
	err = s.db.Update(func(tx *bolt.Tx) error {
		key := taskDefKey(family, rev)
		if err := get(tx, bucketTaskDefs, key, rec); err != nil {
			if errors.Is(err, errNoRecord) {
				return clientError("The specified task definition does not exist.")
			}
			return err
		}
		if rec.Status == "ACTIVE" {
			rec.Status = "INACTIVE"
			rec.DeregisteredAt = s.clock.Now()
		}
		return put(tx, bucketTaskDefs, key, rec)
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("task definition deregistered", "task_definition", s.taskDefArn(family, rev))
	out, err := s.taskDefOut(rec)
	if err != nil {
		return nil, err
	}
	return map[string]any{"taskDefinition": out}, nil
}

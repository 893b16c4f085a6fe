package localcp

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
)

type registerContainerInstanceRequest struct {
	Cluster              string       `json:"cluster"`
	ContainerInstanceArn string       `json:"containerInstanceArn"`
	TotalResources       []resource   `json:"totalResources"`
	VersionInfo          *versionInfo `json:"versionInfo"`
	Attributes           []attribute  `json:"attributes"`
	Tags                 []tag        `json:"tags"`
}

// registerContainerInstance registers (or, given its ARN, re-registers) the agent's host. Unlike ECS
// it creates a missing cluster: in local mode the agent's ECS_CLUSTER names the cluster to use.
// Tasks waiting for an instance in the cluster are placed on it.
func (s *Server) registerContainerInstance(r *http.Request, req *registerContainerInstanceRequest) (any, error) {
	name := clusterName(req.Cluster)
	if !validName(name) {
		return nil, clusterNotFound()
	}
	ci := &instanceRecord{}
	var placed int
	err := s.db.Update(func(tx *bolt.Tx) error {
		if _, err := s.ensureCluster(tx, name); err != nil {
			return err
		}
		arn := req.ContainerInstanceArn
		if arn == "" {
			arn = s.arn("container-instance/" + name + "/" + newID())
		}
		err := get(tx, bucketInstances, arn, ci)
		switch {
		case errors.Is(err, errNoRecord):
			ci = &instanceRecord{Arn: arn, Status: "ACTIVE", RegisteredAt: s.clock.Now()}
		case err != nil:
			return err
		}
		ci.ClusterName = name
		ci.Attributes = req.Attributes
		ci.RegisteredResources = req.TotalResources
		ci.VersionInfo = req.VersionInfo
		ci.Tags = req.Tags
		ci.Version++
		if err := put(tx, bucketInstances, arn, ci); err != nil {
			return err
		}
		placed, err = s.placeWaiting(tx, ci)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("container instance registered", "container_instance", ci.Arn, "cluster", name, "tasks_placed", placed)
	s.kick(ci.Arn)
	var out instanceOut
	static := s.staticTasks(r.Context(), name)
	err = s.db.View(func(tx *bolt.Tx) error {
		out = s.instanceOut(tx, ci, static)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"containerInstance": out}, nil
}

// placeWaiting puts the cluster's tasks that wait for an instance on ci, if ci takes new tasks.
func (s *Server) placeWaiting(tx *bolt.Tx, ci *instanceRecord) (int, error) {
	if ci.Status != "ACTIVE" {
		return 0, nil
	}
	var waiting []*taskRecord
	err := eachLive(tx, s.badRecord, func(t *taskRecord) error {
		if t.ClusterName == ci.ClusterName && t.ContainerInstanceArn == "" && t.DesiredStatus == task.TaskRunning {
			waiting = append(waiting, t)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, t := range waiting {
		t.ContainerInstanceArn = ci.Arn
		t.Version++
		if err := saveTask(tx, t); err != nil {
			return 0, err
		}
		s.log.Info("task placed", "task", t.Arn, "container_instance", ci.Arn)
	}
	return len(waiting), nil
}

// findInstance returns the container instance ref names (an ARN or an ID) in cluster, or errNoRecord.
func (s *Server) findInstance(tx *bolt.Tx, cluster, ref string) (*instanceRecord, error) {
	var found *instanceRecord
	err := each(tx, bucketInstances, "", s.badRecord, func(ci *instanceRecord) error {
		if ci.ClusterName == cluster && (ci.Arn == ref || lastSegment(ci.Arn) == ref) {
			found = ci
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, errNoRecord
	}
	return found, nil
}

// instanceOut renders a container instance with its task counts and remaining resources, the static
// tasks on it (among static) included.
func (s *Server) instanceOut(tx *bolt.Tx, ci *instanceRecord, static []StaticTask) instanceOut {
	out := instanceOut{
		ContainerInstanceArn: ci.Arn,
		Version:              ci.Version,
		VersionInfo:          ci.VersionInfo,
		RegisteredResources:  slices.Clone(ci.RegisteredResources),
		Status:               ci.Status,
		AgentConnected:       s.connected(ci.Arn),
		Attributes:           slices.Clone(ci.Attributes),
		RegisteredAt:         ts(ci.RegisteredAt),
		Tags:                 slices.Clone(ci.Tags),
	}
	l := staticLoad(static, ci.Arn)
	out.RunningTasksCount, out.PendingTasksCount = l.running, l.pending
	cpu, mem := l.cpu, l.mem
	_ = eachLive(tx, s.badRecord, func(t *taskRecord) error {
		if t.ContainerInstanceArn != ci.Arn || t.LastStatus.Terminal() {
			return nil
		}
		cpu += t.CPU
		mem += t.Memory
		switch {
		case t.LastStatus == task.TaskRunning:
			out.RunningTasksCount++
		case t.LastStatus < task.TaskRunning:
			out.PendingTasksCount++
		}
		return nil
	})
	for _, r := range ci.RegisteredResources {
		r.StringSetValue = slices.Clone(r.StringSetValue)
		switch r.Name {
		case "CPU":
			r.IntegerValue = max(0, r.IntegerValue-int64(cpu))
		case "MEMORY":
			r.IntegerValue = max(0, r.IntegerValue-int64(mem))
		}
		out.RemainingResources = append(out.RemainingResources, r)
	}
	if out.RegisteredResources == nil {
		out.RegisteredResources = []resource{}
	}
	if out.RemainingResources == nil {
		out.RemainingResources = []resource{}
	}
	if out.Attributes == nil {
		out.Attributes = []attribute{}
	}
	if out.Tags == nil {
		out.Tags = []tag{}
	}
	return out
}

type listContainerInstancesRequest struct {
	Cluster string `json:"cluster"`
	Status  string `json:"status"`
}

func (s *Server) listContainerInstances(_ *http.Request, req *listContainerInstancesRequest) (any, error) {
	arns := []string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		return each(tx, bucketInstances, "", s.badRecord, func(ci *instanceRecord) error {
			if ci.ClusterName == cl.Name && (req.Status == "" || strings.EqualFold(req.Status, ci.Status)) {
				arns = append(arns, ci.Arn)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"containerInstanceArns": arns}, nil
}

type containerInstancesRequest struct {
	Cluster            string   `json:"cluster"`
	ContainerInstances []string `json:"containerInstances"`
	Status             string   `json:"status"`
}

func (s *Server) describeContainerInstances(r *http.Request, req *containerInstancesRequest) (any, error) {
	if len(req.ContainerInstances) == 0 {
		return nil, invalidParameter("containerInstances can not be empty.")
	}
	instances, failures := []instanceOut{}, []failure{}
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		for _, ref := range req.ContainerInstances {
			ci, err := s.findInstance(tx, cl.Name, ref)
			if errors.Is(err, errNoRecord) {
				failures = append(failures, failure{Arn: ref, Reason: "MISSING"})
				continue
			}
			if err != nil {
				return err
			}
			instances = append(instances, s.instanceOut(tx, ci, static))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"containerInstances": instances, "failures": failures}, nil
}

// updateContainerInstancesState sets instances ACTIVE or DRAINING. A DRAINING instance gets no new
// tasks; its running tasks keep running (there is no service scheduler to replace them).
func (s *Server) updateContainerInstancesState(r *http.Request, req *containerInstancesRequest) (any, error) {
	status := strings.ToUpper(req.Status)
	if status != "ACTIVE" && status != "DRAINING" {
		return nil, invalidParameter("status must be ACTIVE or DRAINING.")
	}
	if len(req.ContainerInstances) == 0 {
		return nil, invalidParameter("containerInstances can not be empty.")
	}
	instances, failures := []instanceOut{}, []failure{}
	var kicks []string
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.Update(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		for _, ref := range req.ContainerInstances {
			ci, err := s.findInstance(tx, cl.Name, ref)
			if errors.Is(err, errNoRecord) {
				failures = append(failures, failure{Arn: ref, Reason: "MISSING"})
				continue
			}
			if err != nil {
				return err
			}
			if ci.Status != status {
				ci.Status = status
				ci.Version++
				if err := put(tx, bucketInstances, ci.Arn, ci); err != nil {
					return err
				}
				s.log.Info("container instance state changed", "container_instance", ci.Arn, "status", status)
				if n, err := s.placeWaiting(tx, ci); err != nil {
					return err
				} else if n > 0 {
					kicks = append(kicks, ci.Arn)
				}
			}
			instances = append(instances, s.instanceOut(tx, ci, static))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, arn := range kicks {
		s.kick(arn)
	}
	return map[string]any{"containerInstances": instances, "failures": failures}, nil
}

type discoverPollEndpointRequest struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
}

// discoverPollEndpoint points the agent's ACS client (and telemetry) back at this server, as reached
// by the request.
func (s *Server) discoverPollEndpoint(r *http.Request, _ *discoverPollEndpointRequest) (any, error) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host + "/"
	return map[string]any{"endpoint": base, "telemetryEndpoint": scheme + "://" + r.Host + tcsPath}, nil
}

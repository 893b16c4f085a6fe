package localcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// maxRunCount is the most tasks one RunTask call starts, as in ECS.
const maxRunCount = 10

type runTaskRequest struct {
	Cluster            string        `json:"cluster"`
	TaskDefinition     string        `json:"taskDefinition"`
	Count              int           `json:"count"`
	StartedBy          string        `json:"startedBy"`
	Group              string        `json:"group"`
	Overrides          *taskOverride `json:"overrides"`
	LaunchType         string        `json:"launchType"`
	ContainerInstances []string      `json:"containerInstances"` // StartTask
	Tags               []tag         `json:"tags"`
	// ClientToken makes the call idempotent: see startTasks.
	ClientToken string `json:"clientToken"`
	// EnableExecuteCommand gives every container of the task ECS Exec's managed agent.
	EnableExecuteCommand bool `json:"enableExecuteCommand"`
}

// maxClientToken is the longest client token ECS accepts for RunTask.
const maxClientToken = 64

// checkClientToken refuses a client token ECS would: longer than maxClientToken, or with a character
// outside ASCII 33-126.
func checkClientToken(token string) error {
	if len(token) > maxClientToken {
		return invalidParameter("clientToken can have at most %d characters.", maxClientToken)
	}
	for i := range len(token) {
		if token[i] < 33 || token[i] > 126 {
			return invalidParameter("clientToken can only contain ASCII characters 33-126.")
		}
	}
	return nil
}

func (s *Server) runTask(_ *http.Request, req *runTaskRequest) (any, error) {
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > maxRunCount {
		return nil, invalidParameter("count must be between 1 and %d.", maxRunCount)
	}
	if lt := strings.ToUpper(req.LaunchType); lt != "" && lt != "EC2" && lt != "EXTERNAL" {
		return nil, unsupported("launch type %s is not supported by Berth's local control plane; use EC2", req.LaunchType)
	}
	return s.startTasks("RunTask", req, false)
}

// launchTypeOf is the launch type a task has for the one RunTask named: EC2 when it named none
// (tasks stored before launch types were, too).
func launchTypeOf(requested string) string {
	if requested == "" {
		return "EC2"
	}
	return strings.ToUpper(requested)
}

// refuseUnsupported answers a RunTask or StartTask that asks for what Berth cannot do with a
// ClientException naming the field, as a task definition field would be.
func refuseUnsupported(req *runTaskRequest) error {
	o := req.Overrides
	if o == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"overrides.ephemeralStorage", o.EphemeralStorage}, {"overrides.inferenceAcceleratorOverrides", o.InferenceAcceleratorOverrides}} {
		if len(f.raw) > 0 && string(f.raw) != "null" && string(f.raw) != "[]" && string(f.raw) != "{}" {
			return clientError("%s: not supported by Berth", f.name)
		}
	}
	for i, co := range o.ContainerOverrides {
		if r := co.ResourceRequirements; len(r) > 0 && string(r) != "null" && string(r) != "[]" {
			return clientError("overrides.containerOverrides[%d].resourceRequirements: GPUs and inference accelerators are not supported by Berth yet", i)
		}
	}
	return nil
}

func (s *Server) startTask(_ *http.Request, req *runTaskRequest) (any, error) {
	if len(req.ContainerInstances) == 0 {
		return nil, invalidParameter("containerInstances can not be empty.")
	}
	if len(req.ContainerInstances) > maxRunCount {
		return nil, invalidParameter("containerInstances can have at most %d items.", maxRunCount)
	}
	return s.startTasks("StartTask", req, true)
}

// startTasks creates the tasks of a RunTask (placed on the cluster's instance) or StartTask (one on
// each given instance) and sends them to the agents.
//
// With a client token it is idempotent as ECS is: a call that repeats a successful one's token in the
// same cluster, within clientTokenTTL (and while the tasks it started are remembered), gets that
// call's answer and starts nothing; one that repeats the token with other parameters, or for the
// other operation, gets a ConflictException naming the tasks the token started. The token is stored
// in the transaction that creates the tasks, so it holds across a restart.
func (s *Server) startTasks(op string, req *runTaskRequest, explicit bool) (any, error) {
	if err := refuseUnsupported(req); err != nil {
		return nil, err
	}
	if err := checkClientToken(req.ClientToken); err != nil {
		return nil, err
	}
	var (
		tasks  []*taskRecord
		answer json.RawMessage
		replay bool
	)
	failures := []failure{}
	err := s.db.Update(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		if _, err := expire(tx, now, expireBatch); err != nil {
			return err
		}
		digest, err := requestDigest(op, cl.Name, req)
		if err != nil {
			return err
		}
		if req.ClientToken != "" {
			prev := &clientTokenRecord{}
			err := get(tx, bucketClientTokens, tokenKey(cl.Name, req.ClientToken), prev)
			switch {
			case err == nil && prev.Digest == digest:
				answer, replay = prev.Response, true
				return nil
			case err == nil:
				return &APIError{Status: http.StatusBadRequest, Type: "ConflictException", ResourceIDs: prev.TaskArns,
					Message: "The clientToken is already in use with a different " + prev.Op + " request."}
			case !errors.Is(err, errNoRecord):
				return err
			}
		}
		td, err := s.findTaskDef(tx, req.TaskDefinition, "TaskDefinition not found.")
		if err != nil {
			return err
		}
		if td.Status != "ACTIVE" {
			return clientError("TaskDefinition is inactive")
		}
		def, err := effectiveDefinition(td, req.Overrides)
		if err != nil {
			return err
		}
		var targets []string
		if explicit {
			for _, ref := range req.ContainerInstances {
				ci, err := s.findInstance(tx, cl.Name, ref)
				if errors.Is(err, errNoRecord) {
					failures = append(failures, failure{Arn: ref, Reason: "MISSING"})
					continue
				}
				if err != nil {
					return err
				}
				if ci.Status != "ACTIVE" {
					failures = append(failures, failure{Arn: ci.Arn, Reason: "DRAINING", Detail: "the container instance is draining; no new tasks are placed on it"})
					continue
				}
				targets = append(targets, ci.Arn)
			}
		} else {
			target, fails, err := s.place(tx, cl.Name)
			if err != nil {
				return err
			}
			if len(fails) > 0 {
				failures = append(failures, fails...)
			} else {
				for range req.Count {
					targets = append(targets, target)
				}
			}
		}
		out := make([]taskOut, 0, len(targets))
		arns := make([]string, 0, len(targets))
		for _, inst := range targets {
			t, err := s.newTask(cl.Name, td, def, req, inst)
			if err != nil {
				return err
			}
			if err := saveTask(tx, t); err != nil {
				return err
			}
			tasks = append(tasks, t)
			out = append(out, s.taskOut(t))
			arns = append(arns, t.Arn)
		}
		if answer, err = json.Marshal(map[string]any{"tasks": out, "failures": failures}); err != nil {
			return fmt.Errorf("encode %s response: %w", op, err)
		}
		if req.ClientToken == "" {
			return nil
		}
		key := tokenKey(cl.Name, req.ClientToken)
		rec := &clientTokenRecord{Op: op, Digest: digest, TaskArns: arns, Response: answer, CreatedAt: now}
		if err := put(tx, bucketClientTokens, key, rec); err != nil {
			return err
		}
		return tx.Bucket(bucketExpiry).Put(expiryKey(now.Add(clientTokenTTL), expireToken, key), nil)
	})
	if err != nil {
		return nil, err
	}
	if replay {
		s.log.Info("repeated call answered from its client token; nothing started", "op", op, "client_token", req.ClientToken)
		return answer, nil
	}
	for _, t := range tasks {
		s.log.Info("task created", "task", t.Arn, "task_definition", t.TaskDefinitionArn, "container_instance", t.ContainerInstanceArn)
		s.kick(t.ContainerInstanceArn)
	}
	return answer, nil
}

// requestDigest identifies a RunTask or StartTask call by its operation and parameters, with its
// cluster by name and without its client token: two calls with the same digest ask for the same.
func requestDigest(op, cluster string, req *runTaskRequest) (string, error) {
	r := *req
	r.Cluster, r.ClientToken = cluster, ""
	b, err := json.Marshal(struct {
		Op  string          `json:"op"`
		Req *runTaskRequest `json:"req"`
	}{op, &r})
	if err != nil {
		return "", fmt.Errorf("encode %s request: %w", op, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// place picks the instance a RunTask task goes to: an ACTIVE one of the cluster, preferring one whose
// agent is connected, then the most recently registered. With no instance at all it returns "" and
// the task waits for one; with only DRAINING instances it returns one failure per instance.
func (s *Server) place(tx *bolt.Tx, cluster string) (string, []failure, error) {
	var best *instanceRecord
	var fails []failure
	err := each(tx, bucketInstances, "", s.badRecord, func(ci *instanceRecord) error {
		if ci.ClusterName != cluster {
			return nil
		}
		if ci.Status != "ACTIVE" {
			fails = append(fails, failure{Arn: ci.Arn, Reason: "DRAINING", Detail: "the container instance is draining; no new tasks are placed on it"})
			return nil
		}
		if best == nil || better(s.connected(ci.Arn), ci, s.connected(best.Arn), best) {
			best = ci
		}
		return nil
	})
	if err != nil || best != nil {
		return arnOf(best), nil, err
	}
	return "", fails, nil
}

func better(aConn bool, a *instanceRecord, bConn bool, b *instanceRecord) bool {
	if aConn != bConn {
		return aConn
	}
	return a.RegisteredAt.After(b.RegisteredAt)
}

func arnOf(ci *instanceRecord) string {
	if ci == nil {
		return ""
	}
	return ci.Arn
}

// effectiveDefinition decodes a stored revision through taskdef and applies RunTask overrides.
func effectiveDefinition(td *taskDefRecord, o *taskOverride) (*taskdef.Definition, error) {
	def, err := taskdef.Parse(td.Definition)
	if err != nil {
		return nil, fmt.Errorf("stored task definition %s:%d: %w", td.Family, td.Revision, err)
	}
	if o == nil {
		return def, nil
	}
	if o.CPU != "" {
		if err := def.CPU.UnmarshalJSON([]byte(strconv.Quote(o.CPU))); err != nil {
			return nil, invalidParameter("overrides.cpu: %v", err)
		}
	}
	if o.Memory != "" {
		if err := def.Memory.UnmarshalJSON([]byte(strconv.Quote(o.Memory))); err != nil {
			return nil, invalidParameter("overrides.memory: %v", err)
		}
	}
	if o.TaskRoleArn != "" {
		def.TaskRoleArn = o.TaskRoleArn
	}
	if o.ExecutionRoleArn != "" {
		def.ExecutionRoleArn = o.ExecutionRoleArn
	}
	for _, co := range o.ContainerOverrides {
		i := slices.IndexFunc(def.ContainerDefinitions, func(c taskdef.ContainerDefinition) bool { return c.Name == co.Name })
		if i < 0 {
			return nil, invalidParameter("Override for container named %s is not a container in the TaskDefinition.", co.Name)
		}
		c := &def.ContainerDefinitions[i]
		if co.Command != nil {
			c.Command = slices.Clone(co.Command)
		}
		c.EnvironmentFiles = append(c.EnvironmentFiles, co.EnvironmentFiles...)
		for _, kv := range co.Environment {
			j := slices.IndexFunc(c.Environment, func(e taskdef.KeyValue) bool { return e.Name == kv.Name })
			if j >= 0 {
				c.Environment[j].Value = kv.Value
			} else {
				c.Environment = append(c.Environment, taskdef.KeyValue{Name: kv.Name, Value: kv.Value})
			}
		}
		if co.CPU != nil {
			c.CPU = *co.CPU
		}
		if co.Memory != nil {
			c.Memory = co.Memory
		}
		if co.MemoryReservation != nil {
			c.MemoryReservation = co.MemoryReservation
		}
	}
	if err := def.Validate(); err != nil {
		return nil, invalidParameter("overrides make the task definition invalid: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return def, nil
}

// newTask makes the record of a new task of def on instance inst ("" when not placed yet).
func (s *Server) newTask(cluster string, td *taskDefRecord, def *taskdef.Definition, req *runTaskRequest, inst string) (*taskRecord, error) {
	canon, err := taskdef.Canonical(def)
	if err != nil {
		return nil, err
	}
	id := newID()
	t := &taskRecord{
		Arn:                  s.arn(fmt.Sprintf("task/%s/%s", cluster, id)),
		ID:                   id,
		ClusterName:          cluster,
		TaskDefinitionArn:    s.taskDefArn(td.Family, td.Revision),
		Family:               td.Family,
		Revision:             td.Revision,
		Definition:           canon,
		Overrides:            req.Overrides,
		ContainerInstanceArn: inst,
		StartedBy:            req.StartedBy,
		Group:                req.Group,
		TaskCPU:              int(def.CPU),
		TaskMemory:           int(def.Memory),
		Version:              1,
		LastStatus:           task.TaskNone,
		DesiredStatus:        task.TaskRunning,
		CreatedAt:            s.clock.Now(),
		LaunchType:           launchTypeOf(req.LaunchType),
		Tags:                 req.Tags,
		ClientToken:          req.ClientToken,
		EnableExecuteCommand: req.EnableExecuteCommand,
	}
	if t.Group == "" {
		t.Group = "family:" + td.Family
	}
	cpu, mem := 0, 0
	for _, c := range def.ContainerDefinitions {
		m := 0
		if c.Memory != nil {
			m = *c.Memory
		} else if c.MemoryReservation != nil {
			m = *c.MemoryReservation
		}
		cpu += c.CPU
		mem += m
		rec := containerRecord{
			Arn:        s.arn(fmt.Sprintf("container/%s/%s/%s", cluster, id, newUUID())),
			Name:       c.Name,
			Image:      c.Image,
			CPU:        c.CPU,
			Memory:     m,
			Essential:  c.Essential == nil || *c.Essential,
			LastStatus: task.ContainerNone,
		}
		if t.EnableExecuteCommand {
			rec.ManagedAgents = []managedAgentRecord{{Name: task.ExecuteCommandAgent, LastStatus: "PENDING"}}
		}
		t.Containers = append(t.Containers, rec)
	}
	t.CPU = max(int(def.CPU), cpu)
	t.Memory = max(int(def.Memory), mem)
	return t, nil
}

// taskOut renders a task the way describe-tasks prints it.
func (s *Server) taskOut(t *taskRecord) taskOut {
	out := taskOut{
		TaskArn:              t.Arn,
		ClusterArn:           s.clusterArn(t.ClusterName),
		TaskDefinitionArn:    t.TaskDefinitionArn,
		ContainerInstanceArn: t.ContainerInstanceArn,
		LastStatus:           taskStatusName(t.LastStatus),
		DesiredStatus:        taskStatusName(t.DesiredStatus),
		StartedBy:            t.StartedBy,
		Version:              t.Version,
		StoppedReason:        t.StoppedReason,
		StopCode:             t.StopCode,
		PullStartedAt:        ts(t.PullStartedAt),
		PullStoppedAt:        ts(t.PullStoppedAt),
		ExecutionStoppedAt:   ts(t.ExecutionStoppedAt),
		CreatedAt:            ts(t.CreatedAt),
		StartedAt:            ts(t.StartedAt),
		StoppingAt:           ts(t.StoppingAt),
		StoppedAt:            ts(t.StoppedAt),
		Group:                t.Group,
		LaunchType:           launchTypeOf(t.LaunchType),
		Attachments:          []struct{}{},
		Tags:                 slices.Clone(t.Tags),
		EnableExecuteCommand: t.EnableExecuteCommand,
	}
	if t.Overrides != nil {
		out.Overrides = *t.Overrides
	}
	if out.Overrides.ContainerOverrides == nil {
		out.Overrides.ContainerOverrides = []containerOverride{}
	}
	if t.TaskCPU > 0 {
		out.CPU = strconv.Itoa(t.TaskCPU)
	}
	if t.TaskMemory > 0 {
		out.Memory = strconv.Itoa(t.TaskMemory)
	}
	if !t.StartedAt.IsZero() {
		out.Connectivity = "CONNECTED"
		out.ConnectivityAt = ts(t.StartedAt)
	}
	for _, c := range t.Containers {
		co := containerOut{
			ContainerArn:    c.Arn,
			TaskArn:         t.Arn,
			Name:            c.Name,
			Image:           c.Image,
			ImageDigest:     c.ImageDigest,
			RuntimeID:       c.RuntimeID,
			LastStatus:      containerStatusName(c.LastStatus),
			ExitCode:        c.ExitCode,
			Reason:          c.Reason,
			NetworkBindings: c.NetworkBindings,
			CPU:             strconv.Itoa(c.CPU),
		}
		if co.NetworkBindings == nil {
			co.NetworkBindings = []networkBinding{}
		}
		if c.Memory > 0 {
			co.Memory = strconv.Itoa(c.Memory)
		}
		for _, a := range c.ManagedAgents {
			co.ManagedAgents = append(co.ManagedAgents, managedAgentOut{Name: a.Name, LastStatus: a.LastStatus, Reason: a.Reason, LastStartedAt: ts(a.LastStartedAt)})
		}
		out.Containers = append(out.Containers, co)
	}
	return out
}

// findTask returns the task ref names (an ARN or an ID) in cluster, or errNoRecord.
func (s *Server) findTask(tx *bolt.Tx, cluster, ref string) (*taskRecord, error) {
	arn := ref
	if !strings.HasPrefix(ref, "arn:") {
		var err error
		if arn, err = taskArnByID(tx, lastSegment(ref)); err != nil {
			return nil, err
		}
	}
	t := &taskRecord{}
	if err := get(tx, bucketTasks, arn, t); err != nil {
		return nil, err
	}
	if t.ClusterName != cluster {
		return nil, errNoRecord
	}
	return t, nil
}

type stopTaskRequest struct {
	Cluster string `json:"cluster"`
	Task    string `json:"task"`
	Reason  string `json:"reason"`
}

// stopTask stops a task of this control plane. A static task is refused while it runs (its file
// decides) and answered as it is once it is stopping.
func (s *Server) stopTask(r *http.Request, req *stopTaskRequest) (any, error) {
	if req.Task == "" {
		return nil, invalidParameter("task can not be blank.")
	}
	static := s.staticFinder(r.Context(), clusterName(req.Cluster))
	var t *taskRecord
	var stopping *StaticTask
	changed := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		t, err = s.findTask(tx, cl.Name, req.Task)
		if errors.Is(err, errNoRecord) {
			if st := static(req.Task); st != nil {
				if st.Task.DesiredStatus != task.TaskStopped {
					return s.staticStopRefused(st)
				}
				stopping = st
				return nil
			}
			return invalidParameter("The referenced task was not found.")
		}
		if err != nil {
			return err
		}
		if t.DesiredStatus == task.TaskStopped {
			return nil
		}
		changed = true
		now := s.clock.Now()
		t.DesiredStatus = task.TaskStopped
		t.StoppedReason = req.Reason
		if t.StoppedReason == "" {
			t.StoppedReason = "Task stopped by user"
		}
		t.StopCode = "UserInitiated"
		t.StoppingAt = now
		t.Version++
		if t.ContainerInstanceArn == "" {
			// Never placed: nothing runs it, so it stops here.
			s.markStopped(t, now)
			t.AckedDesired = task.TaskStopped
		}
		if _, err := expire(tx, now, expireBatch); err != nil {
			return err
		}
		return saveTask(tx, t)
	})
	if err != nil {
		return nil, err
	}
	if stopping != nil {
		return map[string]any{"task": s.staticOut(stopping)}, nil
	}
	if changed {
		s.log.Info("task stop requested", "task", t.Arn, "reason", t.StoppedReason)
		s.kick(t.ContainerInstanceArn)
	}
	return map[string]any{"task": s.taskOut(t)}, nil
}

// markStopped records that t has stopped at now.
func (s *Server) markStopped(t *taskRecord, now time.Time) {
	t.LastStatus = task.TaskStopped
	t.DesiredStatus = task.TaskStopped
	if t.StoppedAt.IsZero() {
		t.StoppedAt = now
	}
	if t.StoppingAt.IsZero() {
		t.StoppingAt = now
	}
	if t.ExecutionStoppedAt.IsZero() {
		t.ExecutionStoppedAt = now
	}
	for i := range t.Containers {
		t.Containers[i].LastStatus = task.ContainerStopped
	}
}

type describeTasksRequest struct {
	Cluster string   `json:"cluster"`
	Tasks   []string `json:"tasks"`
	Include []string `json:"include"`
}

// includeTags is the one value of DescribeTasks' include: show the tasks' tags.
const includeTags = "TAGS"

// describeTasks describes tasks of this control plane and the static tasks the agent runs, with
// their tags when include names TAGS.
func (s *Server) describeTasks(r *http.Request, req *describeTasksRequest) (any, error) {
	if len(req.Tasks) == 0 {
		return nil, invalidParameter("Tasks cannot be empty.")
	}
	for _, v := range req.Include {
		if v != includeTags {
			return nil, invalidParameter("include: %q is not a valid value; the only one is %s.", v, includeTags)
		}
	}
	withTags := len(req.Include) > 0
	static := s.staticFinder(r.Context(), clusterName(req.Cluster))
	tasks, failures := []taskOut{}, []failure{}
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		for _, ref := range req.Tasks {
			t, err := s.findTask(tx, cl.Name, ref)
			if errors.Is(err, errNoRecord) {
				if st := static(ref); st != nil {
					tasks = append(tasks, s.staticOut(st))
					continue
				}
				arn := ref
				if !strings.HasPrefix(arn, "arn:") {
					arn = s.arn(fmt.Sprintf("task/%s/%s", cl.Name, ref))
				}
				failures = append(failures, failure{Arn: arn, Reason: "MISSING"})
				continue
			}
			if err != nil {
				return err
			}
			tasks = append(tasks, s.taskOut(t))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !withTags {
		for i := range tasks {
			tasks[i].Tags = nil
		}
	}
	return map[string]any{"tasks": tasks, "failures": failures}, nil
}

type listTasksRequest struct {
	Cluster           string `json:"cluster"`
	Family            string `json:"family"`
	DesiredStatus     string `json:"desiredStatus"`
	ContainerInstance string `json:"containerInstance"`
	StartedBy         string `json:"startedBy"`
}

// listTasks lists the ARNs of the tasks of this control plane and of the static tasks the agent
// runs that match the filters, oldest first.
func (s *Server) listTasks(r *http.Request, req *listTasksRequest) (any, error) {
	desired := task.TaskRunning
	if req.DesiredStatus != "" {
		var err error
		if desired, err = parseTaskStatus(strings.ToUpper(req.DesiredStatus)); err != nil {
			return nil, invalidParameter("desiredStatus must be one of RUNNING, PENDING, STOPPED.")
		}
	}
	type listed struct {
		arn     string
		created time.Time
	}
	var tasks []listed
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		// Only a task not STOPPED can be desired RUNNING: those need not read the stopped ones.
		visit := func(fn func(*taskRecord) error) error { return eachLive(tx, s.badRecord, fn) }
		if desired == task.TaskStopped {
			visit = func(fn func(*taskRecord) error) error { return each(tx, bucketTasks, "", s.badRecord, fn) }
		}
		return visit(func(t *taskRecord) error {
			if t.ClusterName == cl.Name && req.matches(desired, t.Family, t.StartedBy, t.ContainerInstanceArn, t.DesiredStatus, t.LastStatus) {
				tasks = append(tasks, listed{t.Arn, t.CreatedAt})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for _, st := range static {
		t := st.Task
		if req.matches(desired, t.Family, StaticStartedBy, st.ContainerInstanceArn, t.DesiredStatus, t.KnownStatus) {
			tasks = append(tasks, listed{t.Arn, t.CreatedAt})
		}
	}
	slices.SortStableFunc(tasks, func(a, b listed) int { return a.created.Compare(b.created) })
	arns := make([]string, 0, len(tasks))
	for _, t := range tasks {
		arns = append(arns, t.arn)
	}
	return map[string]any{"taskArns": arns}, nil
}

// matches reports whether a task of the request's cluster, with this family, startedBy, container
// instance and statuses, passes the request's other filters, desired being the desiredStatus it asks
// for. ECS lists PENDING tasks under desired status RUNNING; PENDING (task.TaskNone here) asks for
// tasks desired RUNNING that do not run yet.
func (req *listTasksRequest) matches(desired task.TaskStatus, family, startedBy, instance string, desiredStatus, lastStatus task.TaskStatus) bool {
	switch {
	case req.Family != "" && family != req.Family,
		req.StartedBy != "" && startedBy != req.StartedBy,
		req.ContainerInstance != "" && lastSegment(instance) != lastSegment(req.ContainerInstance):
		return false
	case desired == task.TaskNone:
		return desiredStatus == task.TaskRunning && lastStatus < task.TaskRunning
	}
	return desiredStatus == desired
}

// State changes reported by the agent.

type containerStateChange struct {
	ContainerName   string           `json:"containerName"`
	ImageDigest     string           `json:"imageDigest"`
	RuntimeID       string           `json:"runtimeId"`
	Status          string           `json:"status"`
	ExitCode        *int             `json:"exitCode"`
	Reason          string           `json:"reason"`
	NetworkBindings []networkBinding `json:"networkBindings"`
}

type submitTaskStateChangeRequest struct {
	Cluster            string                 `json:"cluster"`
	Task               string                 `json:"task"`
	Status             string                 `json:"status"`
	Reason             string                 `json:"reason"`
	Containers         []containerStateChange `json:"containers"`
	ManagedAgents      []managedAgentChange   `json:"managedAgents"`
	PullStartedAt      timestamp              `json:"pullStartedAt"`
	PullStoppedAt      timestamp              `json:"pullStoppedAt"`
	ExecutionStoppedAt timestamp              `json:"executionStoppedAt"`
}

// managedAgentChange is a ManagedAgentStateChange of SubmitTaskStateChange.
type managedAgentChange struct {
	ContainerName    string `json:"containerName"`
	ManagedAgentName string `json:"managedAgentName"`
	Status           string `json:"status"`
	Reason           string `json:"reason"`
}

type submitContainerStateChangeRequest struct {
	Cluster string `json:"cluster"`
	Task    string `json:"task"`
	containerStateChange
}

var ack = map[string]string{"acknowledgment": "true"}

// updateTask applies fn to the task the agent reported on, in one transaction. The agent reports
// the changes of many tasks at once (20 tasks launched together send 40 and more): reports that
// arrive while one commits share the next transaction, and so one fsync, while a lone report commits
// at once (boltgroup; bolt's Batch made each wait 10 ms for company). A shared transaction that fails
// runs each of its reports again alone, so the function reads the task afresh each time.
func (s *Server) updateTask(cluster, ref string, fn func(t *taskRecord, now time.Time)) (*taskRecord, error) {
	var t *taskRecord
	err := s.reports.Update(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, cluster)
		if err != nil {
			return err
		}
		t, err = s.findTask(tx, cl.Name, ref)
		if errors.Is(err, errNoRecord) {
			return invalidParameter("The referenced task was not found: %s", ref)
		}
		if err != nil {
			return err
		}
		now := s.clock.Now()
		fn(t, now)
		t.Version++
		if _, err := expire(tx, now, expireBatch); err != nil {
			return err
		}
		return saveTask(tx, t)
	})
	return t, err
}

func (s *Server) submitTaskStateChange(_ *http.Request, req *submitTaskStateChangeRequest) (any, error) {
	if req.Task == "" {
		return nil, invalidParameter("task can not be blank.")
	}
	t, err := s.updateTask(req.Cluster, req.Task, func(t *taskRecord, now time.Time) {
		for _, cc := range req.Containers {
			applyContainerChange(t, &cc)
		}
		for _, mc := range req.ManagedAgents {
			applyManagedAgentChange(t, &mc, now)
		}
		if !req.PullStartedAt.IsZero() {
			t.PullStartedAt = req.PullStartedAt.time()
		}
		if !req.PullStoppedAt.IsZero() {
			t.PullStoppedAt = req.PullStoppedAt.time()
		}
		if !req.ExecutionStoppedAt.IsZero() {
			t.ExecutionStoppedAt = req.ExecutionStoppedAt.time()
		}
		status, err := parseTaskStatus(req.Status)
		if err != nil || status <= t.LastStatus {
			return // a status ECS does not name, or a late report: the task keeps its status
		}
		t.LastStatus = status
		switch status {
		case task.TaskRunning:
			if t.StartedAt.IsZero() {
				t.StartedAt = now
			}
		case task.TaskStopped:
			if t.StoppedReason == "" {
				t.StoppedReason = req.Reason
				t.StopCode = "TaskFailedToStart"
				if !t.StartedAt.IsZero() || slices.ContainsFunc(t.Containers, func(c containerRecord) bool { return c.Essential && c.ExitCode != nil }) {
					t.StopCode = "EssentialContainerExited"
					if t.StoppedReason == "" {
						t.StoppedReason = "Essential container in task exited"
					}
				}
			}
			// The agent stopped it itself: nothing more to send.
			t.AckedDesired = task.TaskStopped
			s.markStopped(t, now)
		}
	})
	if err != nil {
		return nil, err
	}
	s.log.Debug("task state change", "task", t.Arn, "status", req.Status, "last_status", taskStatusName(t.LastStatus))
	return ack, nil
}

func (s *Server) submitContainerStateChange(_ *http.Request, req *submitContainerStateChangeRequest) (any, error) {
	if req.Task == "" || req.ContainerName == "" {
		return nil, invalidParameter("task and containerName are required.")
	}
	_, err := s.updateTask(req.Cluster, req.Task, func(t *taskRecord, _ time.Time) {
		applyContainerChange(t, &req.containerStateChange)
	})
	if err != nil {
		return nil, err
	}
	return ack, nil
}

// applyContainerChange records a reported container state on the container of t it names.
func applyContainerChange(t *taskRecord, cc *containerStateChange) {
	i := slices.IndexFunc(t.Containers, func(c containerRecord) bool { return c.Name == cc.ContainerName })
	if i < 0 {
		return
	}
	c := &t.Containers[i]
	if status, err := parseContainerStatus(cc.Status); err == nil && status > c.LastStatus {
		c.LastStatus = status
	}
	if cc.RuntimeID != "" {
		c.RuntimeID = cc.RuntimeID
	}
	if cc.ImageDigest != "" {
		c.ImageDigest = cc.ImageDigest
	}
	if cc.ExitCode != nil {
		c.ExitCode = new(*cc.ExitCode)
	}
	if cc.Reason != "" {
		c.Reason = cc.Reason
	}
	if len(cc.NetworkBindings) > 0 {
		c.NetworkBindings = slices.Clone(cc.NetworkBindings)
	}
}

// applyManagedAgentChange records a reported managed agent state on the container of t it names,
// as ECS shows it: RUNNING sets lastStartedAt to when it was reported. A container or agent the task
// does not have, or a status ECS does not name, is ignored.
func applyManagedAgentChange(t *taskRecord, mc *managedAgentChange, now time.Time) {
	i := slices.IndexFunc(t.Containers, func(c containerRecord) bool { return c.Name == mc.ContainerName })
	if i < 0 || !slices.Contains([]string{"PENDING", "RUNNING", "STOPPED"}, mc.Status) {
		return
	}
	c := &t.Containers[i]
	j := slices.IndexFunc(c.ManagedAgents, func(a managedAgentRecord) bool { return a.Name == mc.ManagedAgentName })
	if j < 0 {
		return
	}
	a := &c.ManagedAgents[j]
	a.LastStatus, a.Reason = mc.Status, mc.Reason
	if mc.Status == "RUNNING" {
		a.LastStartedAt = now
	}
}

type submitAttachmentStateChangesRequest struct {
	Cluster     string            `json:"cluster"`
	Attachments []json.RawMessage `json:"attachments"`
}

// submitAttachmentStateChanges acknowledges ENI attachment reports; local mode attaches no ENIs.
func (s *Server) submitAttachmentStateChanges(_ *http.Request, req *submitAttachmentStateChangesRequest) (any, error) {
	s.log.Debug("attachment state changes", "count", len(req.Attachments))
	return ack, nil
}

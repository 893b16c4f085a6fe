package localcp

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
)

// stopOnAgent reports the task at arn STOPPED, as the agent does when its container exits.
func stopOnAgent(t *testing.T, h *harness, arn string) {
	t.Helper()
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": arn, "status": "STOPPED", "reason": "done",
		"containers": []map[string]any{{"containerName": "app", "status": "STOPPED", "exitCode": 0}}}))
}

// TestStoppedTasksExpireAfterAnHour: as ECS, a stopped task stays visible for an hour after it
// stopped and is then forgotten, by ARN and by ID, also across a restart; a task that runs is never
// forgotten.
func TestStoppedTasksExpireAfterAnHour(t *testing.T) {
	h := newHarness(t)
	registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	stopped := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	running := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": running, "status": "RUNNING"}))
	stopOnAgent(t, h, stopped)
	id := stopped[strings.LastIndexByte(stopped, '/')+1:]

	h.clock.Advance(59 * time.Minute)
	h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": running, "status": "RUNNING"})) // a write: expiry runs
	out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{stopped, id}}))
	assert.Len(t, out["tasks"], 2, "59 minutes after it stopped, it is still described")
	assert.Equal(t, []any{stopped}, h.ok("ListTasks", `{"desiredStatus":"STOPPED"}`)["taskArns"])

	h.clock.Advance(2 * time.Minute)
	h.restart()
	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{stopped, id, running}}))
	require.Len(t, out["tasks"], 1, "61 minutes after it stopped, it is forgotten: %v", out)
	assert.Equal(t, running, at(t, out, "tasks", 0, "taskArn"))
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"))
	assert.Equal(t, "MISSING", at(t, out, "failures", 1, "reason"))
	assert.Empty(t, h.ok("ListTasks", `{"desiredStatus":"STOPPED"}`)["taskArns"])
	h.fails("StopTask", mustJSON(map[string]any{"task": id}), "InvalidParameterException")
	err := h.srv.db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketLive, bucketTaskIDs, bucketExpiry} {
			assert.Nil(t, tx.Bucket(b).Get([]byte(stopped)), "%s holds no entry of the forgotten task", b)
		}
		assert.Nil(t, tx.Bucket(bucketTaskIDs).Get([]byte(id)))
		assert.Equal(t, 0, tx.Bucket(bucketExpiry).Stats().KeyN, "nothing left to expire")
		return nil
	})
	require.NoError(t, err)

	h.clock.Advance(48 * time.Hour)
	h.restart()
	assert.Equal(t, []any{running}, h.ok("ListTasks", `{}`)["taskArns"], "a running task is never forgotten")
}

// storeStoppedTasks writes n stopped copies of the task at tmpl straight into the store, each
// stopped ago before the harness's clock, as n tasks run and stopped would leave them.
func storeStoppedTasks(t *testing.T, h *harness, tmpl string, n int, ago time.Duration) {
	t.Helper()
	base := &taskRecord{}
	require.NoError(t, h.srv.db.View(func(tx *bolt.Tx) error { return get(tx, bucketTasks, tmpl, base) }))
	h.srv.db.NoSync = true // a test's file: what matters is what is in it
	defer func() { h.srv.db.NoSync = false }()
	const batch = 2000 // bbolt copies a transaction's dirty pages each time the file grows
	for from := 0; from < n; from += batch {
		require.NoError(t, h.srv.db.Update(func(tx *bolt.Tx) error {
			for i := from; i < min(from+batch, n); i++ {
				r := *base
				r.ID = fmt.Sprintf("%032x", i+1)
				r.Arn = h.srv.arn("task/default/" + r.ID)
				r.LastStatus, r.DesiredStatus, r.AckedDesired = task.TaskStopped, task.TaskStopped, task.TaskStopped
				r.StoppedAt = h.clock.Now().Add(-ago)
				if err := saveTask(tx, &r); err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

// TestCallsStayFastWith40000StoppedTasks: with 40,000 stopped tasks in history (within the hour ECS
// keeps them), the calls of a running host (ListTasks, DescribeClusters, DescribeContainerInstances,
// RunTask and StopTask by ID with their ACS deliveries, the agent's state changes) read only the tasks
// that are not stopped. A control plane that reads every task per call takes seconds for each of
// these; the bound is generous, for a loaded machine.
func TestCallsStayFastWith40000StoppedTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 40,000 task records")
	}
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	tmpl := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	storeStoppedTasks(t, h, tmpl, 40000, 10*time.Minute)
	h.restart() // the file is written out before the clock starts
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)

	start := time.Now()
	agent := dialACS(t, ts, ci)
	agent.ack(agent.payload())
	for range 3 {
		assert.Equal(t, []any{tmpl}, h.ok("ListTasks", `{}`)["taskArns"])
		assert.Len(t, h.ok("ListTasks", `{"family":"sleep","desiredStatus":"RUNNING"}`)["taskArns"], 1)
		out := h.ok("DescribeClusters", `{"clusters":["default"]}`)
		assert.EqualValues(t, 1, at(t, out, "clusters", 0, "pendingTasksCount"))
		out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
		assert.EqualValues(t, 1, at(t, out, "containerInstances", 0, "pendingTasksCount"))
		arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
		p := agent.payload()
		require.Len(t, p.Tasks, 1)
		agent.ack(p)
		waitAcked(t, h, arn, task.TaskRunning)
		h.ok("SubmitTaskStateChange", mustJSON(map[string]any{"task": arn, "status": "RUNNING"}))
		h.ok("StopTask", mustJSON(map[string]any{"task": arn[strings.LastIndexByte(arn, '/')+1:]}))
		p = agent.payload()
		require.Len(t, p.Tasks, 1)
		agent.ack(p)
		waitAcked(t, h, arn, task.TaskStopped)
		stopOnAgent(t, h, arn)
	}
	elapsed := time.Since(start)
	t.Logf("27 calls and 7 deliveries took %v", elapsed)
	out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{fmt.Sprintf("%032x", 40000)}}))
	assert.Equal(t, "STOPPED", at(t, out, "tasks", 0, "lastStatus"), "the history is still there")
	assert.Less(t, elapsed, 5*time.Second, "27 calls and 7 deliveries with 40,000 stopped tasks in history")
}

// TestUpgradeFromSchema1BuildsTheIndexes: a version 1 file (no indexes) is upgraded in place: its
// live tasks are found by ID and counted, and its long-stopped tasks are forgotten.
func TestUpgradeFromSchema1BuildsTheIndexes(t *testing.T) {
	h := newHarness(t)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	live := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	old := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	stopOnAgent(t, h, old)
	require.NoError(t, h.srv.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketLive, bucketTaskIDs, bucketExpiry, bucketClientTokens} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("1"))
	}))
	h.clock.Advance(2 * time.Hour)
	h.restart()

	id := live[strings.LastIndexByte(live, '/')+1:]
	out := h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{id, old}}))
	require.Len(t, out["tasks"], 1)
	assert.Equal(t, live, at(t, out, "tasks", 0, "taskArn"))
	assert.Equal(t, "MISSING", at(t, out, "failures", 0, "reason"), "stopped two hours ago: forgotten")
	out = h.ok("DescribeContainerInstances", mustJSON(map[string]any{"containerInstances": []string{ci}}))
	assert.EqualValues(t, 1, at(t, out, "containerInstances", 0, "pendingTasksCount"))
	require.NoError(t, h.srv.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, "2", string(tx.Bucket(bucketMeta).Get(keySchemaVersion)))
		return nil
	}))
}

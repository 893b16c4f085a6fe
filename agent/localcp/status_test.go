package localcp

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func TestTaskStatusNames(t *testing.T) {
	tests := []struct {
		status task.TaskStatus
		name   string
	}{
		{task.TaskNone, "PENDING"},
		{task.TaskPulled, "PENDING"},
		{task.TaskCreated, "PENDING"},
		{task.TaskRunning, "RUNNING"},
		{task.TaskStopped, "STOPPED"},
	}
	for _, tc := range tests {
		t.Run(tc.status.String(), func(t *testing.T) {
			assert.Equal(t, tc.name, taskStatusName(tc.status))
		})
	}
	for name, want := range map[string]task.TaskStatus{"PENDING": task.TaskNone, "RUNNING": task.TaskRunning, "STOPPED": task.TaskStopped} {
		got, err := parseTaskStatus(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"", "NONE", "PULLED", "CREATED", "running", "STOPPING", "PROVISIONING"} {
		_, err := parseTaskStatus(name)
		assert.Error(t, err, "%q is not an ECS task status", name)
	}
}

func TestContainerStatusNames(t *testing.T) {
	tests := []struct {
		status task.ContainerStatus
		name   string
	}{
		{task.ContainerNone, "PENDING"},
		{task.ContainerPulled, "PENDING"},
		{task.ContainerCreated, "PENDING"},
		{task.ContainerRunning, "RUNNING"},
		{task.ContainerResourcesProvisioned, "RUNNING"},
		{task.ContainerStopped, "STOPPED"},
	}
	for _, tc := range tests {
		t.Run(tc.status.String(), func(t *testing.T) {
			assert.Equal(t, tc.name, containerStatusName(tc.status))
		})
	}
	for name, want := range map[string]task.ContainerStatus{"PENDING": task.ContainerNone, "RUNNING": task.ContainerRunning, "STOPPED": task.ContainerStopped} {
		got, err := parseContainerStatus(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"", "NONE", "PULLED", "CREATED", "RESOURCES_PROVISIONED", "stopped", "STOPPING"} {
		_, err := parseContainerStatus(name)
		assert.Error(t, err, "%q is not an ECS container status", name)
	}
}

// TestTaskRecordStatuses pins how records store statuses: by ECS name, as records written before
// the statuses were the task model's did, so that those still load.
func TestTaskRecordStatuses(t *testing.T) {
	const stored = `{"arn":"a","id":"1","clusterName":"default","taskDefinitionArn":"td","family":"f","revision":1,
		"definition":{},"group":"family:f","version":2,"lastStatus":"PENDING","desiredStatus":"STOPPED",
		"createdAt":"2025-03-01T12:00:00Z","containers":[{"arn":"c","name":"app","image":"busybox","essential":true,"lastStatus":"RUNNING"}]}`
	var rec taskRecord
	require.NoError(t, json.Unmarshal([]byte(stored), &rec))
	assert.Equal(t, task.TaskNone, rec.LastStatus)
	assert.Equal(t, task.TaskStopped, rec.DesiredStatus)
	assert.Equal(t, task.TaskNone, rec.AckedDesired, "never acked")
	assert.Equal(t, "family:f", rec.Group)
	require.Len(t, rec.Containers, 1)
	assert.Equal(t, "app", rec.Containers[0].Name)
	assert.Equal(t, task.ContainerRunning, rec.Containers[0].LastStatus)

	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	assert.JSONEq(t, stored, string(b), "written back unchanged")

	rec.AckedDesired = task.TaskStopped
	rec.LastStatus = task.TaskRunning
	rec.Containers[0].LastStatus = task.ContainerStopped
	b, err = json.Marshal(&rec)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	assert.Equal(t, "RUNNING", fields["lastStatus"])
	assert.Equal(t, "STOPPED", fields["ackedDesired"])
	assert.Equal(t, "STOPPED", at(t, fields, "containers", 0, "lastStatus"))
	var again taskRecord
	require.NoError(t, json.Unmarshal(b, &again))
	assert.Equal(t, rec, again)

	for name, bad := range map[string]string{
		"task lastStatus":      `{"lastStatus":"PULLED","desiredStatus":"RUNNING"}`,
		"task desiredStatus":   `{"lastStatus":"PENDING","desiredStatus":"NONE"}`,
		"ackedDesired":         `{"lastStatus":"PENDING","desiredStatus":"RUNNING","ackedDesired":"BOGUS"}`,
		"container lastStatus": `{"lastStatus":"PENDING","desiredStatus":"RUNNING","containers":[{"name":"app","lastStatus":"CREATED"}]}`,
	} {
		var r taskRecord
		assert.Error(t, json.Unmarshal([]byte(bad), &r), name)
	}
}

package localcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acstranslate"
	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// TestPayloadRoundTrip is the contract between this package and agent/acstranslate: a task definition
// sent in a PayloadMessage and decoded as the agent's ACS client does gives the same task as the
// definition itself.
func TestPayloadRoundTrip(t *testing.T) {
	for name, body := range map[string]string{"web": webRequest(t), "full": goldenFullDef, "sleep": sleepDef} {
		t.Run(name, func(t *testing.T) {
			def, err := taskdef.Parse([]byte(body))
			require.NoError(t, err)
			def.Revision = 3
			canon, err := taskdef.Canonical(def)
			require.NoError(t, err)
			rec := &taskRecord{Arn: "arn:aws:ecs:local:000000000000:task/default/0123", Revision: 3, Definition: canon}

			sent, err := acsTaskOf(rec, task.TaskRunning)
			require.NoError(t, err)
			wire, err := acswire.Encode(&acswire.PayloadMessage{MessageID: "m", SeqNum: 1, Tasks: []*acswire.Task{sent}})
			require.NoError(t, err)
			m, err := acswire.Decode(wire)
			require.NoError(t, err)
			got, ok := m.(*acswire.PayloadMessage)
			require.True(t, ok, "want a PayloadMessage, got %T", m)
			require.Len(t, got.Tasks, 1)
			back, err := acstranslate.Definition(got.Tasks[0])
			require.NoError(t, err)
			require.NoError(t, back.Validate())

			assert.Equal(t, def.NewTask(rec.Arn), back.NewTask(rec.Arn))

			for _, desired := range []task.TaskStatus{task.TaskRunning, task.TaskStopped} {
				sent, err := acsTaskOf(rec, desired)
				require.NoError(t, err)
				accepted, err := acstranslate.TranslateTask(sent)
				require.NoError(t, err)
				assert.Equal(t, desired, accepted.Task.DesiredStatus)
			}
		})
	}
}

// TestPayloadExecutionRolePulls: a definition with an executionRoleArn reaches the agent as Amazon
// ECS sends it, the role without keys and each container with registryAuthentication
// {type: ecr, useExecutionRole: true}, and translates to the pulls the definition asks for.
func TestPayloadExecutionRolePulls(t *testing.T) {
	const role = "arn:aws:iam::012345678901:role/exec"
	def, err := taskdef.Parse([]byte(`{"family": "ecr", "executionRoleArn": "` + role + `", "containerDefinitions": [
		{"name": "app", "image": "012345678901.dkr.ecr.us-east-1.amazonaws.com/app:1", "memory": 16},
		{"name": "side", "image": "busybox", "memory": 16, "essential": false}]}`))
	require.NoError(t, err)
	canon, err := taskdef.Canonical(def)
	require.NoError(t, err)
	sent, err := acsTaskOf(&taskRecord{Arn: "arn:aws:ecs:local:000000000000:task/default/0456", Revision: 1, Definition: canon}, task.TaskRunning)
	require.NoError(t, err)
	require.NotNil(t, sent.ExecutionRoleCredentials)
	assert.Equal(t, acswire.IAMRoleCredentials{RoleArn: role}, *sent.ExecutionRoleCredentials)
	for _, c := range sent.Containers {
		assert.Equal(t, &acswire.RegistryAuthentication{Type: "ecr", ECRAuthData: &acswire.ECRAuthData{UseExecutionRole: true}}, c.RegistryAuthentication, c.Name)
	}
	accepted, err := acstranslate.TranslateTask(sent)
	require.NoError(t, err)
	want := def.NewTask(sent.Arn)
	for i, c := range accepted.Task.Containers {
		assert.Equal(t, want.Containers[i].ECRAuth, c.ECRAuth, c.Name)
	}
}

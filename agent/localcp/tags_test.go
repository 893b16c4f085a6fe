package localcp

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListTagsForResource: a task has the tags RunTask gave it and the launch type it named, a
// container instance the tags it registered with; the ACS payload carries the launch type and the
// container ARNs DescribeTasks shows.
func TestListTagsForResource(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	out := h.ok("RegisterContainerInstance", `{"cluster":"default","tags":[{"key":"rack","value":"r12"}]}`)
	ci := at(t, out, "containerInstance", "containerInstanceArn").(string)
	h.ok("RegisterTaskDefinition", sleepDef)
	out = h.ok("RunTask", `{"taskDefinition":"sleep","launchType":"external","tags":[{"key":"team","value":"infra"},{"key":"env","value":"dev"}]}`)
	tagged := at(t, out, "tasks", 0, "taskArn").(string)
	assert.Equal(t, "EXTERNAL", at(t, out, "tasks", 0, "launchType"))
	assert.Equal(t, []any{map[string]any{"key": "team", "value": "infra"}, map[string]any{"key": "env", "value": "dev"}},
		at(t, out, "tasks", 0, "tags"))
	containerArn := at(t, out, "tasks", 0, "containers", 0, "containerArn").(string)
	plain := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)

	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": tagged}))
	assert.Equal(t, map[string]any{"tags": []any{map[string]any{"key": "team", "value": "infra"}, map[string]any{"key": "env", "value": "dev"}}}, out)
	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": plain}))
	assert.Equal(t, map[string]any{"tags": []any{}}, out)
	out = h.ok("ListTagsForResource", mustJSON(map[string]any{"resourceArn": ci}))
	assert.Equal(t, map[string]any{"tags": []any{map[string]any{"key": "rack", "value": "r12"}}}, out)

	for _, arn := range []string{"arn:aws:ecs:local:000000000000:task/default/ffff", "arn:aws:ecs:local:000000000000:cluster/default", ""} {
		msg := h.fails("ListTagsForResource", mustJSON(map[string]any{"resourceArn": arn}), "InvalidParameterException")
		assert.NotEmpty(t, msg, arn)
	}

	agent := dialACS(t, ts, ci)
	p := agent.payload()
	require.Len(t, p.Tasks, 2)
	for _, tk := range p.Tasks {
		if tk.Arn == tagged {
			assert.Equal(t, "EXTERNAL", tk.LaunchType)
			assert.Equal(t, containerArn, tk.Containers[0].ContainerArn)
		} else {
			assert.Equal(t, "EC2", tk.LaunchType, "RunTask named none")
			assert.Contains(t, tk.Containers[0].ContainerArn, ":container/default/")
		}
	}
}

// TestDescribeTasksIncludeTags: DescribeTasks shows a task's tags only when include names TAGS, as
// ECS does; RunTask's answer has them; another include value is an InvalidParameterException.
func TestDescribeTasksIncludeTags(t *testing.T) {
	h := newHarness(t)
	h.ok("RegisterTaskDefinition", sleepDef)
	out := h.ok("RunTask", `{"taskDefinition":"sleep","tags":[{"key":"team","value":"infra"}]}`)
	tags := []any{map[string]any{"key": "team", "value": "infra"}}
	assert.Equal(t, tags, at(t, out, "tasks", 0, "tags"))
	arn := at(t, out, "tasks", 0, "taskArn").(string)

	out = h.ok("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}, "include": []string{"TAGS"}}))
	assert.Equal(t, tags, at(t, out, "tasks", 0, "tags"))
	for _, req := range []map[string]any{{"tasks": []string{arn}}, {"tasks": []string{arn}, "include": []string{}}} {
		out = h.ok("DescribeTasks", mustJSON(req))
		assert.NotContains(t, at(t, out, "tasks", 0), "tags", "%v", req)
		assert.Equal(t, arn, at(t, out, "tasks", 0, "taskArn"))
	}
	msg := h.fails("DescribeTasks", mustJSON(map[string]any{"tasks": []string{arn}, "include": []string{"TAGS", "tags"}}), "InvalidParameterException")
	assert.Equal(t, `include: "tags" is not a valid value; the only one is TAGS.`, msg)
}

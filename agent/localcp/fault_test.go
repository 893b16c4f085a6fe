package localcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// A task definition with enableFaultInjection is accepted in awsvpc and host mode and kept:
// DescribeTaskDefinition shows it, and the task ACS sends carries it. In bridge mode it is refused,
// naming the field, as ECS refuses it.
func TestEnableFaultInjectionKept(t *testing.T) {
	h := newHarness(t)
	for _, mode := range []string{"awsvpc", "host"} {
		h.ok("RegisterTaskDefinition", `{"family":"chaos-`+mode+`","networkMode":"`+mode+`","enableFaultInjection":true,
			"containerDefinitions":[{"name":"app","image":"busybox","memory":32}]}`)
		out := h.ok("DescribeTaskDefinition", `{"taskDefinition":"chaos-`+mode+`"}`)
		assert.Equal(t, true, at(t, out, "taskDefinition", "enableFaultInjection"), mode)
	}
	out := h.ok("DescribeTaskDefinition", mustJSON(map[string]any{"taskDefinition": "chaos-host"}))
	canon := mustJSON(out["taskDefinition"])
	sent, err := acsTaskOf(&taskRecord{Arn: "arn:aws:ecs:local:000000000000:task/default/0789", Revision: 1, Definition: []byte(canon)}, task.TaskRunning)
	require.NoError(t, err)
	assert.True(t, sent.EnableFaultInjection)

	msg := h.fails("RegisterTaskDefinition", `{"family":"chaos-bridge","enableFaultInjection":true,
		"containerDefinitions":[{"name":"app","image":"busybox","memory":32}]}`, "ClientException")
	assert.Contains(t, msg, "enableFaultInjection: only allowed with networkMode awsvpc or host, not bridge")
}

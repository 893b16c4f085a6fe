package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/introspection"
)

func TestPrintTasks(t *testing.T) {
	code, restarts, cpu, mem := 0, 2, 12.345, 20.5
	var out bytes.Buffer
	printTasks(&out, []introspection.TaskResponse{{
		Arn: "arn:aws:ecs:local:000000000000:task/default/static-web-0123456789ab", Family: "web", Version: "1",
		DesiredStatus: "RUNNING", KnownStatus: "RUNNING",
		Containers: []introspection.ContainerResponse{
			{Name: "web", KnownStatus: "RUNNING", DockerID: "0123456789abcdef", CPUPercent: &cpu, MemoryMiB: &mem, Ports: []introspection.PortResponse{
				{ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}, {ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}}},
			{Name: "init", KnownStatus: "STOPPED", ExitCode: &code},
			{Name: "worker", KnownStatus: "RUNNING", RestartCount: &restarts},
			{Name: "flaky", KnownStatus: "STOPPED", ExitCode: &code, RestartCount: &restarts},
		},
	}, {Arn: "arn:aws:ecs:local:000000000000:task/default/big", Family: "big", Version: "2", DesiredStatus: "RUNNING", KnownStatus: "PENDING",
		PendingReason: "waiting for host resources: memory", Containers: []introspection.ContainerResponse{{Name: "hog", KnownStatus: "NONE"}}},
		{Arn: "arn:aws:ecs:local:000000000000:task/default/done", Family: "done", Version: "1", KnownStatus: "STOPPED"}}, nil)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Len(t, lines, 7)
	assert.Regexp(t, `^TASK\s+FAMILY:REV\s+DESIRED\s+KNOWN\s+CONTAINER\s+STATUS\s+CPU %\s+MEM\s+DOCKER ID\s+PORTS\s+REASON$`, lines[0])
	assert.Regexp(t, `^static-web-0123456789ab\s+web:1\s+RUNNING\s+RUNNING\s+web\s+RUNNING\s+12\.3%\s+20\.5MiB\s+0123456789ab\s+8080->8080/tcp\s*$`, lines[1])
	assert.Regexp(t, `^\s+init\s+STOPPED \(exit 0\)\s+-\s+-\s+-\s*$`, lines[2])
	assert.Regexp(t, `^\s+worker\s+RUNNING \(restarts 2\)\s+-\s+-\s+-\s*$`, lines[3])
	assert.Regexp(t, `^\s+flaky\s+STOPPED \(exit 0, restarts 2\)\s+-\s+-\s+-\s*$`, lines[4])
	assert.Regexp(t, `^big\s+big:2\s+RUNNING\s+PENDING\s+hog\s+NONE\s+-\s+-\s+-\s+waiting for host resources: memory$`, lines[5])
	assert.Regexp(t, `^done\s+done:1\s+-\s+STOPPED\s+-\s+-`, lines[6], "no desired status: a dash")
}

func TestPrintTasksUnknownContainers(t *testing.T) {
	tasks := []introspection.TaskResponse{{Arn: "arn:aws:ecs:local:000000000000:task/default/web", Family: "web", Version: "1",
		DesiredStatus: "RUNNING", KnownStatus: "RUNNING", Containers: []introspection.ContainerResponse{{Name: "web", KnownStatus: "RUNNING"}}}}
	unknown := []introspection.UnknownContainerResponse{
		{DockerID: "feedfacefeedface0001", DockerName: "ecs-ghost-1-app-9a8b", TaskArn: "arn:aws:ecs:local:000000000000:task/default/ghost",
			Name: "app", Image: "testapp:latest", Since: time.Date(2026, 11, 30, 14, 0, 0, 0, time.FixedZone("CET", 3600))},
		{DockerID: "feedfacefeedface0002", DockerName: "hand-made", Image: "busybox"},
	}
	var out bytes.Buffer
	printTasks(&out, tasks, unknown)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 8, out.String())
	assert.Regexp(t, `^web\s+web:1\s+RUNNING\s+RUNNING\s+web\s+RUNNING`, lines[1])
	assert.Empty(t, lines[2], "a blank line after the task table")
	assert.Regexp(t, `^UNKNOWN CONTAINERS \(2\): left running because the agent has no record of them`, lines[3])
	assert.Contains(t, lines[4], "docker rm -f <id>")
	assert.Regexp(t, `^DOCKER ID\s+NAME\s+TASK\s+CONTAINER\s+IMAGE\s+RUNNING SINCE$`, lines[5])
	assert.Regexp(t, `^feedfacefeed\s+ecs-ghost-1-app-9a8b\s+ghost\s+app\s+testapp:latest\s+2026-11-30T13:00:00Z$`, lines[6])
	assert.Regexp(t, `^feedfacefeed\s+hand-made\s+-\s+-\s+busybox\s+-$`, lines[7])

	out.Reset()
	printTasks(&out, tasks, nil)
	assert.NotContains(t, out.String(), "UNKNOWN", "nothing about unknown containers when there are none")
	assert.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 2)
}

// TestPrintTasksManagedAgent: a container's ECS Exec agent shows in its STATUS, and a STOPPED one's
// reason in REASON when the container has none.
func TestPrintTasksManagedAgent(t *testing.T) {
	var out bytes.Buffer
	printTasks(&out, []introspection.TaskResponse{{Arn: "arn:aws:ecs:local:000000000000:task/default/exec", Family: "exec", Version: "1",
		DesiredStatus: "RUNNING", KnownStatus: "RUNNING", Containers: []introspection.ContainerResponse{
			{Name: "app", KnownStatus: "RUNNING", ManagedAgents: []introspection.ManagedAgentResponse{{Name: "ExecuteCommandAgent", LastStatus: "RUNNING"}}},
			{Name: "side", KnownStatus: "RUNNING", ManagedAgents: []introspection.ManagedAgentResponse{{Name: "ExecuteCommandAgent", LastStatus: "STOPPED",
				Reason: "ExecuteCommandAgent Initialization failed - /deps/bin/3.0/ssm-session-worker: missing"}}},
		}}}, nil)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Regexp(t, `\sapp\s+RUNNING \(exec RUNNING\)\s+-\s+-\s+-\s*$`, lines[1])
	assert.Regexp(t, `^\s+side\s+RUNNING \(exec STOPPED\)\s+-\s+-\s+-\s+ECS Exec: ExecuteCommandAgent Initialization failed - /deps/bin/3.0/ssm-session-worker: missing$`, lines[2])
}

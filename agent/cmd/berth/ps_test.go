package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/berth-agent/berth/agent/handlers"
)

func TestPrintTasks(t *testing.T) {
	code := 0
	var out bytes.Buffer
	printTasks(&out, []handlers.TaskResponse{{
		Arn: "arn:aws:ecs:local:000000000000:task/default/static-web-0123456789ab", Family: "web", Version: "1",
		DesiredStatus: "RUNNING", KnownStatus: "RUNNING",
		Containers: []handlers.ContainerResponse{
			{Name: "web", KnownStatus: "RUNNING", DockerID: "0123456789abcdef", Ports: []handlers.PortResponse{
				{ContainerPort: 8080, HostPort: 8080, Protocol: "tcp", HostIP: "0.0.0.0"}, {ContainerPort: 8080, HostPort: 8080, Protocol: "tcp", HostIP: "::"}}},
			{Name: "init", KnownStatus: "STOPPED", ExitCode: &code},
		},
	}, {Arn: "arn:aws:ecs:local:000000000000:task/default/big", Family: "big", Version: "2", DesiredStatus: "RUNNING", KnownStatus: "NONE",
		PendingReason: "waiting for host resources: memory", Containers: []handlers.ContainerResponse{{Name: "hog", KnownStatus: "NONE"}}}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Len(t, lines, 4)
	assert.Regexp(t, `^TASK\s+FAMILY:REV\s+DESIRED\s+KNOWN\s+CONTAINER\s+STATUS\s+DOCKER ID\s+PORTS\s+REASON$`, lines[0])
	assert.Regexp(t, `^static-web-0123456789ab\s+web:1\s+RUNNING\s+RUNNING\s+web\s+RUNNING\s+0123456789ab\s+8080->8080/tcp\s*$`, lines[1])
	assert.Regexp(t, `^\s+init\s+STOPPED \(exit 0\)\s+-\s*$`, lines[2])
	assert.Regexp(t, `^big\s+big:2\s+RUNNING\s+NONE\s+hog\s+NONE\s+-\s+waiting for host resources: memory$`, lines[3])
}

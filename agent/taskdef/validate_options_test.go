package taskdef

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestContainerOptionsRefused holds the ECS rules of the container options: each definition is
// refused with one error, naming the field.
func TestContainerOptionsRefused(t *testing.T) {
	const c0 = "containerDefinitions[0]."
	tests := []struct {
		name, json, want string
	}{
		{"unknown pid mode", doc(`"pidMode": "shared"`, ctr("a", "")), `pidMode: unknown pid mode "shared"`},
		{"unknown ipc mode", doc(`"ipcMode": "private"`, ctr("a", "")), `ipcMode: unknown ipc mode "private"`},
		{"links outside bridge", doc(`"networkMode": "host"`, ctr("a", ""), ctr("b", `"links": ["a"]`)),
			"containerDefinitions[1].links: only allowed with networkMode bridge, not host"},
		{"link to no container", doc("", ctr("a", `"links": ["nope:alias"]`)), c0 + `links[0]: no container named "nope"`},
		{"link to itself", doc("", ctr("a", `"links": ["a"]`)), c0 + "links[0]: a container cannot link to itself"},
		{"hostname in awsvpc", doc(`"networkMode": "awsvpc"`, ctr("a", `"hostname": "h"`)), c0 + "hostname: not allowed with networkMode awsvpc"},
		{"hostname in host mode", doc(`"networkMode": "host"`, ctr("a", `"hostname": "h"`)), c0 + "hostname: not allowed with networkMode host"},
		{"bad hostname", doc("", ctr("a", `"hostname": "a b"`)), c0 + `hostname: "a b" is not a host name`},
		{"dns in awsvpc", doc(`"networkMode": "awsvpc"`, ctr("a", `"dnsServers": ["10.0.0.2"]`)), c0 + "dnsServers: not allowed with networkMode awsvpc"},
		{"bad dns server", doc("", ctr("a", `"dnsServers": ["ns1"]`)), c0 + `dnsServers[0]: "ns1" is not an IP address`},
		{"bad extra host address", doc("", ctr("a", `"extraHosts": [{"hostname": "h", "ipAddress": "x"}]`)), c0 + `extraHosts[0].ipAddress: "x" is not an IP address`},
		{"sysctl without namespace", doc("", ctr("a", `"systemControls": [{"value": "1"}]`)), c0 + "systemControls[0].namespace: required"},
		{"net sysctl in host mode", doc(`"networkMode": "host"`, ctr("a", `"systemControls": [{"namespace": "net.core.somaxconn", "value": "1"}]`)),
			c0 + "systemControls[0].namespace: net.core.somaxconn cannot be set with networkMode host"},
		{"seccomp security option", doc("", ctr("a", `"dockerSecurityOptions": ["seccomp:unconfined"]`)), c0 + `dockerSecurityOptions[0]: "seccomp:unconfined" is not supported`},
		{"unknown capability", doc("", ctr("a", `"linuxParameters": {"capabilities": {"add": ["CAP_NET_ADMIN"]}}`)),
			c0 + `linuxParameters.capabilities.add[0]: unknown capability "CAP_NET_ADMIN"`},
		{"relative device path", doc("", ctr("a", `"linuxParameters": {"devices": [{"hostPath": "dev/null"}]}`)),
			c0 + `linuxParameters.devices[0].hostPath: "dev/null" is not an absolute path`},
		{"unknown device permission", doc("", ctr("a", `"linuxParameters": {"devices": [{"hostPath": "/dev/null", "permissions": ["exec"]}]}`)),
			c0 + `linuxParameters.devices[0].permissions[0]: unknown permission "exec"`},
		{"zero shared memory", doc("", ctr("a", `"linuxParameters": {"sharedMemorySize": 0}`)), c0 + "linuxParameters.sharedMemorySize: 0 is out of range"},
		{"tmpfs without size", doc("", ctr("a", `"linuxParameters": {"tmpfs": [{"containerPath": "/t"}]}`)), c0 + "linuxParameters.tmpfs[0].size: 0 is out of range"},
		{"unknown tmpfs option", doc("", ctr("a", `"linuxParameters": {"tmpfs": [{"containerPath": "/t", "size": 8, "mountOptions": ["fast"]}]}`)),
			c0 + `linuxParameters.tmpfs[0].mountOptions[0]: unknown tmpfs mount option "fast"`},
		{"no swap without memory", doc(`"memory": "512"`, `{"name": "a", "image": "i", "linuxParameters": {"maxSwap": 0}}`),
			c0 + "linuxParameters.maxSwap: needs the container's memory"},
		{"swappiness above 100", doc("", ctr("a", `"linuxParameters": {"swappiness": 101}`)), c0 + "linuxParameters.swappiness: 101 is out of range 0-100"},
		{"secret without valueFrom", doc("", ctr("a", `"secrets": [{"name": "S"}]`)), c0 + "secrets[0].valueFrom: required"},
		{"duplicate secret", doc("", ctr("a", `"secrets": [{"name": "S", "valueFrom": "/a"}, {"name": "S", "valueFrom": "/b"}]`)),
			c0 + `secrets[1].name: duplicate name "S"`},
		{"log secret without name", doc("", ctr("a", `"logConfiguration": {"logDriver": "awslogs", "secretOptions": [{"valueFrom": "/a"}]}`)),
			c0 + "logConfiguration.secretOptions[0].name: required"},
		{"environment file not in S3", doc("", ctr("a", `"environmentFiles": [{"value": "arn:aws:s3:::bucket/k.env", "type": "ssm"}]`)),
			c0 + `environmentFiles[0].type: unknown type "ssm"`},
		{"environment file not an object ARN", doc("", ctr("a", `"environmentFiles": [{"value": "arn:aws:s3:::bucket", "type": "s3"}]`)),
			c0 + `environmentFiles[0].value: "arn:aws:s3:::bucket" is not an S3 object ARN`},
		{"repository credentials without parameter", doc("", ctr("a", `"repositoryCredentials": {}`)),
			c0 + "repositoryCredentials.credentialsParameter: required"},
		{"restart period below ECS's minimum", doc("", ctr("a", `"restartPolicy": {"enabled": true, "restartAttemptPeriod": 59}`)),
			c0 + "restartPolicy.restartAttemptPeriod: 59 is out of range 60-1800 seconds"},
		{"port range in host mode", doc(`"networkMode": "host"`, ctr("a", `"portMappings": [{"containerPortRange": "80-81"}]`)),
			c0 + "portMappings[0].containerPortRange: only allowed with networkMode bridge or awsvpc, not host"},
		{"port range backwards", doc("", ctr("a", `"portMappings": [{"containerPortRange": "81-80"}]`)),
			c0 + `portMappings[0].containerPortRange: "81-80" is not a port range`},
		{"port range with a host port", doc("", ctr("a", `"portMappings": [{"containerPortRange": "80-81", "hostPort": 80}]`)),
			c0 + "portMappings[0].hostPort: not allowed with containerPortRange"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			require.ErrorIs(t, err, ErrInvalid)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, 1, "one error: %v", err)
			assert.True(t, strings.HasPrefix(lines[0], tt.want), "got %q, want it to start with %q", lines[0], tt.want)
		})
	}
}

// TestContainerOptionsAccepted parses a definition with every option set validly.
func TestContainerOptionsAccepted(t *testing.T) {
	_, err := Parse([]byte(doc(`"pidMode": "task", "ipcMode": "none"`, ctr("a", ""), ctr("b", `"links": ["a:alias"], "hostname": "b.local",
		"dnsServers": ["10.0.0.2", "fd00::2"], "dnsSearchDomains": ["corp"], "extraHosts": [{"hostname": "db", "ipAddress": "10.0.0.9"}],
		"systemControls": [{"namespace": "net.core.somaxconn", "value": "1024"}], "dockerSecurityOptions": ["no-new-privileges", "apparmor:p", "label:type:t"],
		"linuxParameters": {"capabilities": {"add": ["ALL"], "drop": ["MKNOD"]}, "devices": [{"hostPath": "/dev/fuse", "permissions": ["read", "mknod"]}],
			"sharedMemorySize": 64, "tmpfs": [{"containerPath": "/t", "size": 8, "mountOptions": ["mode=1777", "noexec"]}], "maxSwap": 0, "swappiness": 0},
		"secrets": [{"name": "S", "valueFrom": "/p"}], "environmentFiles": [{"value": "arn:aws-cn:s3:::b/k/app.env", "type": "s3"}],
		"repositoryCredentials": {"credentialsParameter": "reg"}, "restartPolicy": {"enabled": true, "ignoredExitCodes": [0, 1], "restartAttemptPeriod": 1800},
		"portMappings": [{"containerPortRange": "9000-9100", "protocol": "udp"}]`))))
	require.NoError(t, err)
}

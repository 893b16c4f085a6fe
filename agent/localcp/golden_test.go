package localcp

import (
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden from the current code")

// goldenFullDef sets every field of a task definition that reaches the ACS payload; the golden frames
// and the payload round trip with agent/acstranslate both use it.
const goldenFullDef = `{"family":"full","networkMode":"bridge","cpu":"512","memory":"1 GB","pidMode":"task","ipcMode":"host",
	"executionRoleArn":"arn:aws:iam::012345678901:role/exec",
	"volumes":[{"name":"scratch"},{"name":"data","host":{"sourcePath":"/srv/data"}},
	           {"name":"named","dockerVolumeConfiguration":{"scope":"shared","autoprovision":true,"driver":"local","driverOpts":{"o":"bind"},"labels":{"a":"b"}}},
	           {"name":"plain","dockerVolumeConfiguration":{"scope":"task"}}],
	"containerDefinitions":[
	 {"name":"db","image":"postgres:16","cpu":256,"memoryReservation":128,"essential":true,
	  "entryPoint":["/bin/sh","-c"],"command":["exec postgres"],
	  "environment":[{"name":"PGDATA","value":"/data"}],
	  "environmentFiles":[{"value":"arn:aws:s3:::config/db.env","type":"s3"}],
	  "secrets":[{"name":"DB_PASS","valueFrom":"arn:aws:ssm:us-east-1:012345678901:parameter/db/pass"},
	             {"name":"API_KEY","valueFrom":"arn:aws:secretsmanager:us-east-1:012345678901:secret:api-AbCdEf:key::"}],
	  "repositoryCredentials":{"credentialsParameter":"arn:aws:secretsmanager:us-east-1:012345678901:secret:registry-AbCdEf"},
	  "portMappings":[{"containerPort":5432,"hostPort":5432,"protocol":"tcp"},{"containerPort":53,"protocol":"udp"}],
	  "mountPoints":[{"sourceVolume":"data","containerPath":"/data"},{"sourceVolume":"scratch","containerPath":"/tmp","readOnly":true}],
	  "healthCheck":{"command":["CMD-SHELL","pg_isready"],"interval":10,"timeout":3,"retries":5,"startPeriod":20},
	  "stopTimeout":30,"startTimeout":60,"user":"postgres","workingDirectory":"/data",
	  "ulimits":[{"name":"nofile","softLimit":1024,"hardLimit":4096}],
	  "dockerLabels":{"team":"core"},
	  "logConfiguration":{"logDriver":"awslogs","options":{"awslogs-group":"db"},"secretOptions":[{"name":"awslogs-endpoint","valueFrom":"/logs/endpoint"}]},
	  "privileged":true,"readonlyRootFilesystem":true,
	  "linuxParameters":{"initProcessEnabled":true,"capabilities":{"add":["NET_ADMIN"],"drop":["MKNOD"]},
	    "devices":[{"hostPath":"/dev/null","containerPath":"/dev/nothing","permissions":["read","write"]}],
	    "sharedMemorySize":64,"tmpfs":[{"containerPath":"/run","size":32,"mountOptions":["noexec","mode=1777"]}]},
	  "hostname":"db","dnsServers":["10.0.0.2"],"dnsSearchDomains":["corp.internal"],
	  "extraHosts":[{"hostname":"api","ipAddress":"10.0.0.9"}],"systemControls":[{"namespace":"net.core.somaxconn","value":"1024"}],
	  "dockerSecurityOptions":["no-new-privileges"],"pseudoTerminal":true,"interactive":true,
	  "restartPolicy":{"enabled":true,"ignoredExitCodes":[0,143],"restartAttemptPeriod":60}},
	 {"name":"app","image":"app:1","memory":64,"essential":false,
	  "volumesFrom":[{"sourceContainer":"db","readOnly":true},{"sourceContainer":"db"}],
	  "mountPoints":[{"sourceVolume":"named","containerPath":"/named"}],
	  "portMappings":[{"containerPortRange":"9000-9002","protocol":"udp"}],
	  "links":["db:database"],
	  "linuxParameters":{"maxSwap":128,"swappiness":10},
	  "restartPolicy":{"enabled":true},
	  "dependsOn":[{"containerName":"db","condition":"HEALTHY"},{"containerName":"db","condition":"START"}]},
	 {"name":"bare","image":"busybox","memoryReservation":16,"disableNetworking":true}]}`

var goldenUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestACSWireGolden pins the exact bytes of the frames the embedded control plane sends: field names,
// field order, and which fields are present when empty. Random IDs are replaced before comparing.
func TestACSWireGolden(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)

	var frames []string

	// An unknown instance gets InvalidInstanceException.
	frames = append(frames, string(dialACS(t, ts, "arn:aws:ecs:local:000000000000:container-instance/default/nope").readRaw()))

	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", goldenFullDef)
	h.ok("RegisterTaskDefinition", sleepDef)
	h.ok("RegisterTaskDefinition", webRequest(t))
	full := at(t, h.ok("RunTask", `{"taskDefinition":"full"}`), "tasks", 0, "taskArn").(string)
	agent := dialACS(t, ts, ci)
	frames = append(frames, string(agent.readRaw()))
	sleep := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	frames = append(frames, string(agent.readRaw()))
	web := at(t, h.ok("RunTask", `{"taskDefinition":"web"}`), "tasks", 0, "taskArn").(string)
	frames = append(frames, string(agent.readRaw()))
	h.ok("StopTask", mustJSON(map[string]any{"task": sleep, "reason": "test"}))
	frames = append(frames, string(agent.readRaw()))
	h.heartbeatDue()
	frames = append(frames, string(agent.readRaw()))

	// Every frame is what agent/acswire makes of its own reading of it: one wire vocabulary.
	for _, f := range frames {
		m, err := acswire.Decode([]byte(f))
		require.NoError(t, err, "%s", f)
		again, err := acswire.Encode(m)
		require.NoError(t, err)
		assert.Equal(t, f, string(again))
	}

	got := strings.Join(frames, "\n") + "\n"
	got = strings.NewReplacer(full, "TASK-FULL", sleep, "TASK-SLEEP", web, "TASK-WEB", ci, "INSTANCE",
		lastSegment(full), "FULL-ID", lastSegment(sleep), "SLEEP-ID", lastSegment(web), "WEB-ID").Replace(got)
	got = goldenUUID.ReplaceAllString(got, "UUID")

	path := filepath.Join("testdata", "acs_frames.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
}

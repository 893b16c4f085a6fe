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

	"github.com/berth-agent/berth/agent/acs"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/*.golden from the current code")

// goldenFullDef sets every field of a task definition that reaches the ACS payload; the golden frames
// and the payload round trip with agent/acs both use it.
const goldenFullDef = `{"family":"full","networkMode":"host","cpu":"512","memory":"1 GB",
	"volumes":[{"name":"scratch"},{"name":"data","host":{"sourcePath":"/srv/data"}},
	           {"name":"named","dockerVolumeConfiguration":{"scope":"shared","autoprovision":true,"driver":"local","driverOpts":{"o":"bind"},"labels":{"a":"b"}}},
	           {"name":"plain","dockerVolumeConfiguration":{"scope":"task"}}],
	"containerDefinitions":[
	 {"name":"db","image":"postgres:16","cpu":256,"memoryReservation":128,"essential":true,
	  "entryPoint":["/bin/sh","-c"],"command":["exec postgres"],
	  "environment":[{"name":"PGDATA","value":"/data"}],
	  "portMappings":[{"containerPort":5432,"hostPort":5432,"protocol":"tcp"},{"containerPort":53,"protocol":"udp"}],
	  "mountPoints":[{"sourceVolume":"data","containerPath":"/data"},{"sourceVolume":"scratch","containerPath":"/tmp","readOnly":true}],
	  "healthCheck":{"command":["CMD-SHELL","pg_isready"],"interval":10,"timeout":3,"retries":5,"startPeriod":20},
	  "stopTimeout":30,"startTimeout":60,"user":"postgres","workingDirectory":"/data",
	  "ulimits":[{"name":"nofile","softLimit":1024,"hardLimit":4096}],
	  "dockerLabels":{"team":"core"},
	  "logConfiguration":{"logDriver":"json-file","options":{"max-size":"10m"}},
	  "privileged":true,"readonlyRootFilesystem":true,"linuxParameters":{"initProcessEnabled":true}},
	 {"name":"app","image":"app:1","memory":64,"essential":false,
	  "volumesFrom":[{"sourceContainer":"db","readOnly":true},{"sourceContainer":"db"}],
	  "mountPoints":[{"sourceVolume":"named","containerPath":"/named"}],
	  "links":["db"],
	  "dependsOn":[{"containerName":"db","condition":"HEALTHY"},{"containerName":"db","condition":"START"}]},
	 {"name":"bare","image":"busybox","memoryReservation":16}]}`

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

	// Every frame is what agent/acs makes of its own reading of it: one wire vocabulary.
	for _, f := range frames {
		m, err := acs.Decode([]byte(f))
		require.NoError(t, err, "%s", f)
		again, err := acs.Encode(m)
		require.NoError(t, err)
		assert.Equal(t, f, string(again))
	}

	got := strings.Join(frames, "\n") + "\n"
	got = strings.NewReplacer(full, "TASK-FULL", sleep, "TASK-SLEEP", web, "TASK-WEB", ci, "INSTANCE").Replace(got)
	got = goldenUUID.ReplaceAllString(got, "UUID")

	path := filepath.Join("testdata", "acs_frames.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
}

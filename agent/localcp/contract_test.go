package localcp

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/taskdef"
)

// TestPayloadRoundTrip is the contract between this package and agent/acs: a task definition sent in
// a PayloadMessage and decoded by the agent's ACS client gives the same task as the definition itself.
func TestPayloadRoundTrip(t *testing.T) {
	full := `{"family":"full","networkMode":"host","cpu":"512","memory":"1 GB",
	"volumes":[{"name":"scratch"},{"name":"data","host":{"sourcePath":"/srv/data"}},
	           {"name":"named","dockerVolumeConfiguration":{"scope":"shared","autoprovision":true,"driver":"local","labels":{"a":"b"}}}],
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
	  "volumesFrom":[{"sourceContainer":"db","readOnly":true}],
	  "mountPoints":[{"sourceVolume":"named","containerPath":"/named"}],
	  "dependsOn":[{"containerName":"db","condition":"HEALTHY"}]}]}`

	for name, body := range map[string]string{"web": webRequest(t), "full": full, "sleep": sleepDef} {
		t.Run(name, func(t *testing.T) {
			def, err := taskdef.Parse([]byte(body))
			require.NoError(t, err)
			def.Revision = 3
			canon, err := taskdef.Canonical(def)
			require.NoError(t, err)
			rec := &taskRecord{Arn: "arn:aws:ecs:local:000000000000:task/default/0123", Revision: 3, Definition: canon}

			sent, err := acsTaskOf(rec, "RUNNING")
			require.NoError(t, err)
			wire, err := json.Marshal(acsPayloadMessage{MessageID: "m", SeqNum: 1, Tasks: []acsTask{sent}})
			require.NoError(t, err)
			var got acs.PayloadMessage
			require.NoError(t, json.Unmarshal(wire, &got))
			require.Len(t, got.Tasks, 1)
			back, warnings, err := acs.Definition(got.Tasks[0])
			require.NoError(t, err)
			assert.Empty(t, warnings)
			require.NoError(t, back.Validate())

			assert.Equal(t, def.NewTask(rec.Arn), back.NewTask(rec.Arn))
		})
	}
}

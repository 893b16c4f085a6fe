package acstranslate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// roundTripDefs are task definitions whose tasks must survive task → wire → task: every field that
// reaches the ACS payload, an execution role with ECR pulls and awslogs, and the least a definition
// can say.
var roundTripDefs = map[string]string{
	"full": `{"family":"full","networkMode":"bridge","cpu":"512","memory":"1 GB","pidMode":"task","ipcMode":"host",
	"taskRoleArn":"arn:aws:iam::012345678901:role/app",
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
	  "logConfiguration":{"logDriver":"json-file","options":{"max-size":"10m"},"secretOptions":[{"name":"token","valueFrom":"/logs/token"}]},
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
	 {"name":"bare","image":"busybox","memoryReservation":16,"disableNetworking":true}]}`,
	"fault injection": `{"family":"chaos","networkMode":"host","enableFaultInjection":true,"containerDefinitions":[
	 {"name":"app","image":"busybox","memory":16}]}`,
	"execution role": `{"family":"ecr","executionRoleArn":"arn:aws:iam::012345678901:role/exec","containerDefinitions":[
	 {"name":"app","image":"012345678901.dkr.ecr.us-east-1.amazonaws.com/app:1","memory":16,
	  "logConfiguration":{"logDriver":"awslogs","options":{"awslogs-group":"app","awslogs-region":"us-east-1"}}},
	 {"name":"side","image":"busybox","memory":16,"essential":false}]}`,
	"firelens": `{"family":"logs","executionRoleArn":"arn:aws:iam::012345678901:role/exec","containerDefinitions":[
	 {"name":"log_router","image":"public.ecr.aws/aws-observability/aws-for-fluent-bit:stable","memoryReservation":50,
	  "firelensConfiguration":{"type":"fluentbit","options":{"enable-ecs-log-metadata":"false",
	    "config-file-type":"s3","config-file-value":"arn:aws:s3:::config/fluent/extra.conf"}},
	  "logConfiguration":{"logDriver":"awslogs","options":{"awslogs-group":"firelens","awslogs-region":"us-east-1"}}},
	 {"name":"app","image":"app:1","memory":64,
	  "logConfiguration":{"logDriver":"awsfirelens","options":{"Name":"datadog","dd_service":"app","include-pattern":"^ERROR"},
	    "secretOptions":[{"name":"apikey","valueFrom":"arn:aws:secretsmanager:us-east-1:012345678901:secret:dd-AbCdEf"}]}}]}`,
	"least": `{"family":"least","containerDefinitions":[{"name":"c","image":"busybox","memory":8}]}`,
}

// TestTaskWireTaskRoundTrip: a task of the model rendered by WireTask, sent in a PayloadMessage and
// translated back by TranslateTask is the same task, for either desired status; the definition
// Definition makes of the wire task gives the same task as the original definition; and WireTask
// renders the translated task as it was sent.
func TestTaskWireTaskRoundTrip(t *testing.T) {
	const arn = "arn:aws:ecs:us-east-1:012345678901:task/default/0123"
	for name, body := range roundTripDefs {
		t.Run(name, func(t *testing.T) {
			def, err := taskdef.Parse([]byte(body))
			require.NoError(t, err)
			def.Revision = 3
			for _, desired := range []task.TaskStatus{task.TaskRunning, task.TaskStopped} {
				want := def.NewTask(arn)
				want.DesiredStatus = desired
				want.ServiceName, want.LaunchType = "web-svc", "EXTERNAL"
				for _, c := range want.Containers {
					c.ARN = "arn:aws:ecs:us-east-1:012345678901:container/default/0123/" + c.Name
				}
				want.Containers[0].ManagedAgents = []task.ManagedAgent{{Name: task.ExecuteCommandAgent,
					Properties: map[string]string{"sessionLimit": "4"}, Status: task.ManagedAgentPending}}
				if desired == task.TaskStopped {
					for _, c := range want.Containers {
						c.DesiredStatus = task.ContainerStopped
					}
				}
				sent, err := WireTask(want)
				require.NoError(t, err)
				frame, err := acswire.Encode(&acswire.PayloadMessage{MessageID: "m", SeqNum: 1, Tasks: []*acswire.Task{sent}})
				require.NoError(t, err)
				m, err := acswire.Decode(frame)
				require.NoError(t, err)
				got, ok := m.(*acswire.PayloadMessage)
				require.True(t, ok, "want a PayloadMessage, got %T", m)
				require.Len(t, got.Tasks, 1)

				accepted, err := TranslateTask(got.Tasks[0])
				require.NoError(t, err)
				assert.Equal(t, want, accepted.Task, desired.String())
				assert.Equal(t, def.NewTask(arn), accepted.Definition.NewTask(arn), "the definition of the wire task")
				again, err := WireTask(accepted.Task)
				require.NoError(t, err)
				assert.Equal(t, sent, again, "wire → task → wire")
			}
		})
	}
}

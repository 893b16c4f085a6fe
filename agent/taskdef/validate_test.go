package taskdef

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

// ctr is a valid container definition named name with extra JSON members appended.
func ctr(name, extra string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`{"name": %q, "image": "busybox", "memory": 64%s}`, name, extra)
}

// doc is a task definition of family "f" with extra top-level members and the given containers.
func doc(extra string, containers ...string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`{"family": "f"%s, "containerDefinitions": [%s]}`, extra, strings.Join(containers, ", "))
}

// invalidCase is a definition Parse must reject with exactly the listed errors, each given by a
// prefix of its text (which starts with its path).
type invalidCase struct {
	name string
	json string
	want []string
}

func invalidCases() []invalidCase {
	hc := `"healthCheck": {"command": ["CMD", "true"]}`
	healthCheck := func(field string, value int) string {
		return fmt.Sprintf(`"healthCheck": {"command": ["CMD", "true"], %q: %d}`, field, value)
	}
	port := func(mapping string) string { return fmt.Sprintf(`"portMappings": [%s]`, mapping) }
	return []invalidCase{
		// Document.
		{name: "syntax error", json: "{\n  \"family\": \"f\",\n  oops\n}", want: []string{"line 3, column 3: invalid character 'o'"}},
		{name: "truncated", json: `{"family": "f"`, want: []string{"line 1, column 15: unexpected end of JSON"}},
		{name: "empty", json: ``, want: []string{"empty task definition"}},
		{name: "not an object", json: `[]`, want: []string{"the task definition must be a JSON object, got an array"}},
		{name: "trailing data", json: doc("", ctr("a", "")) + ` {}`, want: []string{"line 1, column"}},
		{name: "wrapper not an object", json: `{"taskDefinition": "x"}`, want: []string{"taskDefinition: want an object, got a string"}},
		{
			name: "type errors name their paths",
			json: doc(`"networkMode": 1, "cpu": "lots"`, ctr("a", port(`{"containerPort": "80"}`)+`, "essential": "yes"`),
				ctr("b", `"environment": {"A": "1"}, "dockerLabels": {"k": 1}, "stopTimeout": 1.5`)),
			want: []string{
				"networkMode: want a string, got number 1",
				`cpu: want a number of CPU units or a string such as "256" or "0.25 vCPU", got "lots"`,
				"containerDefinitions[0].essential: want true or false, got a string",
				"containerDefinitions[0].portMappings[0].containerPort: want an integer, got a string",
				"containerDefinitions[1].environment: want an array, got an object",
				"containerDefinitions[1].stopTimeout: want an integer in range, got number 1.5",
				`containerDefinitions[1].dockerLabels["k"]: want a string, got number 1`,
			},
		},
		{name: "integer overflow", json: doc("", ctr("a", `"cpu": 99999999999999999999`)), want: []string{"containerDefinitions[0].cpu: want an integer in range"}},
		{name: "efs volume", json: doc(`"volumes": [{"name": "v", "efsVolumeConfiguration": {"fileSystemId": "fs-1"}}]`, ctr("a", "")),
			want: []string{"volumes[0].efsVolumeConfiguration: not supported by Berth"}},

		// Task.
		{name: "family missing", json: `{"containerDefinitions": [` + ctr("a", "") + `]}`, want: []string{"family: required"}},
		{name: "family bad characters", json: `{"family": "my app", "containerDefinitions": [` + ctr("a", "") + `]}`,
			want: []string{`family: "my app" may hold only letters, digits, hyphens and underscores`}},
		{name: "family too long", json: `{"family": "` + strings.Repeat("f", 256) + `", "containerDefinitions": [` + ctr("a", "") + `]}`,
			want: []string{"family: longer than 255 characters"}},
		{name: "negative revision", json: doc(`"revision": -1`, ctr("a", "")), want: []string{"revision: -1 is negative"}},
		{name: "unknown network mode", json: doc(`"networkMode": "nat"`, ctr("a", "")),
			want: []string{`networkMode: unknown network mode "nat" (want bridge, host, none or awsvpc)`}},
		{name: "no containers", json: `{"family": "f", "containerDefinitions": []}`, want: []string{"containerDefinitions: at least one container is required"}},
		{name: "containers missing", json: `{"family": "f"}`, want: []string{"containerDefinitions: at least one container is required"}},

		// Container identity.
		{name: "container name missing", json: doc("", `{"image": "i", "memory": 8}`), want: []string{"containerDefinitions[0].name: required"}},
		{name: "container name bad", json: doc("", ctr("a.b", "")), want: []string{`containerDefinitions[0].name: "a.b" may hold only`}},
		{name: "duplicate container name", json: doc("", ctr("web", ""), ctr("db", ""), ctr("web", "")),
			want: []string{`containerDefinitions[2].name: duplicate container name "web"`}},
		{name: "image missing", json: doc("", `{"name": "a", "memory": 8}`), want: []string{"containerDefinitions[0].image: required"}},
		{name: "negative cpu", json: doc("", ctr("a", `"cpu": -2`)), want: []string{"containerDefinitions[0].cpu: -2 is negative"}},
		{name: "no essential container", json: doc("", ctr("a", `"essential": false`), ctr("b", `"essential": false`)),
			want: []string{"containerDefinitions: no essential container"}},

		// Dependencies.
		{name: "depends on unknown container", json: doc("", ctr("web", ""), ctr("app", `"dependsOn": [{"containerName": "db", "condition": "START"}]`)),
			want: []string{`containerDefinitions[1].dependsOn[0].containerName: no container named "db"`}},
		{name: "depends on nothing", json: doc("", ctr("web", `"dependsOn": [{"condition": "START"}]`)),
			want: []string{"containerDefinitions[0].dependsOn[0].containerName: required"}},
		{name: "depends on itself", json: doc("", ctr("web", `"dependsOn": [{"containerName": "web", "condition": "START"}]`)),
			want: []string{"containerDefinitions[0].dependsOn[0].containerName: a container cannot depend on itself"}},
		{name: "two-container cycle", json: doc("",
			ctr("web", `"dependsOn": [{"containerName": "db", "condition": "START"}]`),
			ctr("db", `"dependsOn": [{"containerName": "web", "condition": "START"}]`)),
			want: []string{"containerDefinitions[0].dependsOn[0]: circular dependency web -> db -> web"}},
		{name: "three-container cycle behind a chain", json: doc("",
			ctr("app", `"dependsOn": [{"containerName": "a", "condition": "START"}]`),
			ctr("a", `"dependsOn": [{"containerName": "b", "condition": "START"}]`),
			ctr("b", `"dependsOn": [{"containerName": "app", "condition": "START"}, {"containerName": "c", "condition": "START"}]`),
			ctr("c", `"dependsOn": [{"containerName": "a", "condition": "START"}]`)),
			want: []string{
				"containerDefinitions[0].dependsOn[0]: circular dependency app -> a -> b -> app",
				"containerDefinitions[1].dependsOn[0]: circular dependency a -> b -> c -> a",
			}},
		{name: "unknown condition", json: doc("", ctr("web", ""), ctr("app", `"dependsOn": [{"containerName": "web", "condition": "READY"}]`)),
			want: []string{`containerDefinitions[1].dependsOn[0].condition: unknown condition "READY" (want START, COMPLETE, SUCCESS or HEALTHY)`}},
		{name: "condition missing", json: doc("", ctr("web", ""), ctr("app", `"dependsOn": [{"containerName": "web"}]`)),
			want: []string{"containerDefinitions[1].dependsOn[0].condition: required"}},
		{name: "healthy without a health check", json: doc("", ctr("web", ""), ctr("app", `"dependsOn": [{"containerName": "web", "condition": "HEALTHY"}]`)),
			want: []string{`containerDefinitions[1].dependsOn[0].condition: HEALTHY needs a healthCheck on container "web"`}},
		{name: "complete on an essential container", json: doc("", ctr("init", ""), ctr("app", `"dependsOn": [{"containerName": "init", "condition": "COMPLETE"}]`)),
			want: []string{`containerDefinitions[1].dependsOn[0].condition: COMPLETE cannot be used with essential container "init"`}},
		{name: "success on an essential container", json: doc("", ctr("init", `"essential": true`), ctr("app", `"dependsOn": [{"containerName": "init", "condition": "SUCCESS"}]`)),
			want: []string{`containerDefinitions[1].dependsOn[0].condition: SUCCESS cannot be used with essential container "init"`}},

		// Ports.
		{name: "container port 0", json: doc("", ctr("a", port(`{"containerPort": 0}`))),
			want: []string{"containerDefinitions[0].portMappings[0].containerPort: 0 is out of range 1-65535"}},
		{name: "container port too big", json: doc("", ctr("a", port(`{"containerPort": 65536}`))),
			want: []string{"containerDefinitions[0].portMappings[0].containerPort: 65536 is out of range 1-65535"}},
		{name: "negative host port", json: doc("", ctr("a", port(`{"containerPort": 80, "hostPort": -1}`))),
			want: []string{"containerDefinitions[0].portMappings[0].hostPort: -1 is out of range 0-65535"}},
		{name: "host port too big", json: doc("", ctr("a", port(`{"containerPort": 80, "hostPort": 70000}`))),
			want: []string{"containerDefinitions[0].portMappings[0].hostPort: 70000 is out of range 0-65535"}},
		{name: "unknown protocol", json: doc("", ctr("a", port(`{"containerPort": 80, "protocol": "sctp"}`))),
			want: []string{`containerDefinitions[0].portMappings[0].protocol: unknown protocol "sctp" (want tcp or udp)`}},
		{name: "awsvpc host port differs", json: doc(`"networkMode": "awsvpc"`, ctr("a", port(`{"containerPort": 80, "hostPort": 8080}`))),
			want: []string{"containerDefinitions[0].portMappings[0].hostPort: must be 0 or equal containerPort (80) in awsvpc network mode"}},
		{name: "host mode host port differs", json: doc(`"networkMode": "host"`, ctr("a", port(`{"containerPort": 80, "hostPort": 8080}`))),
			want: []string{"containerDefinitions[0].portMappings[0].hostPort: must be 0 or equal containerPort (80) in host network mode"}},
		{name: "duplicate host port in bridge mode", json: doc("", ctr("a", port(`{"containerPort": 80, "hostPort": 8080}`)),
			ctr("b", port(`{"containerPort": 81, "hostPort": 8080, "protocol": "tcp"}`))),
			want: []string{"containerDefinitions[1].portMappings[0].hostPort: host port 8080/tcp already used by containerDefinitions[0].portMappings[0]"}},
		{name: "duplicate container port in awsvpc mode", json: doc(`"networkMode": "awsvpc"`,
			ctr("a", port(`{"containerPort": 53, "protocol": "udp"}, {"containerPort": 53, "hostPort": 53, "protocol": "udp"}`))),
			want: []string{"containerDefinitions[0].portMappings[1].hostPort: host port 53/udp already used by containerDefinitions[0].portMappings[0]"}},
		{name: "ports with network mode none", json: doc(`"networkMode": "none"`, ctr("a", port(`{"containerPort": 80}`))),
			want: []string{"containerDefinitions[0].portMappings: not allowed with networkMode none"}},

		// Memory.
		{name: "memory too small", json: doc("", `{"name": "a", "image": "i", "memory": 4}`),
			want: []string{"containerDefinitions[0].memory: 4 MiB is below the minimum of 6 MiB"}},
		{name: "memory zero", json: doc("", `{"name": "a", "image": "i", "memory": 0}`),
			want: []string{"containerDefinitions[0].memory: 0 MiB is below the minimum of 6 MiB"}},
		{name: "memory reservation too small", json: doc("", `{"name": "a", "image": "i", "memoryReservation": 5}`),
			want: []string{"containerDefinitions[0].memoryReservation: 5 MiB is below the minimum of 6 MiB"}},
		{name: "no memory anywhere", json: doc("", ctr("a", ""), `{"name": "b", "image": "i"}`),
			want: []string{"containerDefinitions[1].memory: required when neither memoryReservation nor the task's memory is set"}},
		{name: "reservation above limit", json: doc("", `{"name": "a", "image": "i", "memory": 64, "memoryReservation": 128}`),
			want: []string{"containerDefinitions[0].memoryReservation: 128 MiB exceeds memory (64 MiB)"}},

		// Volumes and mounts.
		{name: "mount of an unknown volume", json: doc("", ctr("a", `"mountPoints": [{"sourceVolume": "data", "containerPath": "/data"}]`)),
			want: []string{`containerDefinitions[0].mountPoints[0].sourceVolume: no volume named "data"`}},
		{name: "mount without source or path", json: doc(`"volumes": [{"name": "data"}]`, ctr("a", `"mountPoints": [{}]`)),
			want: []string{"containerDefinitions[0].mountPoints[0].sourceVolume: required", "containerDefinitions[0].mountPoints[0].containerPath: required"}},
		{name: "mount at a relative path", json: doc(`"volumes": [{"name": "data"}]`, ctr("a", `"mountPoints": [{"sourceVolume": "data", "containerPath": "data"}]`)),
			want: []string{`containerDefinitions[0].mountPoints[0].containerPath: "data" is not an absolute path`}},
		{name: "volumes from an unknown container", json: doc("", ctr("a", `"volumesFrom": [{"sourceContainer": "b"}]`)),
			want: []string{`containerDefinitions[0].volumesFrom[0].sourceContainer: no container named "b"`}},
		{name: "volumes from itself", json: doc("", ctr("a", `"volumesFrom": [{"sourceContainer": "a"}]`)),
			want: []string{"containerDefinitions[0].volumesFrom[0].sourceContainer: a container cannot mount its own volumes"}},
		{name: "volume name missing", json: doc(`"volumes": [{"host": {}}]`, ctr("a", "")), want: []string{"volumes[0].name: required"}},
		{name: "duplicate volume name", json: doc(`"volumes": [{"name": "v"}, {"name": "w"}, {"name": "v"}]`, ctr("a", "")),
			want: []string{`volumes[2].name: duplicate volume name "v"`}},
		{name: "host and docker volume", json: doc(`"volumes": [{"name": "v", "host": {}, "dockerVolumeConfiguration": {}}]`, ctr("a", "")),
			want: []string{"volumes[0]: host and dockerVolumeConfiguration are mutually exclusive"}},
		{name: "relative host path", json: doc(`"volumes": [{"name": "v", "host": {"sourcePath": "data"}}]`, ctr("a", "")),
			want: []string{`volumes[0].host.sourcePath: "data" is not an absolute path`}},
		{name: "unknown volume scope", json: doc(`"volumes": [{"name": "v", "dockerVolumeConfiguration": {"scope": "global"}}]`, ctr("a", "")),
			want: []string{`volumes[0].dockerVolumeConfiguration.scope: unknown scope "global" (want task or shared)`}},
		{name: "autoprovision a task volume", json: doc(`"volumes": [{"name": "v", "dockerVolumeConfiguration": {"autoprovision": true}}]`, ctr("a", "")),
			want: []string{"volumes[0].dockerVolumeConfiguration.autoprovision: only allowed with scope shared"}},

		// Timeouts.
		{name: "stop timeout too long", json: doc("", ctr("a", `"stopTimeout": 121`)), want: []string{"containerDefinitions[0].stopTimeout: 121 is out of range 0-120 seconds"}},
		{name: "negative stop timeout", json: doc("", ctr("a", `"stopTimeout": -1`)), want: []string{"containerDefinitions[0].stopTimeout: -1 is out of range 0-120 seconds"}},
		{name: "start timeout too long", json: doc("", ctr("a", `"startTimeout": 601`)), want: []string{"containerDefinitions[0].startTimeout: 601 is out of range 0-600 seconds"}},

		// Health checks.
		{name: "health check without command", json: doc("", ctr("a", `"healthCheck": {}`)), want: []string{"containerDefinitions[0].healthCheck.command: required"}},
		{name: "health check command form", json: doc("", ctr("a", `"healthCheck": {"command": ["curl", "-f", "localhost"]}`)),
			want: []string{"containerDefinitions[0].healthCheck.command: must start with CMD or CMD-SHELL"}},
		{name: "health check command missing", json: doc("", ctr("a", `"healthCheck": {"command": ["CMD-SHELL"]}`)),
			want: []string{"containerDefinitions[0].healthCheck.command: CMD-SHELL needs a command to run"}},
		{name: "health interval too short", json: doc("", ctr("a", healthCheck("interval", 4))),
			want: []string{"containerDefinitions[0].healthCheck.interval: 4 is out of range 5-300 seconds"}},
		{name: "health interval too long", json: doc("", ctr("a", healthCheck("interval", 301))),
			want: []string{"containerDefinitions[0].healthCheck.interval: 301 is out of range 5-300 seconds"}},
		{name: "health timeout too short", json: doc("", ctr("a", healthCheck("timeout", 1))),
			want: []string{"containerDefinitions[0].healthCheck.timeout: 1 is out of range 2-60 seconds"}},
		{name: "health timeout too long", json: doc("", ctr("a", healthCheck("timeout", 61))),
			want: []string{"containerDefinitions[0].healthCheck.timeout: 61 is out of range 2-60 seconds"}},
		{name: "health retries zero", json: doc("", ctr("a", healthCheck("retries", 0))),
			want: []string{"containerDefinitions[0].healthCheck.retries: 0 is out of range 1-10"}},
		{name: "health retries too many", json: doc("", ctr("a", healthCheck("retries", 11))),
			want: []string{"containerDefinitions[0].healthCheck.retries: 11 is out of range 1-10"}},
		{name: "health start period negative", json: doc("", ctr("a", healthCheck("startPeriod", -1))),
			want: []string{"containerDefinitions[0].healthCheck.startPeriod: -1 is out of range 0-300 seconds"}},
		{name: "health start period too long", json: doc("", ctr("a", healthCheck("startPeriod", 301))),
			want: []string{"containerDefinitions[0].healthCheck.startPeriod: 301 is out of range 0-300 seconds"}},

		// Other container fields.
		{name: "unknown ulimit", json: doc("", ctr("a", `"ulimits": [{"name": "files", "softLimit": 1, "hardLimit": 1}]`)),
			want: []string{`containerDefinitions[0].ulimits[0].name: unknown ulimit "files"`}},
		{name: "ulimit soft above hard", json: doc("", ctr("a", `"ulimits": [{"name": "nofile", "softLimit": 2048, "hardLimit": 1024}]`)),
			want: []string{"containerDefinitions[0].ulimits[0].softLimit: 2048 exceeds hardLimit 1024"}},
		{name: "duplicate ulimit", json: doc("", ctr("a", `"ulimits": [{"name": "nproc", "softLimit": 1, "hardLimit": 1}, {"name": "nproc", "softLimit": 2, "hardLimit": 2}]`)),
			want: []string{`containerDefinitions[0].ulimits[1].name: duplicate ulimit "nproc"`}},
		{name: "log configuration without driver", json: doc("", ctr("a", `"logConfiguration": {"options": {"a": "b"}}`)),
			want: []string{"containerDefinitions[0].logConfiguration.logDriver: required"}},
		{name: "environment variable without name", json: doc("", ctr("a", `"environment": [{"value": "x"}]`)),
			want: []string{"containerDefinitions[0].environment[0].name: required"}},

		// Limits.
		{name: "task cpu above 192 vCPU", json: doc(`"cpu": "196609"`, ctr("a", "")),
			want: []string{"cpu: 196609 CPU units is above the maximum of 196608 (192 vCPU)"}},
		{name: "container cpu above the kernel's cpu.shares", json: doc("", ctr("a", `"cpu": 262145`)),
			want: []string{"containerDefinitions[0].cpu: 262145 CPU units is above the maximum of 262144"}},
		{name: "memory whose bytes overflow int64", json: doc("", ctr("a", ""), `{"name": "b", "image": "i", "memory": 17592186044416}`),
			want: []string{"containerDefinitions[1].memory: 17592186044416 MiB is above the maximum of 2147483647 MiB"}},
		{name: "memory reservation whose bytes overflow int64", json: doc("", `{"name": "a", "image": "i", "memoryReservation": 17592186044416}`),
			want: []string{"containerDefinitions[0].memoryReservation: 17592186044416 MiB is above the maximum of 2147483647 MiB"}},
		{name: "eleven containers", json: doc("", ctr("a", ""), ctr("b", ""), ctr("c", ""), ctr("d", ""), ctr("e", ""), ctr("f", ""),
			ctr("g", ""), ctr("h", ""), ctr("i", ""), ctr("j", ""), ctr("k", "")),
			want: []string{"containerDefinitions: 11 entries; at most 10 are allowed"}},
		{name: "sixteen ulimits", json: doc("", ctr("a", `"ulimits": [`+strings.Repeat(`{"name": "nofile", "softLimit": 1, "hardLimit": 1}, `, 15)+`{}]`)),
			want: []string{"containerDefinitions[0].ulimits: 16 entries; at most 15 are allowed"}},
		{name: "count limits are checked before anything else", json: doc(`"volumes": [`+strings.Repeat(`{"name": "v"}, `, MaxEntries)+`{}]`,
			ctr("a", `"environment": [`+strings.Repeat(`{}, `, MaxEntries)+`{}], "memory": 1, "dependsOn": [{"containerName": "x"}]`)),
			want: []string{"volumes: 4097 entries; at most 4096 are allowed", "containerDefinitions[0].environment: 4097 entries; at most 4096 are allowed"}},

		// Many at once.
		{
			name: "every problem is reported",
			json: `{"networkMode": "nat", "volumes": [{"name": "v"}, {"name": "v"}], "containerDefinitions": [
				{"name": "web", "image": "", "memory": 2, "essential": false, "dependsOn": [{"containerName": "db", "condition": "HEALTHY"}], ` + hc + `},
				{"name": "web", "image": "i", "memory": 8, "essential": false, "portMappings": [{"containerPort": 0}]}]}`,
			want: []string{
				"family: required",
				`networkMode: unknown network mode "nat"`,
				`volumes[1].name: duplicate volume name "v"`,
				"containerDefinitions[0].image: required",
				"containerDefinitions[0].memory: 2 MiB is below the minimum of 6 MiB",
				`containerDefinitions[0].dependsOn[0].containerName: no container named "db"`,
				`containerDefinitions[1].name: duplicate container name "web"`,
				"containerDefinitions[1].portMappings[0].containerPort: 0 is out of range 1-65535",
				"containerDefinitions: no essential container",
			},
		},
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tt := range invalidCases() {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse([]byte(tt.json))
			require.Error(t, err)
			assert.Nil(t, d)
			assert.ErrorIs(t, err, ErrInvalid)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)

			got := fieldErrors(t, err)
			texts := make([]string, len(got))
			for i, e := range got {
				texts[i] = e.Error()
				assert.ErrorIs(t, e, ErrInvalid)
				assert.True(t, errdefs.IsInvalidArgument(e))
				assert.False(t, errdefs.IsRetriable(e))
			}
			require.Len(t, texts, len(tt.want), "errors: %q", texts)
			for i, want := range tt.want {
				assert.True(t, strings.HasPrefix(texts[i], want), "error %d is %q, want prefix %q", i, texts[i], want)
			}
		})
	}
}

func TestValidateGoLimits(t *testing.T) {
	// The ACS translation builds Definitions in Go; its values are not bounded by JSON decoding.
	mem, huge := 64, 1<<44
	d := &Definition{Family: "go", Memory: maxMemory + 1, ContainerDefinitions: []ContainerDefinition{
		{Name: "a", Image: "i", Memory: &mem, MemoryReservation: &huge},
	}}
	got := fieldErrors(t, d.Validate())
	require.Len(t, got, 3)
	assert.Equal(t, "memory: 2147483648 MiB is above the maximum of 2147483647 MiB", got[0].Error())
	assert.Equal(t, "containerDefinitions[0].memoryReservation", got[1].Path)
	assert.Equal(t, "containerDefinitions[0].memoryReservation", got[2].Path, "and it exceeds memory")

	d = &Definition{Family: "go", ContainerDefinitions: make([]ContainerDefinition, 1000)}
	got = fieldErrors(t, d.Validate())
	require.Len(t, got, 1, "only the count is reported, not a thousand missing names")
	assert.Equal(t, "containerDefinitions: 1000 entries; at most 10 are allowed", got[0].Error())
}

func TestValidateReportsAtMostMaxErrors(t *testing.T) {
	mounts := strings.Repeat(`{"sourceVolume": "nope", "containerPath": "/x"}, `, 199) + `{"sourceVolume": "nope", "containerPath": "/x"}`
	_, err := Parse([]byte(doc("", ctr("a", `"mountPoints": [`+mounts+`]`))))
	got := fieldErrors(t, err)
	require.Len(t, got, maxErrors+1)
	assert.Equal(t, `containerDefinitions[0].mountPoints[49].sourceVolume: no volume named "nope"`, got[maxErrors-1].Error())
	assert.Equal(t, "and 150 more problems", got[maxErrors].Error())
}

func TestFieldError(t *testing.T) {
	e := &FieldError{Path: "containerDefinitions[0].image", Msg: "required"}
	assert.Equal(t, "containerDefinitions[0].image: required", e.Error())
	assert.Equal(t, "line 1, column 2: bad", (&FieldError{Msg: "line 1, column 2: bad"}).Error())
	wrapped := fmt.Errorf("static task %q: %w", "web.json", e)
	assert.ErrorIs(t, wrapped, ErrInvalid)
	var fe *FieldError
	require.ErrorAs(t, wrapped, &fe)
	assert.Equal(t, "containerDefinitions[0].image", fe.Path)
	assert.False(t, errors.Is(e, errors.New("invalid task definition")))
}

func TestValidateGoValue(t *testing.T) {
	// Callers that build a Definition in Go (the ACS translation) validate it without JSON.
	mem := 64
	d := &Definition{Family: "go", ContainerDefinitions: []ContainerDefinition{{Name: "a", Image: "i", Memory: &mem}}}
	require.NoError(t, d.Validate())
	d.CPU = -1
	d.ContainerDefinitions[0].DependsOn = []Dependency{{ContainerName: "a", Condition: "START"}}
	got := fieldErrors(t, d.Validate())
	require.Len(t, got, 2)
	assert.Equal(t, "cpu", got[0].Path)
	assert.Equal(t, "containerDefinitions[0].dependsOn[0].containerName", got[1].Path)
}

package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/set"
)

// TestECSKeysAreReadOrUnsupported holds ecsKeys to keys.go: every ECS key is either read by Berth or
// listed as unsupported with a reason, never both, and listed once.
func TestECSKeysAreReadOrUnsupported(t *testing.T) {
	var read set.Set[string]
	for _, k := range keyTable() {
		read.Add(k.name)
	}
	var seen set.Set[string]
	for _, k := range ecsKeys() {
		assert.False(t, seen.Has(k.name), "%s is listed twice in ecsKeys", k.name)
		seen.Add(k.name)
		if k.unsupported == "" {
			assert.True(t, read.Has(k.name), "%s is listed as read but keys.go has no entry for it", k.name)
		} else {
			assert.False(t, read.Has(k.name), "%s is read by keys.go and also listed as unsupported", k.name)
			assert.NotContains(t, k.unsupported, "\n", "%s: the reason is one line", k.name)
		}
	}
	// Every ECS key Berth reads is in the list (Berth extensions and JSON-only keys are not ECS_* env keys).
	for _, k := range keyTable() {
		if !k.berth && k.only != fromJSON {
			assert.True(t, seen.Has(k.name), "keys.go reads ECS key %s that ecsKeys does not list", k.name)
		}
	}
}

// TestECSParity holds each ECS key's default and parsing to the values the ECS agent documents
// (README "Environment Variables", agent/config, agent/logger). want is the value as `berth config`
// shows it; "ERR" means the value does not parse.
func TestECSParity(t *testing.T) {
	type in struct{ value, want string }
	tests := []struct {
		key  string
		def  string
		vals []in
	}{
		{"ECS_CLUSTER", "default", []in{{"prod", "prod"}, {" prod ", "prod"}}},
		{"ECS_LOGLEVEL", "info", []in{{"debug", "debug"}, {"DEBUG", "debug"}, {"Info", "info"}, {"warn", "warn"},
			{"error", "error"}, {"crit", "crit"}, {"CRIT", "crit"}, {"none", "crit"}, {"None", "crit"}, {"loud", "ERR"}}},
		{"ECS_LOGFILE", "", []in{{"/log/ecs-agent.log", "/log/ecs-agent.log"}}},
		{"ECS_LOG_ROLLOVER_TYPE", "date", []in{{"size", "size"}, {"hourly", "date"}, {"HOURLY", "date"}, {"Size", "size"},
			{"date", "date"}, {"none", "none"}, {"daily", "ERR"}}},
		{"ECS_LOG_MAX_FILE_SIZE_MB", "10", []in{{"10", "10"}, {"2.5", "2.5"}, {"ten", "ERR"}}},
		{"ECS_LOG_MAX_ROLL_COUNT", "24", []in{{"24", "24"}, {"48", "48"}, {"x", "ERR"}}},
		{"ECS_LOG_OUTPUT_FORMAT", "logfmt", []in{{"logfmt", "logfmt"}, {"json", "json"}, {"JSON", "json"}, {"xml", "ERR"}}},
		{"ECS_CHECKPOINT", "true", []in{{"false", "false"}, {"true", "true"}}},
		{"ECS_RESERVED_PORTS", "[22 2375 2376 51678 51679]", []in{{"[22, 80, 5000, 8080]", "[22 80 5000 8080]"}}},
		{"ECS_RESERVED_PORTS_UDP", "[]", []in{{"[53, 123]", "[53 123]"}}},
		{"ECS_RESERVED_MEMORY", "0", []in{{"32", "32"}}},
		{"ECS_AVAILABLE_LOGGING_DRIVERS", "[json-file none]", []in{{`["awslogs","fluentd","gelf","json-file","journald","logentries","splunk","syslog"]`,
			"[awslogs fluentd gelf json-file journald logentries splunk syslog]"}}},
		{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION", "3h0m0s", []in{{"10m", "10m0s"}, {"1h", "1h0m0s"}}},
		{"ECS_CONTAINER_STOP_TIMEOUT", "30s", []in{{"10m", "10m0s"}}},
		{"ECS_CONTAINER_START_TIMEOUT", "3m0s", []in{{"10m", "10m0s"}}},
		{"ECS_CONTAINER_CREATE_TIMEOUT", "4m0s", []in{{"10m", "10m0s"}, {"30s", "1m0s"}}},
		{"ECS_IMAGE_PULL_TIMEOUT", "2h0m0s", []in{{"1h", "1h0m0s"}}},
		{"ECS_IMAGE_PULL_INACTIVITY_TIMEOUT", "1m0s", []in{{"3m", "3m0s"}}},
		{"ECS_IMAGE_PULL_BEHAVIOR", "default", []in{{"default", "default"}, {"always", "always"}, {"once", "once"}, {"prefer-cached", "prefer-cached"}}},
		{"ECS_IMAGE_CLEANUP_INTERVAL", "30m0s", []in{{"30m", "30m0s"}, {"1h", "1h0m0s"}}},
		{"ECS_IMAGE_MINIMUM_CLEANUP_AGE", "1h0m0s", []in{{"30m", "30m0s"}}},
		{"ECS_TASK_PIDS_LIMIT", "0", []in{{"100", "100"}, {"4194304", "4194304"}, {"4194305", "ERR"}, {"-1", "0"}, {"many", "ERR"}}},
		{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION_JITTER", "0s", []in{{"1h", "1h0m0s"}, {"soon", "ERR"}}},
		{"NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE", "1h0m0s", []in{{"30m", "30m0s"}, {"0", "0s"}}},
		{"ECS_NUM_IMAGES_DELETE_PER_CYCLE", "5", []in{{"5", "5"}, {"10", "10"}}},
		{"ECS_DISABLE_IMAGE_CLEANUP", "false", []in{{"true", "true"}}},
		{"ECS_INSTANCE_ATTRIBUTES", "map[]", []in{{`{"stack": "prod"}`, "map[stack:prod]"}, {`{"stack": 1}`, "ERR"}}},
		{"ECS_DISABLE_PRIVILEGED", "false", []in{{"true", "true"}}},
		{"ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST", "true", []in{{"false", "false"}, {"true", "true"}}},
		{"ECS_ENABLE_CONTAINER_METADATA", "false", []in{{"true", "true"}}},
		{"ECS_ENABLE_TASK_CPU_MEM_LIMIT", "true", []in{{"false", "false"}}},
		{"ECS_CGROUP_PATH", "/sys/fs/cgroup", []in{{"/sys/fs/cgroup", "/sys/fs/cgroup"}}},
		{"ECS_CGROUP_CPU_PERIOD", "100ms", []in{{"10ms", "10ms"}}},
		{"ECS_DYNAMIC_HOST_PORT_RANGE", "", []in{{"100-200", "100-200"}, {"200-100", "ERR"}}},
		{"ECS_TASK_METADATA_RPS_LIMIT", "40,60", []in{{"100,150", "100,150"}, {"100, 50", "100,50"}, {"100", "ERR"}, {"0,10", "ERR"}}},
		{"ECS_ENABLE_TASK_ENI", "false", []in{{"true", "true"}}},
		{"ECS_AWSVPC_BLOCK_IMDS", "false", []in{{"true", "true"}}},
		{"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES", "[]", []in{{`["10.0.15.0/24"]`, "[10.0.15.0/24]"}}},
		{"ECS_ENGINE_AUTH_TYPE", "", []in{{"docker", "docker"}, {"dockercfg", "dockercfg"}}},
		// Telemetry, EC2 and capabilities.
		{"ECS_DISABLE_METRICS", "false", []in{{"true", "true"}}},
		{"ECS_POLL_METRICS", "false", []in{{"true", "true"}}},
		{"ECS_POLLING_METRICS_WAIT_DURATION", "10s", []in{{"10s", "10s"}, {"1s", "5s"}, {"1m", "20s"}}},
		{"ECS_ENABLE_SPOT_INSTANCE_DRAINING", "false", []in{{"true", "true"}}},
		{"ECS_WARM_POOLS_CHECK", "false", []in{{"true", "true"}}},
		{"ECS_CONTAINER_INSTANCE_TAGS", "map[]", []in{{`{"tag_key": "tag_val"}`, "map[tag_key:tag_val]"},
			{`{"` + strings.Repeat("k", 129) + `": "v"}`, "ERR"}, {"tag_key=tag_val", "ERR"}}},
		{"ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM", "none", []in{{"ec2_instance", "ec2_instance"}, {"none", "none"}, {"ec2", "ERR"}}},
		{"ECS_EXTERNAL", "false", []in{{"true", "true"}}},
		{"ECS_SELINUX_CAPABLE", "false", []in{{"true", "true"}}},
		{"ECS_APPARMOR_CAPABLE", "false", []in{{"true", "true"}}},
		{"ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP", "false", []in{{"true", "true"}}},
		{"ECS_EXCLUDE_UNTRACKED_IMAGE", "[]", []in{{"alpine:latest", "[alpine:latest]"}, {"alpine:latest,busybox:1", "[alpine:latest busybox:1]"}}},
		{"ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS", "false", []in{{"true", "true"}}},
	}
	// Booleans take strconv.ParseBool's spellings, as the ECS agent's parser does.
	bools := []in{{"true", "true"}, {"TRUE", "true"}, {"True", "true"}, {"t", "true"}, {"1", "true"},
		{"false", "false"}, {"FALSE", "false"}, {"f", "false"}, {"0", "false"}, {" true ", "true"}, {"yes", "ERR"}}
	for _, k := range keyTable() {
		if _, ok := k.field(&Config{}).(boolField); ok && !k.berth {
			tests = append(tests, struct {
				key  string
				def  string
				vals []in
			}{k.name, "", bools})
		}
	}

	show := func(res *Result, key string) string { return fmt.Sprint(res.Show().Keys[key].Value) }
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if tt.def != "" {
				res := newFiles(t, "", "").mustLoad(t, nil)
				assert.Equal(t, tt.def, show(res, tt.key), "default")
			}
			for _, v := range tt.vals {
				res, err := newFiles(t, "", "").load(nil, tt.key+"="+v.value)
				if v.want == "ERR" {
					keyError(t, err, tt.key)
					continue
				}
				require.NoError(t, err, "%s=%q", tt.key, v.value)
				assert.Equal(t, v.want, show(res, tt.key), "%s=%q", tt.key, v.value)
			}
		})
	}
}

// TestUnsupportedECSKeysWarnOnce: an unsupported ECS key that is set is one warning naming the key
// and its highest source, and not also an "unknown key" warning.
func TestUnsupportedECSKeysWarnOnce(t *testing.T) {
	f := newFiles(t, "ECS_UPDATES_ENABLED=true\nECS_AUDIT_LOGFILE=/var/log/audit.log\nECS_NOT_A_KEY=1\n", `{"ECS_GMSA_SUPPORTED": true}`)
	res := f.mustLoad(t, nil, "ECS_UPDATES_ENABLED=true", "ECS_ENABLE_GPU_SUPPORT=true")
	count := map[string]int{}
	for _, w := range res.Warnings {
		count[w.Key]++
	}
	for _, k := range []string{"ECS_UPDATES_ENABLED", "ECS_AUDIT_LOGFILE", "ECS_GMSA_SUPPORTED", "ECS_ENABLE_GPU_SUPPORT", "ECS_NOT_A_KEY"} {
		assert.Equal(t, 1, count[k], "warnings for %s", k)
	}
	w := warningFor(res, "ECS_UPDATES_ENABLED")
	require.NotNil(t, w)
	assert.Equal(t, SourceEnv, w.Origin.Kind, "the highest source is named")
	assert.Contains(t, w.Msg, "not supported by Berth")
	w = warningFor(res, "ECS_AUDIT_LOGFILE")
	require.NotNil(t, w)
	assert.Equal(t, SourceEnvFile, w.Origin.Kind)
	assert.Equal(t, 2, w.Origin.Line)
	assert.Equal(t, "unknown key, ignored", warningFor(res, "ECS_NOT_A_KEY").Msg)
}

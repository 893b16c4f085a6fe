package config

import (
	"fmt"
	"sort"
	"strings"
)

// ecsKey is one configuration key of the Amazon ECS agent or of ecs-init, and what Berth does with it.
type ecsKey struct {
	name string
	// unsupported is empty when Berth reads the key (it has an entry in keys.go); otherwise it says in
	// one line why Berth does not, and a value set for the key is a warning at start.
	unsupported string
}

// ecsKeys lists every ECS_* key of the ECS agent's README ("Environment Variables") and agent/config,
// and of ecs-init's config, with AWS_DEFAULT_REGION and DOCKER_HOST. A test holds it to keys.go:
// a key is either read by Berth or listed here with a reason, never both.
func ecsKeys() []ecsKey {
	read := func(names ...string) []ecsKey {
		out := make([]ecsKey, len(names))
		for i, n := range names {
			out[i] = ecsKey{name: n}
		}
		return out
	}
	keys := read(
		"ECS_CLUSTER", "AWS_DEFAULT_REGION", "ECS_BACKEND_HOST", "DOCKER_HOST", "ECS_DATADIR", "ECS_CHECKPOINT",
		"ECS_LOGLEVEL", "ECS_LOGFILE", "ECS_LOG_ROLLOVER_TYPE", "ECS_LOG_MAX_FILE_SIZE_MB", "ECS_LOG_MAX_ROLL_COUNT",
		"ECS_LOG_OUTPUT_FORMAT", "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION", "ECS_CONTAINER_STOP_TIMEOUT",
		"ECS_CONTAINER_START_TIMEOUT", "ECS_CONTAINER_CREATE_TIMEOUT", "ECS_IMAGE_PULL_TIMEOUT",
		"ECS_IMAGE_PULL_INACTIVITY_TIMEOUT", "ECS_IMAGE_PULL_BEHAVIOR", "ECS_IMAGE_CLEANUP_INTERVAL",
		"ECS_IMAGE_MINIMUM_CLEANUP_AGE", "ECS_NUM_IMAGES_DELETE_PER_CYCLE", "ECS_DISABLE_IMAGE_CLEANUP",
		"ECS_ENGINE_AUTH_TYPE", "ECS_ENGINE_AUTH_DATA", "ECS_RESERVED_MEMORY", "ECS_RESERVED_PORTS",
		"ECS_RESERVED_PORTS_UDP", "ECS_AVAILABLE_LOGGING_DRIVERS", "ECS_INSTANCE_ATTRIBUTES", "ECS_DISABLE_PRIVILEGED",
		"ECS_ENABLE_TASK_IAM_ROLE", "ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST", "ECS_ENABLE_CONTAINER_METADATA",
		"ECS_ENABLE_TASK_CPU_MEM_LIMIT", "ECS_CGROUP_PATH", "ECS_CGROUP_CPU_PERIOD", "ECS_DYNAMIC_HOST_PORT_RANGE",
		"ECS_TASK_METADATA_RPS_LIMIT", "ECS_ENABLE_TASK_ENI", "ECS_CNI_PLUGINS_PATH", "ECS_AWSVPC_BLOCK_IMDS",
		"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES", "ECS_AGENT_CONFIG_FILE_PATH",
		"ECS_DISABLE_METRICS", "ECS_POLL_METRICS", "ECS_POLLING_METRICS_WAIT_DURATION",
		"ECS_ENABLE_SPOT_INSTANCE_DRAINING", "ECS_WARM_POOLS_CHECK", "ECS_CONTAINER_INSTANCE_TAGS",
		"ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM", "ECS_EXTERNAL", "ECS_SELINUX_CAPABLE", "ECS_APPARMOR_CAPABLE",
		"ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP", "ECS_EXCLUDE_UNTRACKED_IMAGE", "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS",
		"NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE", "ECS_DISABLE_DOCKER_HEALTH_CHECK", "ECS_DISABLE_TASK_METADATA_AZ",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION_JITTER", "ECS_EXCLUDE_IPV6_PORTBINDING",
		"ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE", "ECS_TASK_PIDS_LIMIT",
	)
	return append(keys, []ecsKey{
		{"ECS_LOGLEVEL_ON_INSTANCE", "Berth has one log level; it has no logging driver of its own to split levels with"},
		{"ECS_UPDATES_ENABLED", "agent self-update through ECS is not implemented; update the package instead"},
		{"ECS_UPDATE_DOWNLOAD_DIR", "agent self-update through ECS is not implemented"},
		{"ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT", "not implemented"},
		{"ECS_MANIFEST_PULL_TIMEOUT", "Berth does not fetch image manifests separately; ECS_IMAGE_PULL_TIMEOUT bounds the whole pull"},
		{"NONECS_NUM_CONTAINERS_DELETE_PER_CYCLE", "Berth never removes containers it did not create"},
		{"ECS_ENABLE_HIGH_DENSITY_ENI", "ENI trunking is not supported"},
		{"ECS_HOST_DATA_DIR", "Berth runs on the host, not in a container: ECS_DATADIR is the host path"},
		{"ECS_AGENT_HEALTHCHECK_HOST", "Berth runs on the host, not in a container; berth healthcheck uses ECS_INTROSPECTION_ADDR"},
		{"ECS_ENABLE_CPU_UNBOUNDED_WINDOWS_WORKAROUND", "Windows only"},
		{"ECS_ENABLE_MEMORY_UNBOUNDED_WINDOWS_WORKAROUND", "Windows only"},
		{"ECS_FSX_WINDOWS_FILE_SERVER_SUPPORTED", "FSx for Windows File Server volumes are not supported"},
		{"ECS_SHARED_VOLUME_MATCH_FULL_CONFIG", "not implemented"},
		{"ECS_NVIDIA_RUNTIME", "GPUs are not supported"},
		{"ECS_ENABLE_GPU_SUPPORT", "GPUs are not supported"},
		{"ECS_ALTERNATE_CREDENTIAL_PROFILE", "the AWS SDK's AWS_PROFILE selects the agent's credentials profile"},
		{"ECS_LOG_DRIVER", "ecs-init: Berth runs on the host, not in a container with a logging driver"},
		{"ECS_LOG_OPTS", "ecs-init: Berth runs on the host, not in a container with a logging driver"},
		{"ECS_ENABLE_RUNTIME_STATS", "pprof and runtime stats logging are not exposed"},
		{"ECS_SKIP_LOCALHOST_TRAFFIC_FILTER", "the filter that keeps containers off the host's loopback (added with the task endpoint's NAT redirect, as ecs-init adds it) cannot be turned off"},
		{"ECS_OFFHOST_INTROSPECTION_INTERFACE_NAME", "ecs-init: Berth adds no introspection iptables rule; ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS decides where introspection listens"},
		{"ECS_GMSA_SUPPORTED", "gMSA is not supported"},
		{"ECS_EBSTA_SUPPORTED", "EBS task attach is not supported"},
		{"ECS_AGENT_LABELS", "ecs-init: Berth runs on the host, not in a labelled container"},
		{"ECS_AGENT_APPARMOR_PROFILE", "ecs-init: Berth runs on the host, not in a container with an AppArmor profile"},
		{"ECS_AGENT_RUN_PRIVILEGED", "ecs-init: Berth runs on the host, not in a container"},
		{"ECS_INIT_DOCKER_LOG_FILE_SIZE", "ecs-init: Berth runs on the host, not in a container"},
		{"ECS_INIT_DOCKER_LOG_FILE_NUM", "ecs-init: Berth runs on the host, not in a container"},
		{"ECS_AUDIT_LOGFILE", "the credentials audit log is not implemented"},
		{"ECS_AUDIT_LOGFILE_DISABLED", "the credentials audit log is not implemented"},
	}...)
}

// unsupportedKeys returns the reason for every ECS key Berth does not read, by name.
func unsupportedKeys() map[string]string {
	out := map[string]string{}
	for _, k := range ecsKeys() {
		if k.unsupported != "" {
			out[k.name] = k.unsupported
		}
	}
	return out
}

// unsupportedWarnings returns one warning for each unsupported ECS key that is set, naming the
// source of highest precedence it is set in.
func unsupportedWarnings(env map[string]string, envEntries, jsonEntries []entry, c *Config) []Warning {
	reasons := unsupportedKeys()
	where := map[string]Origin{}
	for _, e := range jsonEntries {
		if _, ok := reasons[e.key]; ok {
			where[e.key] = Origin{Kind: SourceJSONFile, File: c.JSONFile, Line: e.line}
		}
	}
	for _, e := range envEntries {
		if _, ok := reasons[e.key]; ok {
			where[e.key] = Origin{Kind: SourceEnvFile, File: c.EnvFile, Line: e.line}
		}
	}
	for name := range env {
		if _, ok := reasons[name]; ok {
			where[name] = Origin{Kind: SourceEnv}
		}
	}
	names := make([]string, 0, len(where))
	for n := range where {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Warning, 0, len(names))
	for _, n := range names {
		out = append(out, Warning{Key: n, Origin: where[n], Msg: "not supported by Berth, ignored: " + reasons[n]})
	}
	return out
}

// unsupportedREADME is the README's table of the ECS keys Berth does not support.
func unsupportedREADME() string {
	var b strings.Builder
	b.WriteString("| key | why Berth does not read it |\n|---|---|\n")
	keys := ecsKeys()
	sort.Slice(keys, func(i, j int) bool { return keys[i].name < keys[j].name })
	for _, k := range keys {
		if k.unsupported != "" {
			fmt.Fprintf(&b, "| `%s` | %s |\n", k.name, k.unsupported)
		}
	}
	return b.String()
}

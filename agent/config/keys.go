package config

import (
	"time"

	"github.com/berth-agent/berth/agent/logger"
)

// Keys whose values select the configuration files themselves.
const (
	keyEnvFile     = "ECS_ENV_FILE"
	keyJSONFile    = "ECS_AGENT_CONFIG_FILE_PATH"
	keyCluster     = "ECS_CLUSTER"
	keyLocalCPAddr = "ECS_LOCAL_CONTROL_PLANE_ADDR"
	keyLocalCP     = "ECS_LOCAL_CONTROL_PLANE"
	keyIntroAddr   = "ECS_INTROSPECTION_ADDR"
	keyOffhost     = "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS"
	keyRegion      = "AWS_DEFAULT_REGION"
)

// maxTaskPidsLimit is the largest ECS_TASK_PIDS_LIMIT, as the ECS agent bounds it (4 Mi, the largest pid_max).
const maxTaskPidsLimit = 4194304

// Minimums, as in the ECS agent. A value below one is raised to it with a warning.
const (
	minTaskCleanupWait       = time.Minute
	minStopTimeout           = time.Second
	minStartTimeout          = 45 * time.Second
	minCreateTimeout         = time.Minute
	minPullInactivityTimeout = time.Minute
	minImageCleanupInterval  = 10 * time.Minute
	minImagesPerCycle        = 1
	minPullTimeout           = time.Minute
	minLogFileSizeMB         = 0.001
	maxLogFileSizeMB         = 1<<43 - 1 // MiB whose byte value fits an int64
	minLogRollCount          = 1
	minPollingMetricsWait    = 5 * time.Second
	maxPollingMetricsWait    = 20 * time.Second
)

// logLevelAliases maps the ECS agent's spellings Berth's logger does not know. The logger has no
// "none" level yet, so none is its most silent one, crit.
func logLevelAliases() map[string]string {
	return map[string]string{"none": logger.LevelCrit, "critical": logger.LevelCrit}
}

// from is a set of sources a key may be read from.
type from uint8

const (
	fromFlag from = 1 << iota
	fromEnv
	fromEnvFile
	fromJSON
)

// key declares one configuration key.
type key struct {
	name     string // the ECS_* (or AWS_*, DOCKER_*) name: env, env file, and accepted in the JSON file
	jsonName string // the ECS agent's JSON field name, accepted in the JSON file
	flag     string // command-line flag, if any
	def      string // default, parsed like any other value
	noDef    bool   // no default: the field keeps its zero value unless a source sets it
	secret   bool   // never shown, never quoted in errors
	only     from   // the sources the key is read from; zero means all of them
	berth    bool   // a Berth extension, not an ECS agent key
	doc      string // one line for the README and --help
	field    func(c *Config) field
}

// keyTable returns every key the agent reads. It is built on each call so that nothing is shared.
func keyTable() []key {
	return []key{
		{name: keyCluster, jsonName: "Cluster", flag: "cluster", def: "default", doc: "cluster to join; setting it (with a region) selects ecs mode",
			field: func(c *Config) field { return stringField{p: &c.Cluster} }},
		{name: keyRegion, jsonName: "AWSRegion", def: "", doc: "AWS region",
			field: func(c *Config) field { return stringField{p: &c.AWSRegion} }},
		{name: "ECS_BACKEND_HOST", jsonName: "APIEndpoint", def: "", doc: "ECS API endpoint override",
			field: func(c *Config) field { return stringField{p: &c.BackendHost} }},
		{name: "DOCKER_HOST", jsonName: "DockerEndpoint", def: "unix:///var/run/docker.sock", doc: "Docker Engine endpoint",
			field: func(c *Config) field { return stringField{p: &c.DockerHost} }},
		{name: "ECS_DATADIR", jsonName: "DataDir", flag: "datadir", def: "/var/lib/ecs/data", doc: "directory of the state file berth.db",
			field: func(c *Config) field { return stringField{p: &c.DataDir} }},
		{name: "ECS_CHECKPOINT", jsonName: "Checkpoint", def: "true", doc: "persist state to ECS_DATADIR; false keeps it in memory only",
			field: func(c *Config) field { return boolField{p: &c.Checkpoint} }},

		{name: "ECS_LOGLEVEL", jsonName: "LogLevel", flag: "loglevel", def: "info", doc: "debug, info, warn, error, crit or none, in any case; none logs critical messages only (the logger has no silent level yet)",
			field: func(c *Config) field {
				return stringField{p: &c.Log.Level, fold: true, alias: logLevelAliases(),
					oneOf: []string{logger.LevelDebug, logger.LevelInfo, logger.LevelWarn, logger.LevelError, logger.LevelCrit}}
			}},
		{name: "ECS_LOGFILE", jsonName: "LogFile", def: "", doc: "log file; empty logs to stdout only",
			field: func(c *Config) field { return stringField{p: &c.Log.File} }},
		{name: "ECS_LOG_ROLLOVER_TYPE", jsonName: "LogRolloverType", def: "hourly", doc: "size or hourly, in any case; Berth also takes date (hourly) and none",
			field: func(c *Config) field {
				return stringField{p: &c.Log.RolloverType, fold: true, alias: map[string]string{"hourly": logger.RolloverDate},
					oneOf: []string{logger.RolloverSize, logger.RolloverDate, logger.RolloverNone}}
			}},
		{name: "ECS_LOG_MAX_FILE_SIZE_MB", jsonName: "LogMaxFileSizeMB", def: "10", doc: "log size that triggers a roll (size rollover)",
			field: func(c *Config) field {
				return floatField{p: &c.Log.MaxFileSizeMB, min: minLogFileSizeMB, max: maxLogFileSizeMB}
			}},
		{name: "ECS_LOG_MAX_ROLL_COUNT", jsonName: "LogMaxRollCount", def: "24", doc: "rolled log files kept",
			field: func(c *Config) field { return intField{p: &c.Log.MaxRollCount, min: minLogRollCount} }},
		{name: "ECS_LOG_OUTPUT_FORMAT", jsonName: "LogOutputFormat", def: "logfmt", doc: "logfmt or json",
			field: func(c *Config) field {
				return stringField{p: &c.Log.OutputFormat, fold: true, oneOf: []string{logger.FormatLogfmt, logger.FormatJSON}}
			}},

		{name: "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION", jsonName: "TaskCleanupWaitDuration", def: "3h", doc: "how long a stopped task's containers are kept",
			field: func(c *Config) field { return durationField{p: &c.TaskCleanupWaitDuration, min: minTaskCleanupWait} }},
		{name: "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION_JITTER", jsonName: "TaskCleanupWaitDurationJitter", def: "0s", doc: "each stopped task is kept up to this much longer than ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, an amount of its own (fixed by its ARN), so cleanups of tasks stopped together spread out",
			field: func(c *Config) field { return durationField{p: &c.TaskCleanupWaitJitter} }},
		{name: "ECS_CONTAINER_STOP_TIMEOUT", jsonName: "DockerStopTimeout", def: "30s", doc: "time between the stop signal and SIGKILL",
			field: func(c *Config) field { return durationField{p: &c.DockerStopTimeout, min: minStopTimeout} }},
		{name: "ECS_CONTAINER_START_TIMEOUT", jsonName: "ContainerStartTimeout", def: "3m", doc: "timeout of a container start",
			field: func(c *Config) field { return durationField{p: &c.ContainerStartTimeout, min: minStartTimeout} }},
		{name: "ECS_CONTAINER_CREATE_TIMEOUT", jsonName: "ContainerCreateTimeout", def: "4m", doc: "timeout of a container create",
			field: func(c *Config) field { return durationField{p: &c.ContainerCreateTimeout, min: minCreateTimeout} }},
		{name: "ECS_IMAGE_PULL_TIMEOUT", jsonName: "ImagePullTimeout", def: "2h", doc: "overall deadline of one image pull, retries included",
			field: func(c *Config) field { return durationField{p: &c.ImagePullTimeout, min: minPullTimeout} }},
		{name: "ECS_IMAGE_PULL_INACTIVITY_TIMEOUT", jsonName: "ImagePullInactivityTimeout", def: "1m", doc: "a pull attempt with no progress for this long is cancelled and retried",
			field: func(c *Config) field {
				return durationField{p: &c.ImagePullInactivityTimeout, min: minPullInactivityTimeout}
			}},
		{name: "ECS_IMAGE_PULL_BEHAVIOR", jsonName: "ImagePullBehavior", def: "default", doc: "default, always, once or prefer-cached",
			field: func(c *Config) field {
				return stringField{p: (*string)(&c.ImagePullBehavior), oneOf: []string{"default", "always", "once", "prefer-cached"}}
			}},
		{name: "ECS_IMAGE_PULL_MAX_CONCURRENT", def: "4", berth: true, doc: "host-wide limit on image pulls running at once (each pull fetches 3 layers at a time)",
			field: func(c *Config) field { return intField{p: &c.ImagePullMaxConcurrent, min: 1} }},
		{name: "ECS_IMAGE_CLEANUP_INTERVAL", jsonName: "ImageCleanupInterval", def: "30m", doc: "how often unused images are removed",
			field: func(c *Config) field { return durationField{p: &c.ImageCleanupInterval, min: minImageCleanupInterval} }},
		{name: "ECS_IMAGE_MINIMUM_CLEANUP_AGE", jsonName: "MinimumImageDeletionAge", def: "1h", doc: "an image younger than this is kept",
			field: func(c *Config) field { return durationField{p: &c.ImageMinimumCleanupAge} }},
		{name: "ECS_NUM_IMAGES_DELETE_PER_CYCLE", jsonName: "NumImagesToDeletePerCycle", def: "5", doc: "images removed per cleanup cycle",
			field: func(c *Config) field { return intField{p: &c.NumImagesToDeletePerCycle, min: minImagesPerCycle} }},
		{name: "ECS_DISABLE_IMAGE_CLEANUP", jsonName: "ImageCleanupDisabled", def: "false", doc: "turn image cleanup off",
			field: func(c *Config) field { return boolField{p: &c.ImageCleanupDisabled} }},

		{name: "ECS_DISK_HIGH_WATER_PERCENT", def: "85", berth: true, doc: "when the Docker data filesystem is fuller than this, stopped tasks and unused images are cleaned up at once",
			field: func(c *Config) field { return intField{p: &c.DiskHighWaterPercent, min: 1} }},
		{name: "ECS_DISK_LOW_WATER_PERCENT", def: "75", berth: true, doc: "pressure cleanup goes on until the Docker data filesystem is this full",
			field: func(c *Config) field { return intField{p: &c.DiskLowWaterPercent} }},
		{name: "ECS_ENGINE_AUTH_TYPE", jsonName: "EngineAuthType", def: "", doc: "docker or dockercfg",
			field: func(c *Config) field {
				return stringField{p: &c.EngineAuthType, oneOf: []string{"", "docker", "dockercfg"}}
			}},
		{name: "ECS_ENGINE_AUTH_DATA", jsonName: "EngineAuthData", def: "", secret: true, doc: "registry credentials, a JSON object per registry (never logged)",
			field: func(c *Config) field { return secretField{p: &c.EngineAuthData} }},

		{name: "ECS_RESERVED_MEMORY", jsonName: "ReservedMemory", def: "0", doc: "MiB of memory kept back from tasks",
			field: func(c *Config) field { return intField{p: &c.ReservedMemoryMiB} }},
		{name: "ECS_RESERVED_PORTS", jsonName: "ReservedPorts", def: "[22, 2375, 2376, 51678, 51679]", doc: "TCP host ports tasks may not use",
			field: func(c *Config) field { return portsField{p: &c.ReservedPorts} }},
		{name: "ECS_RESERVED_PORTS_UDP", jsonName: "ReservedPortsUDP", def: "[]", doc: "UDP host ports tasks may not use",
			field: func(c *Config) field { return portsField{p: &c.ReservedPortsUDP} }},
		{name: "ECS_AVAILABLE_LOGGING_DRIVERS", jsonName: "AvailableLoggingDrivers", def: `["json-file","none"]`, doc: "logging drivers registered as capabilities; tasks may use these",
			field: func(c *Config) field { return listField{p: &c.AvailableLoggingDrivers, check: checkLoggingDriver} }},
		{name: "ECS_INSTANCE_ATTRIBUTES", jsonName: "InstanceAttributes", def: "{}", doc: "JSON object of string attributes registered with the instance",
			field: func(c *Config) field { return attributesField{p: &c.InstanceAttributes} }},
		{name: "ECS_DISABLE_PRIVILEGED", jsonName: "PrivilegedDisabled", def: "false", doc: "refuse privileged containers",
			field: func(c *Config) field { return boolField{p: &c.PrivilegedDisabled} }},

		{name: "ECS_ENABLE_TASK_IAM_ROLE", jsonName: "TaskIAMRoleEnabled", def: "true", doc: "serve task role credentials to bridge and awsvpc tasks (true as on the ECS-optimized AMI)",
			field: func(c *Config) field { return boolField{p: &c.TaskIAMRoleEnabled} }},
		{name: "ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST", jsonName: "TaskIAMRoleEnabledForNetworkHost", def: "true", doc: "serve task role credentials to host-network tasks too (true as on the ECS-optimized AMI)",
			field: func(c *Config) field { return boolField{p: &c.TaskIAMRoleNetworkHost} }},
		{name: "ECS_ENABLE_CONTAINER_METADATA", jsonName: "ContainerMetadataEnabled", def: "false", doc: "write each container's metadata file under ECS_DATADIR/metadata and point ECS_CONTAINER_METADATA_FILE at it",
			field: func(c *Config) field { return boolField{p: &c.ContainerMetadataEnabled} }},
		{name: "ECS_ENABLE_TASK_CPU_MEM_LIMIT", jsonName: "TaskCPUMemLimit", def: "true", doc: "give each task with task-level cpu or memory its own cgroup (ECS_CGROUP_PATH/ecs/<task id>) with those limits",
			field: func(c *Config) field { return boolField{p: &c.TaskCPUMemLimit} }},
		{name: "ECS_CGROUP_PATH", jsonName: "CgroupPath", def: "/sys/fs/cgroup", doc: "the cgroup filesystem task cgroups are made in",
			field: func(c *Config) field { return stringField{p: &c.CgroupPath} }},
		{name: "ECS_CGROUP_CPU_PERIOD", jsonName: "CgroupCPUPeriod", def: "100ms", doc: "CFS period of a task cgroup's CPU quota (8ms to 100ms)",
			field: func(c *Config) field { return durationField{p: &c.CgroupCPUPeriod, min: 8 * time.Millisecond} }},
		{name: "ECS_DYNAMIC_HOST_PORT_RANGE", jsonName: "DynamicHostPortRange", def: "", doc: "host ports (first-last) that containerPortRange mappings get in bridge mode; empty: the kernel's ephemeral range, else 49153-65535",
			field: func(c *Config) field { return portRangeField{p: &c.DynamicHostPortRange} }},
		{name: "ECS_TASK_METADATA_RPS_LIMIT", def: "40,60", doc: "requests per second (steady,burst) each container may make to the task endpoint",
			field: func(c *Config) field { return rateField{steady: &c.TaskMetadataRPS, burst: &c.TaskMetadataBurst} }},
		{name: "ECS_TASK_CREDENTIALS_BIND_TO_TASK", def: "true", berth: true, doc: "answer a bridge or awsvpc task's role credentials only to its own containers' addresses and the host; false: to anyone with the ID, as the ECS agent does",
			field: func(c *Config) field { return boolField{p: &c.TaskCredentialsBindToTask} }},
		{name: "ECS_ENABLE_TASK_ENI", jsonName: "TaskENIEnabled", def: "false", doc: "enable awsvpc tasks and check the CNI plugins at start-up",
			field: func(c *Config) field { return boolField{p: &c.TaskENIEnabled} }},
		{name: "ECS_CNI_PLUGINS_PATH", jsonName: "CNIPluginsPath", def: "/usr/lib/berth/cni", doc: "directory of the CNI plugin binaries",
			field: func(c *Config) field { return stringField{p: &c.CNIPluginsPath} }},
		{name: "ECS_AWSVPC_BLOCK_IMDS", jsonName: "AWSVPCBlockInstanceMetdata", def: "false", doc: "make 169.254.169.254 unreachable from awsvpc tasks",
			field: func(c *Config) field { return boolField{p: &c.AWSVPCBlockIMDS} }},
		{name: "ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES", jsonName: "AWSVPCAdditionalLocalRoutes", def: "[]", doc: "CIDRs routed via the task bridge instead of the task ENI",
			field: func(c *Config) field { return cidrListField{p: &c.AWSVPCAdditionalLocalRoutes} }},
		{name: "OverrideAWSVPCLocalIPv4Address", jsonName: "OverrideAWSVPCLocalIPv4Address", only: fromJSON, def: "", doc: "static IPv4 address/prefix of the task bridge interface (JSON file only)",
			field: func(c *Config) field { return staticAddrField{p: &c.OverrideAWSVPCLocalIPv4Address} }},

		{name: "ECS_DISABLE_METRICS", jsonName: "DisableMetrics", def: "false", doc: "do not gather task metrics",
			field: func(c *Config) field { return boolField{p: &c.MetricsDisabled} }},
		{name: "ECS_TASK_PIDS_LIMIT", jsonName: "TaskPidsLimit", def: "0", doc: "the most processes each task's containers may have together (pids.max of the task cgroup; every task then gets one); 0: no limit; needs ECS_ENABLE_TASK_CPU_MEM_LIMIT",
			field: func(c *Config) field { return intField{p: &c.TaskPidsLimit, min: 0, max: maxTaskPidsLimit} }},
		{name: "ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE", jsonName: "OverrideAWSLogsExecutionRole", def: "false", doc: "let the awslogs driver of a task with an execution role use the role's credentials, and register execution-role-awslogs (with awslogs among the logging drivers and ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST)",
			field: func(c *Config) field { return boolField{p: &c.AWSLogsExecutionRole} }},
		{name: "ECS_EXCLUDE_IPV6_PORTBINDING", jsonName: "ShouldExcludeIPv6PortBinding", def: "true", doc: "leave IPv6 host port bindings (Docker's \"::\" ones) out of the state changes sent to Amazon ECS",
			field: func(c *Config) field { return boolField{p: &c.ExcludeIPv6PortBindings} }},
		{name: "ECS_DISABLE_TASK_METADATA_AZ", jsonName: "TaskMetadataAZDisabled", def: "false", doc: "leave AvailabilityZone out of the task metadata endpoint's answers (in ecs mode on EC2 they carry the instance's)",
			field: func(c *Config) field { return boolField{p: &c.TaskMetadataAZDisabled} }},
		{name: "ECS_DISABLE_DOCKER_HEALTH_CHECK", jsonName: "DisableDockerHealthCheck", def: "false", doc: "register without the container-health-check capability, so Amazon ECS places no task with a health check here, and publish no container health; with ECS_DISABLE_METRICS too, no TCS session",
			field: func(c *Config) field { return boolField{p: &c.DockerHealthCheckDisabled} }},
		{name: "ECS_POLL_METRICS", jsonName: "PollMetrics", def: "false", doc: "sample container stats every ECS_POLLING_METRICS_WAIT_DURATION instead of every second",
			field: func(c *Config) field { return boolField{p: &c.PollMetrics} }},
		{name: "ECS_POLLING_METRICS_WAIT_DURATION", jsonName: "PollingMetricsWaitDuration", def: "10s", doc: "interval of polled container stats (5s to 20s)",
			field: func(c *Config) field {
				return durationField{p: &c.PollingMetricsWaitDuration, min: minPollingMetricsWait, max: maxPollingMetricsWait}
			}},
		{name: "ECS_ENABLE_SPOT_INSTANCE_DRAINING", jsonName: "SpotInstanceDrainingEnabled", def: "false", doc: "on a spot interruption notice, set the container instance to DRAINING",
			field: func(c *Config) field { return boolField{p: &c.SpotInstanceDrainingEnabled} }},
		{name: "ECS_WARM_POOLS_CHECK", jsonName: "WarmPoolsSupport", def: "false", doc: "wait until the Auto Scaling target lifecycle state is InService before registering",
			field: func(c *Config) field { return boolField{p: &c.WarmPoolsCheck} }},
		{name: "ECS_CONTAINER_INSTANCE_TAGS", jsonName: "ContainerInstanceTags", def: "{}", doc: "JSON object of tags registered with the container instance (keys up to 128, values up to 256 characters)",
			field: func(c *Config) field { return tagsField{p: &c.ContainerInstanceTags} }},
		{name: "ECS_CONTAINER_INSTANCE_PROPAGATE_TAGS_FROM", jsonName: "ContainerInstancePropagateTagsFrom", def: "none", doc: "none or ec2_instance: register the EC2 instance's tags (from IMDS instance metadata tags) with the container instance",
			field: func(c *Config) field {
				return stringField{p: &c.ContainerInstancePropagateTagsFrom, oneOf: []string{PropagateTagsNone, PropagateTagsEC2Instance}}
			}},
		{name: "ECS_EXTERNAL", jsonName: "External", def: "false", doc: "the host is outside EC2 (ECS Anywhere): ecs mode asks IMDS nothing and registers no EC2 identity",
			field: func(c *Config) field { return boolField{p: &c.External} }},
		{name: "ECS_SELINUX_CAPABLE", jsonName: "SELinuxCapable", def: "false", doc: "SELinux is available: register the selinux security-options capability",
			field: func(c *Config) field { return boolField{p: &c.SELinuxCapable} }},
		{name: "ECS_APPARMOR_CAPABLE", jsonName: "AppArmorCapable", def: "false", doc: "AppArmor is available: register the apparmor security-options capability",
			field: func(c *Config) field { return boolField{p: &c.AppArmorCapable} }},
		{name: "ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP", jsonName: "DeleteNonECSImagesEnabled", def: "false", doc: "each image cleanup cycle also removes, with the removals it has left, images Berth did not pull that no container uses, smallest first",
			field: func(c *Config) field { return boolField{p: &c.UntrackedImageCleanup} }},
		{name: "NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE", jsonName: "NonECSMinimumImageDeletionAge", def: "1h", doc: "an untracked image created more recently than this is kept",
			field: func(c *Config) field { return durationField{p: &c.UntrackedImageMinimumAge} }},
		{name: "ECS_EXCLUDE_UNTRACKED_IMAGE", jsonName: "ImageCleanupExclusionList", def: "", doc: "images (name:tag, comma-separated) image cleanup never removes, pulled by Berth or not; the pause image is always kept",
			field: func(c *Config) field { return listField{p: &c.ImageCleanupExclusionList} }},
		{name: keyOffhost, def: "false", doc: "true: the introspection API listens on all addresses (:51678 unless ECS_INTROSPECTION_ADDR is set), unauthenticated and read-only; false: a non-loopback ECS_INTROSPECTION_ADDR is refused",
			field: func(c *Config) field { return boolField{p: &c.OffhostIntrospectionAccess} }},

		{name: "ECS_AWSVPC_LOCAL_SUBNET", def: "172.31.250.0/24", berth: true, doc: "local mode: the subnet of the bridge network with NAT that stands in for an awsvpc task's ENI",
			field: func(c *Config) field { return subnetField{p: &c.AWSVPCLocalSubnet} }},
		{name: "ECS_PAUSE_IMAGE_TARBALL", def: "/usr/lib/berth/pause.tar", berth: true, doc: "the pause image (berth/pause:latest) as a docker save tarball, loaded at start when missing",
			field: func(c *Config) field { return stringField{p: &c.PauseImageTarball} }},
		{name: "ECS_REGISTRY_REQUIRE", flag: "registry-require", def: "", berth: true, doc: "registry vendors that must be reachable at start-up (only ecr is known)",
			field: func(c *Config) field { return setField{p: &c.Registry.Require, check: checkVendor} }},
		{name: "ECS_REGISTRY_ECR_REGIONS", noDef: true, berth: true, doc: "regions whose ECR images get credentials; unset = the detected region, empty = off",
			field: func(c *Config) field { return ecrRegionsField{p: &c.Registry.ECRRegions} }},
		{name: "ECS_REGISTRY_ECR_INCLUDE_ACCOUNTS", def: "", berth: true, doc: "accounts whose ECR images get credentials (default all)",
			field: func(c *Config) field { return setField{p: &c.Registry.IncludeAccounts, check: checkAccount} }},
		{name: "ECS_REGISTRY_ECR_EXCLUDE_ACCOUNTS", def: "602401143452,918309763551", berth: true, doc: "accounts whose ECR images never get credentials",
			field: func(c *Config) field { return setField{p: &c.Registry.ExcludeAccounts, check: checkAccount} }},

		{name: "ECS_TASK_SECURITY_POLICY", def: "none", berth: true, doc: "none, or baseline: refuse tasks that ask for the host (privileged, capabilities beyond Docker's default set, host pid, ipc or network namespaces, devices, binds of /, /proc, /sys, the Docker or containerd socket or ECS_DATADIR, unconfined seccomp, AppArmor, SELinux or system paths), naming the field",
			field: func(c *Config) field {
				return stringField{p: &c.TaskSecurityPolicy, fold: true, oneOf: []string{TaskSecurityPolicyNone, TaskSecurityPolicyBaseline}}
			}},
		{name: "ECS_BRIDGE_BLOCK_IMDS", def: "false", berth: true, doc: "make 169.254.169.254 unreachable from bridge-mode tasks (an iptables DROP in DOCKER-USER for the Docker bridge, kept in place while the agent runs)",
			field: func(c *Config) field { return boolField{p: &c.BridgeBlockIMDS} }},

		{name: "ECS_EXEC_DEPS_DIR", def: "/var/lib/ecs/deps/execute-command", berth: true, doc: "ECS Exec: the SSM agent's binaries (bin/<version>/), CA bundle (certs/tls-ca-bundle.pem) and generated configuration (config/); an absolute path",
			field: func(c *Config) field { return stringField{p: &c.ExecDepsDir, abs: true} }},
		{name: "ECS_EXEC_LOG_DIR", def: "/var/log/ecs/exec", berth: true, doc: "ECS Exec: the SSM agents' logs, in <task ID>/<container>; an absolute path",
			field: func(c *Config) field { return stringField{p: &c.ExecLogDir, abs: true} }},
		{name: "ECS_STATIC_TASKS_DIR", def: "", berth: true, doc: "directory of task definitions kept running on this host",
			field: func(c *Config) field { return stringField{p: &c.StaticTasksDir} }},
		{name: keyLocalCP, def: "false", berth: true, doc: "run the embedded control plane (local mode) even with ECS_CLUSTER set, which then names its cluster",
			field: func(c *Config) field { return boolField{p: &c.LocalControlPlane} }},
		{name: keyLocalCPAddr, def: "127.0.0.1:51677", berth: true, doc: "local mode: listen address of the embedded control plane (ECS API on POST /, ACS on /ws); a loopback address, as it serves its own host only",
			field: func(c *Config) field { return stringField{p: &c.LocalControlPlaneAddr} }},
		{name: keyIntroAddr, def: "127.0.0.1:51678", berth: true, doc: "listen address of the introspection API",
			field: func(c *Config) field { return stringField{p: &c.IntrospectionAddr} }},

		{name: keyEnvFile, flag: "ecs-config", def: DefaultEnvFile, only: fromFlag | fromEnv, berth: true, doc: "the env file to read",
			field: func(c *Config) field { return stringField{p: &c.EnvFile} }},
		{name: keyJSONFile, flag: "config-file", def: DefaultJSONFile, only: fromFlag | fromEnv | fromEnvFile, doc: "the JSON config file to read",
			field: func(c *Config) field { return stringField{p: &c.JSONFile} }},
	}
}

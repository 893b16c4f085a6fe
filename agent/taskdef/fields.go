package taskdef

import (
	"regexp"
	"sync"
)

// Support says what Berth does with a field of an ECS task definition.
type Support int

// The three answers. Every field of Amazon ECS's TaskDefinition and ContainerDefinition (and of
// RegisterTaskDefinition's input) has one; a test walks the AWS SDK's types and fails on a field
// with none.
const (
	// Honoured: Berth does what Amazon ECS does with the field.
	Honoured Support = iota + 1
	// Informational: the field describes the definition to the control plane (its ARN, status,
	// placement, tags) and changes nothing on the host; Berth accepts it and otherwise ignores it,
	// as the ECS agent does.
	Informational
	// Refused: Berth cannot do what the field asks. A definition that sets it is refused with an
	// error naming the field, rather than run without part of itself.
	Refused
)

// String names the support as the README's table does.
func (s Support) String() string {
	switch s {
	case Honoured:
		return "honoured"
	case Informational:
		return "informational"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Field is one entry of the table of fields. Path is the JSON path without list indices, e.g.
// containerDefinitions.linuxParameters.capabilities.add. The children of a Refused or Informational
// field share its answer; those of an Honoured one have entries of their own.
type Field struct {
	Path    string
	Support Support
	Note    string // why a field is refused or informational
}

// The notes of the refused families of fields.
const (
	notYet        = "not supported by Berth yet"
	fargateOnly   = "applies to AWS Fargate only"
	windowsOnly   = "applies to Windows containers only"
	controlPlane  = "read by the control plane; nothing to do on the host"
	serviceConn   = "kept; read by Service Connect, which Berth does not run"
	refusedGPU    = "GPUs and inference accelerators are not supported by Berth yet"
	refusedVolume = "this volume type is not supported by Berth yet"
)

// Fields returns the table of every task definition field and what Berth does with it, in the
// order of the README's table. The caller must not modify it.
func Fields() []Field { return fieldTable() }

var fieldTable = sync.OnceValue(func() []Field {
	h := func(paths ...string) []Field {
		out := make([]Field, len(paths))
		for i, p := range paths {
			out[i] = Field{Path: p, Support: Honoured}
		}
		return out
	}
	var f []Field
	add := func(fs ...Field) { f = append(f, fs...) }
	add(h("family", "revision", "taskRoleArn", "executionRoleArn", "networkMode", "cpu", "memory", "pidMode", "ipcMode", "enableFaultInjection")...)
	add(h("containerDefinitions", "volumes")...)
	add(
		Field{"requiresCompatibilities", Informational, "kept; Berth runs EC2 and EXTERNAL tasks alike"},
		Field{"placementConstraints", Informational, controlPlane},
		Field{"runtimePlatform", Informational, controlPlane},
		Field{"tags", Informational, controlPlane},
		Field{"taskDefinitionArn", Informational, "set by the control plane"},
		Field{"status", Informational, "set by the control plane"},
		Field{"compatibilities", Informational, "set by the control plane"},
		Field{"requiresAttributes", Informational, "set by the control plane"},
		Field{"registeredAt", Informational, "set by the control plane"},
		Field{"registeredBy", Informational, "set by the control plane"},
		Field{"deregisteredAt", Informational, "set by the control plane"},
		Field{"deleteRequestedAt", Informational, "set by the control plane"},
		Field{"ephemeralStorage", Refused, fargateOnly},
		Field{"inferenceAccelerators", Refused, refusedGPU},
		Field{"proxyConfiguration", Refused, "App Mesh proxy configuration is " + notYet},
		Field{"trustedExecutionConfiguration", Refused, notYet},
	)
	add(h("volumes.name", "volumes.host", "volumes.host.sourcePath", "volumes.dockerVolumeConfiguration",
		"volumes.dockerVolumeConfiguration.scope", "volumes.dockerVolumeConfiguration.autoprovision",
		"volumes.dockerVolumeConfiguration.driver", "volumes.dockerVolumeConfiguration.driverOpts",
		"volumes.dockerVolumeConfiguration.labels")...)
	add(
		Field{"volumes.efsVolumeConfiguration", Refused, "EFS: " + refusedVolume},
		Field{"volumes.fsxWindowsFileServerVolumeConfiguration", Refused, "FSx for Windows File Server: " + refusedVolume},
		Field{"volumes.configuredAtLaunch", Refused, "EBS volumes configured at launch: " + refusedVolume},
		Field{"volumes.s3filesVolumeConfiguration", Refused, "S3 Files: " + refusedVolume},
	)
	const c = "containerDefinitions."
	add(h(c+"name", c+"image", c+"cpu", c+"memory", c+"memoryReservation", c+"essential", c+"entryPoint",
		c+"command", c+"environment", c+"environment.name", c+"environment.value",
		c+"environmentFiles", c+"environmentFiles.value", c+"environmentFiles.type",
		c+"secrets", c+"secrets.name", c+"secrets.valueFrom",
		c+"portMappings", c+"portMappings.containerPort", c+"portMappings.hostPort", c+"portMappings.protocol",
		c+"portMappings.containerPortRange",
		c+"mountPoints", c+"mountPoints.sourceVolume", c+"mountPoints.containerPath", c+"mountPoints.readOnly",
		c+"volumesFrom", c+"volumesFrom.sourceContainer", c+"volumesFrom.readOnly",
		c+"dependsOn", c+"dependsOn.containerName", c+"dependsOn.condition",
		c+"healthCheck", c+"healthCheck.command", c+"healthCheck.interval", c+"healthCheck.timeout",
		c+"healthCheck.retries", c+"healthCheck.startPeriod",
		c+"startTimeout", c+"stopTimeout", c+"user", c+"workingDirectory",
		c+"ulimits", c+"ulimits.name", c+"ulimits.softLimit", c+"ulimits.hardLimit",
		c+"dockerLabels", c+"logConfiguration", c+"logConfiguration.logDriver", c+"logConfiguration.options",
		c+"logConfiguration.secretOptions", c+"logConfiguration.secretOptions.name",
		c+"logConfiguration.secretOptions.valueFrom",
		c+"privileged", c+"readonlyRootFilesystem",
		c+"linuxParameters", c+"linuxParameters.capabilities", c+"linuxParameters.capabilities.add",
		c+"linuxParameters.capabilities.drop", c+"linuxParameters.devices", c+"linuxParameters.devices.hostPath",
		c+"linuxParameters.devices.containerPath", c+"linuxParameters.devices.permissions",
		c+"linuxParameters.initProcessEnabled", c+"linuxParameters.sharedMemorySize", c+"linuxParameters.tmpfs",
		c+"linuxParameters.tmpfs.containerPath", c+"linuxParameters.tmpfs.size", c+"linuxParameters.tmpfs.mountOptions",
		c+"linuxParameters.maxSwap", c+"linuxParameters.swappiness",
		c+"links", c+"hostname", c+"dnsServers", c+"dnsSearchDomains", c+"extraHosts", c+"extraHosts.hostname",
		c+"extraHosts.ipAddress", c+"systemControls", c+"systemControls.namespace", c+"systemControls.value",
		c+"dockerSecurityOptions", c+"pseudoTerminal", c+"interactive", c+"disableNetworking",
		c+"repositoryCredentials", c+"repositoryCredentials.credentialsParameter",
		c+"restartPolicy", c+"restartPolicy.enabled", c+"restartPolicy.ignoredExitCodes",
		c+"restartPolicy.restartAttemptPeriod",
		c+"firelensConfiguration", c+"firelensConfiguration.type", c+"firelensConfiguration.options")...)
	add(
		Field{c + "portMappings.name", Informational, serviceConn},
		Field{c + "portMappings.appProtocol", Informational, serviceConn},
		Field{c + "versionConsistency", Informational, "the control plane resolves image tags to digests"},
		Field{c + "resourceRequirements", Refused, refusedGPU},
		Field{c + "credentialSpecs", Refused, windowsOnly + " (gMSA)"},
	)
	return f
})

var fieldIndex = sync.OnceValue(func() map[string]Field {
	m := make(map[string]Field, len(fieldTable()))
	for _, f := range fieldTable() {
		m[f.Path] = f
	}
	return m
})

var listIndex = regexp.MustCompile(`\[[^\]]*\]`)

// lookupField returns the table's entry for a JSON path as errors spell it (with list indices and
// map keys, e.g. containerDefinitions[2].resourceRequirements), or false for a field ECS does not
// have.
func lookupField(path string) (Field, bool) {
	f, ok := fieldIndex()[listIndex.ReplaceAllString(path, "")]
	return f, ok
}

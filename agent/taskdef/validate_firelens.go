package taskdef

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/berth-agent/berth/agent/task"
)

// The firelensConfiguration options ECS takes, and the log options of an awsfirelens container the
// agent reads itself rather than pass to the router's output.
const (
	firelensOptionECSLogMetadata  = "enable-ecs-log-metadata" // true (the default) or false
	firelensOptionConfigFileType  = "config-file-type"        // file or s3
	firelensOptionConfigFileValue = "config-file-value"       // a path in the router's image, or an S3 object ARN

	firelensConfigFile = "file"
	firelensConfigS3   = "s3"

	// firelensIncludePattern and firelensExcludePattern filter a container's records by regex;
	// firelensBufferLimit is the Docker driver's buffer; none of them is an output option.
	firelensIncludePattern = "include-pattern"
	firelensExcludePattern = "exclude-pattern"
	firelensBufferLimit    = "log-driver-buffer-limit"
)

// firelensOutputKey returns the log option that names the output plugin of an awsfirelens container
// for a router of type routerType: Name for fluentbit, @type for fluentd; "" for another type.
func firelensOutputKey(routerType string) string {
	switch routerType {
	case task.FirelensFluentbit:
		return "Name"
	case task.FirelensFluentd:
		return "@type"
	}
	return ""
}

// firelens checks FireLens as ECS's RegisterTaskDefinition does: at most one log router per task,
// of a known type with known options; an awsfirelens container needs the router, is not the router
// itself, and names its output plugin whenever it gives the output options.
func (v *validator) firelens() {
	router := -1
	for i := range v.def.ContainerDefinitions {
		c := &v.def.ContainerDefinitions[i]
		if c.FirelensConfiguration == nil {
			continue
		}
		p := fmt.Sprintf("containerDefinitions[%d]", i)
		if router >= 0 {
			v.fail(p+".firelensConfiguration", "a task has at most one log router and container %q already is one",
				v.def.ContainerDefinitions[router].Name)
		} else {
			router = i
		}
		v.firelensConfiguration(p+".firelensConfiguration", c.FirelensConfiguration)
		if lc := c.LogConfiguration; lc != nil && lc.LogDriver == task.LogDriverFirelens {
			v.fail(p+".logConfiguration.logDriver", "the log router cannot log through itself (%s)", task.LogDriverFirelens)
		}
	}
	for i := range v.def.ContainerDefinitions {
		c := &v.def.ContainerDefinitions[i]
		lc := c.LogConfiguration
		if lc == nil || lc.LogDriver != task.LogDriverFirelens || c.FirelensConfiguration != nil {
			continue
		}
		p := fmt.Sprintf("containerDefinitions[%d].logConfiguration", i)
		if router < 0 {
			v.fail(p+".logDriver", "%s needs a log router: a container of the task with a firelensConfiguration", task.LogDriverFirelens)
			continue
		}
		key := firelensOutputKey(v.def.ContainerDefinitions[router].FirelensConfiguration.Type)
		if key == "" {
			continue // the router's type is reported
		}
		if _, named := lc.Options[key]; named {
			continue
		}
		outputs := len(lc.SecretOptions)
		for k := range lc.Options {
			if k != firelensIncludePattern && k != firelensExcludePattern && k != firelensBufferLimit {
				outputs++
			}
		}
		if outputs > 0 {
			v.fail(p+".options", "%s (the output plugin) is required with output options for a %s log router",
				key, v.def.ContainerDefinitions[router].FirelensConfiguration.Type)
		}
	}
}

// firelensConfiguration checks a router's type and options.
func (v *validator) firelensConfiguration(p string, fc *FirelensConfiguration) {
	switch fc.Type {
	case "":
		v.fail(p+".type", "required")
	case task.FirelensFluentbit, task.FirelensFluentd:
	default:
		v.fail(p+".type", "unknown type %q (want fluentbit or fluentd)", clip(fc.Type))
	}
	op := func(k string) string { return fmt.Sprintf("%s.options[%q]", p, k) }
	for _, k := range slices.Sorted(maps.Keys(fc.Options)) {
		val := fc.Options[k]
		switch k {
		case firelensOptionECSLogMetadata:
			if val != "true" && val != "false" {
				v.fail(op(k), "%q is neither true nor false", clip(val))
			}
		case firelensOptionConfigFileType:
			if val != firelensConfigFile && val != firelensConfigS3 {
				v.fail(op(k), "unknown config file type %q (want file or s3)", clip(val))
			}
			if _, ok := fc.Options[firelensOptionConfigFileValue]; !ok {
				v.fail(op(firelensOptionConfigFileValue), "required with %s", firelensOptionConfigFileType)
			}
		case firelensOptionConfigFileValue:
			switch fc.Options[firelensOptionConfigFileType] {
			case "":
				v.fail(op(firelensOptionConfigFileType), "required with %s", firelensOptionConfigFileValue)
			case firelensConfigFile:
				if !strings.HasPrefix(val, "/") {
					v.fail(op(k), "%q is not an absolute path in the router's image", clip(val))
				}
			case firelensConfigS3:
				if !isS3ObjectARN(val) {
					v.fail(op(k), "%q is not an S3 object ARN (arn:aws:s3:::bucket/key.conf)", clip(val))
				}
			}
		default:
			v.fail(op(k), "unknown option (want %s, %s or %s)", firelensOptionECSLogMetadata,
				firelensOptionConfigFileType, firelensOptionConfigFileValue)
		}
	}
}

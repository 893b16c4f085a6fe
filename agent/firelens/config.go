package firelens

// STUB of fgen's agent/firelens/config.go, only so that the feature compiles and its tests run
// before fgen's lands; the lead merges fgen's file over this one.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-agent/berth/agent/task"
)

// The firelensConfiguration options.
const (
	OptionEnableECSLogMetadata = "enable-ecs-log-metadata"
	OptionConfigFileType       = "config-file-type"
	OptionConfigFileValue      = "config-file-value"
)

// Spec is what the router's configuration is generated from.
type Spec struct {
	Type        string
	NetworkMode task.NetworkMode
	TaskID      string
	Metadata    *Metadata
	External    External
	MemBufLimit string
	Outputs     []Output
}

// Metadata is the ECS metadata added to every record.
type Metadata struct{ Cluster, TaskARN, TaskDefinition, EC2InstanceID string }

// External is an included configuration file: Kind "file" or "s3", Path in the router.
type External struct{ Kind, Path string }

// Output is one awsfirelens container's output.
type Output struct {
	Container string
	Options   map[string]string
}

// Generate returns the router's configuration.
func Generate(s Spec) ([]byte, error) {
	var b strings.Builder
	for _, o := range s.Outputs {
		if o.Options["Name"] == "" && o.Options["@type"] == "" {
			return nil, fmt.Errorf("container %s: %w", o.Container, errors.New("no Name"))
		}
		fmt.Fprintf(&b, "[OUTPUT]\n    Match %s\n", OutputTag(o.Container, s.TaskID))
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range o.Options {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s %s\n", k, o.Options[k])
		}
	}
	return []byte(b.String()), nil
}

// MemBufLimit returns the router's memory buffer limit.
func MemBufLimit(memory, memoryReservation int) string { return "" }

// OutputTag is the tag of a container's records.
func OutputTag(container, taskID string) string { return container + "-firelens-" + taskID }

// ConfigPath is where the generated file goes in the router.
func ConfigPath(typ string) string {
	if typ == task.FirelensFluentd {
		return "/fluentd/etc/fluent.conf"
	}
	return "/fluent-bit/etc/fluent-bit.conf"
}

// S3ConfigPath is where a downloaded S3 config goes in the router.
func S3ConfigPath(typ string) string {
	if typ == task.FirelensFluentd {
		return "/fluentd/etc/external.conf"
	}
	return "/fluent-bit/etc/external.conf"
}

// Package firelens is FireLens: a task's log router (Fluent Bit or Fluentd) and the containers
// that log through it with the awsfirelens driver.
package firelens

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/berth-agent/berth/agent/task"
)

// The options of a router's firelensConfiguration, as the ECS agent reads them
// (agent/taskresource/firelens/firelens_unix.go).
const (
	// OptionEnableECSLogMetadata is "true" (the default) or "false": whether the ECS metadata fields
	// are added to every record.
	OptionEnableECSLogMetadata = "enable-ecs-log-metadata"
	// OptionConfigFileType is ConfigFileTypeFile or ConfigFileTypeS3: the operator's own
	// configuration, included after the filters.
	OptionConfigFileType = "config-file-type"
	// OptionConfigFileValue is a path in the router image (file) or an S3 object ARN (s3).
	OptionConfigFileValue = "config-file-value"
)

// The kinds of an External configuration (OptionConfigFileType's values).
const (
	ConfigFileTypeFile = "file"
	ConfigFileTypeS3   = "s3"
)

// The log options of an awsfirelens container that Generate does not pass through to its output.
const (
	// OptionIncludePattern is a regular expression: only records whose log matches it are kept.
	OptionIncludePattern = "include-pattern"
	// OptionExcludePattern is a regular expression: records whose log matches it are dropped.
	OptionExcludePattern = "exclude-pattern"
	// OptionLogDriverBufferLimit is the Docker fluentd driver's buffer limit, never an output option.
	OptionLogDriverBufferLimit = "log-driver-buffer-limit"
)

// SocketPath is the unix socket in the router on which it takes the app containers' records.
const SocketPath = "/var/run/fluent.sock"

// The values the ECS agent writes (agent/taskresource/firelens/firelensconfig_unix.go).
const (
	forwardPort         = "24224"
	bridgeBind          = "0.0.0.0"
	awsvpcBind          = "127.0.0.1"
	healthCheckBind     = "127.0.0.1"
	healthCheckPort     = "8877"
	healthCheckTag      = "firelens-healthcheck"
	defaultMemBufLimitM = 25
	recordKey           = "log" // the field include-pattern and exclude-pattern are matched against
)

// Spec is what a router's configuration is generated from.
type Spec struct {
	Type        string           // task.FirelensFluentbit or task.FirelensFluentd
	NetworkMode task.NetworkMode // bridge and awsvpc add the TCP forward input (0.0.0.0 / 127.0.0.1) and, for fluentbit, the health-check input
	// TaskID is the part of the task ARN after the last '/'. The file does not depend on it: an
	// output matches "<container>-firelens*", which the tags of OutputTag fall under, as on ECS.
	TaskID string
	// Metadata is added to every record; nil when the router's enable-ecs-log-metadata is "false".
	Metadata *Metadata
	// External includes the operator's own configuration: Kind "file" (Path in the router image) or
	// "s3" (Path is where the downloaded file is mounted in the router: S3ConfigPath(type)); zero: none.
	External External
	// MemBufLimit is Fluent Bit's Mem_Buf_Limit of the socket input, as MemBufLimit computes it.
	MemBufLimit string
	// Outputs are the containers that log with awsfirelens, in the task's order, with their log
	// options, secretOptions' values already resolved into Options.
	Outputs []Output
}

// Metadata is the ECS metadata added to every record. TaskDefinition is "family:revision";
// EC2InstanceID is "" off EC2 (then left out).
type Metadata struct{ Cluster, TaskARN, TaskDefinition, EC2InstanceID string }

// External is the operator's own configuration file, included after the filters.
type External struct{ Kind, Path string }

// Output is a container that logs through the router, with its awsfirelens log options.
type Output struct {
	Container string
	Options   map[string]string
}

// pipe is an input or output section.
type pipe struct {
	name, tag string
	options   map[string]string
}

// grep is an include or exclude filter on the records of tag.
type grep struct{ tag, regex string }

// field is a key and value added to every record.
type field struct{ key, value string }

// layout is a configuration file's sections in the order both types write them: inputs, include
// filters, exclude filters, the record fields, the include of the operator's file, outputs.
type layout struct {
	inputs           []pipe
	include, exclude []grep
	recordTag        string
	record           []field // sorted by key
	external         string
	outputs          []pipe
}

// Generate returns the router's configuration file (fluent-bit.conf or fluent.conf), the same
// bytes as the ECS agent writes for the same inputs, with the outputs in the order of s.Outputs.
// Every error is bad input: it names the container and option (never a value) that cannot be
// turned into an output (no Name / @type) or that the file cannot carry (a line break or other
// control character, an empty value where the format needs one, a key that is not a plain word).
func Generate(s Spec) ([]byte, error) {
	f, err := plan(s)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if s.Type == task.FirelensFluentd {
		writeFluentd(&b, f)
	} else {
		writeFluentbit(&b, f)
	}
	return []byte(b.String()), nil
}

// plan checks s and lays out its sections.
func plan(s Spec) (layout, error) {
	var f layout
	var outputKey, anyTag string
	switch s.Type {
	case task.FirelensFluentbit:
		outputKey, anyTag = "Name", "*"
		if err := checkValue(s.Type, s.MemBufLimit); err != nil {
			return f, fmt.Errorf("mem buf limit: %w", err)
		}
		f.inputs = append(f.inputs, pipe{name: "forward", options: map[string]string{"unix_path": SocketPath, "Mem_Buf_Limit": s.MemBufLimit}})
	case task.FirelensFluentd:
		outputKey, anyTag = "@type", "**"
		f.inputs = append(f.inputs, pipe{name: "unix", options: map[string]string{"path": SocketPath}})
	default:
		return f, fmt.Errorf("firelens type %q: want %s or %s", s.Type, task.FirelensFluentbit, task.FirelensFluentd)
	}

	var bind string
	switch s.NetworkMode {
	case task.NetworkBridge:
		bind = bridgeBind
	case task.NetworkAWSVPC:
		bind = awsvpcBind
	}
	if bind != "" {
		if s.Type == task.FirelensFluentd {
			f.inputs = append(f.inputs, pipe{name: "forward", options: map[string]string{"bind": bind, "port": forwardPort}})
		} else {
			f.inputs = append(f.inputs,
				pipe{name: "forward", options: map[string]string{"Listen": bind, "Port": forwardPort}},
				pipe{name: "tcp", tag: healthCheckTag, options: map[string]string{"Listen": healthCheckBind, "Port": healthCheckPort}})
			f.outputs = append(f.outputs, pipe{name: "null", tag: healthCheckTag})
		}
	}

	if m := s.Metadata; m != nil {
		f.recordTag = anyTag
		fields := []field{{"ecs_cluster", m.Cluster}, {"ecs_task_arn", m.TaskARN}, {"ecs_task_definition", m.TaskDefinition}}
		if m.EC2InstanceID != "" {
			fields = append([]field{{"ec2_instance_id", m.EC2InstanceID}}, fields...)
		}
		for _, fd := range fields {
			if err := checkValue(s.Type, fd.value); err != nil {
				return f, fmt.Errorf("metadata %s: %w", fd.key, err)
			}
		}
		f.record = fields
	}

	for _, o := range s.Outputs {
		if err := addOutput(&f, s.Type, outputKey, anyTag, o); err != nil {
			return f, err
		}
	}

	switch s.External.Kind {
	case "":
	case ConfigFileTypeFile, ConfigFileTypeS3:
		if err := checkValue(s.Type, s.External.Path); err != nil {
			return f, fmt.Errorf("firelens option %s: %w", OptionConfigFileValue, err)
		}
		f.external = s.External.Path
	default:
		return f, fmt.Errorf("firelens option %s %q: want %s or %s", OptionConfigFileType, s.External.Kind, ConfigFileTypeFile, ConfigFileTypeS3)
	}
	return f, nil
}

// addOutput adds a container's filters and output section, as the ECS agent's addOutputSection
// does: without options other than the patterns it may leave out the output key (the operator's
// own file then routes its records).
func addOutput(f *layout, typ, outputKey, anyTag string, o Output) error {
	if !validContainerName(o.Container) {
		return fmt.Errorf("container %q: not a container name (letters, digits, hyphens and underscores)", o.Container)
	}
	tag := o.Container + "-firelens" + anyTag
	out := pipe{tag: tag, options: map[string]string{}}
	named := false
	for _, key := range slices.Sorted(maps.Keys(o.Options)) {
		value := o.Options[key]
		switch key {
		case OptionLogDriverBufferLimit:
			continue
		case OptionIncludePattern, OptionExcludePattern, outputKey:
		default:
			if err := checkKey(typ, key); err != nil {
				return fmt.Errorf("container %q: log option %q: %w", o.Container, key, err)
			}
		}
		if err := checkValue(typ, value); err != nil {
			return fmt.Errorf("container %q: log option %q: %w", o.Container, key, err)
		}
		switch key {
		case outputKey:
			out.name, named = value, true
		case OptionIncludePattern:
			f.include = append(f.include, grep{tag, value})
		case OptionExcludePattern:
			f.exclude = append(f.exclude, grep{tag, value})
		default:
			out.options[key] = value
		}
	}
	switch {
	case named && out.name == "":
		return fmt.Errorf("container %q: log option %q: empty", o.Container, outputKey)
	case !named && len(out.options) > 0:
		return fmt.Errorf("container %q: log option %q is required with the other options given (it names the %s output plugin)", o.Container, outputKey, typ)
	case named:
		f.outputs = append(f.outputs, out)
	}
	return nil
}

// checkKey refuses an option key the file cannot carry: empty, holding white space or a control
// character, or starting with a character that opens a comment, a section or (Fluent Bit) a
// directive.
func checkKey(typ, key string) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("key holds white space or a control character")
		}
	}
	switch key[0] {
	case '#', '[', '<':
		return fmt.Errorf("key starts with %q", key[0])
	case '@':
		if typ == task.FirelensFluentbit {
			return fmt.Errorf("key starts with %q", key[0])
		}
	}
	return nil
}

// checkValue refuses a value the file cannot carry: a line break or another control character
// (a tab is fine), or, in Fluent Bit, an empty value. The error never holds the value.
func checkValue(typ, value string) error {
	if value == "" && typ == task.FirelensFluentbit {
		return fmt.Errorf("empty value, which Fluent Bit's configuration cannot carry")
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("value holds a line break or control character, which the configuration file cannot carry")
		}
	}
	return nil
}

// validContainerName reports whether name is an ECS container name: 1-255 letters, digits,
// hyphens and underscores.
func validContainerName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// writeFluentbit writes f as the ECS agent's generator writes fluent-bit.conf.
func writeFluentbit(b *strings.Builder, f layout) {
	for _, in := range f.inputs {
		b.WriteString("\n[INPUT]\n    Name " + in.name)
		if in.tag != "" {
			b.WriteString("\n    Tag " + in.tag)
		}
		writeOptions(b, in.options)
		b.WriteString("\n")
	}
	for _, g := range f.include {
		b.WriteString("\n[FILTER]\n    Name   grep\n    Match " + g.tag + "\n    Regex  " + recordKey + " " + g.regex + "\n")
	}
	for _, g := range f.exclude {
		b.WriteString("\n[FILTER]\n    Name   grep\n    Match " + g.tag + "\n    Exclude " + recordKey + " " + g.regex + "\n")
	}
	if f.record != nil {
		b.WriteString("\n[FILTER]\n    Name record_modifier\n    Match " + f.recordTag)
		for _, fd := range f.record {
			b.WriteString("\n    Record " + fd.key + " " + fd.value)
		}
		b.WriteString("\n")
	}
	if f.external != "" {
		b.WriteString("\n@INCLUDE " + f.external + "\n")
	}
	for _, out := range f.outputs {
		b.WriteString("\n[OUTPUT]\n    Name " + out.name + "\n    Match " + out.tag)
		writeOptions(b, out.options)
		b.WriteString("\n")
	}
}

// writeFluentd writes f as the ECS agent's generator writes fluent.conf.
func writeFluentd(b *strings.Builder, f layout) {
	for _, in := range f.inputs {
		b.WriteString("\n<source>\n    @type " + in.name)
		writeOptions(b, in.options)
		b.WriteString("\n</source>\n")
	}
	for _, g := range f.include {
		b.WriteString("\n<filter " + g.tag + ">\n    @type  grep\n    <regexp>\n        key " + recordKey + "\n        pattern " + g.regex + "\n    </regexp>\n</filter>\n")
	}
	for _, g := range f.exclude {
		b.WriteString("\n<filter " + g.tag + ">\n    @type  grep\n    <exclude>\n        key " + recordKey + "\n        pattern " + g.regex + "\n    </exclude>\n</filter>\n")
	}
	if f.record != nil {
		b.WriteString("\n<filter " + f.recordTag + ">\n    @type record_transformer\n    <record>")
		for _, fd := range f.record {
			b.WriteString("\n        " + fd.key + " " + fd.value)
		}
		b.WriteString("\n    </record>\n</filter>\n")
	}
	if f.external != "" {
		b.WriteString("\n@include " + f.external + "\n")
	}
	for _, out := range f.outputs {
		b.WriteString("\n<match " + out.tag + ">\n    @type " + out.name)
		writeOptions(b, out.options)
		b.WriteString("\n</match>\n")
	}
}

// writeOptions writes a section's options one a line, in the byte order of their keys, as Go's
// text/template ranges over a map.
func writeOptions(b *strings.Builder, options map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(options)) {
		b.WriteString("\n    " + key + " " + options[key])
	}
}

// MemBufLimit returns Fluent Bit's Mem_Buf_Limit for a router with these memory settings (MiB, 0
// when unset), as the ECS agent resolves it: half the reservation, else half the limit, else 25MB
// when either is unset or half of it rounds down to nothing.
func MemBufLimit(memory, memoryReservation int) string {
	limit := 0
	switch {
	case memoryReservation > 0:
		limit = memoryReservation
	case memory > 0:
		limit = memory
	}
	half := limit / 2
	if half <= 0 {
		half = defaultMemBufLimitM
	}
	return fmt.Sprintf("%dMB", half)
}

// OutputTag is the tag an app container's records carry: "<container>-firelens-<taskID>".
func OutputTag(container, taskID string) string {
	return container + "-firelens-" + taskID
}

// ConfigPath is where the generated file goes in a router of type typ; "" for another type.
func ConfigPath(typ string) string {
	switch typ {
	case task.FirelensFluentbit:
		return "/fluent-bit/etc/fluent-bit.conf"
	case task.FirelensFluentd:
		return "/fluentd/etc/fluent.conf"
	}
	return ""
}

// S3ConfigPath is where the configuration downloaded from S3 goes in a router of type typ; "" for
// another type.
func S3ConfigPath(typ string) string {
	switch typ {
	case task.FirelensFluentbit:
		return "/fluent-bit/etc/external.conf"
	case task.FirelensFluentd:
		return "/fluentd/etc/external.conf"
	}
	return ""
}

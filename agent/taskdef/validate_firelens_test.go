package taskdef

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

// router is a log router container of the given type with extra members.
func router(typ, extra string) string {
	fc := `"firelensConfiguration": {"type": "` + typ + `"}`
	if extra != "" {
		fc = extra
	}
	return ctr("router", fc)
}

// firelensApp is a container logging through awsfirelens with the given options.
func firelensApp(name, options string) string {
	return ctr(name, `"logConfiguration": {"logDriver": "awsfirelens", "options": {`+options+`}}`)
}

// TestFirelensRefused holds ECS's FireLens rules: each definition is refused with exactly one error,
// naming the field.
func TestFirelensRefused(t *testing.T) {
	const c0, c1 = "containerDefinitions[0].", "containerDefinitions[1]."
	tests := []struct {
		name, json, want string
	}{
		{"two routers", doc("", router("fluentbit", ""), ctr("second", `"firelensConfiguration": {"type": "fluentd"}`)),
			c1 + `firelensConfiguration: a task has at most one log router and container "router" already is one`},
		{"awsfirelens without a router", doc("", ctr("a", ""), firelensApp("app", `"Name": "stdout"`)),
			c1 + "logConfiguration.logDriver: awsfirelens needs a log router: a container of the task with a firelensConfiguration"},
		{"no type", doc("", router("", `"firelensConfiguration": {"options": {}}`)), c0 + "firelensConfiguration.type: required"},
		{"unknown type", doc("", router("logstash", "")), c0 + `firelensConfiguration.type: unknown type "logstash" (want fluentbit or fluentd)`},
		{"type in capitals", doc("", router("FluentBit", "")), c0 + `firelensConfiguration.type: unknown type "FluentBit"`},
		{"unknown option", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file": "/x"}}`)),
			c0 + `firelensConfiguration.options["config-file"]: unknown option (want enable-ecs-log-metadata, config-file-type or config-file-value)`},
		{"metadata neither true nor false", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"enable-ecs-log-metadata": "yes"}}`)),
			c0 + `firelensConfiguration.options["enable-ecs-log-metadata"]: "yes" is neither true nor false`},
		{"unknown config file type", doc("", router("", `"firelensConfiguration": {"type": "fluentd", "options": {"config-file-type": "http", "config-file-value": "/x"}}`)),
			c0 + `firelensConfiguration.options["config-file-type"]: unknown config file type "http" (want file or s3)`},
		{"config file type without value", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "file"}}`)),
			c0 + `firelensConfiguration.options["config-file-value"]: required with config-file-type`},
		{"config file value without type", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file-value": "/extra.conf"}}`)),
			c0 + `firelensConfiguration.options["config-file-type"]: required with config-file-value`},
		{"file value not a path", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "file", "config-file-value": "extra.conf"}}`)),
			c0 + `firelensConfiguration.options["config-file-value"]: "extra.conf" is not an absolute path in the router's image`},
		{"s3 value not an object ARN", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "s3", "config-file-value": "s3://bucket/extra.conf"}}`)),
			c0 + `firelensConfiguration.options["config-file-value"]: "s3://bucket/extra.conf" is not an S3 object ARN`},
		{"s3 value a bucket ARN", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "s3", "config-file-value": "arn:aws:s3:::bucket"}}`)),
			c0 + `firelensConfiguration.options["config-file-value"]: "arn:aws:s3:::bucket" is not an S3 object ARN`},
		{"fluentbit output without Name", doc("", router("fluentbit", ""), firelensApp("app", `"region": "us-east-1", "delivery_stream": "s"`)),
			c1 + "logConfiguration.options: Name (the output plugin) is required with output options for a fluentbit log router"},
		{"fluentd output without @type", doc("", router("fluentd", ""), firelensApp("app", `"Name": "stdout"`)),
			c1 + "logConfiguration.options: @type (the output plugin) is required with output options for a fluentd log router"},
		{"secret output option without Name", doc("", router("fluentbit", ""),
			ctr("app", `"logConfiguration": {"logDriver": "awsfirelens", "secretOptions": [{"name": "apikey", "valueFrom": "/k"}]}`)),
			c1 + "logConfiguration.options: Name (the output plugin) is required with output options for a fluentbit log router"},
		{"awsfirelens on the router", doc("", router("", `"firelensConfiguration": {"type": "fluentbit"}, "logConfiguration": {"logDriver": "awsfirelens"}`)),
			c0 + "logConfiguration.logDriver: the log router cannot log through itself (awsfirelens)"},
		{"unknown member", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "config": "x"}`)),
			c0 + "firelensConfiguration.config: unknown field"},
		{"options not strings", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"enable-ecs-log-metadata": true}}`)),
			c0 + `firelensConfiguration.options["enable-ecs-log-metadata"]: want a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			require.ErrorIs(t, err, ErrInvalid)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, 1, "one error: %v", err)
			assert.True(t, strings.HasPrefix(lines[0], tt.want), "got %q, want it to start with %q", lines[0], tt.want)
		})
	}
}

// TestFirelensAccepted: the FireLens definitions ECS takes parse, and NewTask puts the router's
// configuration and the awsfirelens log configuration in the model as given.
func TestFirelensAccepted(t *testing.T) {
	for _, tt := range []struct {
		name, json string
	}{
		{"fluentbit, every option", doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options":
			{"enable-ecs-log-metadata": "false", "config-file-type": "s3", "config-file-value": "arn:aws:s3:::bucket/fluent/extra.conf"}}`),
			firelensApp("app", `"Name": "firehose", "region": "us-east-1", "delivery_stream": "s", "include-pattern": "^E"`))},
		{"fluentd with a file", doc("", router("", `"firelensConfiguration": {"type": "fluentd", "options": {"config-file-type": "file", "config-file-value": "/fluentd/etc/extra.conf"}}`),
			firelensApp("app", `"@type": "stdout"`))},
		{"no output options: the output is in the router's own configuration", doc("", router("fluentbit", ""),
			firelensApp("app", `"exclude-pattern": "DEBUG", "log-driver-buffer-limit": "2097152"`))},
		{"a router alone", doc("", router("fluentd", ""))},
		{"a router that logs elsewhere", doc("", router("", `"firelensConfiguration": {"type": "fluentbit"}, "logConfiguration": {"logDriver": "json-file"}`),
			firelensApp("app", `"Name": "stdout"`))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			require.NoError(t, err)
		})
	}

	def, err := Parse([]byte(doc("", router("", `"firelensConfiguration": {"type": "fluentbit", "options": {"enable-ecs-log-metadata": "true"}}`),
		ctr("app", `"logConfiguration": {"logDriver": "awsfirelens", "options": {"Name": "cloudwatch", "region": "eu-west-1"},
			"secretOptions": [{"name": "apikey", "valueFrom": "arn:aws:ssm:eu-west-1:111122223333:parameter/key"}]}`))))
	require.NoError(t, err)
	tk := def.NewTask("arn:aws:ecs:eu-west-1:111122223333:task/c/1")
	assert.Equal(t, &task.FirelensConfiguration{Type: "fluentbit", Options: map[string]string{"enable-ecs-log-metadata": "true"}},
		tk.Containers[0].Firelens)
	assert.Nil(t, tk.Containers[1].Firelens)
	assert.Equal(t, &task.LogConfiguration{LogDriver: "awsfirelens", Options: map[string]string{"Name": "cloudwatch", "region": "eu-west-1"},
		SecretOptions: []task.Secret{{Name: "apikey", ValueFrom: "arn:aws:ssm:eu-west-1:111122223333:parameter/key"}}},
		tk.Containers[1].LogConfiguration)
	def.ContainerDefinitions[0].FirelensConfiguration.Options["enable-ecs-log-metadata"] = "false"
	assert.Equal(t, "true", tk.Containers[0].Firelens.Options["enable-ecs-log-metadata"], "the task shares no memory with the definition")

	canon, err := Canonical(def)
	require.NoError(t, err)
	assert.Contains(t, string(canon), `"firelensConfiguration":{"type":"fluentbit","options":{"enable-ecs-log-metadata":"false"}}`)
}

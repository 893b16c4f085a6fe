package firelens

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-agent/berth/agent/task"
)

const (
	testARN      = "arn:aws:ecs:us-west-2:123456789012:task/prod/0123456789abcdef0123456789abcdef"
	testTaskID   = "0123456789abcdef0123456789abcdef"
	testInstance = "i-0abc123def4567890"
)

func testMetadata(instance string) *Metadata {
	return &Metadata{Cluster: "prod", TaskARN: testARN, TaskDefinition: "web:7", EC2InstanceID: instance}
}

// TestGenerate compares the whole file with one written by hand from the ECS agent's generator
// templates (go-config-generator-for-fluentd-and-fluentbit, fluent-bit-template.go and
// fluentd-template.go) and the sections firelensconfig_unix.go adds.
func TestGenerate(t *testing.T) {
	cases := []struct {
		name   string
		spec   Spec
		golden string
	}{{
		// Two containers: include filters before exclude filters, each in the task's order; the
		// health-check output before the containers'; options in byte order (upper case first);
		// the Docker driver's buffer limit never written.
		name: "fluentbit bridge, metadata with instance, s3 include, patterns",
		spec: Spec{
			Type: task.FirelensFluentbit, NetworkMode: task.NetworkBridge, TaskID: testTaskID,
			Metadata:    testMetadata(testInstance),
			External:    External{Kind: ConfigFileTypeS3, Path: S3ConfigPath(task.FirelensFluentbit)},
			MemBufLimit: "64MB",
			Outputs: []Output{
				{Container: "app", Options: map[string]string{
					"Name": "cloudwatch_logs", "region": "us-west-2", "log_group_name": "/ecs/web",
					"auto_create_group": "true", "Retry_Limit": "2", "include-pattern": "^ERROR",
					"exclude-pattern": "healthz", "log-driver-buffer-limit": "2097152",
				}},
				{Container: "sidecar", Options: map[string]string{"Name": "stdout", "exclude-pattern": "DEBUG"}},
			},
		},
		golden: "fluentbit-bridge.conf",
	}, {
		name: "fluentbit awsvpc, metadata off EC2, file include",
		spec: Spec{
			Type: task.FirelensFluentbit, NetworkMode: task.NetworkAWSVPC, TaskID: testTaskID,
			Metadata:    testMetadata(""),
			External:    External{Kind: ConfigFileTypeFile, Path: "/fluent-bit/etc/extra.conf"},
			MemBufLimit: "25MB",
			Outputs: []Output{{Container: "app", Options: map[string]string{
				"Name": "forward", "Host": "aggregator.internal", "Port": "24224", "tls": "on",
			}}},
		},
		golden: "fluentbit-awsvpc.conf",
	}, {
		// A container with only a pattern and no Name gets its filter and no output, as on ECS.
		name: "fluentbit host, no metadata, no include",
		spec: Spec{
			Type: task.FirelensFluentbit, NetworkMode: task.NetworkHost, TaskID: testTaskID,
			MemBufLimit: "50MB",
			Outputs: []Output{
				{Container: "logs-only", Options: map[string]string{"include-pattern": "keep"}},
				{Container: "app", Options: map[string]string{"Name": "stdout", "include-pattern": "x"}},
			},
		},
		golden: "fluentbit-host.conf",
	}, {
		name: "fluentbit none is as host",
		spec: Spec{
			Type: task.FirelensFluentbit, NetworkMode: task.NetworkNone, TaskID: testTaskID,
			MemBufLimit: "50MB",
			Outputs: []Output{
				{Container: "logs-only", Options: map[string]string{"include-pattern": "keep"}},
				{Container: "app", Options: map[string]string{"Name": "stdout", "include-pattern": "x"}},
			},
		},
		golden: "fluentbit-host.conf",
	}, {
		name: "fluentd bridge, metadata with instance, s3 include, patterns",
		spec: Spec{
			Type: task.FirelensFluentd, NetworkMode: task.NetworkBridge, TaskID: testTaskID,
			Metadata: testMetadata(testInstance),
			External: External{Kind: ConfigFileTypeS3, Path: S3ConfigPath(task.FirelensFluentd)},
			Outputs: []Output{
				{Container: "app", Options: map[string]string{
					"@type": "s3", "s3_bucket": "logs", "path": "web/", "include-pattern": "ERROR",
					"exclude-pattern": "healthz", "@id": "out_app",
				}},
				{Container: "agg", Options: map[string]string{"@type": "stdout"}}, // after app: the task's order, not sorted
			},
		},
		golden: "fluentd-bridge.conf",
	}, {
		name: "fluentd awsvpc, no metadata, file include",
		spec: Spec{
			Type: task.FirelensFluentd, NetworkMode: task.NetworkAWSVPC, TaskID: testTaskID,
			External: External{Kind: ConfigFileTypeFile, Path: "/fluentd/etc/custom.conf"},
			Outputs: []Output{
				{Container: "app", Options: map[string]string{"@type": "null"}},
				{Container: "quiet"}, // no options: no output section, as on ECS
			},
		},
		golden: "fluentd-awsvpc.conf",
	}, {
		name: "fluentd host, metadata off EC2",
		spec: Spec{
			Type: task.FirelensFluentd, NetworkMode: task.NetworkHost, TaskID: testTaskID,
			Metadata: testMetadata(""),
			Outputs: []Output{{Container: "app", Options: map[string]string{
				"@type": "stdout", "exclude-pattern": "noise",
			}}},
		},
		golden: "fluentd-host.conf",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", tc.golden))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Generate(tc.spec)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Generate:\n%s\nwant (%s):\n%s", got, tc.golden, want)
			}
		})
	}
}

// TestGenerateRefuses checks that what cannot become an output, or that the file cannot carry, is
// an error naming the container and option, never holding the value.
func TestGenerateRefuses(t *testing.T) {
	const secret = "s3cr3t-value"
	bit := func(options map[string]string) Spec {
		return Spec{Type: task.FirelensFluentbit, NetworkMode: task.NetworkBridge, MemBufLimit: "25MB",
			Outputs: []Output{{Container: "app", Options: options}}}
	}
	fluentd := func(options map[string]string) Spec {
		return Spec{Type: task.FirelensFluentd, NetworkMode: task.NetworkBridge,
			Outputs: []Output{{Container: "app", Options: options}}}
	}
	cases := []struct {
		name string
		spec Spec
		want []string // each in the error
	}{
		{"fluentbit options without Name", bit(map[string]string{"region": "us-west-2"}), []string{`"app"`, `"Name"`, "required"}},
		{"fluentd options without @type", fluentd(map[string]string{"path": "/x"}), []string{`"app"`, `"@type"`, "required"}},
		{"fluentbit empty Name", bit(map[string]string{"Name": ""}), []string{`"app"`, `"Name"`}},
		{"fluentd empty @type", fluentd(map[string]string{"@type": ""}), []string{`"app"`, `"@type"`, "empty"}},
		{"newline in a value", bit(map[string]string{"Name": "http", "header": secret + "\n[OUTPUT]"}), []string{`"app"`, `"header"`, "line break"}},
		{"carriage return in a value", fluentd(map[string]string{"@type": "http", "header": secret + "\r"}), []string{`"app"`, `"header"`, "line break"}},
		{"NUL in a value", bit(map[string]string{"Name": "http", "header": secret + "\x00"}), []string{`"header"`}},
		{"newline in Name", bit(map[string]string{"Name": "stdout\n[OUTPUT]"}), []string{`"Name"`, "line break"}},
		{"newline in a pattern", fluentd(map[string]string{"@type": "stdout", "include-pattern": "a\n</filter>"}), []string{`"include-pattern"`, "line break"}},
		{"fluentbit empty value", bit(map[string]string{"Name": "http", "header": ""}), []string{`"header"`, "empty"}},
		{"fluentbit empty pattern", bit(map[string]string{"Name": "http", "exclude-pattern": ""}), []string{`"exclude-pattern"`, "empty"}},
		{"space in a key", bit(map[string]string{"Name": "http", "a b": "c"}), []string{`"a b"`, "white space"}},
		{"newline in a key", fluentd(map[string]string{"@type": "http", "a\nb": "c"}), []string{`"a\nb"`}},
		{"empty key", fluentd(map[string]string{"@type": "http", "": "c"}), []string{`""`, "empty key"}},
		{"section in a fluentbit key", bit(map[string]string{"Name": "http", "[OUTPUT]": "c"}), []string{`"[OUTPUT]"`, "starts with"}},
		{"section in a fluentd key", fluentd(map[string]string{"@type": "http", "<match": "c"}), []string{`"<match"`, "starts with"}},
		{"comment key", fluentd(map[string]string{"@type": "http", "#x": "c"}), []string{`"#x"`, "starts with"}},
		{"directive key in fluentbit", bit(map[string]string{"Name": "http", "@INCLUDE": "/etc/passwd"}), []string{`"@INCLUDE"`, "starts with"}},
		{"container name", Spec{Type: task.FirelensFluentd, Outputs: []Output{{Container: "a>b", Options: map[string]string{"@type": "stdout"}}}}, []string{`"a>b"`, "container name"}},
		{"unknown type", Spec{Type: "vector"}, []string{`"vector"`, "fluentbit", "fluentd"}},
		{"unknown config-file-type", Spec{Type: task.FirelensFluentd, External: External{Kind: "http", Path: "/x"}}, []string{"config-file-type", `"http"`}},
		{"newline in config-file-value", Spec{Type: task.FirelensFluentd, External: External{Kind: ConfigFileTypeFile, Path: "/x\n@include /y"}}, []string{"config-file-value", "line break"}},
		{"empty config-file-value in fluentbit", Spec{Type: task.FirelensFluentbit, MemBufLimit: "25MB", External: External{Kind: ConfigFileTypeFile}}, []string{"config-file-value", "empty"}},
		{"newline in the cluster", Spec{Type: task.FirelensFluentd, Metadata: &Metadata{Cluster: "a\nb", TaskARN: testARN, TaskDefinition: "web:7"}}, []string{"ecs_cluster", "line break"}},
		{"fluentbit without a mem buf limit", Spec{Type: task.FirelensFluentbit}, []string{"mem buf limit", "empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Generate(tc.spec)
			if err == nil {
				t.Fatalf("Generate: no error, file:\n%s", got)
			}
			if got != nil {
				t.Errorf("Generate: a file with the error %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not hold %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q holds the value", err)
			}
		})
	}
}

// TestGenerateCarries checks values the file carries as they are: a tab, a value that looks like
// a section, a fluentd system key, and an empty fluentd value (fluentd reads it as "").
func TestGenerateCarries(t *testing.T) {
	got, err := Generate(Spec{Type: task.FirelensFluentd, NetworkMode: task.NetworkHost, Outputs: []Output{{
		Container: "app", Options: map[string]string{"@type": "http", "@label": "@OUT", "a": "x\ty", "b": "</match>", "c": ""},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "\n<source>\n    @type unix\n    path /var/run/fluent.sock\n</source>\n" +
		"\n<match app-firelens**>\n    @type http\n    @label @OUT\n    a x\ty\n    b </match>\n    c \n</match>\n"
	if string(got) != want {
		t.Errorf("Generate:\n%q\nwant\n%q", got, want)
	}
}

// TestMemBufLimit holds the ECS agent's resolveMemBufLimit (firelensconfig_unix.go) with the
// limit task.go's initializeFirelensResource picks: the reservation, else the memory, halved; 25MB
// when neither is set or half rounds to zero.
func TestMemBufLimit(t *testing.T) {
	cases := []struct {
		memory, reservation int
		want                string
	}{
		{0, 0, "25MB"},
		{100, 0, "50MB"},
		{0, 64, "32MB"},
		{512, 100, "50MB"},
		{101, 0, "50MB"},
		{3, 0, "1MB"},
		{1, 0, "25MB"},
		{0, 1, "25MB"},
		{2048, 0, "1024MB"},
		{-5, -1, "25MB"},
		{40, -1, "20MB"},
	}
	for _, tc := range cases {
		if got := MemBufLimit(tc.memory, tc.reservation); got != tc.want {
			t.Errorf("MemBufLimit(%d, %d) = %q, want %q", tc.memory, tc.reservation, got, tc.want)
		}
	}
}

// TestPaths holds the tag of the app containers' records and where the files go in the router, as
// the ECS agent mounts them (agent/api/task/task.go, firelensConfigBindFormat*; firelens_unix.go,
// S3ConfigPath*).
func TestPaths(t *testing.T) {
	if got, want := OutputTag("app", testTaskID), "app-firelens-0123456789abcdef0123456789abcdef"; got != want {
		t.Errorf("OutputTag = %q, want %q", got, want)
	}
	cases := []struct{ typ, config, s3 string }{
		{task.FirelensFluentbit, "/fluent-bit/etc/fluent-bit.conf", "/fluent-bit/etc/external.conf"},
		{task.FirelensFluentd, "/fluentd/etc/fluent.conf", "/fluentd/etc/external.conf"},
		{"vector", "", ""},
	}
	for _, tc := range cases {
		if got := ConfigPath(tc.typ); got != tc.config {
			t.Errorf("ConfigPath(%q) = %q, want %q", tc.typ, got, tc.config)
		}
		if got := S3ConfigPath(tc.typ); got != tc.s3 {
			t.Errorf("S3ConfigPath(%q) = %q, want %q", tc.typ, got, tc.s3)
		}
	}
}

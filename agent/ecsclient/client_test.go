package ecsclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
)

func baseRegistration() Registration {
	return Registration{
		CPU:              2048,
		MemoryMiB:        3584,
		ReservedPorts:    []uint16{22, 2375, 2376, 51678, 51679},
		ReservedPortsUDP: []uint16{5353},
		AgentVersion:     "1.2.3",
		AgentHash:        "abc123",
		DockerVersion:    "24.0.7",
		DockerAPIVersion: "1.41",
		LoggingDrivers:   []string{"json-file", "awslogs"},
		Attributes:       map[string]string{"stack": "prod"},
	}
}

// attrMap decodes the attributes list of a RegisterContainerInstance body.
func attrMap(t *testing.T, body map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	list, _ := body["attributes"].([]any)
	for _, a := range list {
		m := a.(map[string]any)
		v, _ := m["value"].(string)
		out[m["name"].(string)] = v
	}
	return out
}

func resource(t *testing.T, body map[string]any, name string) map[string]any {
	t.Helper()
	list, _ := body["totalResources"].([]any)
	for _, r := range list {
		if m := r.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("resource %s missing in %v", name, body["totalResources"])
	return nil
}

func TestRegisterContainerInstance(t *testing.T) {
	const savedArn = "arn:aws:ecs:us-west-2:123456789012:container-instance/test/saved"
	tests := []struct {
		name    string
		mod     func(*Registration)
		wantArn string
		check   func(t *testing.T, body map[string]any, attrs map[string]string)
	}{
		{
			name:    "new instance",
			wantArn: testInstanceArn,
			check: func(t *testing.T, body map[string]any, attrs map[string]string) {
				if _, ok := body["containerInstanceArn"]; ok {
					t.Errorf("containerInstanceArn sent for a new instance: %v", body["containerInstanceArn"])
				}
				if _, ok := attrs[AttrTaskENI]; ok {
					t.Errorf("task-eni registered while disabled")
				}
			},
		},
		{
			name:    "re-registration re-uses the saved ARN",
			mod:     func(r *Registration) { r.ContainerInstanceArn = savedArn },
			wantArn: savedArn,
			check: func(t *testing.T, body map[string]any, _ map[string]string) {
				if got := body["containerInstanceArn"]; got != savedArn {
					t.Errorf("containerInstanceArn = %v, want %s", got, savedArn)
				}
			},
		},
		{
			name:    "tags",
			mod:     func(r *Registration) { r.Tags = map[string]string{"team": "core", "env": "prod"} },
			wantArn: testInstanceArn,
			check: func(t *testing.T, body map[string]any, _ map[string]string) {
				want := []any{map[string]any{"key": "env", "value": "prod"}, map[string]any{"key": "team", "value": "core"}}
				if got := body["tags"]; !reflect.DeepEqual(got, want) {
					t.Errorf("tags = %v, want %v", got, want)
				}
			},
		},
		{
			name:    "task ENI enabled",
			mod:     func(r *Registration) { r.TaskENI = true },
			wantArn: testInstanceArn,
			check: func(t *testing.T, _ map[string]any, attrs map[string]string) {
				if _, ok := attrs[AttrTaskENI]; !ok {
					t.Errorf("task-eni not registered")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeECS(t)
			c := newTestClient(t, f, nil)
			reg := baseRegistration()
			if tc.mod != nil {
				tc.mod(&reg)
			}
			arn, err := c.RegisterContainerInstance(context.Background(), reg)
			if err != nil {
				t.Fatalf("register: %v", err)
			}
			if arn != tc.wantArn {
				t.Errorf("arn = %q, want %q", arn, tc.wantArn)
			}
			calls := f.callsOf("RegisterContainerInstance", false)
			if len(calls) != 1 {
				t.Fatalf("%d register calls, want 1", len(calls))
			}
			body := calls[0].Body
			if !strings.HasPrefix(calls[0].Auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
				t.Errorf("request not SigV4-signed with the static credentials: %q", calls[0].Auth)
			}
			if body["cluster"] != "test" {
				t.Errorf("cluster = %v", body["cluster"])
			}
			if v := resource(t, body, "CPU"); v["type"] != "INTEGER" || v["integerValue"] != float64(2048) {
				t.Errorf("CPU = %v", v)
			}
			if v := resource(t, body, "MEMORY"); v["type"] != "INTEGER" || v["integerValue"] != float64(3584) {
				t.Errorf("MEMORY = %v", v)
			}
			if v := resource(t, body, "PORTS"); v["type"] != "STRINGSET" || fmt.Sprint(v["stringSetValue"]) != "[22 2375 2376 51678 51679]" {
				t.Errorf("PORTS = %v", v)
			}
			if v := resource(t, body, "PORTS_UDP"); v["type"] != "STRINGSET" || fmt.Sprint(v["stringSetValue"]) != "[5353]" {
				t.Errorf("PORTS_UDP = %v", v)
			}
			vi, _ := body["versionInfo"].(map[string]any)
			if vi["agentVersion"] != "1.2.3" || vi["agentHash"] != "abc123" || vi["dockerVersion"] != "DockerVersion: 24.0.7" {
				t.Errorf("versionInfo = %v", vi)
			}
			attrs := attrMap(t, body)
			want := map[string]string{
				AttrDockerRemoteAPIPrefix + "1.17":    "",
				AttrDockerRemoteAPIPrefix + "1.29":    "",
				AttrDockerRemoteAPIPrefix + "1.32":    "",
				AttrLoggingDriverPrefix + "json-file": "",
				AttrLoggingDriverPrefix + "awslogs":   "",
				AttrContainerHealthCheck:              "",
				AttrECRAuth:                           "",
				AttrExecutionRoleECRPull:              "", // ECR pulls with the task's execution role
				AttrContainerOrdering:                 "",
				AttrDockerPluginLocal:                 "",
				AttrOSType:                            "linux",
				AttrOSFamily:                          "LINUX",
				AttrOSTypeDetailed:                    "LINUX",
				"stack":                               "prod",
			}
			for k, v := range want {
				got, ok := attrs[k]
				if !ok || got != v {
					t.Errorf("attribute %s = %q (present %v), want %q", k, got, ok, v)
				}
			}
			if list, _ := body["totalResources"].([]any); len(list) != 4 {
				t.Errorf("%d resources, want CPU, MEMORY, PORTS, PORTS_UDP only", len(list))
			}
			if _, ok := body["platformDevices"]; ok {
				t.Errorf("platformDevices sent: %v", body["platformDevices"])
			}
			if tok, _ := body["clientToken"].(string); !uuidV4.MatchString(tok) {
				t.Errorf("clientToken = %q, want a UUID", tok)
			}
			for _, absent := range []string{AttrDockerRemoteAPIPrefix + "1.16", AttrDockerRemoteAPIPrefix + "1.26",
				AttrDockerRemoteAPIPrefix + "1.33", AttrDockerRemoteAPIPrefix + "1.41", AttrCPUArchitecture} {
				if _, ok := attrs[absent]; ok {
					t.Errorf("attribute %s registered", absent)
				}
			}
			tc.check(t, body, attrs)
		})
	}
}

func TestRegisterErrors(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(f *fakeECS)
		wantCalls int
		wantErr   error // nil: success
	}{
		{
			name:      "retries on 500 then succeeds",
			setup:     func(f *fakeECS) { f.failNext("RegisterContainerInstance", 3) },
			wantCalls: 4,
		},
		{
			name: "attributes not echoed",
			setup: func(f *fakeECS) {
				f.handle("RegisterContainerInstance", func(map[string]any) (int, any) {
					return http.StatusOK, map[string]any{"containerInstance": map[string]any{"containerInstanceArn": testInstanceArn}}
				})
			},
			wantCalls: 1,
			wantErr:   ErrAttributesNotEchoed,
		},
		{
			name: "invalid parameter is not retried",
			setup: func(f *fakeECS) {
				f.handle("RegisterContainerInstance", apiError(400, "InvalidParameterException", "bad"))
			},
			wantCalls: 1,
			wantErr:   ErrInvalidParameter,
		},
		{
			name: "cluster not found is not retried",
			setup: func(f *fakeECS) {
				f.handle("RegisterContainerInstance", apiError(400, "ClusterNotFoundException", "no cluster"))
			},
			wantCalls: 1,
			wantErr:   ErrClusterNotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeECS(t)
			tc.setup(f)
			c := newTestClient(t, f, nil)
			arn, err := c.RegisterContainerInstance(context.Background(), baseRegistration())
			if tc.wantErr == nil {
				if err != nil || arn != testInstanceArn {
					t.Fatalf("register = %q, %v", arn, err)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := len(f.callsOf("RegisterContainerInstance", false)); got != tc.wantCalls {
				t.Errorf("%d calls, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestRegisterStopsAtContextEnd(t *testing.T) {
	f := newFakeECS(t)
	f.setDown("RegisterContainerInstance", true)
	c := newTestClient(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.failed
		cancel()
	}()
	_, err := c.RegisterContainerInstance(ctx, baseRegistration())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestAttributesDockerAPIVersions: the docker-remote-api capabilities are the ECS agent's: each
// version from 1.17 the Engine supports, up to 1.32, but 1.26, 1.27 and 1.31.
func TestAttributesDockerAPIVersions(t *testing.T) {
	tests := []struct {
		version string
		want    []string // minor versions registered
		wantErr bool
	}{
		{version: "1.16"},
		{version: "1.17", want: []string{"1.17"}},
		{version: "1.20", want: []string{"1.17", "1.18", "1.19", "1.20"}},
		{version: "1.27", want: []string{"1.17", "1.18", "1.19", "1.20", "1.21", "1.22", "1.23", "1.24", "1.25"}},
		{version: "1.41.0", want: []string{"1.17", "1.18", "1.19", "1.20", "1.21", "1.22", "1.23", "1.24", "1.25",
			"1.28", "1.29", "1.30", "1.32"}},
		{version: "1.52", want: []string{"1.17", "1.18", "1.19", "1.20", "1.21", "1.22", "1.23", "1.24", "1.25",
			"1.28", "1.29", "1.30", "1.32"}},
		{version: "2.0", wantErr: true},
		{version: "", wantErr: true},
		{version: "latest", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			attrs, err := Attributes(Registration{DockerAPIVersion: tc.version}, "arm64")
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for k := range attrs {
				if v, ok := strings.CutPrefix(k, AttrDockerRemoteAPIPrefix); ok {
					got = append(got, v)
				}
			}
			slices.Sort(got) // every minor has two digits
			if !slices.Equal(got, tc.want) {
				t.Errorf("versions = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAttributesExternal: ECS_EXTERNAL registers ecs.capability.external and ecs.cpu-architecture
// (ECS reads the architecture from the instance identity document on EC2) and leaves out task-eni
// and its attributes, as the ECS agent does.
func TestAttributesExternal(t *testing.T) {
	r := Registration{DockerAPIVersion: "1.41", TaskENI: true, BlockIMDS: true, CNIPluginVersion: "v1.10.0"}
	onEC2, err := Attributes(r, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	r.External = true
	external, err := Attributes(r, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{AttrTaskENI: "", AttrTaskENIBlockIMDS: "", AttrCNIPluginVersion: "v1.10.0"} {
		if got, ok := onEC2[name]; !ok || got != want {
			t.Errorf("on EC2: %s = %q (present %v), want %q", name, got, ok, want)
		}
		if _, ok := external[name]; ok {
			t.Errorf("external: %s registered", name)
		}
	}
	if _, ok := onEC2[AttrCPUArchitecture]; ok {
		t.Errorf("on EC2: %s registered", AttrCPUArchitecture)
	}
	if _, ok := onEC2[AttrExternal]; ok {
		t.Errorf("on EC2: %s registered", AttrExternal)
	}
	if external[AttrCPUArchitecture] != "x86_64" {
		t.Errorf("external: %s = %q, want x86_64", AttrCPUArchitecture, external[AttrCPUArchitecture])
	}
	if _, ok := external[AttrExternal]; !ok {
		t.Errorf("external: %s not registered", AttrExternal)
	}
	for goarch, want := range map[string]string{"amd64": "x86_64", "386": "i386", "arm64": "arm64"} {
		if got := cpuArchitecture(goarch); got != want {
			t.Errorf("cpuArchitecture(%s) = %q, want %q", goarch, got, want)
		}
	}
}

// TestAttributesLoggingDrivers: a logging driver of ECS_AVAILABLE_LOGGING_DRIVERS is registered when
// the ECS agent knows the Docker API version it needs and the Engine has it; awsfirelens never is.
func TestAttributesLoggingDrivers(t *testing.T) {
	all := []string{"json-file", "syslog", "journald", "gelf", "fluentd", "awslogs", "splunk", "logentries", "sumologic", "awsfirelens", "none"}
	attrs, err := Attributes(Registration{DockerAPIVersion: "1.24", LoggingDrivers: all}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range attrs {
		if d, ok := strings.CutPrefix(k, AttrLoggingDriverPrefix); ok {
			got = append(got, d)
		}
	}
	slices.Sort(got)
	// logentries needs 1.25, sumologic 1.29; awsfirelens comes with Registration.Firelens, never the list.
	want := []string{"awslogs", "fluentd", "gelf", "journald", "json-file", "none", "splunk", "syslog"}
	if !slices.Equal(got, want) {
		t.Errorf("logging drivers at API 1.24 = %v, want %v", got, want)
	}
}

// TestRegisterClientToken: every attempt of one registration carries the same clientToken, a UUID;
// the next registration another.
func TestRegisterClientToken(t *testing.T) {
	f := newFakeECS(t)
	f.failNext("RegisterContainerInstance", 2)
	c := newTestClient(t, f, nil)
	for range 2 {
		if _, err := c.RegisterContainerInstance(context.Background(), baseRegistration()); err != nil {
			t.Fatal(err)
		}
	}
	var tokens []string
	for _, call := range f.callsOf("RegisterContainerInstance", false) {
		tok, _ := call.Body["clientToken"].(string)
		tokens = append(tokens, tok)
	}
	if len(tokens) != 4 {
		t.Fatalf("%d calls, want 4 (3 attempts, then 1)", len(tokens))
	}
	if !uuidV4.MatchString(tokens[0]) || tokens[1] != tokens[0] || tokens[2] != tokens[0] || tokens[3] == tokens[0] || !uuidV4.MatchString(tokens[3]) {
		t.Errorf("tokens %q: want one UUID for the three attempts of the first registration, another for the second", tokens)
	}
}

// TestRegisterChecksEveryAttributeEchoed: a response that does not carry back every attribute
// registered, with its value, fails the registration, as the ECS agent's check does.
func TestRegisterChecksEveryAttributeEchoed(t *testing.T) {
	f := newFakeECS(t)
	f.handle("RegisterContainerInstance", func(body map[string]any) (int, any) {
		var echoed []any
		for _, a := range body["attributes"].([]any) {
			if a.(map[string]any)["name"] != AttrContainerOrdering {
				echoed = append(echoed, a)
			}
		}
		return http.StatusOK, map[string]any{"containerInstance": map[string]any{"containerInstanceArn": testInstanceArn, "attributes": echoed}}
	})
	c := newTestClient(t, f, nil)
	_, err := c.RegisterContainerInstance(context.Background(), baseRegistration())
	if !errors.Is(err, ErrAttributesNotEchoed) || !strings.Contains(err.Error(), AttrContainerOrdering) {
		t.Errorf("err = %v, want ErrAttributesNotEchoed naming %s", err, AttrContainerOrdering)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDiscoverPollEndpointCached(t *testing.T) {
	f := newFakeECS(t)
	clk := clockwork.NewFakeClockAt(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newTestClient(t, f, func(cfg *Config) { cfg.Clock = clk })
	ctx := context.Background()

	for i := range 2 {
		ep, err := c.DiscoverPollEndpoint(ctx, testInstanceArn)
		if err != nil || ep != "https://ecs-a-1.us-west-2.amazonaws.com/" {
			t.Fatalf("call %d: %q, %v", i, ep, err)
		}
		clk.Advance(time.Minute)
	}
	if got := len(f.callsOf("DiscoverPollEndpoint", false)); got != 1 {
		t.Fatalf("%d requests within the TTL, want 1", got)
	}
	body := f.callsOf("DiscoverPollEndpoint", false)[0].Body
	if body["cluster"] != "test" || body["containerInstance"] != testInstanceArn {
		t.Errorf("body = %v", body)
	}

	clk.Advance(DefaultPollEndpointTTL)
	if _, err := c.DiscoverPollEndpoint(ctx, testInstanceArn); err != nil {
		t.Fatal(err)
	}
	if got := len(f.callsOf("DiscoverPollEndpoint", false)); got != 2 {
		t.Fatalf("%d requests after the TTL, want 2", got)
	}
}

// TestTelemetryEndpoint checks that the TCS endpoint comes from the same cached DiscoverPollEndpoint
// call as the ACS one, and that an answer without one is an error.
func TestTelemetryEndpoint(t *testing.T) {
	f := newFakeECS(t)
	c := newTestClient(t, f, nil)
	ctx := context.Background()
	if _, err := c.DiscoverPollEndpoint(ctx, testInstanceArn); err != nil {
		t.Fatal(err)
	}
	ep, err := c.TelemetryEndpoint(ctx, testInstanceArn)
	if err != nil || ep != "https://ecs-t-1.us-west-2.amazonaws.com/" {
		t.Fatalf("TelemetryEndpoint = %q, %v", ep, err)
	}
	if got := len(f.callsOf("DiscoverPollEndpoint", false)); got != 1 {
		t.Fatalf("%d requests, want 1 shared by both endpoints", got)
	}

	c.ForgetPollEndpoint(testInstanceArn)
	f.handle("DiscoverPollEndpoint", func(map[string]any) (int, any) {
		return http.StatusOK, map[string]any{"endpoint": "https://ecs-a-1.us-west-2.amazonaws.com/"}
	})
	if ep, err := c.TelemetryEndpoint(ctx, testInstanceArn); err == nil {
		t.Fatalf("TelemetryEndpoint without one in the answer = %q, want an error", ep)
	}
}

func TestErrorTranslation(t *testing.T) {
	tests := []struct {
		name      string
		h         handlerFunc
		class     error // this package's finer class; nil: none
		errdefs   error // the errdefs class; nil: none
		retriable bool
	}{
		{"server exception", apiError(500, "ServerException", "oops"), nil, errdefs.ErrUnavailable, true},
		{"bare 503", func(map[string]any) (int, any) { return 503, map[string]any{} }, nil, errdefs.ErrUnavailable, true},
		{"bare 429", func(map[string]any) (int, any) { return 429, map[string]any{} }, ErrThrottled, errdefs.ErrResourceExhausted, true},
		{"throttled", apiError(400, "ThrottlingException", "slow down"), ErrThrottled, errdefs.ErrResourceExhausted, true},
		{"inactive instance", apiError(400, "ClientException", "The referenced container instance is inactive."), ErrInactiveInstance, errdefs.ErrFailedPrecondition, false},
		{"inactive instance exception", apiError(400, "InactiveInstanceException", ""), ErrInactiveInstance, errdefs.ErrFailedPrecondition, false},
		{"cluster not found", apiError(400, "ClusterNotFoundException", "Cluster not found."), ErrClusterNotFound, errdefs.ErrNotFound, false},
		{"invalid parameter", apiError(400, "InvalidParameterException", "bad"), ErrInvalidParameter, errdefs.ErrInvalidArgument, false},
		{"access denied", apiError(400, "AccessDeniedException", "no"), ErrAccessDenied, errdefs.ErrUnauthorized, false},
		{"other client error", apiError(400, "ClientException", "nope"), nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeECS(t)
			f.handle("DiscoverPollEndpoint", tc.h)
			c := newTestClient(t, f, nil)
			_, err := c.DiscoverPollEndpoint(context.Background(), testInstanceArn)
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if errdefs.IsRetriable(err) != tc.retriable {
				t.Errorf("retriable = %v, want %v (%v)", ae.Retriable, tc.retriable, err)
			}
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("err = %v, want class %v", err, tc.class)
			}
			if tc.errdefs != nil && !errors.Is(err, tc.errdefs) {
				t.Errorf("err = %v, want errdefs class %v", err, tc.errdefs)
			}
			if tc.errdefs == nil && (errdefs.IsInvalidArgument(err) || errdefs.IsUnavailable(err) || errdefs.IsNotFound(err)) {
				t.Errorf("err = %v matches an errdefs class it should not", err)
			}
		})
	}
}

func TestDrain(t *testing.T) {
	t.Run("sends DRAINING", func(t *testing.T) {
		f := newFakeECS(t)
		f.failNext("UpdateContainerInstancesState", 1)
		c := newTestClient(t, f, nil)
		if err := c.Drain(context.Background(), testInstanceArn); err != nil {
			t.Fatal(err)
		}
		calls := f.callsOf("UpdateContainerInstancesState", true)
		if len(calls) != 1 {
			t.Fatalf("%d accepted calls", len(calls))
		}
		b := calls[0].Body
		if b["status"] != "DRAINING" || b["cluster"] != "test" || fmt.Sprint(b["containerInstances"]) != "["+testInstanceArn+"]" {
			t.Errorf("body = %v", b)
		}
	})
	t.Run("failure reported", func(t *testing.T) {
		f := newFakeECS(t)
		f.handle("UpdateContainerInstancesState", func(map[string]any) (int, any) {
			return 200, map[string]any{"failures": []any{map[string]any{"arn": testInstanceArn, "reason": "MISSING"}}}
		})
		c := newTestClient(t, f, nil)
		err := c.Drain(context.Background(), testInstanceArn)
		if err == nil || !strings.Contains(err.Error(), "MISSING") {
			t.Fatalf("err = %v", err)
		}
		if got := len(f.callsOf("UpdateContainerInstancesState", false)); got != 1 {
			t.Errorf("%d calls, want 1", got)
		}
	})
}

func TestSubmitAttachmentStateChanges(t *testing.T) {
	f := newFakeECS(t)
	c := newTestClient(t, f, nil)
	err := c.SubmitAttachmentStateChanges(context.Background(), []AttachmentStateChange{{AttachmentArn: "arn:att/1", Status: AttachmentAttached}})
	if err != nil {
		t.Fatal(err)
	}
	b := f.callsOf("SubmitAttachmentStateChanges", true)[0].Body
	if fmt.Sprint(b["attachments"]) != "[map[attachmentArn:arn:att/1 status:ATTACHED]]" || b["cluster"] != "test" {
		t.Errorf("body = %v", b)
	}
}

// TestAttributesAdvertiseWhatWorks: the capabilities of the container-definition fields are
// registered exactly when what they need is there.
func TestAttributesAdvertiseWhatWorks(t *testing.T) {
	always := []string{AttrSecretsSSMEnv, AttrSecretsASMEnv, AttrSecretsSSMLogDriver, AttrSecretsASMLogDriver,
		AttrPrivateRegistryASM, AttrEnvFilesS3, AttrContainerPortRange, AttrContainerRestart}
	conditional := []string{AttrTaskCPUMemLimit, AttrPIDIPCSharing, AttrExecutionRoleAWSLogs, "ecs.capability.execute-command"}
	check := func(name string, r Registration, want, notWant []string) {
		t.Helper()
		r.DockerAPIVersion = "1.41"
		attrs, err := Attributes(r, "amd64")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, a := range want {
			if _, ok := attrs[a]; !ok {
				t.Errorf("%s: %s is not registered", name, a)
			}
		}
		for _, a := range notWant {
			if _, ok := attrs[a]; ok {
				t.Errorf("%s: %s is registered", name, a)
			}
		}
	}
	check("bare", Registration{LoggingDrivers: []string{"json-file"}}, always, conditional)
	check("everything on", Registration{LoggingDrivers: []string{"json-file", "awslogs"}, TaskCPUMemLimit: true,
		PIDIPCSharing: true, TaskIAMRole: true, TaskIAMRoleNetworkHost: true, AWSLogsExecutionRole: true, ExecuteCommand: true},
		append(append(slices.Clone(always), conditional...), AttrLoggingDriverPrefix+"awslogs"), nil)
	// Without host-network credentials the Docker daemon cannot reach the credentials endpoint.
	check("awslogs without host credentials", Registration{LoggingDrivers: []string{"awslogs"}, TaskIAMRole: true,
		AWSLogsExecutionRole: true}, nil, []string{AttrExecutionRoleAWSLogs})
	// ECS_ENABLE_AWSLOGS_EXECUTIONROLE_OVERRIDE unset: as with the ECS agent, no execution-role-awslogs.
	check("awslogs without the override", Registration{LoggingDrivers: []string{"awslogs"}, TaskIAMRole: true,
		TaskIAMRoleNetworkHost: true}, nil, []string{AttrExecutionRoleAWSLogs})
	check("health checks on", Registration{}, []string{AttrContainerHealthCheck}, nil)
	// ECS_DISABLE_DOCKER_HEALTH_CHECK: Amazon ECS must not place tasks with a health check here.
	check("health checks off", Registration{HealthCheckDisabled: true}, nil, []string{AttrContainerHealthCheck})
}

// TestAttributesSecurityOptions: the selinux and apparmor capabilities are registered when the
// operator says the host has them.
func TestAttributesSecurityOptions(t *testing.T) {
	attrs, err := Attributes(Registration{DockerAPIVersion: "1.41", SELinux: true}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := attrs[AttrSELinux]; !ok {
		t.Errorf("%s not registered", AttrSELinux)
	}
	if _, ok := attrs[AttrAppArmor]; ok {
		t.Errorf("%s registered without ECS_APPARMOR_CAPABLE", AttrAppArmor)
	}
}

// TestIPv6PortBindingsExcluded: ECS_EXCLUDE_IPV6_PORTBINDING (the ECS agent's default) leaves the
// "::" bindings Docker makes beside "0.0.0.0" out of the state change, and only those (as the ECS
// agent, which matches the address "::"); without it every binding goes.
func TestIPv6PortBindingsExcluded(t *testing.T) {
	change := TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning, Containers: []ContainerStateChange{{
		Name: "web", Status: StatusRunning, NetworkBindings: []NetworkBinding{
			{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
			{BindIP: "::", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
			{BindIP: "::1", ContainerPort: 81, HostPort: 32769, Protocol: "tcp"},
		}}}}
	for _, exclude := range []bool{true, false} {
		f := newFakeECS(t)
		c := newTestClient(t, f, func(cfg *Config) { cfg.ExcludeIPv6PortBindings = exclude })
		if err := c.SubmitTaskStateChange(context.Background(), change); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(f.callsOf("SubmitTaskStateChange", true)[0].Body["containers"])
		want := map[bool]int{true: 2, false: 3}[exclude]
		if n := strings.Count(got, "bindIP:"); n != want {
			t.Errorf("exclude=%v: %d bindings sent, want %d: %s", exclude, n, want, got)
		}
		if exclude && strings.Contains(got, "bindIP::: ") {
			t.Errorf("the :: binding was sent: %s", got)
		}
	}
}

// TestUserAgent: every call carries the ECS agent's form of User-Agent
// (ecs-agent/httpclient/httpclient.go), with and without a detailed OS family.
func TestUserAgent(t *testing.T) {
	const agent = "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d)"
	for detailed, want := range map[string]string{
		"debian_12": "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d) (linux; debian_12) (+http://aws.amazon.com/ecs/)",
		"":          "Amazon ECS Agent - v1.105.1 (berth 0.4.0 1a2b3c4d) (linux) (+http://aws.amazon.com/ecs/)",
	} {
		f := newFakeECS(t)
		c := newTestClient(t, f, func(cfg *Config) { cfg.UserAgent = UserAgent(agent, "linux", detailed) })
		if _, err := c.DiscoverPollEndpoint(context.Background(), testInstanceArn); err != nil {
			t.Fatal(err)
		}
		calls := f.callsOf("DiscoverPollEndpoint", false)
		if len(calls) != 1 || calls[0].UserAgent != want {
			t.Errorf("User-Agent = %q, want %q", calls[0].UserAgent, want)
		}
	}
}

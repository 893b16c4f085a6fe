package ecsclient

import (
	"bufio"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// capabilityRows reads the "### Capabilities" table of docs/parity/ECS-API.md: each row's
// capability name (its first cell, in backquotes) and whether Berth's cell says it is advertised.
func capabilityRows(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("../../docs/parity/ECS-API.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "### ") {
			in = line == "### Capabilities"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) != 5 {
			t.Fatalf("capability row without five cells: %s", line)
		}
		name := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
		berth := cells[2]
		if _, dup := rows[name]; dup {
			t.Fatalf("row %s twice", name)
		}
		switch {
		case strings.HasPrefix(berth, "advertised"):
			rows[name] = true
		case strings.HasPrefix(berth, "not advertised"):
			rows[name] = false
		default:
			t.Fatalf("row %s: Berth's cell says neither advertised nor not advertised: %q", name, berth)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no capability rows found")
	}
	return rows
}

// attributesOnly are the attributes of a registration that are not capabilities; every other name
// Attributes returns must be a row of the capability table.
var attributesOnly = []string{AttrOSType, AttrOSFamily, AttrOSTypeDetailed, AttrCPUArchitecture}

// TestCapabilityTable: with every option on (on EC2, then as an external instance), the
// capabilities Berth computes are exactly the table's rows marked advertised; none marked not
// advertised is computed, nor anything the table does not list.
func TestCapabilityTable(t *testing.T) {
	rows := capabilityRows(t)
	everything := Registration{DockerAPIVersion: "1.44",
		LoggingDrivers: []string{"json-file", "syslog", "journald", "gelf", "fluentd", "awslogs", "splunk",
			"logentries", "sumologic", "awsfirelens", "none"},
		TaskENI: true, BlockIMDS: true, CNIPluginVersion: "v1.10.0", Privileged: true, TaskCPUMemLimit: true,
		SELinux: true, AppArmor: true, PIDIPCSharing: true, AWSLogsExecutionRole: true, TaskIAMRole: true,
		TaskIAMRoleNetworkHost: true, ExecuteCommand: true,
		FaultInjection: true, Firelens: true}
	computed := map[string]bool{}
	for _, external := range []bool{false, true} {
		r := everything
		r.External = external
		attrs, err := Attributes(r, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		for name := range attrs {
			if !slices.Contains(attributesOnly, name) {
				computed[name] = true
			}
		}
	}
	for name, advertised := range rows {
		switch {
		case advertised && !computed[name]:
			t.Errorf("%s: the table says advertised, Berth does not compute it", name)
		case !advertised && computed[name]:
			t.Errorf("%s: the table says not advertised, Berth computes it", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(computed)) {
		if _, ok := rows[name]; !ok {
			t.Errorf("%s is computed but has no row in docs/parity/ECS-API.md", name)
		}
	}
}

// TestFaultInjectionCapability: ecs.capability.fault-injection goes with a host that has what the
// faults need, and never with ECS_EXTERNAL, as the ECS agent decides (appendFaultInjectionCapabilities).
func TestFaultInjectionCapability(t *testing.T) {
	for _, tc := range []struct {
		name              string
		faults, external  bool
		wantAdvertisement bool
	}{
		{"host has the tools", true, false, true},
		{"host lacks them", false, false, false},
		{"external", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs, err := Attributes(Registration{DockerAPIVersion: "1.44", FaultInjection: tc.faults, External: tc.external}, "amd64")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := attrs["ecs.capability.fault-injection"]; ok != tc.wantAdvertisement {
				t.Errorf("ecs.capability.fault-injection advertised: %v, want %v", ok, tc.wantAdvertisement)
			}
		})
	}
}

// TestFirelensCapabilities: with FireLens, the seven capabilities the ECS agent advertises on Linux
// (agent/app/agent_capability_unix.go), awsfirelens whether ECS_AVAILABLE_LOGGING_DRIVERS lists it
// or not; without, none of them, even when the list names awsfirelens.
func TestFirelensCapabilities(t *testing.T) {
	firelens := []string{
		"ecs.capability.firelens.fluentd",
		"ecs.capability.firelens.fluentbit",
		"com.amazonaws.ecs.capability.logging-driver.awsfirelens",
		"ecs.capability.logging-driver.awsfirelens.log-driver-buffer-limit",
		"ecs.capability.firelens.options.config.file",
		"ecs.capability.firelens.options.config.s3",
		"ecs.capability.firelens.non-root-user",
	}
	for _, tc := range []struct {
		name    string
		reg     Registration
		want    bool
		drivers []string
	}{
		{"with FireLens", Registration{Firelens: true}, true, []string{"json-file"}},
		{"with FireLens, external", Registration{Firelens: true, External: true}, true, nil},
		{"without", Registration{}, false, []string{"json-file", "awsfirelens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.reg
			r.DockerAPIVersion, r.LoggingDrivers = "1.44", tc.drivers
			attrs, err := Attributes(r, "amd64")
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range firelens {
				if v, ok := attrs[name]; ok != tc.want || v != "" {
					t.Errorf("%s advertised: %v (value %q), want %v with no value", name, ok, v, tc.want)
				}
			}
		})
	}
}

package ecsclient

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// submitted sends ch and returns the one SubmitTaskStateChange body the fake received.
func submitted(t *testing.T, ch TaskStateChange) map[string]any {
	t.Helper()
	f := newFakeECS(t)
	c := newTestClient(t, f, nil)
	if err := c.SubmitTaskStateChange(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf("SubmitTaskStateChange", true)
	if len(calls) != 1 {
		t.Fatalf("%d calls, want 1", len(calls))
	}
	return calls[0].Body
}

// TestStateChangeLengthLimits: reasons are cut at 1024 bytes (a task's and a container's), the
// runtime ID and the image digest at 255, as the ECS agent cuts them; a cut never splits a rune.
func TestStateChangeLengthLimits(t *testing.T) {
	long := strings.Repeat("r", 1500)
	// 1023 ASCII bytes then "é" (2 bytes): byte 1024 is inside the rune, so the cut is at 1023.
	straddling := strings.Repeat("x", 1023) + "é" + "tail"
	body := submitted(t, TaskStateChange{TaskArn: "arn:task/1", Status: StatusStopped, Reason: long,
		Containers: []ContainerStateChange{
			{Name: "a", Status: StatusStopped, Reason: long, RuntimeID: strings.Repeat("i", 300), ImageDigest: "sha256:" + strings.Repeat("d", 300)},
			{Name: "b", Status: StatusStopped, Reason: straddling},
		}})
	if got := body["reason"].(string); len(got) != 1024 {
		t.Errorf("task reason: %d bytes, want 1024", len(got))
	}
	cs := body["containers"].([]any)
	a, b := cs[0].(map[string]any), cs[1].(map[string]any)
	if got := a["reason"].(string); len(got) != 1024 {
		t.Errorf("container reason: %d bytes, want 1024", len(got))
	}
	if got := a["runtimeId"].(string); len(got) != 255 {
		t.Errorf("runtimeId: %d bytes, want 255", len(got))
	}
	if got := a["imageDigest"].(string); len(got) != 255 {
		t.Errorf("imageDigest: %d bytes, want 255", len(got))
	}
	if got := b["reason"].(string); got != strings.Repeat("x", 1023) {
		t.Errorf("straddling reason cut to %d bytes, want the 1023 before the rune", len(got))
	}
}

// TestStateChangeEmptyTaskReasonSent: the task's reason is sent even when empty, as the ECS agent
// sends it; an empty container reason, runtime ID or digest is left out.
func TestStateChangeEmptyTaskReasonSent(t *testing.T) {
	body := submitted(t, TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning,
		Containers: []ContainerStateChange{{Name: "a", Status: StatusRunning}}})
	if got, ok := body["reason"]; !ok || got != "" {
		t.Errorf("reason = %v (present %v), want \"\"", got, ok)
	}
	c := body["containers"].([]any)[0].(map[string]any)
	for _, k := range []string{"reason", "runtimeId", "imageDigest", "exitCode"} {
		if _, ok := c[k]; ok {
			t.Errorf("container %s sent empty: %v", k, c[k])
		}
	}
}

// TestStateChangePortRangeBinding: a consolidated binding is sent with containerPortRange and
// hostPortRange and no single ports; a single one with containerPort and hostPort.
func TestStateChangePortRangeBinding(t *testing.T) {
	body := submitted(t, TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning,
		Containers: []ContainerStateChange{{Name: "a", Status: StatusRunning, PortRange: true, NetworkBindings: []NetworkBinding{
			{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPort: 80, HostPort: 8080},
			{BindIP: "0.0.0.0", Protocol: "udp", ContainerPortRange: "9000-9099", HostPortRange: "50000-50099"},
		}}}})
	got := body["containers"].([]any)[0].(map[string]any)["networkBindings"]
	want := []any{
		map[string]any{"bindIP": "0.0.0.0", "protocol": "tcp", "containerPort": float64(80), "hostPort": float64(8080)},
		map[string]any{"bindIP": "0.0.0.0", "protocol": "udp", "containerPortRange": "9000-9099", "hostPortRange": "50000-50099"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("networkBindings = %v\nwant %v", got, want)
	}
}

// TestStateChangeTooManyBindings: a container with a containerPortRange and more than 100 bindings
// is refused before anything is sent, as the ECS agent refuses it; without a range, or with 100,
// it is sent.
func TestStateChangeTooManyBindings(t *testing.T) {
	many := func(n int) []NetworkBinding {
		out := make([]NetworkBinding, n)
		for i := range out {
			out[i] = NetworkBinding{BindIP: "0.0.0.0", Protocol: "tcp", ContainerPort: uint16(1000 + i), HostPort: uint16(2000 + i)}
		}
		return out
	}
	tests := []struct {
		name      string
		portRange bool
		n         int
		wantErr   bool
	}{
		{"101 with a range", true, 101, true},
		{"100 with a range", true, 100, false},
		{"101 without a range", false, 101, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeECS(t)
			c := newTestClient(t, f, nil)
			ch := TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning, Containers: []ContainerStateChange{
				{Name: "a", Status: StatusRunning, PortRange: tc.portRange, NetworkBindings: many(tc.n)}}}
			err := c.SubmitTaskStateChange(context.Background(), ch)
			calls := len(f.callsOf("SubmitTaskStateChange", false))
			if tc.wantErr {
				if !errors.Is(err, ErrTooManyBindings) || !errors.Is(err, ErrInvalidParameter) || calls != 0 {
					t.Errorf("err = %v, %d calls; want ErrTooManyBindings (an ErrInvalidParameter) and no call", err, calls)
				}
				return
			}
			if err != nil || calls != 1 {
				t.Errorf("err = %v, %d calls; want it sent", err, calls)
			}
		})
	}
}

// TestStateChangeManagedAgents: managed agents travel in SubmitTaskStateChange's managedAgents with
// the fields of the SDK's ManagedAgentStateChange, the reason sent even when empty, as the ECS agent
// builds them (buildManagedAgentStateChangePayload).
func TestStateChangeManagedAgents(t *testing.T) {
	body := submitted(t, TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning, ManagedAgents: []ManagedAgentStateChange{
		{ContainerName: "web", Name: "ExecuteCommandAgent", Status: StatusRunning, Reason: "ExecuteCommandAgent started"},
		{ContainerName: "side", Name: "ExecuteCommandAgent", Status: StatusStopped},
	}})
	want := []any{
		map[string]any{"containerName": "web", "managedAgentName": "ExecuteCommandAgent", "status": "RUNNING", "reason": "ExecuteCommandAgent started"},
		map[string]any{"containerName": "side", "managedAgentName": "ExecuteCommandAgent", "status": "STOPPED", "reason": ""},
	}
	if !reflect.DeepEqual(body["managedAgents"], want) {
		t.Errorf("managedAgents = %#v, want %#v", body["managedAgents"], want)
	}
	if _, ok := submitted(t, TaskStateChange{TaskArn: "arn:task/1", Status: StatusRunning})["managedAgents"]; ok {
		t.Error("managedAgents sent without any")
	}
}

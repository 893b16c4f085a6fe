package acstranslate

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/taskdef"
	"github.com/berth-agent/berth/agent/wire"
)

// FuzzDecodeTranslate feeds a frame through Decode and, for a payload, TranslatePayload, as the ACS
// client does. It checks that nothing panics; that Decode's errors are ErrMalformedFrame or an
// *UnknownTypeError and say something; that a decoded frame encodes to a frame that decodes to the
// same encoding; that every payload task is either accepted or rejected, a rejection matching
// taskdef.ErrInvalid with a reason; and that an accepted task's definition validates, survives a
// round trip through its canonical JSON, and has cpu and memory whose byte values fit an int64.
func FuzzDecodeTranslate(f *testing.F) {
	for _, s := range []string{
		realisticPayload,
		`{"type": "PayloadMessage", "message": {"messageId": "m", "tasks": [null, {}, {"arn": "a", "family": "f", "containers": [{"name": "c", "image": "i", "memory": 17592186044416}]}]}}`,
		`{"type": "PayloadMessage", "message": {"messageId": "m", "tasks": [{"arn": "a", "family": "f", "cpu": 1e308, "memory": 9223372036854775807, "containers": [{"name": "c", "image": "i", "cpu": -1, "memory": 64}]}]}}`,
		`{"type": "PayloadMessage", "message": {"messageId": "m", "tasks": [{"arn": "a", "family": "f", "containers": [{"name": "c", "image": "i", "memory": 64, "dockerConfig": {"hostConfig": "{\"MemoryReservation\":9223372036854775807}", "config": "{\"Healthcheck\":{\"Test\":[\"CMD\",\"x\"],\"Interval\":9223372036854775807}}"}}]}]}}`,
		`{"type": "PayloadMessage", "message": {"messageId": "m", "tasks": [{"arn": "a", "family": "f", "containers": [null, null, null, null, null, null, null, null, null, null, null]}]}}`,
		`{"type": "PayloadMessage", "message": {"messageId": "m", "tasks": [{"arn": "a", "family": "f", "networkMode": "awsvpc", "containers": [{"name": "c", "image": "i", "memory": 64}], "elasticNetworkInterfaces": [{"macAddress": "0a:00:00:00:00:01", "ipv4Addresses": [{"privateAddress": "10.0.0.5", "primary": true}], "subnetGatewayIpv4Address": "10.0.0.1/24", "domainNameServers": ["10.0.0.2"]}]}]}}`,
		`{"type": "AttachTaskNetworkInterfacesMessage", "message": {"messageId": "m", "taskArn": "t", "elasticNetworkInterfaces": [null]}}`,
		`{"type": "IAMRoleCredentialsMessage", "message": {"messageId": "m", "taskArn": "t", "roleCredentials": {"secretAccessKey": "s"}}}`,
		`{"type": "HeartbeatMessage", "message": {"messageId": "h", "healthy": true}}`,
		`{"type": "CloseMessage", "message": {}}`,
		`{"type": "NoSuchMessage", "message": {}}`,
		`{"type": "PayloadMessage", "message": null}`,
		`{"type": "PayloadMessage", "message": {"tasks": {}}}`,
		`{"type": 1}`, `[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := acswire.Decode(data)
		if err != nil {
			var unknown *wire.UnknownTypeError
			if !errors.Is(err, wire.ErrMalformedFrame) && !errors.As(err, &unknown) {
				t.Fatalf("Decode error %v (%T) is neither ErrMalformedFrame nor *UnknownTypeError", err, err)
			}
			if err.Error() == "" {
				t.Fatal("empty Decode error")
			}
			return
		}
		if m == nil {
			t.Fatal("Decode returned neither a message nor an error")
		}
		frame, err := acswire.Encode(m)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", m.MessageType(), err)
		}
		again, err := acswire.Decode(frame)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v\n%s", err, frame)
		}
		if frame2, err := acswire.Encode(again); err != nil || !bytes.Equal(frame, frame2) {
			t.Fatalf("encoding is not stable over a round trip (%v):\n%s\n%s", err, frame, frame2)
		}
		p, ok := m.(*acswire.PayloadMessage)
		if !ok {
			return
		}
		accepted, rejected := TranslatePayload(p)
		if len(accepted)+len(rejected) != len(p.Tasks) {
			t.Fatalf("%d tasks, %d accepted and %d rejected", len(p.Tasks), len(accepted), len(rejected))
		}
		for _, r := range rejected {
			if !errors.Is(r.Err, taskdef.ErrInvalid) || r.Err.Error() == "" {
				t.Fatalf("rejection of %q: %v does not match taskdef.ErrInvalid or says nothing", r.Arn, r.Err)
			}
		}
		for _, a := range accepted {
			checkAccepted(t, a)
		}
	})
}

func checkAccepted(t *testing.T, a Accepted) {
	t.Helper()
	if a.Task == nil || a.Definition == nil || a.Task.Arn == "" {
		t.Fatalf("accepted task without a task, definition or ARN: %+v", a)
	}
	if err := a.Definition.Validate(); err != nil {
		t.Fatalf("accepted definition does not validate: %v", err)
	}
	canon, err := taskdef.Canonical(a.Definition)
	if err != nil {
		t.Fatal(err)
	}
	back, err := taskdef.Parse(canon)
	if err != nil {
		t.Fatalf("canonical form of an accepted definition does not parse: %v\n%s", err, canon)
	}
	want, _ := a.Definition.Digest()
	if got, _ := back.Digest(); got != want {
		t.Fatalf("digest changed over a round trip: %s", canon)
	}
	const maxMiB = math.MaxInt64 >> 20
	if a.Task.Memory < 0 || a.Task.Memory > maxMiB || a.Task.CPU < 0 {
		t.Fatalf("task cpu %d or memory %d MiB out of range", a.Task.CPU, a.Task.Memory)
	}
	for _, c := range a.Task.Containers {
		if c.CPU < 0 || c.Memory < 0 || c.Memory > maxMiB || c.MemoryReservation < 0 || c.MemoryReservation > maxMiB {
			t.Fatalf("container %q: cpu %d, memory %d MiB or memoryReservation %d MiB out of range", c.Name, c.CPU, c.Memory, c.MemoryReservation)
		}
	}
}

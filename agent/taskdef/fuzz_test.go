package taskdef

import (
	"errors"
	"testing"

	"github.com/berth-agent/berth/agent/set"
)

// FuzzParse checks that Parse never panics, that every error it returns is a *FieldError matching
// ErrInvalid, and that what it accepts makes a runnable task: unique container names, every
// dependsOn target present, and a canonical form that parses back to the same digest.
func FuzzParse(f *testing.F) {
	for _, c := range validCases(f) {
		f.Add([]byte(c.json))
	}
	for _, c := range invalidCases() {
		f.Add([]byte(c.json))
	}
	for _, s := range []string{
		`null`, `{}`, `{"taskDefinition": null}`, `{"taskDefinition": {"taskDefinition": {}}}`, `"x"`, `{"family": "a"}{`,
		`{"family": "f", "containerDefinitions": [null, {}, []]}`,
		`{"family": "f", "cpu": "0.0001 vcpu", "memory": "1e9 GB", "containerDefinitions": [{"name": "a", "image": "i"}]}`,
		`{"family": "f", "containerDefinitions": [{"name": "a", "image": "i", "memory": 8, "dependsOn": [{"containerName": "a", "condition": "START"}, null]}]}`,
		// Limits: bytes of memory that overflow an int64, cpu above ECS's maximum, too many entries.
		`{"family": "f", "cpu": "192 vcpu", "containerDefinitions": [{"name": "a", "image": "i", "memory": 17592186044416, "cpu": 262144}]}`,
		`{"family": "f", "cpu": 196609, "containerDefinitions": [{"name": "a", "image": "i", "memoryReservation": 9223372036854775807}]}`,
		`{"family": "f", "containerDefinitions": [{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}]}`,
		`{"family": "f", "containerDefinitions": [{"name": "a", "image": "i", "memory": 8, "ulimits": [{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			if d != nil {
				t.Fatal("Parse returned a definition with an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			fieldErrors(t, err)
			return
		}
		tk := d.NewTask("arn")
		var names set.Set[string]
		for _, c := range tk.Containers {
			if names.Has(c.Name) {
				t.Fatalf("duplicate container name %q", c.Name)
			}
			names.Add(c.Name)
		}
		for _, c := range tk.Containers {
			for _, dep := range c.DependsOn {
				if tk.Container(dep.ContainerName) == nil {
					t.Fatalf("container %q depends on missing %q", c.Name, dep.ContainerName)
				}
			}
			if b := tk.CanStart(c); b.Fail != nil {
				t.Fatalf("container %q can never start in a new task: %v", c.Name, b.Fail)
			}
		}
		canon, err := Canonical(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", canon, err)
		}
		want, _ := d.Digest()
		got, _ := back.Digest()
		if got != want {
			t.Fatalf("digest changed over a round trip: %s", canon)
		}
	})
}

package localcp

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// FuzzAPIRequest sends arbitrary bodies, signed, to every operation of the ECS API. Whatever the
// body, the answer is 200 with a JSON object or a client error in ECS's shape: never a panic, never a
// ServerException (which would mean the input reached a state the code did not expect).
func FuzzAPIRequest(f *testing.F) {
	h := &harness{t: nil, keys: testKeys, clock: clockwork.NewFakeClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))}
	srv, err := New(Config{DBPath: f.TempDir() + "/localcp.db", Keys: testKeys, Clock: h.clock}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Close() })
	h.srv = srv
	ops := slices.Sorted(func(yield func(string) bool) {
		for op := range srv.ops {
			if !yield(op) {
				return
			}
		}
	})
	opIndex := func(name string) uint8 { return uint8(slices.Index(ops, name)) }

	f.Add(opIndex("RegisterTaskDefinition"), []byte(sleepDef))
	f.Add(opIndex("RegisterTaskDefinition"), []byte(rootDef))
	f.Add(opIndex("RegisterTaskDefinition"), []byte(`{"family":"x","containerDefinitions":[{"name":"a","image":"i","memory":17592186044416}]}`))
	f.Add(opIndex("RegisterTaskDefinition"), []byte(`{"family":"x","containerDefinitions":[{"name":"a","image":"i","memory":32,"dependsOn":[{"containerName":"a","condition":"START"}]}]}`))
	f.Add(opIndex("RunTask"), []byte(`{"taskDefinition":"sleep","count":10,"overrides":{"containerOverrides":[{"name":"app","command":["x"]}]}}`))
	f.Add(opIndex("StopTask"), []byte(`{"task":"arn:aws:ecs:local:000000000000:task/default/x"}`))
	f.Add(opIndex("DescribeTasks"), []byte(`{"tasks":["a","b"],"cluster":"default"}`))
	f.Add(opIndex("RegisterContainerInstance"), []byte(`{"totalResources":[{"name":"CPU","type":"INTEGER","integerValue":-1}]}`))
	f.Add(opIndex("SubmitTaskStateChange"), []byte(`{"task":"t","status":"RUNNING","containers":[{"containerName":"c","exitCode":-1}]}`))
	f.Add(opIndex("ListTasks"), []byte(`{"maxResults":-5,"nextToken":"\u0000"}`))
	f.Add(opIndex("DescribeClusters"), []byte(`null`))
	f.Add(opIndex("CreateCluster"), []byte(`[1,2,3]`))

	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		h.t = t
		name := ops[int(op)%len(ops)]
		code, out := h.doRaw(name, string(body))
		switch {
		case code == http.StatusOK:
		case code >= 400 && code < 500:
			if typ, _ := out["__type"].(string); typ == "" || out["message"] == nil {
				t.Fatalf("%s: %d without ECS's error shape: %v", name, code, out)
			}
		default:
			t.Fatalf("%s: status %d (%v) for body %q", name, code, out, body)
		}
	})
}

// doRaw is do without the test's assertions, for the fuzzer: a body that is not JSON comes back as
// a nil map with its status.
func (h *harness) doRaw(op, body string) (int, map[string]any) {
	rec := h.send(op, body)
	out := map[string]any{}
	if json.Unmarshal(rec.Body.Bytes(), &out) != nil {
		return rec.Code, nil
	}
	return rec.Code, out
}

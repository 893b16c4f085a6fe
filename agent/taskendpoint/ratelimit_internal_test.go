package taskendpoint

import (
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
)

func TestLimiterStaysBounded(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(RateLimit{Steady: 1, Burst: 2}, clock, 100)
	// Every caller is busy (its bucket not full again): the map still never holds more than max.
	for i := range 1000 {
		l.allow("busy " + strconv.Itoa(i))
		l.allow("busy " + strconv.Itoa(i))
		assert.LessOrEqual(t, l.size(), 100)
	}
	// A caller kept in the map keeps its limit.
	assert.True(t, l.allow("me"))
	assert.True(t, l.allow("me"))
	assert.False(t, l.allow("me"))
}

func TestLimiterDropsIdleCallers(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(RateLimit{Steady: 10, Burst: 10}, clock, 100)
	for i := range 50 {
		l.allow("caller " + strconv.Itoa(i))
	}
	assert.Equal(t, 50, l.size())
	clock.Advance(sweepInterval)
	l.allow("new")
	assert.Equal(t, 1, l.size(), "every old caller refilled long ago and was dropped")
}

func TestLimiterRefills(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(RateLimit{Steady: 4, Burst: 2}, clock, 100)
	assert.True(t, l.allow("a"))
	assert.True(t, l.allow("a"))
	assert.False(t, l.allow("a"))
	clock.Advance(250 * time.Millisecond)
	assert.True(t, l.allow("a"))
	assert.False(t, l.allow("a"))
	clock.Advance(time.Hour) // never more than the burst
	assert.True(t, l.allow("a"))
	assert.True(t, l.allow("a"))
	assert.False(t, l.allow("a"))
}

func TestParse(t *testing.T) {
	tests := []struct {
		path string
		want route
	}{
		{"/v1/credentials", route{kind: credentialsV1, version: 1}},
		{"/v2/credentials/abc", route{kind: credentialsV2, version: 2, arg: "abc"}},
		{"/v2/metadata", route{kind: v2Task, version: 2}},
		{"/v2/metadata/abc", route{kind: v2Container, version: 2, arg: "abc"}},
		{"/v2/stats/", route{kind: v2TaskStats, version: 2}},
		{"/v2/stats/abc", route{kind: v2ContainerStats, version: 2, arg: "abc"}},
		{"/v3/tok", route{kind: tokenContainer, version: 3, arg: "tok"}},
		{"/v4/tok/task", route{kind: tokenTask, version: 4, arg: "tok"}},
		{"/v4/tok/taskWithTags", route{kind: tokenTaskWithTags, version: 4, arg: "tok"}},
		{"/v4/tok/stats", route{kind: tokenContainerStats, version: 4, arg: "tok"}},
		{"/v4/tok/task/stats", route{kind: tokenTaskStats, version: 4, arg: "tok"}},
		{"/v4/tok/", route{kind: notFound}},
		{"/v4/tok/tasks", route{kind: notFound}},
		{"/v44/tok", route{kind: notFound}},
		{"/api/tok/task-protection/v1/state", route{kind: agentAPI, arg: "tok", sub: "task-protection/v1/state"}},
		{"/api/tok/fault/v1/network-latency/start", route{kind: agentAPI, arg: "tok", sub: "fault/v1/network-latency/start"}},
		{"/api/tok", route{kind: notFound}},
		{"/api/", route{kind: notFound}},
		{"", route{kind: notFound}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			assert.Equal(t, tt.want, parse(tt.path))
		})
	}
}

// FuzzParse checks that parse never panics and that what it returns is consistent with the path.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"/v4/a/task/stats", "/v3/", "/v2/metadata/x", "/v2/credentials/", "/v1/credentials", "/v4//stats",
		"/api/a/task-protection/v1/state", "/api//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r := parse(path)
		if r.kind == agentAPI {
			if r.version != 0 || path != "/api/"+r.arg+"/"+r.sub {
				t.Fatalf("%q: agent API route %+v is not the path's", path, r)
			}
			return
		}
		if r.kind >= tokenContainer {
			if r.version != 3 && r.version != 4 {
				t.Fatalf("%q: token route with version %d", path, r.version)
			}
			if len(r.arg) >= len(path) || !containsAt(path, r.arg, 4) {
				t.Fatalf("%q: token %q is not the path's second segment", path, r.arg)
			}
		}
	})
}

func containsAt(s, sub string, at int) bool {
	return len(s) >= at+len(sub) && s[at:at+len(sub)] == sub
}

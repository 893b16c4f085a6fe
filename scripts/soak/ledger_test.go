package main

import (
	"testing"
	"time"

	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

func TestLedger(t *testing.T) {
	const arn = "arn:aws:ecs:us-east-1:000000000000:task/c/t1"
	sub := func(body string, dropped bool) ecsstandin.Submission {
		return ecsstandin.Submission{Op: "SubmitTaskStateChange", Body: []byte(body), Accepted: true, Dropped: dropped, At: time.Now()}
	}
	running := `{"task":"` + arn + `","status":"RUNNING","containers":[{"containerName":"app","status":"RUNNING","runtimeId":"aaa"}]}`
	stopped := `{"task":"` + arn + `","status":"STOPPED","containers":[{"containerName":"app","status":"STOPPED","runtimeId":"aaa","exitCode":0}]}`
	tests := []struct {
		name                     string
		subs                     []ecsstandin.Submission
		repeated, afterDrop, oth int
	}{
		{"in order", []ecsstandin.Submission{sub(running, false), sub(stopped, false)}, 0, 0, 0},
		{"resend after a dropped answer", []ecsstandin.Submission{sub(running, true), sub(running, false)}, 0, 1, 0},
		{"resend without a drop", []ecsstandin.Submission{sub(running, false), sub(running, false)}, 0, 0, 1},
		{"RUNNING after STOPPED", []ecsstandin.Submission{sub(stopped, false), sub(running, false)}, 2, 0, 1},
		{"another runtime ID", []ecsstandin.Submission{sub(running, false),
			sub(`{"task":"`+arn+`","status":"RUNNING","containers":[{"containerName":"app","status":"RUNNING","runtimeId":"bbb"}]}`, false)}, 1, 0, 1},
		{"another exit code", []ecsstandin.Submission{sub(stopped, false),
			sub(`{"task":"`+arn+`","status":"STOPPED","containers":[{"containerName":"app","status":"STOPPED","exitCode":1}]}`, false)}, 1, 0, 1},
		{"RUNNING with an essential container STOPPED", []ecsstandin.Submission{
			sub(`{"task":"`+arn+`","status":"PENDING","containers":[{"containerName":"app","status":"RUNNING","runtimeId":"aaa"}]}`, false),
			sub(`{"task":"`+arn+`","status":"RUNNING","containers":[{"containerName":"side","status":"STOPPED"}]}`, false)}, 1, 0, 0},
		{"container change re-stating the task", []ecsstandin.Submission{sub(running, false),
			sub(`{"task":"`+arn+`","status":"RUNNING","containers":[{"containerName":"app","status":"STOPPED","exitCode":1}]}`, false)}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			for _, s := range tt.subs {
				l.observe(s)
			}
			if got := l.repeated(); got != tt.repeated {
				t.Errorf("repeated = %d, want %d (%v)", got, tt.repeated, l.confusing)
			}
			if l.resendsAfterDrop != tt.afterDrop || l.resendsOther != tt.oth {
				t.Errorf("resends = %d/%d, want %d/%d", l.resendsAfterDrop, l.resendsOther, tt.afterDrop, tt.oth)
			}
		})
	}
}

func TestAgentReached(t *testing.T) {
	log := `level=info time=2026-11-30T16:01:33.736Z msg="task status changed" task=arn:a/t1 from=NONE to=PULLED
level=info time=2026-11-30T16:01:34.907Z msg="task status changed" task=arn:a/t1 from=PULLED to=RUNNING
level=info time=2026-11-30T16:01:35.000Z msg="container started" task=arn:a/t2 container=app
level=info time=2026-11-30T16:01:36.000Z msg="task status changed" task=arn:a/t2 from=NONE to=STOPPED
level=info time=2026-11-30T16:01:37.000Z msg="task status chan`
	got := agentReached([]byte(log))
	want := map[string]int{"arn:a/t1": 1, "arn:a/t2": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}

package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestReapCollectsExitedChildren(t *testing.T) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary to start as a child")
	}
	const children = 3
	pids := map[int]bool{}
	for range children {
		p, err := os.StartProcess(truePath, []string{"true"}, &os.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		pids[p.Pid] = true
		p.Release() // reap, not os.Process, must collect it
	}
	reaped := 0
	for deadline := time.Now().Add(5 * time.Second); reaped < children && time.Now().Before(deadline); {
		reaped += reap()
		time.Sleep(10 * time.Millisecond)
	}
	if reaped != children {
		t.Fatalf("reap collected %d children, want %d", reaped, children)
	}
	for pid := range pids {
		// A reaped child is gone: no zombie is left to signal.
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("child %d still exists after reap (kill 0: %v)", pid, err)
		}
	}
	if n := reap(); n != 0 {
		t.Errorf("reap with no children left = %d, want 0", n)
	}
}

func TestReapLeavesRunningChildren(t *testing.T) {
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to start as a child")
	}
	p, err := os.StartProcess(sleepPath, []string{"sleep", "30"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Wait()
	defer p.Kill()
	if n := reap(); n != 0 {
		t.Errorf("reap with only a running child = %d, want 0 (it must not block either)", n)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// agentProc is one incarnation of the berth binary, a child of the soak.
type agentProc struct {
	n       int // incarnation, from 1
	cmd     *exec.Cmd
	out     string // its stdout and stderr
	started time.Time
	exited  chan struct{} // closed once waited for
	waitErr error

	mu     sync.Mutex
	killed bool // the soak sent SIGKILL or SIGTERM
}

// startAgent runs `berth agent` with env; its stdout and stderr go to agent-NN.out in dir.
func startAgent(bin, dir string, env []string, n int) (*agentProc, error) {
	p := &agentProc{n: n, out: filepath.Join(dir, fmt.Sprintf("agent-%02d.out", n)), exited: make(chan struct{})}
	f, err := os.Create(p.out)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "agent")
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Should the soak die without cleaning up, the agent dies with it rather than living on.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start berth: %w", err)
	}
	p.started = time.Now()
	go func() {
		p.waitErr = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *agentProc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL and waits for the exit.
func (p *agentProc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits up to 10 s (the agent promises 5 s), then kills it. It returns an
// error when the agent did not exit 0 in time.
func (p *agentProc) stop() error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("agent %d had already exited: %v", p.n, p.waitErr)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("agent %d exited on SIGTERM with %v", p.n, p.waitErr)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("agent %d did not exit within 10 s of SIGTERM; killed", p.n)
	}
}

// unexpected reports whether the process exited without the soak asking it to.
func (p *agentProc) unexpected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.killed
}

// panicked reports whether the agent's output holds a Go panic or fatal runtime error.
func (p *agentProc) panicked() bool {
	data, err := os.ReadFile(p.out)
	if err != nil {
		return false
	}
	s := string(data)
	return strings.Contains(s, "\npanic: ") || strings.HasPrefix(s, "panic: ") || strings.Contains(s, "fatal error: ")
}

// tail returns the last lines the agent wrote.
func (p *agentProc) tail(lines int) string {
	data, err := os.ReadFile(p.out)
	if err != nil || len(data) == 0 {
		return fmt.Sprintf("(agent %d wrote nothing to %s)", p.n, p.out)
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

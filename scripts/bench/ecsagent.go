package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-agent/berth/scripts/internal/ecsstandin"
)

// berthProcess is the berth binary running as a child process of the bench.
type berthProcess struct {
	cmd     *exec.Cmd
	outFile string
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
}

// agentEnv is the complete environment of the agent in ecs mode: localAgentEnv, with the cluster, the
// stand-in's endpoint and its test credentials.
func agentEnv(dir, dataDir, cluster, endpoint, logLevel string) []string {
	env := append(localAgentEnv(dir, dataDir, logLevel), "ECS_CLUSTER="+cluster, "ECS_BACKEND_HOST="+endpoint)
	return append(env, ecsstandin.AgentCredentialsEnv()...)
}

// localAgentEnv is the complete environment of the agent in local mode: nothing is inherited but PATH
// and DOCKER_HOST, so no AWS or ECS setting of the caller's shell, and no proxy, reaches it. Every
// listener but the task endpoint's (fixed at 127.0.0.1:51679, where the containers' NAT points) is on
// a free loopback port. The defaults allow 200 tasks at once: no ECS_* limit is set lower.
func localAgentEnv(dir, dataDir, logLevel string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "aws-config-none"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "aws-credentials-none"),
		"AWS_EC2_METADATA_DISABLED=true",
		"ECS_ENV_FILE=/dev/null",
		"ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_DATADIR=" + dataDir,
		"ECS_LOGFILE=" + filepath.Join(dir, "berth.log"),
		"ECS_LOG_ROLLOVER_TYPE=none",
		"ECS_LOGLEVEL=" + logLevel,
		"ECS_LOCAL_CONTROL_PLANE_ADDR=" + freeLoopback(),
		"ECS_INTROSPECTION_ADDR=" + freeLoopback(),
		"ECS_IMAGE_PULL_BEHAVIOR=prefer-cached",
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env = append(env, "DOCKER_HOST="+h)
	}
	return env
}

// envValue returns the value of key in env, or "".
func envValue(env []string, key string) string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// checkMode asks `berth config` which mode the environment selects and fails unless it is want.
func checkMode(ctx context.Context, bin string, env []string, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "config")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("berth config: %w\n%s", err, stderr.Bytes())
	}
	var eff struct {
		Mode       string `json:"mode"`
		ModeReason string `json:"modeReason"`
	}
	if err := json.Unmarshal(out, &eff); err != nil {
		return fmt.Errorf("berth config printed no JSON: %w", err)
	}
	if eff.Mode != want {
		return fmt.Errorf("berth config selects mode %q, not %s: %s", eff.Mode, want, eff.ModeReason)
	}
	return nil
}

// taskEndpointAddr is where every agent serves its task endpoint, one agent per host.
const taskEndpointAddr = "127.0.0.1:51679"

// waitTaskEndpointFree waits, up to 10 minutes, until no process listens on taskEndpointAddr: on a
// shared machine another agent (a test's) may hold it for a while, and ours would exit at once.
func waitTaskEndpointFree(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, 10*time.Minute, errors.New("10 min"))
	defer cancel()
	for said := false; ; said = true {
		ln, err := net.Listen("tcp", taskEndpointAddr)
		if err == nil {
			return ln.Close()
		}
		if !said {
			fmt.Printf("  waiting for %s, the task endpoint's address, held by another process (%v)\n", taskEndpointAddr, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s stayed in use (another agent runs on this host): %w", taskEndpointAddr, context.Cause(ctx))
		case <-time.After(time.Second):
		}
	}
}

// startBerth runs `berth agent` with env, once the task endpoint's address is free; its stdout and
// stderr go to a file beside its log.
func startBerth(ctx context.Context, bin, dir string, env []string) (*berthProcess, error) {
	if err := waitTaskEndpointFree(ctx); err != nil {
		return nil, err
	}
	p := &berthProcess{outFile: filepath.Join(dir, "berth.out"), exited: make(chan struct{})}
	out, err := os.Create(p.outFile)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "agent")
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Should the bench die without cleaning up, the agent gets SIGTERM rather than living on.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start berth: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *berthProcess) pid() int { return p.cmd.Process.Pid }

// watch returns a context that ends, with a cause naming the exit, if the agent exits.
func (p *berthProcess) watch(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("berth exited (%v)", p.waitErr))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// stop sends SIGTERM and waits up to 10 s (the agent promises 5 s), then kills it.
func (p *berthProcess) stop() error {
	select {
	case <-p.exited:
		return fmt.Errorf("berth had already exited: %v", p.waitErr)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("berth exited on SIGTERM with %v", p.waitErr)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New("berth did not exit within 10 s of SIGTERM; killed")
	}
}

// tail returns the last lines the agent wrote (its log goes to stdout as well as to ECS_LOGFILE;
// stdout also has what the Go runtime prints when it crashes), for an error report.
func (p *berthProcess) tail(lines int) string {
	data, err := os.ReadFile(p.outFile)
	if err != nil || len(data) == 0 {
		return fmt.Sprintf("(berth wrote nothing to %s)", p.outFile)
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return fmt.Sprintf("--- last lines berth wrote:\n%s", strings.Join(ls[max(0, len(ls)-lines):], "\n"))
}

// offHostSockets lists the process's TCP and UDP sockets whose local or remote address is not
// loopback (a listening socket's unspecified remote address is fine).
func offHostSockets(pid int) ([]string, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var bad []string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			local, remote := procAddr(f[1]), procAddr(f[2])
			if local == nil || remote == nil || !local.IsLoopback() || !(remote.IsLoopback() || remote.IsUnspecified()) {
				bad = append(bad, fmt.Sprintf("%s %s -> %s", proto, local, remote))
			}
		}
	}
	return bad, nil
}

// procAddr decodes the address of a /proc/net/{tcp,udp}[6] entry: hex, in 32-bit host-order words.
func procAddr(s string) net.IP {
	h, _, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	if err != nil || len(b)%4 != 0 {
		return nil
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b)
}

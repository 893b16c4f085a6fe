//go:build integration

package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/introspection"
)

// The guard rule the agent adds for docker0, as iptables -S prints it, and its route_localnet.
const (
	dockerGuardSpec    = "-d 127.0.0.0/8 -i docker0 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment berth-task-endpoint -j DROP"
	dockerLocalnetFile = "/proc/sys/net/ipv4/conf/docker0/route_localnet"
)

func dockerGuard(op string) []string {
	return append([]string{"-w", "-t", "filter", op, "BERTH-TASK-ENDPOINT"}, strings.Fields(dockerGuardSpec)...)
}

func hasDockerGuard() bool { return exec.Command("iptables", dockerGuard("-C")...).Run() == nil }

func dockerLocalnet(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(dockerLocalnetFile)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// hostNATError is /v1/metadata's HostNATError.
func (r *agentRun) hostNATError() (string, error) {
	resp, err := http.Get("http://" + r.addr + "/v1/metadata")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var md introspection.Metadata
	err = json.NewDecoder(resp.Body).Decode(&md)
	return md.HostNATError, err
}

// TestIntegrationHostNATKept runs the agent with an iptables wrapper in its PATH that refuses the
// guard rule while a marker file exists:
//   - the guard rule deleted with iptables is back within a check interval;
//   - deleted while iptables refuses it, route_localnet on docker0 goes off (and is never on while the
//     guard is missing), /v1/metadata carries HostNATError and `berth healthcheck` exits 1;
//   - a task with a role written meanwhile makes no container and waits with a PendingReason that
//     names the NAT, while a task without a role runs;
//   - once iptables works again the NAT is back, the healthcheck passes, and the role task runs and
//     its SDK gets the role's credentials through 169.254.170.2.
func TestIntegrationHostNATKept(t *testing.T) {
	ctx := context.Background()
	const role = "arn:aws:iam::000000000000:role/app"
	sts := &stsStandIn{issued: map[string]string{}}
	stsServer := &http.Server{Handler: sts, ReadHeaderTimeout: 5 * time.Second}
	stsLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stsServer.Serve(stsLn) }()
	t.Cleanup(func() { _ = stsServer.Close() })

	iptablesBin, err := exec.LookPath("iptables")
	require.NoError(t, err)
	dir := t.TempDir()
	marker := filepath.Join(dir, "refuse-guard")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "iptables"), []byte(`#!/bin/sh
if [ -e `+marker+` ]; then
	case "$*" in *"-A BERTH-TASK-ENDPOINT "*"127.0.0.0/8"*|*"-I INPUT"*) echo "iptables: injected failure" >&2; exit 4;; esac
fi
exec `+iptablesBin+` "$@"
`), 0o755))

	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	agent := env.start("PATH="+dir+":"+os.Getenv("PATH"), "AWS_ENDPOINT_URL_STS=http://"+stsLn.Addr().String(),
		"AWS_ACCESS_KEY_ID=AKIAHOSTHOSTHOST0000", "AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	healthcheck := func() (int, string) {
		cmd := exec.Command(bin, "healthcheck")
		cmd.Env = append(os.Environ(), "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null", "ECS_INTROSPECTION_ADDR="+agent.addr)
		out, err := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out) + errString(err)
	}
	natIn := func() bool { return hostnat.Check(ctx, hostnat.Config{}) == nil }
	require.Eventually(t, natIn, 30*time.Second, 100*time.Millisecond, "the agent installs the NAT; log:\n%s", agent.out.String())
	require.Eventually(t, func() bool { code, _ := healthcheck(); return code == 0 }, 30*time.Second, 100*time.Millisecond)

	// A guard rule deleted while iptables works is back at the next check.
	out, err := exec.Command("iptables", dockerGuard("-D")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, hasDockerGuard, 45*time.Second, 100*time.Millisecond, "the guard is back; log:\n%s", agent.out.String())
	require.Eventually(t, natIn, 10*time.Second, 100*time.Millisecond)

	// Deleted while iptables refuses it: route_localnet goes off, the agent says why.
	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	out, err = exec.Command("iptables", dockerGuard("-D")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool {
		e, err := agent.hostNATError()
		return err == nil && strings.Contains(e, "injected failure")
	}, 45*time.Second, 100*time.Millisecond, "/v1/metadata reports the NAT missing; log:\n%s", agent.out.String())
	assert.Equal(t, "0", dockerLocalnet(t), "route_localnet is off while the guard is missing")
	code, hc := healthcheck()
	assert.Equal(t, 1, code, hc)
	assert.Contains(t, hc, "containers cannot reach the task endpoint at 169.254.170.2")

	// unguarded reads route_localnet, then the guard: the agent adds the guard before it turns
	// route_localnet on, so on, then missing, in this order, is a moment of both.
	unguarded := func() bool { return dockerLocalnet(t) == "1" && !hasDockerGuard() }
	probeTask(t, env.tasksDir, "nat-role", "bridge", role)
	writeStaticTask(t, env.tasksDir, "nat-plain")
	stopTasks := stopFamiliesAtEnd(t, agent, env.tasksDir, "nat-role", "nat-plain")
	agent.waitTasks(2*time.Minute, "the task without a role runs and the role task waits", func(ts []introspection.TaskResponse) bool {
		require.False(t, unguarded(), "route_localnet on without the guard")
		plain, waiting := false, false
		for _, tk := range ts {
			switch tk.Family {
			case "nat-plain":
				plain = tk.KnownStatus == "RUNNING"
			case "nat-role":
				require.Equal(t, "PENDING", tk.KnownStatus, "the role task makes no container")
				for _, c := range tk.Containers {
					require.Empty(t, c.DockerID, "container %s of the role task is not made", c.Name)
				}
				waiting = strings.Contains(tk.PendingReason, "task endpoint's NAT")
			}
		}
		return plain && waiting
	})

	// iptables works again: everything is back, and the role task runs with its credentials.
	require.NoError(t, os.Remove(marker))
	ts := agent.waitTasks(3*time.Minute, "the role task's probe has run", func(ts []introspection.TaskResponse) bool {
		_, ok := probeDone(ts, "nat-role")
		return ok
	})
	assert.True(t, hasDockerGuard())
	assert.Equal(t, "1", dockerLocalnet(t))
	assert.True(t, natIn())
	e, err := agent.hostNATError()
	require.NoError(t, err)
	assert.Empty(t, e)
	code, hc = healthcheck()
	assert.Equal(t, 0, code, hc)
	probe, _ := probeDone(ts, "nat-role")
	logs, err := exec.Command("docker", "logs", probe.DockerID).CombinedOutput()
	require.NoError(t, err)
	require.Equal(t, 0, *probe.ExitCode, "the SDK got credentials: %s", logs)
	assert.Contains(t, string(logs), "AccessKeyId=ASIALOCAL")
	stopTasks()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

//go:build integration

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
)

// TestIntegrationFirelensCapabilitiesRegistered: the running agent registers FireLens's seven
// capabilities with its control plane, as the ECS agent does on Linux (names written from
// agent/app/agent_capability.go).
func TestIntegrationFirelensCapabilitiesRegistered(t *testing.T) {
	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	cpAddr := freeAddr(t)
	agent := env.start("ECS_LOCAL_CONTROL_PLANE_ADDR=" + cpAddr)
	defer agent.stop()
	var keys localauth.Keys
	require.Eventually(t, func() bool {
		var err error
		keys, err = localauth.Load(localauth.Path(env.dataDir))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the agent wrote its keys")
	var out struct {
		ContainerInstances []struct {
			Attributes []struct {
				Name string `json:"name"`
			} `json:"attributes"`
		} `json:"containerInstances"`
	}
	var names []string
	require.Eventually(t, func() bool {
		list := struct {
			ContainerInstanceArns []string `json:"containerInstanceArns"`
		}{}
		err := localcp.Call(context.Background(), http.DefaultClient, "http://"+cpAddr, keys, "ListContainerInstances",
			map[string]any{"cluster": env.cluster}, &list)
		if err != nil || len(list.ContainerInstanceArns) == 0 {
			return false
		}
		err = localcp.Call(context.Background(), http.DefaultClient, "http://"+cpAddr, keys, "DescribeContainerInstances",
			map[string]any{"cluster": env.cluster, "containerInstances": list.ContainerInstanceArns}, &out)
		if err != nil || len(out.ContainerInstances) == 0 {
			return false
		}
		names = names[:0]
		for _, a := range out.ContainerInstances[0].Attributes {
			names = append(names, a.Name)
		}
		return true
	}, time.Minute, 200*time.Millisecond, "the agent registered with its embedded control plane; log:\n%s", agent.out.String())
	for _, want := range []string{
		"ecs.capability.firelens.fluentd",
		"ecs.capability.firelens.fluentbit",
		"com.amazonaws.ecs.capability.logging-driver.awsfirelens",
		"ecs.capability.logging-driver.awsfirelens.log-driver-buffer-limit",
		"ecs.capability.firelens.options.config.file",
		"ecs.capability.firelens.options.config.s3",
		"ecs.capability.firelens.non-root-user",
	} {
		assert.Contains(t, names, want)
	}
}

//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/ecsagentdata"
	"github.com/berth-agent/berth/agent/imds/imdsmock"
	"github.com/berth-agent/berth/agent/introspection"
)

// recordingECS passes every request to the embedded control plane and records the region each was
// signed for and the body of RegisterContainerInstance.
type recordingECS struct {
	cp       http.Handler
	mu       sync.Mutex
	regions  []string
	register []byte
}

func (s *recordingECS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, scope, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	if parts := strings.Split(scope, "/"); len(parts) > 2 {
		s.mu.Lock()
		s.regions = append(s.regions, parts[2])
		s.mu.Unlock()
	}
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".RegisterContainerInstance") {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.register = body
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.cp.ServeHTTP(w, r)
}

// TestIntegrationClusterOnlyOnEC2 is the user data line `ECS_CLUSTER=prod` on an EC2 instance: with
// no region configured, the agent runs in ecs mode, reads the region from the instance metadata
// service (AWS's ec2-metadata-mock, IMDSv2 only, answering eu-west-3), signs every call for it, and
// registers with the signed instance identity document and the EC2 attributes. With no region and
// no instance metadata service it exits 1 saying how to set the region.
func TestIntegrationClusterOnlyOnEC2(t *testing.T) {
	overrides := filepath.Join(t.TempDir(), "aemm.json")
	require.NoError(t, os.WriteFile(overrides, []byte(`{"metadata": {"values": {"placement-region": "eu-west-3"}}}`), 0o600))
	imds := imdsmock.Start(t, "--config-file", overrides)

	srv := standInECS(t, "eu-west-3")
	ecs := &recordingECS{cp: srv.Handler()}
	addr := serveLoopback(t, ecs)

	bin := buildBerth(t)
	env := newRecoveryEnv(t, bin)
	noRegion := []string{"AWS_DEFAULT_REGION=", "AWS_REGION=", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
	agent := env.start(append(noRegion, "ECS_BACKEND_HOST=http://"+addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test",
		"AWS_EC2_METADATA_DISABLED=false", "AWS_EC2_METADATA_SERVICE_ENDPOINT="+imds,
		`ECS_CONTAINER_INSTANCE_TAGS={"team":"core"}`)...)
	var register struct {
		Tags []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"tags"`
		InstanceIdentityDocument          string `json:"instanceIdentityDocument"`
		InstanceIdentityDocumentSignature string `json:"instanceIdentityDocumentSignature"`
		Attributes                        []struct {
			Name  string  `json:"name"`
			Value *string `json:"value"`
		} `json:"attributes"`
	}
	require.Eventually(t, func() bool {
		ecs.mu.Lock()
		defer ecs.mu.Unlock()
		return ecs.register != nil
	}, time.Minute, 100*time.Millisecond, "the agent registers; log:\n%s", agent.out.String())
	ecs.mu.Lock()
	require.NoError(t, json.Unmarshal(ecs.register, &register))
	regions := append([]string(nil), ecs.regions...)
	ecs.mu.Unlock()

	assert.Contains(t, register.InstanceIdentityDocument, `"instanceId"`)
	assert.Contains(t, register.InstanceIdentityDocument, "i-1234567890abcdef0", "the mock's instance")
	assert.NotEmpty(t, register.InstanceIdentityDocumentSignature)
	attrs := map[string]string{}
	for _, a := range register.Attributes {
		if a.Value != nil {
			attrs[a.Name] = *a.Value
		}
	}
	assert.Equal(t, "m4.xlarge", attrs["ecs.instance-type"])
	require.Len(t, register.Tags, 1, "ECS_CONTAINER_INSTANCE_TAGS")
	assert.Equal(t, "team", register.Tags[0].Key)
	assert.Equal(t, "core", register.Tags[0].Value)
	for _, name := range []string{"ecs.availability-zone", "ecs.ami-id", "ecs.vpc-id", "ecs.subnet-id"} {
		assert.NotEmpty(t, attrs[name], "attribute %s", name)
	}
	require.NotEmpty(t, regions)
	for _, r := range regions {
		assert.Equal(t, "eu-west-3", r, "every call is signed for the region IMDS gave")
	}
	var meta introspection.Metadata
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + agent.addr + "/v1/metadata")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&meta) == nil && meta.EC2InstanceID != ""
	}, 30*time.Second, 100*time.Millisecond, "/v1/metadata names the EC2 instance")
	assert.Equal(t, "i-1234567890abcdef0", meta.EC2InstanceID)
	assert.NotEmpty(t, meta.AvailabilityZone)
	agent.stop()

	// No region anywhere: exit 1, saying how to set it.
	cmd := exec.Command(bin, "agent")
	cmd.Env = append(os.Environ(), append(noRegion, "ECS_ENV_FILE=/dev/null", "ECS_AGENT_CONFIG_FILE_PATH=/dev/null",
		"ECS_CLUSTER=prod", "ECS_DATADIR="+t.TempDir(), "AWS_EC2_METADATA_DISABLED=true")...)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "the agent exits: %v\n%s", err, out)
	assert.Equal(t, 1, exitErr.ExitCode())
	assert.Contains(t, string(out), "AWS_DEFAULT_REGION", "the message says how to set the region")
}

// TestIntegrationSpotNoticeDrains runs an ecs-mode agent with ECS_ENABLE_SPOT_INSTANCE_DRAINING
// against ec2-metadata-mock's spot mode, whose interruption notice appears 3 s after it starts:
// the agent sets its instance DRAINING (UpdateContainerInstancesState) within 10 s of the notice.
func TestIntegrationSpotNoticeDrains(t *testing.T) {
	imds := imdsmock.Start(t, "spot", "--mock-delay-sec", "3", "--action", "terminate")
	noticeAt := time.Now().Add(3 * time.Second)
	srv := standInECS(t, "us-east-1")
	var (
		mu       sync.Mutex
		drainsAt []time.Time
		drained  []string
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateContainerInstancesState") {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			drainsAt, drained = append(drainsAt, time.Now()), append(drained, string(body))
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		srv.Handler().ServeHTTP(w, r)
	})
	addr := serveLoopback(t, handler)

	env := newRecoveryEnv(t, buildBerth(t))
	agent := env.start("AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://"+addr,
		"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=false",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT="+imds, "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(drained) > 0
	}, 30*time.Second, 100*time.Millisecond, "the agent drains its instance; log:\n%s", agent.out.String())
	mu.Lock()
	assert.Contains(t, drained[0], `"status":"DRAINING"`)
	assert.Less(t, drainsAt[0].Sub(noticeAt), 10*time.Second, "DRAINING within 10 s of the notice")
	t.Logf("DRAINING %v after the notice appeared", drainsAt[0].Sub(noticeAt).Round(time.Millisecond))
	mu.Unlock()
	agent.stop()
}

// TestIntegrationWarmPoolsCheckHoldsRegistration runs ecs-mode agents with ECS_WARM_POOLS_CHECK
// against ec2-metadata-mock's asglifecycle mode. While IMDS has no target lifecycle state (the mock
// answers 404 past --mock-ip-count 0, as IMDS does before Auto Scaling sets one) the agent polls,
// says it is still waiting and does not register; once the state is InService it registers. (The
// mock cannot serve a warm-pool state turning InService; agent/imds's unit tests cover that.)
func TestIntegrationWarmPoolsCheckHoldsRegistration(t *testing.T) {
	bin := buildBerth(t)
	run := func(mockArgs ...string) (*recordingECS, *agentRun) {
		imds := imdsmock.Start(t, append([]string{"asglifecycle"}, mockArgs...)...)
		ecs := &recordingECS{cp: standInECS(t, "us-east-1").Handler()}
		addr := serveLoopback(t, ecs)
		agent := newRecoveryEnv(t, bin).start("AWS_DEFAULT_REGION=us-east-1", "ECS_BACKEND_HOST=http://"+addr,
			"AWS_ACCESS_KEY_ID=berth-test", "AWS_SECRET_ACCESS_KEY=berth-test", "AWS_CONFIG_FILE=/dev/null",
			"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=false",
			"AWS_EC2_METADATA_SERVICE_ENDPOINT="+imds, "ECS_WARM_POOLS_CHECK=true")
		return ecs, agent
	}
	registered := func(ecs *recordingECS) bool {
		ecs.mu.Lock()
		defer ecs.mu.Unlock()
		return ecs.register != nil
	}

	ecs, agent := run("--mock-ip-count", "0")
	polled := func() bool {
		return strings.Contains(agent.out.String(), "waiting for the instance to go into service")
	}
	if !assert.Eventually(t, polled, 30*time.Second, 100*time.Millisecond, "the agent polls the target lifecycle state") {
		t.Fatalf("agent log:\n%s", agent.out.String())
	}
	assert.False(t, registered(ecs), "no registration before InService")
	agent.stop()

	ecs, agent = run("--asg-termination-delay-sec", "600")
	if !assert.Eventually(t, func() bool { return registered(ecs) }, 30*time.Second, 100*time.Millisecond, "the agent registers once InService") {
		t.Fatalf("agent log:\n%s", agent.out.String())
	}
	assert.Contains(t, agent.out.String(), "the instance is InService")
	agent.stop()
}

// TestIntegrationTakesOverFromTheECSAgent: on a host whose data directory holds the ECS agent's
// agent.db, a new Berth registers with the ECS agent's container instance ARN, and leaves a
// container the ECS agent runs (its labels, not Berth's) running.
func TestIntegrationTakesOverFromTheECSAgent(t *testing.T) {
	env := newRecoveryEnv(t, buildBerth(t))
	const instance = "arn:aws:ecs:us-east-1:000000000000:container-instance/prod/0123456789abcdef0123456789abcdef"
	db, err := bolt.Open(filepath.Join(env.dataDir, ecsagentdata.BoltFile), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("metadata"))
		if err != nil {
			return err
		}
		for k, v := range map[string]string{"cluster-name": env.cluster, "container-instance-arn": instance, "agent-version": "1.89.0"} {
			raw, _ := json.Marshal(v)
			if err := b.Put([]byte(k), raw); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())
	// A container the ECS agent started: its labels, none of Berth's.
	name := "ecs-agent-task-" + randomHex(t, 4)
	out, err := exec.Command("docker", "run", "-d", "--name", name, "--label", "com.amazonaws.ecs.cluster="+env.cluster,
		"--label", "com.amazonaws.ecs.task-arn=arn:aws:ecs:us-east-1:000000000000:task/prod/0abc", testappImage, "sleep").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })

	srv := standInECS(t, "us-east-1")
	ecs := &recordingECS{cp: srv.Handler()}
	addr := serveLoopback(t, ecs)
	agent := env.start(ecsModeEnv(addr)...)
	require.Eventually(t, func() bool {
		ecs.mu.Lock()
		defer ecs.mu.Unlock()
		return ecs.register != nil
	}, time.Minute, 100*time.Millisecond, "the agent registers; log:\n%s", agent.out.String())
	ecs.mu.Lock()
	var register struct {
		ContainerInstanceArn string `json:"containerInstanceArn"`
	}
	require.NoError(t, json.Unmarshal(ecs.register, &register))
	ecs.mu.Unlock()
	assert.Equal(t, instance, register.ContainerInstanceArn, "the ECS agent's container instance is re-used")
	assert.Contains(t, agent.out.String(), "taking over the container instance the ECS agent registered")
	agent.stop()
	state, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", name).CombinedOutput()
	require.NoError(t, err, "%s", state)
	assert.Equal(t, "true", strings.TrimSpace(string(state)), "the ECS agent's container is left alone")
}

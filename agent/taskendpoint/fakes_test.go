package taskendpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
)

// held is what a metadata token names.
type held struct {
	task      *task.Task
	container string
}

// fakeTasks is a TaskSource over fixed tasks.
type fakeTasks struct {
	tokens map[string]held
	tasks  []*task.Task
}

var _ taskendpoint.TaskSource = (*fakeTasks)(nil)

func (f *fakeTasks) ByToken(token string) (*task.Task, string, bool) {
	h, ok := f.tokens[token]
	if !ok {
		return nil, "", false
	}
	return h.task.Clone(), h.container, true
}

func (f *fakeTasks) Tasks() []*task.Task {
	out := make([]*task.Task, 0, len(f.tasks))
	for _, t := range f.tasks {
		out = append(out, t.Clone())
	}
	return out
}

// fakeCredentials is a CredentialsSource: known IDs answer their credentials, IDs in errs their error.
type fakeCredentials struct {
	creds map[string]taskcreds.Credentials
	errs  map[string]error
}

var _ taskendpoint.CredentialsSource = (*fakeCredentials)(nil)

func (f *fakeCredentials) TaskCredentials(_ context.Context, id string) (taskcreds.Credentials, error) {
	if err, ok := f.errs[id]; ok {
		return taskcreds.Credentials{}, err
	}
	c, ok := f.creds[id]
	if !ok {
		return taskcreds.Credentials{}, fmt.Errorf("credentials %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// fakeStats is a StatsSource over fixed stats; a Docker ID it does not know is not found. It records
// the network namespace each container was last asked with.
type fakeStats struct {
	stats map[string]string
	mu    sync.Mutex
	netns map[string]string
}

var _ taskendpoint.StatsSource = (*fakeStats)(nil)

func (f *fakeStats) Stats(_ context.Context, dockerID, netns string) (json.RawMessage, error) {
	f.mu.Lock()
	f.netns[dockerID] = netns
	f.mu.Unlock()
	s, ok := f.stats[dockerID]
	if !ok {
		return nil, fmt.Errorf("stats of %s: %w", dockerID, errdefs.ErrNotFound)
	}
	return json.RawMessage(s), nil
}

// askedNetNS returns the namespace the container's stats were last asked with, and whether they were.
func (f *fakeStats) askedNetNS(dockerID string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ns, ok := f.netns[dockerID]
	return ns, ok
}

// fakeTags is a TagSource: known ARNs answer their tags, ARNs in errs their error; it counts calls.
type fakeTags struct {
	tags  map[string]map[string]string
	errs  map[string]error
	mu    sync.Mutex
	asked []string
}

var _ taskendpoint.TagSource = (*fakeTags)(nil)

func (f *fakeTags) ListTagsForResource(_ context.Context, arn string) (map[string]string, error) {
	f.mu.Lock()
	f.asked = append(f.asked, arn)
	f.mu.Unlock()
	if err, ok := f.errs[arn]; ok {
		return nil, err
	}
	if tags, ok := f.tags[arn]; ok {
		return tags, nil
	}
	return map[string]string{}, nil
}

const (
	clusterName = "prod"
	bridgeARN   = "arn:aws:ecs:us-west-2:012345678901:task/prod/1f0e5b8c0a9d4c7e8f6a5b4c3d2e1f00"
	awsvpcARN   = "arn:aws:ecs:us-west-2:012345678901:task/prod/2e1d4c3b2a1f4e5d9c8b7a6f5e4d3c2b"
	webID       = "aaaa000000000000000000000000000000000000000000000000000000000001"
	jobID       = "bbbb000000000000000000000000000000000000000000000000000000000002"
	pauseID     = "cccc000000000000000000000000000000000000000000000000000000000003"
	apiID       = "dddd000000000000000000000000000000000000000000000000000000000004"

	webContainerARN = "arn:aws:ecs:us-west-2:012345678901:container/prod/1f0e5b8c0a9d4c7e8f6a5b4c3d2e1f00/7d0c9b8a-6f5e-4d3c-2b1a-0f9e8d7c6b5a"
	instanceARN     = "arn:aws:ecs:us-west-2:012345678901:container-instance/prod/5a4b3c2d1e0f4a9b8c7d6e5f4a3b2c1d"

	credsID      = "6c2e2a9d-4b1e-4f0e-9a8b-7c6d5e4f3a2b"
	accessKeyID  = "ASIAEXAMPLEKEYID0001"
	secretKey    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY1"
	sessionToken = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN//////////wEaCXVzLXdlc3QtMiJHMEUCIQ"
)

// at is a fixed instant in a zone other than UTC, so that the tests see timestamps served in UTC.
func at(sec int) time.Time {
	return time.Date(2026, 11, 30, 15, 0, sec, 123456789, time.FixedZone("CET", 3600))
}

// bridgeTask is a running bridge task: a healthy web container with a dynamic port and a finished job.
func bridgeTask() *task.Task {
	exit := 0
	return &task.Task{
		Arn: bridgeARN, Family: "web", Revision: 3, NetworkMode: task.NetworkBridge, CPU: 512, Memory: 1024,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning, CreatedAt: at(0), StartedAt: at(2),
		LaunchType: "EC2", ServiceName: "web-svc",
		Containers: []*task.Container{
			{
				Name: "web", Image: "nginx:1.27", CPU: 256, Memory: 512, Essential: true,
				PortMappings: []task.PortMapping{{ContainerPort: 80, Protocol: "tcp"}},
				HealthCheck:  &task.HealthCheck{Command: []string{"CMD-SHELL", "curl -f localhost"}},
				DockerLabels: map[string]string{"team": "infra", labelCluster: "spoofed"},
				LogConfiguration: &task.LogConfiguration{LogDriver: "json-file",
					Options: map[string]string{"max-size": "10m"}},
				Environment:   []task.KeyValue{{Name: "PASSWORD", Value: "hunter2"}},
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning,
				DockerID: webID, DockerName: "ecs-web-3-web-0a1b2c3d4e5f", ImageID: "sha256:1111",
				Health: task.HealthHealthy, HealthSince: at(5), HealthOutput: "200 OK",
				ARN:             webContainerARN,
				Mounts:          []task.Mount{{Name: "cache", Source: "/var/lib/docker/volumes/cache/_data", Destination: "/cache"}, {Source: "/srv/conf", Destination: "/etc/nginx"}},
				NetworkBindings: []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"}},
				Networks:        []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.2"}}},
				StartedAt:       at(1),
			},
			{
				Name: "job", Image: "busybox:1.36",
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerStopped,
				DockerID: jobID, DockerName: "ecs-web-3-job-5f4e3d2c1b0a", ImageID: "sha256:2222",
				ExitCode: &exit, Reason: "done", StartedAt: at(1), FinishedAt: at(9),
				Networks: []task.Network{{Mode: "bridge", IPv4Addresses: []string{"172.17.0.3"}}},
			},
		},
	}
}

// awsvpcTask is a running awsvpc task with its ENI: the pause container and one api container.
func awsvpcTask() *task.Task {
	return &task.Task{
		Arn: awsvpcARN, Family: "api", Revision: 7, NetworkMode: task.NetworkAWSVPC,
		DesiredStatus: task.TaskRunning, KnownStatus: task.TaskRunning,
		ENI: &task.ENI{
			AttachmentArn: "arn:aws:ecs:us-west-2:012345678901:attachment/9a8b", MAC: "0e:10:e2:01:bd:91",
			IPv4: netip.MustParsePrefix("10.0.2.61/24"), Gateway: netip.MustParseAddr("10.0.2.1"),
			DNSServers: []string{"10.0.0.2"}, SearchDomains: []string{"us-west-2.compute.internal"},
			PrivateDNSName: "ip-10-0-2-61.us-west-2.compute.internal",
		},
		AWSVPC: &task.AWSVPC{NetNS: "/proc/4242/ns/net", IPv4: "10.0.2.61", BridgeIPv4: "169.254.172.3"},
		Containers: []*task.Container{
			{
				Name: "~internal~ecs~pause", Image: "berth/pause:latest", Essential: true, Pause: true,
				DesiredStatus: task.ContainerResourcesProvisioned, KnownStatus: task.ContainerResourcesProvisioned,
				DockerID: pauseID, DockerName: "ecs-api-7-internalecspause-9f8e7d6c5b4a", ImageID: "sha256:3333",
				StartedAt: at(3),
			},
			{
				Name: "api", Image: "012345678901.dkr.ecr.us-west-2.amazonaws.com/api:v2", Memory: 256, Essential: true,
				PortMappings:  []task.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}},
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerRunning,
				DockerID: apiID, DockerName: "ecs-api-7-api-1a2b3c4d5e6f", ImageID: "sha256:4444",
				StartedAt: at(4),
			},
		},
	}
}

const labelCluster = "com.amazonaws.ecs.cluster"

// env is a handler over the fixtures, with a fake clock and a debug log to read back.
type env struct {
	h     *taskendpoint.Handler
	clock *clockwork.FakeClock
	log   *logger.Buffer
	tasks *fakeTasks
	stats *fakeStats
	tags  *fakeTags
}

func newEnv(t *testing.T, mutate ...func(*taskendpoint.Config)) *env {
	t.Helper()
	bridge, awsvpc := bridgeTask(), awsvpcTask()
	tasks := &fakeTasks{
		tokens: map[string]held{
			"tok-web": {bridge, "web"}, "tok-job": {bridge, "job"}, "tok-api": {awsvpc, "api"},
		},
		tasks: []*task.Task{bridge, awsvpc},
	}
	creds := &fakeCredentials{
		creds: map[string]taskcreds.Credentials{credsID: {
			RoleArn: "arn:aws:iam::012345678901:role/web", AccessKeyID: accessKeyID, SecretAccessKey: secretKey,
			SessionToken: sessionToken, Expiration: time.Date(2026, 11, 30, 20, 32, 25, 987654321, time.FixedZone("X", -5*3600)),
		}},
		errs: map[string]error{"refused-id": fmt.Errorf("STS refused AssumeRole: AccessDenied: %w", errdefs.ErrUnavailable)},
	}
	var buf logger.Buffer
	log, err := logger.New(logger.Config{Level: logger.LevelDebug}, &buf)
	require.NoError(t, err)
	t.Cleanup(log.Close)
	clock := clockwork.NewFakeClock()
	stats := &fakeStats{stats: map[string]string{
		webID:   webStatsJSON,
		apiID:   apiStatsJSON,
		pauseID: `{"id":"` + pauseID + `"}`,
	}, netns: map[string]string{}}
	tags := &fakeTags{tags: map[string]map[string]string{
		bridgeARN:   {"team": "infra", "cost-center": "42"},
		instanceARN: {"rack": "r12"},
	}}
	cfg := taskendpoint.Config{
		Instance: taskendpoint.Instance{Cluster: clusterName, AvailabilityZone: "us-west-2a", AvailabilityZoneID: "usw2-az1",
			VPCID: "vpc-0a1b2c3d4e5f60718"},
		Tasks:       tasks,
		Credentials: creds,
		Stats:       stats,
		Tags:        tags,
		InstanceARN: func() string { return instanceARN },
		Logger:      log,
		Clock:       clock,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	h, err := taskendpoint.New(cfg)
	require.NoError(t, err)
	return &env{h: h, clock: clock, log: &buf, tasks: tasks, stats: stats, tags: tags}
}

// The stats the fake source has: the web container's Docker object, and the api container's with
// the network_rate_stats only v4 shows.
const (
	webStatsJSON = `{"id":"` + webID + `","name":"/ecs-web-3-web-0a1b2c3d4e5f","read":"2026-11-30T14:00:10Z","cpu_stats":{"online_cpus":2}}`
	apiStatsJSON = `{"id":"` + apiID + `","networks":{"eth0":{"rx_bytes":100}},"network_rate_stats":{"rx_bytes_per_sec":10,"tx_bytes_per_sec":20}}`
)

// do sends a request from the given source address (host:port).
func (e *env) do(method, path, from string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://169.254.170.2"+path, nil)
	req.RemoteAddr = from
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// get sends a GET request from the given source address.
func (e *env) get(path, from string) *httptest.ResponseRecorder {
	return e.do(http.MethodGet, path, from)
}

package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/controlplane"
	"github.com/berth-agent/berth/agent/dockerstats"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/faultinject"
	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/kernelstats"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/prommetrics"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskendpoint"
	"github.com/berth-agent/berth/agent/taskmetrics"
	"github.com/berth-agent/berth/agent/tasksecrets"
)

// newKernelStats returns the reader of containers' counters from this host's cgroups, or nil, with
// a warning, when they cannot be found: container stats are then unavailable, and the agent runs on.
func newKernelStats(log *logger.Logger) dockerstats.Kernel {
	r, err := kernelstats.New(kernelstats.Config{})
	if err != nil {
		log.Warn("container stats unavailable: cannot read this host's cgroups", "error", err)
		return nil
	}
	return dockerstats.FromKernel(r)
}

// newHostNAT returns the keeper of the NAT that makes the task endpoint reachable from bridge
// containers (and, with ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST, from the host's own) at
// 169.254.170.2, and, with ECS_ENABLE_TASK_ENI, from the awsvpc task bridge once it exists. Tasks
// whose containers get role credentials wait while it is not in place.
func newHostNAT(cfg *config.Config, log *logger.Logger) *hostnat.Keeper {
	nat := hostnat.Config{HostNetwork: cfg.TaskIAMRoleNetworkHost}
	if cfg.TaskENIEnabled {
		nat.TaskBridges = []string{ecscni.DefaultTaskBridge}
	}
	return hostnat.NewKeeper(hostnat.KeeperConfig{NAT: nat, Logger: log.With("component", "host_nat")})
}

// shutdownGrace bounds how long a server gets to finish in-flight requests after SIGTERM, well inside
// the 5 s the agent has to exit.
const shutdownGrace = 3 * time.Second

// servers holds the agent's listeners, opened at start so that a port in use stops the agent at once.
type servers struct {
	log           *logger.Logger
	introspection net.Listener
	taskEndpoint  net.Listener    // credentials and metadata for containers (127.0.0.1:51679)
	local         net.Listener    // the embedded control plane, local mode only
	localCP       *localcp.Server // its state, local mode only
}

// taskEndpointAddr is where the task endpoint listens; containers reach it as 169.254.170.2:80
// through the host's NAT (agent/hostnat).
var taskEndpointAddr = fmt.Sprintf("127.0.0.1:%d", hostnat.ListenPort)

// taskEndpointURL is the task endpoint as containers reach it.
const taskEndpointURL = "http://" + hostnat.EndpointIP

// listen opens the introspection port, the task endpoint's and, when embedded, the embedded control
// plane's, which shows the static tasks static returns.
func listen(cfg *config.Config, embedded bool, static func(context.Context) []localcp.StaticTask, log *logger.Logger) (*servers, error) {
	s := &servers{log: log}
	var err error
	if s.introspection, err = net.Listen("tcp", cfg.IntrospectionAddr); err != nil {
		return nil, fmt.Errorf("introspection API on %s: %w", cfg.IntrospectionAddr, err)
	}
	if a, err := netip.ParseAddrPort(s.introspection.Addr().String()); err == nil && !a.Addr().IsLoopback() {
		log.Warn("the introspection API answers other hosts, without authentication (ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS=true)",
			"addr", s.introspection.Addr().String())
	}
	if s.taskEndpoint, err = net.Listen("tcp", taskEndpointAddr); err != nil {
		s.close()
		return nil, fmt.Errorf("task endpoint on %s: %w", taskEndpointAddr, err)
	}
	if !embedded {
		return s, nil
	}
	keysFile := localauth.Path(cfg.DataDir)
	keys, err := localauth.Ensure(keysFile)
	if err != nil {
		s.close()
		return nil, err
	}
	dbPath := filepath.Join(cfg.DataDir, "localcp.db")
	if s.localCP, err = localcp.New(localcp.Config{DBPath: dbPath, Keys: keys, StaticTasks: static,
		StaticTasksDir: cfg.StaticTasksDir}, log.With("component", "localcp")); err != nil {
		s.close()
		if errors.Is(err, localcp.ErrCorrupt) {
			err = corruptState(dbPath, err)
		}
		return nil, fmt.Errorf("embedded control plane: %w", err)
	}
	if s.local, err = net.Listen("tcp", cfg.LocalControlPlaneAddr); err != nil {
		s.close()
		return nil, fmt.Errorf("embedded control plane on %s: %w", cfg.LocalControlPlaneAddr, err)
	}
	log.Info("embedded control plane: requests must be signed with its keys", "addr", cfg.LocalControlPlaneAddr, "keys_file", keysFile,
		"aws_cli", localauth.CLIHint(keysFile)+" aws ecs list-tasks --endpoint-url http://"+cfg.LocalControlPlaneAddr)
	return s, nil
}

// serve serves every listener in g until ctx ends.
func (s *servers) serve(ctx context.Context, g *errgroup.Group, eng *engine.Engine, stats *dockerstats.Cache, tel *taskmetrics.Source,
	m *prommetrics.Metrics, cp *controlplane.ControlPlane, ecs *ecsclient.Client, creds *taskcreds.Chain, ec2 ec2Instance, nat *hostnat.Keeper,
	faults *faultinject.Injector, cfg *config.Config) error {
	endpoint, err := taskendpoint.New(taskendpoint.Config{Instance: endpointInstance(cfg, ec2),
		RateLimit: taskendpoint.RateLimit{Steady: cfg.TaskMetadataRPS, Burst: cfg.TaskMetadataBurst},
		Tasks:     eng, Credentials: creds, CredentialsTasks: eng, BindCredentials: cfg.TaskCredentialsBindToTask,
		Stats: stats, Tags: ecs, InstanceARN: instanceARN(cp),
		Protection:           taskProtection{ecs: ecs, agentSigns: planOf(cfg).agentSignsTaskCalls},
		Logger:               s.log.With("component", "task_endpoint"),
		LogDriverCredentials: tasksecrets.LogDriverCredentials{Engine: eng, Creds: creds},
		Faults:               faults})
	if err != nil {
		return fmt.Errorf("task endpoint: %w", err)
	}
	g.Go(func() error {
		<-ctx.Done()
		stats.Close()
		return nil
	})
	m.ReportUsage(func() []prommetrics.ContainerUsage {
		var out []prommetrics.ContainerUsage
		for _, c := range tel.Containers() {
			out = append(out, prommetrics.ContainerUsage{TaskArn: c.TaskArn, ContainerName: c.ContainerName, CPUPercent: c.CPUPercent,
				MemoryBytes: c.MemoryBytes})
		}
		return out
	})
	intro := introspection.NewIntrospection(agentMetadata{cluster: cfg.Cluster, cp: cp, eng: eng, ec2: ec2.Identity, nat: nat},
		tasksWithUsage{Engine: eng, tel: tel}, m.Handler())
	g.Go(func() error { return serveHTTP(ctx, s.introspection, intro, "introspection API", s.log) })
	g.Go(func() error { return serveHTTP(ctx, s.taskEndpoint, endpoint, "task endpoint", s.log) })
	if s.local != nil {
		g.Go(func() error { return serveHTTP(ctx, s.local, s.localCP.Handler(), "embedded control plane", s.log) })
	}
	return nil
}

// tasksWithUsage is the introspection API's task source: the engine's tasks with the telemetry
// source's latest figures.
type tasksWithUsage struct {
	*engine.Engine
	tel *taskmetrics.Source
}

var _ introspection.UsageSource = tasksWithUsage{}

// ContainerUsage returns the telemetry source's latest figures of the container.
func (t tasksWithUsage) ContainerUsage(dockerID string) (introspection.Usage, bool) {
	f, ok := t.tel.Container(dockerID)
	return introspection.Usage{CPUPercent: f.CPUPercent, MemoryBytes: f.MemoryBytes}, ok
}

// close closes what listen opened and serve did not take over.
func (s *servers) close() {
	for _, ln := range []net.Listener{s.introspection, s.taskEndpoint, s.local} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if s.localCP != nil {
		_ = s.localCP.Close()
	}
}

// serverLimits bound what one client can hold of a server: a request's headers and whole body must
// arrive within read, its answer leave within write, a keep-alive connection idle no longer than
// idle. The embedded control plane's ACS sessions set their own deadlines once upgraded.
type serverLimits struct {
	header, read, write, idle time.Duration
	maxHeaderBytes            int
}

var limits = serverLimits{header: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 30 * time.Second,
	maxHeaderBytes: 64 << 10}

// serveHTTP serves h on ln until ctx ends, then shuts the server down within shutdownGrace.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, name string, log *logger.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: limits.header, ReadTimeout: limits.read, WriteTimeout: limits.write,
		IdleTimeout: limits.idle, MaxHeaderBytes: limits.maxHeaderBytes}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info(name+" listening", "addr", ln.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("%s: %w", name, err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn(name+" did not shut down cleanly", "error", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn(name+" stopped with an error", "error", err)
	}
	return nil
}

// endpointInstance is what the task metadata endpoint says of the instance: the cluster, the VPC
// and, unless ECS_DISABLE_TASK_METADATA_AZ, the EC2 availability zone and its ID (none off EC2 and
// in local mode).
func endpointInstance(cfg *config.Config, ec2 ec2Instance) taskendpoint.Instance {
	in := taskendpoint.Instance{Cluster: cfg.Cluster, VPCID: ec2.VPCID}
	if !cfg.TaskMetadataAZDisabled {
		in.AvailabilityZone, in.AvailabilityZoneID = ec2.AvailabilityZone, ec2.AvailabilityZoneID
	}
	return in
}

// instanceARN is the container instance's ARN for the task endpoint; "" until registration.
func instanceARN(cp *controlplane.ControlPlane) func() string {
	return func() string {
		if arn := cp.InstanceArn(); arn != nil {
			return *arn
		}
		return ""
	}
}

// The ECS API client answers /taskWithTags' ListTagsForResource, against ECS or the embedded
// control plane.
var _ taskendpoint.TagSource = (*ecsclient.Client)(nil)

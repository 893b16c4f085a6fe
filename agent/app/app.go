// Package app owns the agent's start-up order: configuration → logging → clients → state → engine →
// control plane → servers, and the reverse on shutdown. cmd/berth only parses arguments and calls Run.
package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/controlplane"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/dockerstats"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/ecscni"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/execagent"
	"github.com/berth-agent/berth/agent/faultinject"
	"github.com/berth-agent/berth/agent/firelens"
	"github.com/berth-agent/berth/agent/hostnat"
	"github.com/berth-agent/berth/agent/imagecleanup"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/prommetrics"
	"github.com/berth-agent/berth/agent/registryauth"
	"github.com/berth-agent/berth/agent/rolecreds"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/statictasks"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
	"github.com/berth-agent/berth/agent/taskmetrics"
	"github.com/berth-agent/berth/agent/tasksecrets"
	"github.com/berth-agent/berth/agent/version"
)

// Run starts the agent with the loaded configuration and blocks until ctx is done, then shuts down and
// returns nil. It returns an error when a component cannot start (for example a port in use).
func Run(ctx context.Context, res *config.Result, opts Options, console io.Writer) (err error) {
	cfg := res.Config
	log, err := logger.New(cfg.Log, console)
	if err != nil {
		return fmt.Errorf("set up logging: %w", err)
	}
	defer func() {
		if err != nil {
			log.Critical("berth cannot run", "error", err)
		}
		log.Close()
	}()
	logStart(res, log)
	plan := planOf(cfg)
	imdsClient := imds.New(imds.Options{Logger: log})
	if plan.regionFromIMDS {
		if err := resolveRegion(ctx, cfg, imdsClient, log); err != nil {
			return err
		}
	}

	auth, err := NewRegistryAuth(ctx, cfg, log)
	if err != nil {
		return err
	}
	store, err := openState(cfg, log)
	if err != nil {
		return err
	}
	defer closeState(store, log)
	if plan.takesOverECSAgent {
		adoptECSAgentInstance(ctx, cfg, store, log)
	}
	client, err := NewDockerClient(cfg, log)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer client.Close()
	dockerVersion, err := waitForDocker(ctx, client, log)
	if err != nil || ctx.Err() != nil {
		return err // nil when stopped while waiting: nothing was started
	}
	if err := blockBridgeIMDS(ctx, cfg, log); err != nil {
		return err
	}
	m := prommetrics.New()
	var roles *rolecreds.Provider // sts:AssumeRole with the host's credentials, when ACS sends none
	if plan.assumesRoles {
		roles = newRoleProvider(ctx, cfg, log)
		defer roles.Close()
	}
	// The control plane's task credentials, then the roles the agent assumes: the one chain the
	// task endpoint, pulls with execution roles and secrets read.
	credentials := taskcreds.NewStore()
	chain := taskcreds.ChainConfig{Store: credentials, Local: plan.assumesRoles}
	if roles != nil {
		chain.Roles = roles
	}
	creds := taskcreds.NewChain(chain)
	nat := newHostNAT(cfg, log)
	// ECS Exec's managed agent; ecs.capability.execute-command is registered when its files are there.
	execAgent := execagent.New(execagent.Config{DepsDir: cfg.ExecDepsDir, LogDir: cfg.ExecLogDir}, client, log.With("feature", "execute-command"))
	faults, faultInjection := newFaultInjection(ctx, log)
	// The EC2 instance FireLens routers name in their records' metadata, known once the control plane
	// is set up below (before the engine starts and a router can be created).
	var ec2InstanceID string
	eng, resources, err := newEngine(ctx, cfg, client, store, auth, m, roles, creds, nat, execAgent, faults,
		firelensConfig{dockerVersion: dockerVersion.Version, ec2InstanceID: func() string { return ec2InstanceID }}, opts.Probe, log)
	if err != nil {
		return err
	}
	servers, err := listen(cfg, plan.embedded, newStaticMirror(eng, store, cfg), log)
	if err != nil {
		return err
	}
	defer servers.close()
	_ = nat.Ensure(ctx) // before any task starts; the keeper logs the outcome
	// Containers' stats, read from their cgroups and network namespaces when the task endpoint's
	// /stats or the telemetry source asks. An awsvpc task's containers show its namespace's
	// interfaces but the task bridge, as the ECS agent shows only the ENI.
	stats := dockerstats.New(client, newKernelStats(log), dockerstats.Config{Logger: log.With("component", "container_stats"),
		NetNSIgnore: []string{ecscni.TaskBridgeIfName}})
	defer stats.Close()
	var sampleEvery time.Duration // the telemetry source's default: about once a second
	if cfg.PollMetrics {
		sampleEvery = cfg.PollingMetricsWaitDuration
	}
	tel := taskmetrics.New(eng, stats, taskmetrics.Config{SampleInterval: sampleEvery,
		Runtime: func(ctx context.Context) error { _, err := client.Version(ctx); return err }, Logger: log.With("component", "telemetry")})
	cp, ecs, ec2, err := newControlPlane(ctx, cfg, plan, resources, dockerVersion, eng, execAgent, store, credentials, imdsClient,
		controlplane.TelemetryConfig{Source: tel, DisableMetrics: cfg.MetricsDisabled, DisableHealth: cfg.DockerHealthCheckDisabled},
		faultInjection, opts.Probe, log)
	if err != nil {
		return err
	}
	ec2InstanceID = ec2.InstanceID
	eng.Subscribe(cp)

	// The engine and the reporters outlive SIGTERM only as long as --stop-tasks-on-exit needs them.
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	if err := eng.Start(engineCtx); err != nil {
		return err
	}
	defer eng.Wait()
	restored, err := store.Tasks(ctx)
	if err != nil {
		log.Error("some saved tasks cannot be read and are skipped", "error", err)
	}
	// Containers of no known task are removed only when the saved state can be trusted to be whole.
	trusted := err == nil && len(restored) > 0
	if _, err := eng.Restore(ctx, restored, trusted); err != nil {
		return fmt.Errorf("recover saved tasks: %w", err)
	}
	eng.RemoveLeftovers(ctx)
	var reporting errgroup.Group
	reporting.Go(func() error { cp.Report(engineCtx, eng.Tasks()); return nil })
	defer func() { _ = reporting.Wait() }()
	defer stopEngine()

	g, gctx := errgroup.WithContext(ctx)
	if err := servers.serve(gctx, g, eng, stats, tel, m, cp, ecs, creds, ec2, nat, faults, cfg); err != nil {
		return err
	}
	defer publishRunFile(cfg, servers, log)()
	g.Go(func() error { nat.Run(gctx); return nil })
	g.Go(func() error { tel.WatchRuntime(gctx); return nil })
	if cfg.BridgeBlockIMDS {
		g.Go(func() error { keepBridgeIMDSBlock(gctx, log); return nil })
	}
	if !cfg.MetricsDisabled {
		g.Go(func() error { tel.Run(gctx); return nil })
	}
	g.Go(func() error {
		if plan.onEC2 && cfg.WarmPoolsCheck {
			if err := waitInService(gctx, imdsClient, log); err != nil {
				if gctx.Err() == nil {
					log.Error("no control plane: tasks from it will not arrive", "error", err)
				}
				return nil
			}
		}
		connect(gctx, cp, log)
		return nil
	})
	if plan.onEC2 && cfg.SpotInstanceDrainingEnabled {
		g.Go(func() error { watchSpot(gctx, imdsClient, cp.DrainInstance, log); return nil })
	}
	g.Go(func() error {
		newImageCleaner(cfg, store, eng, client, diskUsage(ctx, client, log), log).Run(gctx)
		return nil
	})
	if cfg.StaticTasksDir != "" {
		watcher := statictasks.New(statictasks.Config{Dir: cfg.StaticTasksDir, Cluster: cfg.Cluster, Region: cfg.AWSRegion}, eng, log)
		watcher.Adopt(restored)
		g.Go(func() error { watcher.Run(gctx); return nil })
	}
	<-gctx.Done()
	log.Info("shutting down; tasks keep running", "cause", context.Cause(gctx).Error())
	if err := g.Wait(); err != nil {
		return err
	}
	if opts.StopTasksOnExit {
		stopAllTasks(eng, log)
	}
	log.Info("berth stopped")
	return nil
}

// newRoleProvider returns the provider of the roles local mode assumes itself: the task roles only
// with ECS_ENABLE_TASK_IAM_ROLE, execution roles always (as the ECS agent uses the execution role
// credentials ACS sends whatever the key).
func newRoleProvider(ctx context.Context, cfg *config.Config, log *logger.Logger) *rolecreds.Provider {
	return rolecreds.New(ctx, rolecreds.Config{Region: cfg.AWSRegion, TaskRolesDisabled: !cfg.TaskIAMRoleEnabled},
		log.With("component", "role_credentials"))
}

// waitForDocker returns the Engine's version once it answers, logging while it does not.
func waitForDocker(ctx context.Context, client *dockerclient.Client, log *logger.Logger) (dockerclient.VersionInfo, error) {
	v, err := client.WaitReady(ctx, func(attempt int, err error, delay time.Duration) {
		log.Warn("the Docker Engine does not answer; retrying", "attempt", attempt, "retry_in", delay.Round(time.Millisecond), "error", err)
	})
	switch {
	case ctx.Err() != nil:
		return v, nil
	case err != nil:
		return v, fmt.Errorf("docker engine: %w", err)
	}
	log.Info("Docker Engine answers", "version", v.Version, "api_version", v.APIVersion)
	return v, nil
}

// newEngine builds the task engine with the host's resources and, with ECS_ENABLE_TASK_ENI, awsvpc
// support (without it the engine refuses awsvpc tasks, saying how to enable them).
func newEngine(ctx context.Context, cfg *config.Config, client *dockerclient.Client, store state.Store, auth *registryauth.Provider,
	m *prommetrics.Metrics, roles *rolecreds.Provider, creds *taskcreds.Chain, nat *hostnat.Keeper,
	execAgent *execagent.Feature, faults *faultinject.Injector, fl firelensConfig, probe engine.Probe, log *logger.Logger) (*engine.Engine, engine.Resources, error) {
	resources, err := engine.HostResources(engine.HostMeminfo, cfg.ReservedMemoryMiB, cfg.ReservedPorts, cfg.ReservedPortsUDP)
	if err != nil {
		return nil, resources, err
	}
	var awsvpc engine.AWSVPCConfig
	if cfg.TaskENIEnabled {
		awsvpc, err = engine.NewAWSVPC(ctx, engine.AWSVPCSetup{PluginsPath: cfg.CNIPluginsPath, StateDir: filepath.Join(cfg.DataDir, "cni"),
			PauseTarball: cfg.PauseImageTarball, BridgeIPv4: cfg.OverrideAWSVPCLocalIPv4Address,
			AdditionalLocalRoutes: cfg.AWSVPCAdditionalLocalRoutes, BlockIMDS: cfg.AWSVPCBlockIMDS, LocalSubnet: cfg.AWSVPCLocalSubnet}, client, log)
		if err != nil {
			return nil, resources, err
		}
		awsvpc.TaskBridgeReady = func(ctx context.Context) error { return nat.AddTaskBridge(ctx, ecscni.DefaultTaskBridge) }
	}
	pauseImage := awsvpc.PauseImage
	if pauseImage == "" {
		// Tasks with pidMode or ipcMode task need it too; without it they are refused, saying why.
		if pauseImage, err = engine.NamespacePauseImage(ctx, client, cfg.PauseImageTarball, log); err != nil {
			log.Warn("tasks with pidMode or ipcMode task cannot run", "error", err)
		}
	}
	cgroups, err := taskCgroups(cfg)
	if err != nil {
		return nil, resources, err
	}
	endpoint := engine.TaskEndpointConfig{URL: taskEndpointURL, Credentials: cfg.TaskIAMRoleEnabled,
		HostNetwork: cfg.TaskIAMRoleNetworkHost, Region: cfg.AWSRegion, Route: nat}
	if roles != nil {
		endpoint.Roles = roles
	}
	secretSource, err := tasksecrets.New(cfg.AWSRegion, creds)
	if err != nil {
		return nil, resources, err
	}
	eng := engine.New(engine.Config{Cluster: cfg.Cluster, StopTimeout: cfg.DockerStopTimeout, StartTimeout: cfg.ContainerStartTimeout, CreateTimeout: cfg.ContainerCreateTimeout,
		CleanupWait: cfg.TaskCleanupWaitDuration, CleanupJitter: cfg.TaskCleanupWaitJitter,
		AWSLogsExecutionRole: cfg.AWSLogsExecutionRole, Resources: resources, AWSVPC: awsvpc, Probe: probe,
		Policy: task.Policy{NoPrivileged: cfg.PrivilegedDisabled, Baseline: cfg.TaskSecurityPolicy == config.TaskSecurityPolicyBaseline,
			DataDir: cfg.DataDir, Resolve: filepath.EvalSymlinks},
		TaskEndpoint: endpoint, ExecutionRoleAuth: auth.ExecutionRoles(creds),
		PauseImage: pauseImage, TaskCgroups: cgroups, DynamicHostPorts: dynamicHostPorts(cfg), Secrets: secretSource, Images: client,
		ContainerMetadata: engine.ContainerMetadataConfig{Enabled: cfg.ContainerMetadataEnabled,
			Dir: filepath.Join(cfg.DataDir, "metadata"), InstanceARN: func() string { return state.InstanceARN(ctx, store, cfg.Cluster) }},
		Features: []engine.Feature{execAgent, faults, firelens.New(firelens.Config{DataDir: cfg.DataDir, Cluster: cfg.Cluster, Secrets: secretSource,
			EC2InstanceID: fl.ec2InstanceID, DockerVersion: fl.dockerVersion}, log.With("feature", "firelens"))}},
		m.Docker(client), imagecleanup.RecordPulls(m.Puller(client.Puller()), client, store, clockwork.NewRealClock(), log),
		auth, store, log)
	m.CountTasks(eng.Tasks)
	m.CountUnknownContainers(eng.UnknownContainers)
	return eng, resources, nil
}

// firelensConfig is what the FireLens feature learns of the host before the engine is built: the
// Docker Engine's version, and the EC2 instance ID once the control plane knows it.
type firelensConfig struct {
	dockerVersion string
	ec2InstanceID func() string
}

// ec2Instance is what the agent learned of its EC2 instance (zero off EC2): its identity, and the
// VPC and availability zone ID the task metadata endpoint shows.
type ec2Instance struct {
	imds.Identity
	VPCID, AvailabilityZoneID string
}

// newControlPlane builds the agent's side of the control plane the configuration chose, with the
// ECS API client it uses.
func newControlPlane(ctx context.Context, cfg *config.Config, plan modePlan, resources engine.Resources, docker dockerclient.VersionInfo,
	eng *engine.Engine, execAgent *execagent.Feature, store state.Store, credentials *taskcreds.Store, imdsClient *imds.Client,
	tel controlplane.TelemetryConfig, faultInjection bool, probe engine.Probe, log *logger.Logger) (*controlplane.ControlPlane, *ecsclient.Client, ec2Instance, error) {
	var ec2 ec2Instance
	ecs, creds, region, err := NewECSClient(ctx, cfg, log)
	if err != nil {
		return nil, nil, ec2, err
	}
	reg := controlplane.NewRegistration(cfg, resources, docker.Version, docker.APIVersion, openOSRelease())
	reg.CNIPluginVersion = ecscni.PluginsVersion
	reg.PIDIPCSharing = eng.SharesNamespaces()
	if err := execAgent.Available(); err != nil {
		log.Info("ECS Exec is not available: ecs.capability.execute-command is not registered", "error", err)
	} else {
		reg.ExecuteCommand = true
	}
	reg.FaultInjection = faultInjection
	reg.Firelens = true // every task's log router is run by the FireLens feature
	if plan.onEC2 {
		ec2.Identity = controlplane.AddEC2Identity(ctx, imdsClient, &reg, log)
		if cfg.ContainerInstancePropagateTagsFrom == config.PropagateTagsEC2Instance {
			controlplane.AddEC2Tags(ctx, imdsClient, &reg, log)
		}
		ec2.VPCID = reg.Attributes[imds.AttrVPCID]
		if ec2.InstanceID != "" {
			if ec2.AvailabilityZoneID, err = imdsClient.AvailabilityZoneID(ctx); err != nil {
				log.Warn("the availability zone ID cannot be read; task metadata will not show it", "error", err)
			}
		}
	}
	return controlplane.New(controlplane.Config{Cluster: cfg.Cluster, Registration: reg, Region: region, Credentials: creds, Probe: probe,
		CredentialsStore: credentials, Telemetry: tel},
		ecs, eng, store, log.With("control_plane", string(cfg.Mode))), ecs, ec2, nil
}

// openOSRelease returns the host's /etc/os-release, for ecs.os-type-detailed; nil when it cannot be
// read.
func openOSRelease() io.Reader {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return nil
	}
	return bytes.NewReader(b)
}

// connect keeps the control plane connected until ctx ends.
func connect(ctx context.Context, cp *controlplane.ControlPlane, log *logger.Logger) {
	if err := cp.Connect(ctx); err != nil && ctx.Err() == nil {
		log.Error("no control plane: tasks from it will not arrive", "error", err)
	}
}

// logStart logs the version, configuration warnings, the effective configuration and the mode.
func logStart(res *config.Result, log *logger.Logger) {
	cfg := res.Config
	log.Info("berth starting", "version", version.Get().String())
	for _, w := range res.Warnings {
		log.Warn("configuration: "+w.Msg, "key", w.Key, "source", w.Origin.String(), "file", w.Origin.File)
	}
	values, sources := res.Show().LogFields()
	log.Info("effective configuration", values...)
	log.Info("configuration sources (the rest are defaults)", sources...)
	log.Info("control plane mode selected", "mode", string(cfg.Mode), "reason", cfg.ModeReason)
}

// closeState closes the state store, logging a failure. A state file gets its last good copy first:
// a clean stop is a moment it is known to be whole.
func closeState(store state.Store, log *logger.Logger) {
	if err := store.SaveLastGood(); err != nil {
		log.Warn("the last good copy of the state file could not be written", "error", err)
	}
	if err := store.Close(); err != nil {
		log.Warn("closing the state file failed", "error", err)
	}
}

// diskUsage watches the Docker Engine's data directory (the default one if the Engine will not say).
func diskUsage(ctx context.Context, client *dockerclient.Client, log *logger.Logger) imagecleanup.DiskUsage {
	rootDir, err := client.RootDir(ctx)
	if err != nil {
		rootDir = "/var/lib/docker"
		log.Warn("cannot ask the Docker Engine for its data directory; watching the default", "dir", rootDir, "error", err)
	}
	return imagecleanup.StatfsUsage(rootDir)
}

// Options are the agent's command-line switches that are not configuration keys.
type Options struct {
	// StopTasksOnExit stops every task before the agent exits on SIGTERM (berth agent
	// --stop-tasks-on-exit); by default tasks keep running across an agent restart.
	StopTasksOnExit bool
	// Probe is passed to the engine and the control plane (see engine.Config.Probe); the crash-recovery
	// tests set it.
	Probe engine.Probe
}

// openState opens the state store ECS_CHECKPOINT asks for: the bbolt file in ECS_DATADIR, or memory.
func openState(cfg *config.Config, log *logger.Logger) (state.Store, error) {
	if !cfg.Checkpoint {
		log.Warn("ECS_CHECKPOINT=false: state is kept in memory only; an agent restart forgets every task")
		return state.NewMemory(), nil
	}
	path := filepath.Join(cfg.DataDir, "berth.db")
	st, err := state.OpenBolt(path, stateLockTimeout)
	if errors.Is(err, state.ErrCorrupt) {
		return nil, corruptState(path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	log.Info("state file opened", "path", path, "schema_version", state.SchemaVersion)
	if err := st.SaveLastGood(); err != nil {
		log.Warn("the state file is intact but its last good copy could not be written", "error", err)
	}
	return st, nil
}

// corruptState is the error for a damaged state file: it names the file and says what to do, with
// the last good copy when there is one. The agent does not start on a damaged file.
func corruptState(path string, err error) error {
	lastGood := path + state.LastGoodSuffix
	if info, statErr := os.Stat(lastGood); statErr == nil {
		return fmt.Errorf("%w; to go on, move it aside and restore the copy written at the last clean start (%s): mv %s %s.damaged && cp %s %s",
			err, info.ModTime().UTC().Format(time.RFC3339), path, path, lastGood, path)
	}
	return fmt.Errorf("%w; there is no last good copy (%s): move it aside (mv %s %s.damaged) to start with no saved tasks", err, lastGood, path, path)
}

// stateLockTimeout bounds the wait for another process's lock on the state file.
const stateLockTimeout = 5 * time.Second

// stopAllTasks stops every task and waits until they have stopped, bounded by their stop timeouts.
func stopAllTasks(eng *engine.Engine, log *logger.Logger) {
	if left := eng.StopAll(context.Background(), "berth agent stopped with --stop-tasks-on-exit"); left > 0 {
		log.Warn("tasks still running after the stop limit; exiting anyway", "running", left)
		return
	}
	log.Info("every task stopped")
}

// agentMetadata answers /v1/metadata.
type agentMetadata struct {
	cluster string
	cp      *controlplane.ControlPlane
	eng     *engine.Engine
	ec2     imds.Identity
	nat     *hostnat.Keeper
}

var _ introspection.MetadataSource = agentMetadata{}

// Metadata returns the cluster and version, a failure to save task state while there is one, and why
// the host NAT is not in place while it is not; the instance ARN is null until registration exists.
func (m agentMetadata) Metadata() introspection.Metadata {
	md := introspection.Metadata{Cluster: m.cluster, ContainerInstanceArn: m.cp.InstanceArn(), Version: version.Get().ECSAgentString(),
		EC2InstanceID: m.ec2.InstanceID, AvailabilityZone: m.ec2.AvailabilityZone}
	if err := m.eng.SaveError(); err != nil {
		md.StateSaveError = err.Error()
	}
	if err := m.nat.Err(); err != nil {
		md.HostNATError = err.Error()
	}
	return md
}

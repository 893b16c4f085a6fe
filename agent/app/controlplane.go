package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/handlers"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/version"
)

// localRegion signs requests to the embedded control plane, which does not check signatures.
const localRegion = "us-east-1"

// controlPlane is the agent's side of a control plane: the ECS API client, the state-change reporter
// and, in local mode, the embedded control plane itself. The agent uses the same ECS and ACS clients
// in both modes; only the endpoint and the credentials differ.
type controlPlane struct {
	cfg      *config.Config
	log      *logger.Logger
	client   *ecsclient.Client
	reporter *ecsclient.Reporter
	attach   *attachmentReporter
	creds    aws.CredentialsProvider
	region   string
	local    *http.Server // the embedded control plane, local mode only
	localCP  *localcp.Server
	arn      atomic.Pointer[string] // the container instance ARN once registered
}

// newControlPlane builds the ECS API client for the mode the configuration chose and, in local mode,
// starts the embedded control plane on ECS_LOCAL_CONTROL_PLANE_ADDR. Nothing is registered yet.
func newControlPlane(ctx context.Context, cfg *config.Config, eng *engine.Engine, log *logger.Logger) (*controlPlane, error) {
	cp := &controlPlane{cfg: cfg, log: log.With("control_plane", string(cfg.Mode))}
	if cfg.Mode == config.ModeLocal {
		if err := cp.startLocal(cfg, log); err != nil {
			return nil, err
		}
	}
	client, creds, region, err := newECSClient(ctx, cfg, cp.log)
	if err != nil {
		cp.close()
		return nil, err
	}
	cp.client, cp.creds, cp.region = client, creds, region
	cp.reporter = ecsclient.NewReporter(client, sentStore{eng: eng}, ecsclient.ReporterConfig{}, cp.log)
	cp.attach = newAttachmentReporter(client, cp.log)
	return cp, nil
}

// report hears every saved task change and passes on those of the control plane's tasks; static
// tasks are the host's own and no control plane knows them.
func (cp *controlPlane) report(t *task.Task) {
	if t.Static {
		return
	}
	cp.reporter.Report(t)
	cp.attach.Report(t)
}

// newECSClient builds the ECS API client for the configured mode: the embedded control plane with
// throwaway credentials in local mode, the SDK's configuration and ECS_BACKEND_HOST in ecs mode.
func newECSClient(ctx context.Context, cfg *config.Config, log *logger.Logger) (*ecsclient.Client, aws.CredentialsProvider, string, error) {
	endpoint, region := cfg.BackendHost, cfg.AWSRegion
	var creds aws.CredentialsProvider
	if cfg.Mode == config.ModeLocal {
		endpoint = "http://" + cfg.LocalControlPlaneAddr
		creds, region = credentials.NewStaticCredentialsProvider("berth-local", "berth-local", ""), localRegion
	} else {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.AWSRegion))
		if err != nil {
			return nil, nil, "", fmt.Errorf("AWS configuration: %w", err)
		}
		creds = awsCfg.Credentials
	}
	client, err := ecsclient.New(ctx, ecsclient.Config{Region: region, Endpoint: endpoint, Credentials: creds,
		Cluster: cfg.Cluster, Logger: log})
	if err != nil {
		return nil, nil, "", fmt.Errorf("ECS client: %w", err)
	}
	return client, creds, region, nil
}

// Drain sets the running agent's container instance to DRAINING, so the control plane places no new
// task on it. The instance ARN comes from the agent's /v1/metadata.
func Drain(ctx context.Context, cfg *config.Config, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cfg.IntrospectionAddr+"/v1/metadata", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("is the agent running? %w", err)
	}
	defer resp.Body.Close()
	var meta handlers.Metadata
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		return fmt.Errorf("agent metadata: %w", err)
	}
	if meta.ContainerInstanceArn == nil {
		return fmt.Errorf("the agent has not registered a container instance yet")
	}
	client, _, _, err := newECSClient(ctx, cfg, logger.Nop())
	if err != nil {
		return err
	}
	if err := client.Drain(ctx, *meta.ContainerInstanceArn); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s is DRAINING\n", *meta.ContainerInstanceArn)
	return nil
}

// startLocal serves the embedded control plane, with its state beside the agent's.
func (cp *controlPlane) startLocal(cfg *config.Config, log *logger.Logger) error {
	srv, err := localcp.New(localcp.Config{DBPath: filepath.Join(cfg.DataDir, "localcp.db")}, log.With("component", "localcp"))
	if err != nil {
		return fmt.Errorf("embedded control plane: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.LocalControlPlaneAddr)
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("embedded control plane on %s: %w", cfg.LocalControlPlaneAddr, err)
	}
	cp.localCP = srv
	cp.local = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = cp.local.Serve(ln) }()
	log.Info("embedded control plane listening", "addr", ln.Addr().String())
	return nil
}

// close stops the embedded control plane, if any.
func (cp *controlPlane) close() {
	if cp.local == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	_ = cp.local.Shutdown(ctx)
	_ = cp.localCP.Close()
}

// InstanceArn returns the registered container instance ARN, or nil before registration.
func (cp *controlPlane) InstanceArn() *string { return cp.arn.Load() }

// register registers this host (re-using the saved ARN) and saves the registration before anything
// uses it. It retries until it succeeds or ctx ends.
func (cp *controlPlane) register(ctx context.Context, store state.Store, resources engine.Resources, dockerVersion, apiVersion string) error {
	reg := ecsclient.Registration{CPU: resources.CPU, MemoryMiB: resources.MemoryMiB,
		ReservedPorts: resources.ReservedTCP, ReservedPortsUDP: resources.ReservedUDP,
		AgentVersion: version.Get().Version, AgentHash: version.Get().GitHash, DockerVersion: dockerVersion,
		DockerAPIVersion: apiVersion, LoggingDrivers: cp.cfg.AvailableLoggingDrivers, TaskENI: cp.cfg.TaskENIEnabled,
		Attributes: cp.cfg.InstanceAttributes}
	saved, ok, err := store.Registration(ctx)
	if err != nil {
		cp.log.Warn("the saved registration cannot be read; registering anew", "error", err)
	}
	if ok && saved.Cluster == cp.cfg.Cluster {
		reg.ContainerInstanceArn = saved.ContainerInstanceArn
	}
	arn, err := cp.client.RegisterContainerInstance(ctx, reg)
	if err != nil {
		return fmt.Errorf("register the container instance in cluster %s: %w", cp.cfg.Cluster, err)
	}
	if err := store.SaveRegistration(ctx, state.Registration{Cluster: cp.cfg.Cluster, ContainerInstanceArn: arn}); err != nil {
		return fmt.Errorf("save the registration: %w", err)
	}
	cp.arn.Store(&arn)
	return nil
}

// run keeps the ACS session open until ctx ends: discover the endpoint, connect, hand payloads to the
// engine. The sequence number of the last payload handled survives restarts in the state store.
func (cp *controlPlane) run(ctx context.Context, eng *engine.Engine, store state.Store, dockerVersion string) {
	arn := *cp.arn.Load()
	h := &acsHandler{eng: eng, reporter: cp.reporter, store: store, log: cp.log}
	if seq, err := store.SeqNum(ctx); err != nil {
		cp.log.Warn("the saved ACS sequence number cannot be read; starting from 0", "error", err)
	} else {
		h.seq.Store(seq)
	}
	backoffWait := time.Second
	for ctx.Err() == nil {
		endpoint, err := cp.client.DiscoverPollEndpoint(ctx, arn)
		if err != nil {
			cp.log.Warn("cannot discover the ACS endpoint; retrying", "error", err, "retry_in", backoffWait)
			select {
			case <-ctx.Done():
			case <-time.After(backoffWait):
			}
			backoffWait = min(2*backoffWait, time.Minute)
			continue
		}
		client, err := acs.New(acs.Config{Endpoint: endpoint, Cluster: cp.cfg.Cluster, ContainerInstanceArn: arn,
			AgentVersion: version.Get().Version, AgentHash: version.Get().GitHash, DockerVersion: dockerVersion,
			Region: cp.region, Credentials: cp.creds, Logger: cp.log}, h)
		if err != nil {
			cp.log.Error("cannot build the ACS client", "error", err)
			return
		}
		_ = client.Run(ctx)
	}
}

// sentStore records delivered states through the engine, the single writer of every task.
type sentStore struct{ eng *engine.Engine }

func (s sentStore) SaveTask(ctx context.Context, t *task.Task) error { return s.eng.MarkSent(ctx, t) }

// acsHandler hands what ACS sends to the engine.
type acsHandler struct {
	eng      *engine.Engine
	reporter *ecsclient.Reporter
	store    state.Store
	log      *logger.Logger
	seq      atomic.Int64
	mu       sync.Mutex
	creds    map[string]acs.IAMRoleCredentials // credentials ID → credentials, for the task credentials endpoint
}

var _ acs.Handler = (*acsHandler)(nil)

// stopSavedWait bounds how long a payload that stops a task waits for the stop to be saved.
const stopSavedWait = 10 * time.Second

// HandlePayload gives every accepted task to the engine (which saves it before AddTask returns, and
// saves a stop before this returns), and reports rejected tasks as STOPPED with their reason.
func (h *acsHandler) HandlePayload(ctx context.Context, p acs.Payload) error {
	for _, a := range p.Tasks {
		t := a.Task
		t.ENI = taskENI(a.Resources.ENIs)
		for _, w := range a.Warnings {
			h.log.Warn("task definition field ignored: "+w, "task", t.Arn)
		}
		if err := h.eng.AddTask(t); err != nil {
			return fmt.Errorf("accept task %s: %w", t.Arn, err)
		}
		if t.DesiredStatus == task.TaskStopped {
			if err := h.waitStopSaved(ctx, t.Arn); err != nil {
				return err
			}
		}
	}
	for _, r := range p.Rejected {
		h.log.Warn("task rejected", "task", r.Arn, "error", r.Err)
		h.reporter.Report(&task.Task{Arn: r.Arn, DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped,
			StoppedReason: "TaskDefinitionError: " + r.Err.Error(), StoppedAt: time.Now()})
	}
	if err := h.store.SaveSeqNum(ctx, p.SeqNum); err != nil {
		return fmt.Errorf("save the ACS sequence number: %w", err)
	}
	h.seq.Store(p.SeqNum)
	return nil
}

// waitStopSaved waits until the engine has saved the task's desired STOPPED.
func (h *acsHandler) waitStopSaved(ctx context.Context, arn string) error {
	ctx, cancel := context.WithTimeout(ctx, stopSavedWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if t := h.eng.Task(arn); t == nil || t.DesiredStatus == task.TaskStopped {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the stop of task %s was not saved: %w", arn, ctx.Err())
		case <-tick.C:
		}
	}
}

// HandleCredentials keeps task role credentials for the task credentials endpoint.
func (h *acsHandler) HandleCredentials(_ context.Context, c acs.Credentials) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.creds == nil {
		h.creds = map[string]acs.IAMRoleCredentials{}
	}
	h.creds[c.Credentials.CredentialsID] = c.Credentials
	h.log.Info("task credentials received", "task", c.TaskArn, "role_type", c.RoleType)
	return nil
}

// HandleENIAttachment logs the announcement; the task's payload carries the ENI the engine waits for.
func (h *acsHandler) HandleENIAttachment(_ context.Context, a acs.ENIAttachment) error {
	for _, eni := range a.ENIs {
		h.log.Info("ENI attachment announced", "task", a.TaskArn, "mac", eni.MacAddress)
	}
	return nil
}

// SeqNum is the sequence number of the last payload handled.
func (h *acsHandler) SeqNum() int64 { return h.seq.Load() }

// taskENI converts the task's first ENI from ACS's shape to the model's, or nil.
func taskENI(enis []*acs.ElasticNetworkInterface) *task.ENI {
	if len(enis) == 0 || enis[0] == nil {
		return nil
	}
	e := enis[0]
	var addr string
	for _, a := range e.IPv4Addresses {
		if a.Primary || addr == "" {
			addr = a.PrivateAddress
		}
	}
	gateway, prefix, _ := strings.Cut(e.SubnetGatewayIPv4Address, "/")
	if prefix == "" {
		prefix = "32"
	}
	return &task.ENI{AttachmentArn: e.AttachmentArn, MAC: e.MacAddress, IPv4CIDR: addr + "/" + prefix, Gateway: gateway,
		DNSServers: e.DomainNameServers, SearchDomains: e.DomainName}
}

// Package localcp is Berth's embedded, ECS-compatible control plane for local mode. It serves the
// ECS JSON 1.1 API on POST / (what the agent's ECS API client and the AWS CLI speak) and the ACS
// websocket on /ws (what the agent's ACS client speaks) and the TCS websocket on /tcs/ws (its
// telemetry client: each frame signed, each publish acknowledged, the last metrics kept), and keeps its state in its own bbolt file.
//
// It places every task on the cluster's container instance (in local mode there is one, the agent's)
// and delivers it over ACS. A task's life as this control plane sees it:
//
//	RunTask ──▶ PENDING (desired RUNNING) ──agent reports──▶ RUNNING ──agent reports──▶ STOPPED ──1 h──▶ forgotten
//	               │   no instance yet: waits, delivered once one registers             ▲
//	               └── StopTask: desired STOPPED, sent to the agent ────────────────────┘
//	                   (a task never placed on an instance stops at once)
//
// As in ECS, a stopped task is described for an hour after it stopped, then forgotten; a RunTask or
// StartTask that repeats a client token gets the first call's answer. It serves its own host only.
// The static tasks the agent runs (ECS_STATIC_TASKS_DIR) are shown too, as kubelet's mirror pods
// show static pods: read from the agent, marked, and refusing every change (see static.go).
//
// A task is sent in a PayloadMessage whenever its desired status differs from the one the agent last
// acknowledged; un-acknowledged payloads are sent again on the next connection.
package localcp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/boltgroup"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/tcswire"
)

// DefaultHeartbeatInterval is how often an ACS HeartbeatMessage is sent when Config leaves it zero.
const DefaultHeartbeatInterval = 30 * time.Second

// DefaultCluster is the cluster that always exists.
const DefaultCluster = "default"

// accountID is the account in every ARN this control plane makes.
const accountID = "000000000000"

// Config configures a Server.
type Config struct {
	// DBPath is the bbolt file holding the control plane's state, e.g. ECS_DATADIR/localcp.db.
	DBPath string
	// Region goes into every ARN; empty means AWS_DEFAULT_REGION, or "local" when that is unset too.
	Region string
	// HeartbeatInterval is the ACS heartbeat period; zero means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// Clock stamps records and times ACS heartbeats; nil means the wall clock. Signatures' times are
	// checked against the wall clock.
	Clock clockwork.Clock
	// Keys sign every request the server accepts (required): see localauth.
	Keys localauth.Keys
	// StaticTasks, when set, returns the static tasks the agent runs now; the API shows them, marked
	// and unchangeable (see static.go), and stores nothing of them. It is called at most once per
	// request that shows or looks up tasks, with the request's context, and must be safe for
	// concurrent use. Nil: there are none.
	StaticTasks func(ctx context.Context) []StaticTask
	// StaticTasksDir is ECS_STATIC_TASKS_DIR, named in the answers that refuse to change a static task.
	StaticTasksDir string
}

// Server is the embedded control plane. Its methods and handler are safe for concurrent use.
type Server struct {
	db        *bolt.DB
	reports   *boltgroup.Committer // the agent's state-change reports, group-committed
	log       *logger.Logger
	clock     clockwork.Clock
	region    string
	heartbeat time.Duration
	ops       map[string]opFunc
	auth      *localauth.Verifier
	refused   *logger.Summary // refused requests, one line a minute
	static    func(ctx context.Context) []StaticTask
	staticDir string

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // ACS connections

	connMu   sync.Mutex
	conns    map[string]*acsConn // by container instance ARN
	tcsConns map[*tcsConn]struct{}

	tcsMu   sync.Mutex
	metrics map[string][]tcswire.TaskMetric // the last metrics batch by container instance ARN
}

// New opens (or creates) the state file and returns a Server ready to serve; the default cluster
// exists afterwards. A nil log discards logging.
func New(cfg Config, log *logger.Logger) (*Server, error) {
	if cfg.DBPath == "" {
		return nil, errors.New("localcp: no database path")
	}
	if cfg.Keys.AccessKeyID == "" || cfg.Keys.SecretAccessKey == "" {
		return nil, errors.New("localcp: no keys to check signatures with")
	}
	if log == nil {
		log = logger.Nop()
	}
	s := &Server{
		log:       log.With("component", "localcp"),
		clock:     cfg.Clock,
		region:    cmp.Or(cfg.Region, os.Getenv("AWS_DEFAULT_REGION"), "local"),
		heartbeat: cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval),
		closing:   make(chan struct{}),
		conns:     make(map[string]*acsConn),
		tcsConns:  make(map[*tcsConn]struct{}),
		metrics:   make(map[string][]tcswire.TaskMetric),
		static:    cfg.StaticTasks,
		staticDir: cfg.StaticTasksDir,
	}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	s.refused = logger.NewSummary(s.log, s.clock, "control plane request refused; further refusals are counted, one line a minute", time.Minute)
	s.auth = localauth.NewVerifier(cfg.Keys, nil)
	db, err := openDB(cfg.DBPath, s.badRecord)
	if err != nil {
		return nil, fmt.Errorf("localcp: %w", err)
	}
	s.db = db
	s.reports = boltgroup.New(db)
	if err := db.Update(func(tx *bolt.Tx) error {
		if _, err := expire(tx, s.clock.Now(), -1); err != nil {
			return err
		}
		_, err := s.ensureCluster(tx, DefaultCluster)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("localcp: create the default cluster: %w", err)
	}
	s.ops = map[string]opFunc{
		"CreateCluster":                 op(s.createCluster),
		"DescribeClusters":              op(s.describeClusters),
		"ListClusters":                  op(s.listClusters),
		"RegisterTaskDefinition":        s.registerTaskDefinition,
		"DescribeTaskDefinition":        op(s.describeTaskDefinition),
		"ListTaskDefinitions":           op(s.listTaskDefinitions),
		"ListTaskDefinitionFamilies":    op(s.listTaskDefinitionFamilies),
		"DeregisterTaskDefinition":      op(s.deregisterTaskDefinition),
		"RunTask":                       op(s.runTask),
		"StartTask":                     op(s.startTask),
		"StopTask":                      op(s.stopTask),
		"DescribeTasks":                 op(s.describeTasks),
		"ListTasks":                     op(s.listTasks),
		"RegisterContainerInstance":     op(s.registerContainerInstance),
		"ListContainerInstances":        op(s.listContainerInstances),
		"DescribeContainerInstances":    op(s.describeContainerInstances),
		"UpdateContainerInstancesState": op(s.updateContainerInstancesState),
		"DiscoverPollEndpoint":          op(s.discoverPollEndpoint),
		"SubmitTaskStateChange":         op(s.submitTaskStateChange),
		"SubmitContainerStateChange":    op(s.submitContainerStateChange),
		"SubmitAttachmentStateChanges":  op(s.submitAttachmentStateChanges),
		"ListTagsForResource":           op(s.listTagsForResource),
		"ExecuteCommand":                op(s.executeCommand),
		"GetTaskProtection":             op(s.getTaskProtection),
		"UpdateTaskProtection":          op(s.updateTaskProtection),
	}
	return s, nil
}

// Handler returns the HTTP handler: the ACS websocket on /ws, the TCS one on /tcs/ws, the ECS API on
// everything else. It serves its own host only: every request must name a loopback host and carry a
// SigV4 signature made with the keys; anything else is refused with ECS's error before it is looked at.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-amzn-RequestId", newID())
		if err := s.auth.VerifyHeaders(r); err != nil {
			s.refuse(w, r, err)
			return
		}
		if isTCSPath(r.URL.Path) {
			if err := s.auth.Verify(r, nil); err != nil {
				s.refuse(w, r, err)
				return
			}
			s.serveTCS(w, r)
			return
		}
		// The ACS client joins the discovered endpoint and "ws", which may give "//ws".
		if strings.Trim(r.URL.Path, "/") == "ws" {
			if err := s.auth.Verify(r, nil); err != nil {
				s.refuse(w, r, err)
				return
			}
			s.serveACS(w, r)
			return
		}
		s.serveAPI(w, r)
	})
}

// refuse answers a request that failed the signature or Host check, and logs who sent it: at most
// one line a minute, counting the others (any local process or web page can send them at will).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err *localauth.Error) {
	s.refused.Note(err.Type, "remote", r.RemoteAddr, "host", r.Host)
	s.writeError(w, "", &APIError{Status: err.Status, Type: err.Type, Message: err.Message})
}

// Close disconnects every ACS client, waits for their handlers and closes the state file. It is
// idempotent. API requests still in flight after Close fail.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closing)
		s.connMu.Lock()
		for _, c := range s.conns {
			c.close()
		}
		for c := range s.tcsConns {
			c.close()
		}
		s.connMu.Unlock()
		s.wg.Wait()
		err = s.db.Close()
	})
	return err
}

// newID returns 32 random hex digits, the form of ECS task and container instance IDs.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newUUID returns a random version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Server) arn(resource string) string {
	return fmt.Sprintf("arn:aws:ecs:%s:%s:%s", s.region, accountID, resource)
}

func (s *Server) clusterArn(name string) string { return s.arn("cluster/" + name) }

func (s *Server) taskDefArn(family string, rev int) string {
	return s.arn(fmt.Sprintf("task-definition/%s:%d", family, rev))
}

// lastSegment returns what follows the last "/" of an ARN, or the whole string.
func lastSegment(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// clusterName turns a cluster name or ARN (or "") into a name.
func clusterName(s string) string {
	if s == "" {
		return DefaultCluster
	}
	if strings.HasPrefix(s, "arn:") {
		if _, after, ok := strings.Cut(s, ":cluster/"); ok {
			return after
		}
	}
	return s
}

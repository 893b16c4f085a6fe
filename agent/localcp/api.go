package localcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/taskdef"
)

// targetPrefix is the X-Amz-Target prefix of the ECS API (JSON 1.1).
const targetPrefix = "AmazonEC2ContainerServiceV20141113."

// maxRequestBody bounds an API request body.
const maxRequestBody = 8 << 20

// APIError is an error in ECS's shape: the exception name ECS would use (Type), the HTTP status and
// the message the AWS CLI prints.
type APIError struct {
	Status  int
	Type    string
	Message string
	// ResourceIDs are the resources a ConflictException names, if any.
	ResourceIDs []string
}

// Error formats the error as "Type: message".
func (e *APIError) Error() string { return e.Type + ": " + e.Message }

func clientError(format string, args ...any) error {
	return &APIError{Status: http.StatusBadRequest, Type: "ClientException", Message: fmt.Sprintf(format, args...)}
}

func invalidParameter(format string, args ...any) error {
	return &APIError{Status: http.StatusBadRequest, Type: "InvalidParameterException", Message: fmt.Sprintf(format, args...)}
}

func clusterNotFound() error {
	return &APIError{Status: http.StatusBadRequest, Type: "ClusterNotFoundException", Message: "Cluster not found."}
}

func unsupported(format string, args ...any) error {
	return &APIError{Status: http.StatusBadRequest, Type: "UnsupportedFeatureException", Message: fmt.Sprintf(format, args...)}
}

// timestamp is a time on the wire: epoch seconds as a JSON number, as the AWS JSON protocol sends
// them. The zero timestamp is omitted with omitzero.
type timestamp time.Time

// IsZero reports whether the time is unset.
func (t timestamp) IsZero() bool { return time.Time(t).IsZero() }

// MarshalJSON encodes epoch seconds with millisecond precision.
func (t timestamp) MarshalJSON() ([]byte, error) {
	ms := time.Time(t).UnixMilli()
	return []byte(strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64)), nil
}

// UnmarshalJSON decodes epoch seconds (a number or numeric string) or an RFC 3339 string.
func (t *timestamp) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		if tm, err := time.Parse(time.RFC3339Nano, unq); err == nil {
			*t = timestamp(tm)
			return nil
		}
		s = unq
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want a timestamp in epoch seconds, got %s", b)
	}
	*t = timestamp(time.UnixMilli(int64(f * 1000)))
	return nil
}

func ts(t time.Time) timestamp { return timestamp(t) }

func (t timestamp) time() time.Time { return time.Time(t) }

// serveAPI answers one ECS JSON 1.1 request whose headers Handler has checked: the body is read and
// the signature over it checked before the operation is looked up.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err == nil && len(body) > maxRequestBody {
		err = errors.New("request body too large")
	}
	if err != nil {
		s.writeError(w, "", &APIError{Status: http.StatusBadRequest, Type: "SerializationException", Message: err.Error()})
		return
	}
	if err := s.auth.Verify(r, body); err != nil {
		s.refuse(w, r, err)
		return
	}
	if r.Method != http.MethodPost {
		if r.Method == http.MethodGet && r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "Berth embedded ECS control plane: ECS JSON 1.1 API on POST /, ACS on /ws\n")
			return
		}
		s.writeError(w, "", &APIError{Status: http.StatusMethodNotAllowed, Type: "UnknownOperationException", Message: "use POST with an X-Amz-Target header"})
		return
	}
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, targetPrefix)
	h := s.ops[op]
	if !ok || h == nil {
		s.writeError(w, op, &APIError{Status: http.StatusBadRequest, Type: "UnknownOperationException", Message: fmt.Sprintf("unknown operation %q", target)})
		return
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	resp, err := h(r, body)
	if err != nil {
		s.writeError(w, op, err)
		return
	}
	b, err := json.Marshal(resp)
	if err != nil {
		s.writeError(w, op, fmt.Errorf("encode %s response: %w", op, err))
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_, _ = w.Write(b)
}

// writeError maps err to ECS's error shape: an *APIError as it is, anything else a ServerException.
func (s *Server) writeError(w http.ResponseWriter, op string, err error) {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		s.log.Error("control plane request failed", "op", op, "error", err)
		apiErr = &APIError{Status: http.StatusInternalServerError, Type: "ServerException", Message: "internal error"}
	} else {
		s.log.Debug("control plane request rejected", "op", op, "type", apiErr.Type, "message", apiErr.Message)
	}
	body := map[string]any{"__type": apiErr.Type, "message": apiErr.Message}
	if len(apiErr.ResourceIDs) > 0 {
		body["resourceIds"] = apiErr.ResourceIDs
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("x-amzn-ErrorType", apiErr.Type)
	w.WriteHeader(apiErr.Status)
	_, _ = w.Write(b)
}

// opFunc handles one operation: the raw JSON request in, the response value out.
type opFunc func(r *http.Request, body []byte) (any, error)

// op adapts a typed handler to an opFunc, decoding the request into Req.
func op[Req any](fn func(r *http.Request, req *Req) (any, error)) opFunc {
	return func(r *http.Request, body []byte) (any, error) {
		req := new(Req)
		if err := json.Unmarshal(body, req); err != nil {
			return nil, &APIError{Status: http.StatusBadRequest, Type: "SerializationException", Message: err.Error()}
		}
		return fn(r, req)
	}
}

// Shapes shared by several operations, with ECS's field names.

type failure struct {
	Arn    string `json:"arn,omitempty"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

type keyValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type attribute struct {
	Name       string `json:"name"`
	Value      string `json:"value,omitempty"`
	TargetType string `json:"targetType,omitempty"`
	TargetID   string `json:"targetId,omitempty"`
}

type resource struct {
	Name           string   `json:"name"`
	Type           string   `json:"type,omitempty"`
	IntegerValue   int64    `json:"integerValue"`
	LongValue      int64    `json:"longValue,omitempty"`
	DoubleValue    float64  `json:"doubleValue,omitempty"`
	StringSetValue []string `json:"stringSetValue,omitempty"`
}

type versionInfo struct {
	AgentVersion  string `json:"agentVersion,omitempty"`
	AgentHash     string `json:"agentHash,omitempty"`
	DockerVersion string `json:"dockerVersion,omitempty"`
}

type networkBinding struct {
	BindIP             string `json:"bindIP,omitempty"`
	ContainerPort      int    `json:"containerPort,omitempty"`
	HostPort           int    `json:"hostPort,omitempty"`
	Protocol           string `json:"protocol,omitempty"`
	ContainerPortRange string `json:"containerPortRange,omitempty"`
	HostPortRange      string `json:"hostPortRange,omitempty"`
}

type taskOverride struct {
	ContainerOverrides []containerOverride `json:"containerOverrides,omitempty"`
	CPU                string              `json:"cpu,omitempty"`
	Memory             string              `json:"memory,omitempty"`
	TaskRoleArn        string              `json:"taskRoleArn,omitempty"`
	ExecutionRoleArn   string              `json:"executionRoleArn,omitempty"`
	// Refused when set: Berth cannot honour them.
	EphemeralStorage              json.RawMessage `json:"ephemeralStorage,omitempty"`
	InferenceAcceleratorOverrides json.RawMessage `json:"inferenceAcceleratorOverrides,omitempty"`
}

type containerOverride struct {
	Name              string                    `json:"name"`
	Command           []string                  `json:"command,omitempty"`
	Environment       []keyValue                `json:"environment,omitempty"`
	EnvironmentFiles  []taskdef.EnvironmentFile `json:"environmentFiles,omitempty"`
	CPU               *int                      `json:"cpu,omitempty"`
	Memory            *int                      `json:"memory,omitempty"`
	MemoryReservation *int                      `json:"memoryReservation,omitempty"`
	// Refused when set: GPUs and inference accelerators.
	ResourceRequirements json.RawMessage `json:"resourceRequirements,omitempty"`
}

type clusterOut struct {
	ClusterArn                        string `json:"clusterArn"`
	ClusterName                       string `json:"clusterName"`
	Status                            string `json:"status"`
	RegisteredContainerInstancesCount int    `json:"registeredContainerInstancesCount"`
	RunningTasksCount                 int    `json:"runningTasksCount"`
	PendingTasksCount                 int    `json:"pendingTasksCount"`
	ActiveServicesCount               int    `json:"activeServicesCount"`
}

type containerOut struct {
	ContainerArn    string            `json:"containerArn"`
	TaskArn         string            `json:"taskArn"`
	Name            string            `json:"name"`
	Image           string            `json:"image,omitempty"`
	ImageDigest     string            `json:"imageDigest,omitempty"`
	RuntimeID       string            `json:"runtimeId,omitempty"`
	LastStatus      string            `json:"lastStatus"`
	ExitCode        *int              `json:"exitCode,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	NetworkBindings []networkBinding  `json:"networkBindings"`
	CPU             string            `json:"cpu,omitempty"`
	Memory          string            `json:"memory,omitempty"`
	ManagedAgents   []managedAgentOut `json:"managedAgents,omitempty"`
	HealthStatus    string            `json:"healthStatus,omitempty"` // static tasks' only: see static.go
}

// managedAgentOut is a container's managed agent as describe-tasks prints it.
type managedAgentOut struct {
	Name          string    `json:"name"`
	LastStatus    string    `json:"lastStatus"`
	Reason        string    `json:"reason,omitempty"`
	LastStartedAt timestamp `json:"lastStartedAt,omitzero"`
}

type taskOut struct {
	TaskArn              string         `json:"taskArn"`
	ClusterArn           string         `json:"clusterArn"`
	TaskDefinitionArn    string         `json:"taskDefinitionArn"`
	ContainerInstanceArn string         `json:"containerInstanceArn,omitempty"`
	Overrides            taskOverride   `json:"overrides"`
	LastStatus           string         `json:"lastStatus"`
	DesiredStatus        string         `json:"desiredStatus"`
	CPU                  string         `json:"cpu,omitempty"`
	Memory               string         `json:"memory,omitempty"`
	Containers           []containerOut `json:"containers"`
	StartedBy            string         `json:"startedBy,omitempty"`
	Version              int64          `json:"version"`
	StoppedReason        string         `json:"stoppedReason,omitempty"`
	StopCode             string         `json:"stopCode,omitempty"`
	Connectivity         string         `json:"connectivity,omitempty"`
	ConnectivityAt       timestamp      `json:"connectivityAt,omitzero"`
	PullStartedAt        timestamp      `json:"pullStartedAt,omitzero"`
	PullStoppedAt        timestamp      `json:"pullStoppedAt,omitzero"`
	ExecutionStoppedAt   timestamp      `json:"executionStoppedAt,omitzero"`
	CreatedAt            timestamp      `json:"createdAt"`
	StartedAt            timestamp      `json:"startedAt,omitzero"`
	StoppingAt           timestamp      `json:"stoppingAt,omitzero"`
	StoppedAt            timestamp      `json:"stoppedAt,omitzero"`
	Group                string         `json:"group"`
	LaunchType           string         `json:"launchType"`
	Attachments          []struct{}     `json:"attachments"`
	Attributes           []attribute    `json:"attributes,omitempty"`
	// Tags are left out of DescribeTasks' answer unless it is asked to include TAGS, as in ECS.
	Tags                 []tag  `json:"tags,omitempty"`
	EnableExecuteCommand bool   `json:"enableExecuteCommand"`
	HealthStatus         string `json:"healthStatus,omitempty"` // static tasks' only: see static.go
}

type instanceOut struct {
	ContainerInstanceArn string       `json:"containerInstanceArn"`
	Ec2InstanceID        string       `json:"ec2InstanceId,omitempty"`
	Version              int64        `json:"version"`
	VersionInfo          *versionInfo `json:"versionInfo,omitempty"`
	RemainingResources   []resource   `json:"remainingResources"`
	RegisteredResources  []resource   `json:"registeredResources"`
	Status               string       `json:"status"`
	AgentConnected       bool         `json:"agentConnected"`
	RunningTasksCount    int          `json:"runningTasksCount"`
	PendingTasksCount    int          `json:"pendingTasksCount"`
	Attributes           []attribute  `json:"attributes"`
	RegisteredAt         timestamp    `json:"registeredAt"`
	Tags                 []tag        `json:"tags"`
}

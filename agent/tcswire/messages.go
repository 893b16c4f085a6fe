// Package tcswire is the wire of the ECS Telemetry Communication Service: the frames the agent's TCS
// client (agent/tcs) and a server (agent/localcp, agent/tcs/tcstest) exchange, their signed frame
// layout (frame.go), and the stats sets the metrics are made of (stats.go). The envelope is
// agent/wire's; CloseMessage, ServerException and BadRequestException are wire's too.
package tcswire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/berth-agent/berth/agent/wire"
)

// Message is the body of one TCS frame; MessageType is the frame's "type", the shape name of the ECS
// telemetry model (ecstcs). Every message type of this package implements it, so a stand-in server
// can Encode what the client Decodes, and the reverse.
type Message = wire.Message

// Frame types, as they appear in a frame's "type".
const (
	TypePublishMetricsRequest        = "PublishMetricsRequest"
	TypePublishHealthRequest         = "PublishHealthRequest"
	TypePublishInstanceStatusRequest = "PublishInstanceStatusRequest"
	TypeHeartbeatMessage             = "HeartbeatMessage"
	TypeAckPublishMetric             = "AckPublishMetric"
	TypeAckPublishHealth             = "AckPublishHealth"
	TypeAckPublishInstanceStatus     = "AckPublishInstanceStatus"
	TypeStopTelemetrySessionMessage  = "StopTelemetrySessionMessage"
	TypeResourceValidationException  = "ResourceValidationException"
	TypeInvalidParameterException    = "InvalidParameterException"
)

// Health statuses of ContainerHealth.healthStatus.
const (
	HealthStatusHealthy   = "HEALTHY"
	HealthStatusUnhealthy = "UNHEALTHY"
	HealthStatusUnknown   = "UNKNOWN"
)

// Instance statuses of InstanceStatus.status, and the type the agent reports its runtime under.
const (
	InstanceStatusOK               = "OK"
	InstanceStatusImpaired         = "IMPAIRED"
	InstanceStatusInsufficientData = "INSUFFICIENT_DATA"
	InstanceStatusInitializing     = "INITIALIZING"
	InstanceStatusTypeRuntime      = "ContainerRuntime"
)

// Time is a model Timestamp: on the wire, seconds since the Unix epoch as a JSON number with up to
// millisecond fractions. The zero Time is left out of a message (omitzero).
type Time struct{ time.Time }

// At returns t as a Time.
func At(t time.Time) Time { return Time{t} }

// MarshalJSON writes epoch seconds.
func (t Time) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(t.UnixMilli())/1000, 'f', -1, 64), nil
}

// UnmarshalJSON reads epoch seconds.
func (t *Time) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	sec, frac := math.Modf(f)
	t.Time = time.Unix(int64(sec), int64(math.Round(frac*1000))*int64(time.Millisecond)).UTC()
	return nil
}

// CWStatsSet summarises double samples (the model's CWStatsSet and UDoubleCWStatsSet): CPU percent,
// memory MiB, network bytes per second.
type CWStatsSet struct {
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	SampleCount int64   `json:"sampleCount"`
	Sum         float64 `json:"sum"`
}

// ULongStatsSet summarises unsigned 64-bit counters (the model's ULongStatsSet). The wire integers
// are signed 64-bit: a value above math.MaxInt64 is sent as math.MaxInt64 in the base field and the
// rest in its overflow field, so value = base + overflow.
type ULongStatsSet struct {
	Min         int64 `json:"min"`
	Max         int64 `json:"max"`
	SampleCount int64 `json:"sampleCount"`
	Sum         int64 `json:"sum"`
	OverflowMin int64 `json:"overflowMin"`
	OverflowMax int64 `json:"overflowMax"`
	OverflowSum int64 `json:"overflowSum"`
}

// NetworkStatsSet is a container's network counters over a publish interval.
type NetworkStatsSet struct {
	RxBytes          *ULongStatsSet `json:"rxBytes,omitempty"`
	RxBytesPerSecond *CWStatsSet    `json:"rxBytesPerSecond,omitempty"`
	RxDropped        *ULongStatsSet `json:"rxDropped,omitempty"`
	RxErrors         *ULongStatsSet `json:"rxErrors,omitempty"`
	RxPackets        *ULongStatsSet `json:"rxPackets,omitempty"`
	TxBytes          *ULongStatsSet `json:"txBytes,omitempty"`
	TxBytesPerSecond *CWStatsSet    `json:"txBytesPerSecond,omitempty"`
	TxDropped        *ULongStatsSet `json:"txDropped,omitempty"`
	TxErrors         *ULongStatsSet `json:"txErrors,omitempty"`
	TxPackets        *ULongStatsSet `json:"txPackets,omitempty"`
}

// StorageStatsSet is a container's block I/O counters over a publish interval.
type StorageStatsSet struct {
	ReadSizeBytes  *ULongStatsSet `json:"readSizeBytes,omitempty"`
	WriteSizeBytes *ULongStatsSet `json:"writeSizeBytes,omitempty"`
}

// RestartStatsSet counts a container's restarts under its restart policy over a publish interval.
type RestartStatsSet struct {
	RestartCount *int64 `json:"restartCount,omitempty"`
}

// ContainerMetric is one container's stats sets. A nil set is left out (no sample for it).
type ContainerMetric struct {
	ContainerName   string           `json:"containerName"`
	CPUStatsSet     *CWStatsSet      `json:"cpuStatsSet,omitempty"`
	MemoryStatsSet  *CWStatsSet      `json:"memoryStatsSet,omitempty"`
	NetworkStatsSet *NetworkStatsSet `json:"networkStatsSet,omitempty"`
	StorageStatsSet *StorageStatsSet `json:"storageStatsSet,omitempty"`
	RestartStatsSet *RestartStatsSet `json:"restartStatsSet,omitempty"` // only for a container with a restart policy
}

// TaskMetric is one task's container metrics.
type TaskMetric struct {
	TaskArn               string            `json:"taskArn"`
	TaskDefinitionFamily  string            `json:"taskDefinitionFamily"`
	TaskDefinitionVersion string            `json:"taskDefinitionVersion"`
	ContainerMetrics      []ContainerMetric `json:"containerMetrics"`
}

// MetricsMetadata heads a PublishMetricsRequest. The messages of one batch share MessageID; Fin is
// true on the last. Idle is true when no task runs (then the batch is one message without tasks).
type MetricsMetadata struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
	Idle              bool   `json:"idle"`
	Fin               bool   `json:"fin"`
	MessageID         string `json:"messageId"`
}

// PublishMetricsRequest carries the metrics of up to MaxTasksPerMessage tasks.
type PublishMetricsRequest struct {
	Metadata    MetricsMetadata `json:"metadata"`
	TaskMetrics []TaskMetric    `json:"taskMetrics,omitempty"`
	Timestamp   Time            `json:"timestamp"`
}

// ContainerHealth is a container's health-check result; HealthStatus is one of HealthStatus*.
type ContainerHealth struct {
	ContainerName string `json:"containerName"`
	HealthStatus  string `json:"healthStatus"`
	StatusSince   Time   `json:"statusSince,omitzero"`
	StatusMessage string `json:"statusMessage,omitempty"`
}

// TaskHealth is the health of a task's containers that have a health check.
type TaskHealth struct {
	TaskArn               string            `json:"taskArn"`
	TaskDefinitionFamily  string            `json:"taskDefinitionFamily"`
	TaskDefinitionVersion string            `json:"taskDefinitionVersion"`
	Containers            []ContainerHealth `json:"containers"`
}

// HealthMetadata heads a PublishHealthRequest; batches work as for MetricsMetadata.
type HealthMetadata struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
	Fin               bool   `json:"fin"`
	MessageID         string `json:"messageId"`
}

// PublishHealthRequest carries the container health of up to MaxTasksPerMessage tasks.
type PublishHealthRequest struct {
	Metadata  HealthMetadata `json:"metadata"`
	Tasks     []TaskHealth   `json:"tasks"`
	Timestamp Time           `json:"timestamp"`
}

// InstanceStatus is one status of the container instance; Status is one of InstanceStatus*.
type InstanceStatus struct {
	Type             string `json:"type"`
	Status           string `json:"status"`
	LastStatusChange Time   `json:"lastStatusChange,omitzero"`
	LastUpdated      Time   `json:"lastUpdated,omitzero"`
}

// InstanceStatusMetadata heads a PublishInstanceStatusRequest; RequestID is unique per request.
type InstanceStatusMetadata struct {
	Cluster           string `json:"cluster"`
	ContainerInstance string `json:"containerInstance"`
	RequestID         string `json:"requestId"`
}

// PublishInstanceStatusRequest reports the container instance's statuses.
type PublishInstanceStatusRequest struct {
	Metadata  InstanceStatusMetadata `json:"metadata"`
	Statuses  []InstanceStatus       `json:"statuses"`
	Timestamp Time                   `json:"timestamp"`
}

// HeartbeatMessage is the server's sign of life; the client only notes it.
type HeartbeatMessage struct {
	Healthy bool `json:"healthy"`
}

// AckPublishMetric acknowledges one PublishMetricsRequest.
type AckPublishMetric struct {
	Message string `json:"message,omitempty"`
}

// AckPublishHealth acknowledges one PublishHealthRequest.
type AckPublishHealth struct {
	Message string `json:"message,omitempty"`
}

// AckPublishInstanceStatus acknowledges one PublishInstanceStatusRequest.
type AckPublishInstanceStatus struct {
	Message string `json:"message,omitempty"`
}

// StopTelemetrySessionMessage asks the client to end the session (it reconnects).
type StopTelemetrySessionMessage struct {
	Message string `json:"message,omitempty"`
}

// ResourceValidationException is an error frame: a request named an unknown resource.
type ResourceValidationException struct {
	Message string `json:"message,omitempty"`
}

// InvalidParameterException is an error frame: a request had a bad parameter.
type InvalidParameterException struct {
	Message string `json:"message,omitempty"`
}

// MessageType returns TypePublishMetricsRequest.
func (*PublishMetricsRequest) MessageType() string { return TypePublishMetricsRequest }

// MessageType returns TypePublishHealthRequest.
func (*PublishHealthRequest) MessageType() string { return TypePublishHealthRequest }

// MessageType returns TypePublishInstanceStatusRequest.
func (*PublishInstanceStatusRequest) MessageType() string { return TypePublishInstanceStatusRequest }

// MessageType returns TypeHeartbeatMessage.
func (*HeartbeatMessage) MessageType() string { return TypeHeartbeatMessage }

// MessageType returns TypeAckPublishMetric.
func (*AckPublishMetric) MessageType() string { return TypeAckPublishMetric }

// MessageType returns TypeAckPublishHealth.
func (*AckPublishHealth) MessageType() string { return TypeAckPublishHealth }

// MessageType returns TypeAckPublishInstanceStatus.
func (*AckPublishInstanceStatus) MessageType() string { return TypeAckPublishInstanceStatus }

// MessageType returns TypeStopTelemetrySessionMessage.
func (*StopTelemetrySessionMessage) MessageType() string { return TypeStopTelemetrySessionMessage }

// MessageType returns TypeResourceValidationException.
func (*ResourceValidationException) MessageType() string { return TypeResourceValidationException }

// MessageType returns TypeInvalidParameterException.
func (*InvalidParameterException) MessageType() string { return TypeInvalidParameterException }

// newMessage returns an empty message of the named type, or nil for an unknown type.
func newMessage(typ string) Message {
	switch typ {
	case TypePublishMetricsRequest:
		return &PublishMetricsRequest{}
	case TypePublishHealthRequest:
		return &PublishHealthRequest{}
	case TypePublishInstanceStatusRequest:
		return &PublishInstanceStatusRequest{}
	case TypeHeartbeatMessage:
		return &HeartbeatMessage{}
	case TypeAckPublishMetric:
		return &AckPublishMetric{}
	case TypeAckPublishHealth:
		return &AckPublishHealth{}
	case TypeAckPublishInstanceStatus:
		return &AckPublishInstanceStatus{}
	case TypeStopTelemetrySessionMessage:
		return &StopTelemetrySessionMessage{}
	case wire.TypeCloseMessage:
		return &wire.CloseMessage{}
	case wire.TypeBadRequestException:
		return &wire.BadRequestException{}
	case TypeResourceValidationException:
		return &ResourceValidationException{}
	case TypeInvalidParameterException:
		return &InvalidParameterException{}
	case wire.TypeServerException:
		return &wire.ServerException{}
	}
	return nil
}

// protocol is TCS's vocabulary. A frame without a message decodes to the empty message of its type.
func protocol() wire.Protocol { return wire.Protocol{Name: "TCS", New: newMessage} }

// Encode returns the JSON envelope of m.
func Encode(m Message) ([]byte, error) { return protocol().Encode(m) }

// Decode parses a JSON envelope. A frame that is not JSON of the shape its type names is a
// *wire.MalformedFrameError (matching wire.ErrMalformedFrame); a type this package does not know is
// a *wire.UnknownTypeError. Error texts never quote the frame.
func Decode(data []byte) (Message, error) { return protocol().Decode(data) }

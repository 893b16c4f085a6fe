package acswire

import "encoding/json"

// Frame types of the task manifest exchange and of the messages Berth answers without acting on.
const (
	TypeTaskManifestMessage                    = "TaskManifestMessage"
	TypeTaskStopVerificationMessage            = "TaskStopVerificationMessage"
	TypeTaskStopVerificationAck                = "TaskStopVerificationAck"
	TypeAttachInstanceNetworkInterfacesMessage = "AttachInstanceNetworkInterfacesMessage"
	TypeConfirmAttachmentMessage               = "ConfirmAttachmentMessage"
	TypeStageUpdateMessage                     = "StageUpdateMessage"
	TypePerformUpdateMessage                   = "PerformUpdateMessage"
	TypeNackRequest                            = "NackRequest"
)

// TaskIdentifier names a task and the status ACS wants it in.
type TaskIdentifier struct {
	TaskArn        string `json:"taskArn"`
	TaskClusterArn string `json:"taskClusterArn,omitempty"`
	DesiredStatus  string `json:"desiredStatus,omitempty"`
}

// TaskManifestMessage lists every task ACS has placed on the instance. The agent acknowledges it
// with an AckRequest and, when it runs tasks that are not in it (or that it lists as STOPPED), asks
// ACS with a TaskStopVerificationMessage which of them to stop.
type TaskManifestMessage struct {
	MessageID            string           `json:"messageId"`
	ClusterArn           string           `json:"clusterArn,omitempty"`
	ContainerInstanceArn string           `json:"containerInstanceArn,omitempty"`
	Tasks                []TaskIdentifier `json:"tasks"`
	GeneratedAt          int64            `json:"generatedAt,omitempty"`
	Timeline             int64            `json:"timeline,omitempty"`
}

// TaskStopVerificationMessage is the agent's question: may these tasks be stopped?
type TaskStopVerificationMessage struct {
	MessageID      string           `json:"messageId"`
	StopCandidates []TaskIdentifier `json:"stopCandidates"`
}

// TaskStopVerificationAck is ACS's answer: the tasks to stop.
type TaskStopVerificationAck struct {
	MessageID   string           `json:"messageId"`
	GeneratedAt int64            `json:"generatedAt,omitempty"`
	StopTasks   []TaskIdentifier `json:"stopTasks"`
}

// AttachInstanceNetworkInterfacesMessage announces ENIs attached to the instance itself (not to a
// task), for ECS's trunking; Berth does not use them.
type AttachInstanceNetworkInterfacesMessage struct {
	MessageID                string          `json:"messageId"`
	ClusterArn               string          `json:"clusterArn,omitempty"`
	ContainerInstanceArn     string          `json:"containerInstanceArn,omitempty"`
	ElasticNetworkInterfaces json.RawMessage `json:"elasticNetworkInterfaces,omitempty"`
}

// ConfirmAttachmentMessage asks the agent to confirm a resource attachment (EBS and the like);
// Berth does not support them.
type ConfirmAttachmentMessage struct {
	MessageID            string          `json:"messageId"`
	ClusterArn           string          `json:"clusterArn,omitempty"`
	ContainerInstanceArn string          `json:"containerInstanceArn,omitempty"`
	TaskArn              string          `json:"taskArn,omitempty"`
	Attachment           json.RawMessage `json:"attachment,omitempty"`
}

// StageUpdateMessage and PerformUpdateMessage ask the agent to update itself; Berth is updated by
// its package manager, and answers with a NackRequest.
type StageUpdateMessage struct {
	MessageID            string          `json:"messageId"`
	ClusterArn           string          `json:"clusterArn,omitempty"`
	ContainerInstanceArn string          `json:"containerInstanceArn,omitempty"`
	UpdateInfo           json.RawMessage `json:"updateInfo,omitempty"`
}

// PerformUpdateMessage: see StageUpdateMessage.
type PerformUpdateMessage struct {
	MessageID            string          `json:"messageId"`
	ClusterArn           string          `json:"clusterArn,omitempty"`
	ContainerInstanceArn string          `json:"containerInstanceArn,omitempty"`
	UpdateInfo           json.RawMessage `json:"updateInfo,omitempty"`
}

// NackRequest refuses a message, saying why.
type NackRequest struct {
	Cluster           string `json:"cluster,omitempty"`
	ContainerInstance string `json:"containerInstance,omitempty"`
	MessageID         string `json:"messageId"`
	Reason            string `json:"reason,omitempty"`
}

// MessageType returns "TaskManifestMessage".
func (*TaskManifestMessage) MessageType() string { return TypeTaskManifestMessage }

// MessageType returns "TaskStopVerificationMessage".
func (*TaskStopVerificationMessage) MessageType() string { return TypeTaskStopVerificationMessage }

// MessageType returns "TaskStopVerificationAck".
func (*TaskStopVerificationAck) MessageType() string { return TypeTaskStopVerificationAck }

// MessageType returns "AttachInstanceNetworkInterfacesMessage".
func (*AttachInstanceNetworkInterfacesMessage) MessageType() string {
	return TypeAttachInstanceNetworkInterfacesMessage
}

// MessageType returns "ConfirmAttachmentMessage".
func (*ConfirmAttachmentMessage) MessageType() string { return TypeConfirmAttachmentMessage }

// MessageType returns "StageUpdateMessage".
func (*StageUpdateMessage) MessageType() string { return TypeStageUpdateMessage }

// MessageType returns "PerformUpdateMessage".
func (*PerformUpdateMessage) MessageType() string { return TypePerformUpdateMessage }

// MessageType returns "NackRequest".
func (*NackRequest) MessageType() string { return TypeNackRequest }

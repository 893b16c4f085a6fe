package ecsclient

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/berth-agent/berth/agent/errdefs"
)

// BackendStatus is a task or container status as ECS's state-change API names it.
type BackendStatus string

// The statuses ECS accepts in state changes.
const (
	StatusPending BackendStatus = "PENDING"
	StatusRunning BackendStatus = "RUNNING"
	StatusStopped BackendStatus = "STOPPED"
)

// The longest values ECS accepts, as the ECS agent cuts them (ecs-agent/api/ecs/client/ecs_client.go).
const (
	maxReasonLen      = 1024 // a task's or a container's reason
	maxRuntimeIDLen   = 255
	maxImageDigestLen = 255
)

// MaxPortRangeBindings is the most network bindings ECS accepts for a container that maps a
// containerPortRange.
const MaxPortRangeBindings = 100

// ErrTooManyBindings: a container that maps a containerPortRange has more network bindings than ECS
// accepts (MaxPortRangeBindings); the state change is not sent. An ErrInvalidParameter.
var ErrTooManyBindings = errdefs.New(ErrInvalidParameter, "more network bindings than ECS accepts")

// NetworkBinding is one network binding of a container state change: one port (ContainerPort and
// HostPort) or one containerPortRange mapping consolidated (ContainerPortRange and HostPortRange,
// "8000-8010").
type NetworkBinding struct {
	BindIP             string
	Protocol           string // tcp or udp
	ContainerPort      uint16
	HostPort           uint16
	ContainerPortRange string
	HostPortRange      string
}

// ContainerStateChange is one container's reported state inside a task state change.
type ContainerStateChange struct {
	Name            string
	Status          BackendStatus
	ExitCode        *int
	Reason          string
	NetworkBindings []NetworkBinding
	// PortRange says the container maps a containerPortRange: ECS then accepts at most
	// MaxPortRangeBindings network bindings.
	PortRange   bool
	RuntimeID   string // the Docker container ID
	ImageDigest string // the manifest digest, when known
}

// ManagedAgentStateChange is one managed agent's reported state inside a task state change: ECS
// Exec's ExecuteCommandAgent in a container of the task. Only SubmitTaskStateChange carries them.
type ManagedAgentStateChange struct {
	ContainerName string
	Name          string // ExecuteCommandAgent
	Status        BackendStatus
	Reason        string
}

// TaskStateChange is one SubmitTaskStateChange: the task's status, the containers and the managed
// agents that changed.
type TaskStateChange struct {
	TaskArn            string
	Status             BackendStatus
	Reason             string
	Containers         []ContainerStateChange
	ManagedAgents      []ManagedAgentStateChange
	Attachments        []AttachmentStateChange
	PullStartedAt      time.Time // zero: not sent
	PullStoppedAt      time.Time
	ExecutionStoppedAt time.Time
}

// SubmitTaskStateChange sends one task state change. It makes one attempt; errors are *APIError,
// or ErrTooManyBindings (not sent: ECS would refuse it).
func (c *Client) SubmitTaskStateChange(ctx context.Context, ch TaskStateChange) error {
	in := &ecs.SubmitTaskStateChangeInput{
		Cluster: aws.String(c.cluster),
		Task:    aws.String(ch.TaskArn),
		Status:  aws.String(string(ch.Status)),
		// Sent even when empty, as the ECS agent does.
		Reason:             aws.String(truncate(ch.Reason, maxReasonLen)),
		PullStartedAt:      optTime(ch.PullStartedAt),
		PullStoppedAt:      optTime(ch.PullStoppedAt),
		ExecutionStoppedAt: optTime(ch.ExecutionStoppedAt),
	}
	for _, ct := range ch.Containers {
		if err := checkBindings(ch.TaskArn, ct); err != nil {
			return err
		}
		in.Containers = append(in.Containers, types.ContainerStateChange{
			ContainerName:   aws.String(ct.Name),
			Status:          aws.String(string(ct.Status)),
			ExitCode:        optInt32(ct.ExitCode),
			Reason:          optString(truncate(ct.Reason, maxReasonLen)),
			NetworkBindings: bindings(ct.NetworkBindings, c.noIPv6),
			RuntimeId:       optString(truncate(ct.RuntimeID, maxRuntimeIDLen)),
			ImageDigest:     optString(truncate(ct.ImageDigest, maxImageDigestLen)),
		})
	}
	for _, m := range ch.ManagedAgents {
		// The reason is sent even when empty, as the ECS agent sends it (buildManagedAgentStateChangePayload).
		in.ManagedAgents = append(in.ManagedAgents, types.ManagedAgentStateChange{
			ContainerName:    aws.String(m.ContainerName),
			ManagedAgentName: types.ManagedAgentName(m.Name),
			Status:           aws.String(string(m.Status)),
			Reason:           aws.String(truncate(m.Reason, maxReasonLen)),
		})
	}
	for _, a := range ch.Attachments {
		in.Attachments = append(in.Attachments, types.AttachmentStateChange{
			AttachmentArn: aws.String(a.AttachmentArn),
			Status:        aws.String(string(a.Status)),
		})
	}
	_, err := c.api.SubmitTaskStateChange(ctx, in)
	return translate("SubmitTaskStateChange", err)
}

// SubmitContainerStateChange sends one container's change on its own. The Reporter does not use
// it (it batches container changes into SubmitTaskStateChange); it is here for callers that need
// the single-container form. It makes one attempt; errors are *APIError, or ErrTooManyBindings.
func (c *Client) SubmitContainerStateChange(ctx context.Context, taskArn string, ct ContainerStateChange) error {
	if err := checkBindings(taskArn, ct); err != nil {
		return err
	}
	_, err := c.api.SubmitContainerStateChange(ctx, &ecs.SubmitContainerStateChangeInput{
		Cluster:         aws.String(c.cluster),
		Task:            aws.String(taskArn),
		ContainerName:   aws.String(ct.Name),
		Status:          aws.String(string(ct.Status)),
		ExitCode:        optInt32(ct.ExitCode),
		Reason:          optString(truncate(ct.Reason, maxReasonLen)),
		NetworkBindings: bindings(ct.NetworkBindings, c.noIPv6),
		RuntimeId:       optString(truncate(ct.RuntimeID, maxRuntimeIDLen)),
	})
	return translate("SubmitContainerStateChange", err)
}

// checkBindings refuses what ECS would: more than MaxPortRangeBindings network bindings for a
// container that maps a containerPortRange, counted before IPv6 bindings are left out.
func checkBindings(taskArn string, ct ContainerStateChange) error {
	if ct.PortRange && len(ct.NetworkBindings) > MaxPortRangeBindings {
		return fmt.Errorf("task %s container %s: %d network bindings, at most %d: %w",
			taskArn, ct.Name, len(ct.NetworkBindings), MaxPortRangeBindings, ErrTooManyBindings)
	}
	return nil
}

// ipv6Any is the host address of the IPv6 binding Docker makes beside "0.0.0.0"; it is the one
// ECS_EXCLUDE_IPV6_PORTBINDING leaves out.
const ipv6Any = "::"

// bindings converts a container's network bindings; noIPv6 leaves out those on "::".
func bindings(in []NetworkBinding, noIPv6 bool) []types.NetworkBinding {
	var out []types.NetworkBinding
	for _, b := range in {
		if noIPv6 && b.BindIP == ipv6Any {
			continue
		}
		proto := types.TransportProtocolTcp
		if b.Protocol == "udp" {
			proto = types.TransportProtocolUdp
		}
		nb := types.NetworkBinding{BindIP: optString(b.BindIP), Protocol: proto}
		if b.ContainerPortRange != "" {
			nb.ContainerPortRange, nb.HostPortRange = aws.String(b.ContainerPortRange), aws.String(b.HostPortRange)
		} else {
			nb.ContainerPort, nb.HostPort = aws.Int32(int32(b.ContainerPort)), aws.Int32(int32(b.HostPort))
		}
		out = append(out, nb)
	}
	return out
}

// truncate cuts s to at most n bytes, on a rune boundary so that what is sent stays UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func optInt32(v *int) *int32 {
	if v == nil {
		return nil
	}
	return aws.Int32(int32(*v))
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return aws.Time(t)
}

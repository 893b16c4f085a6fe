package ecsclient

import (
	"context"
	"net/netip"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/berth-agent/berth/agent/task"
)

// BackendStatus is a task or container status as ECS's state-change API names it.
type BackendStatus string

// The statuses ECS accepts in state changes.
const (
	StatusPending BackendStatus = "PENDING"
	StatusRunning BackendStatus = "RUNNING"
	StatusStopped BackendStatus = "STOPPED"
)

// maxReasonLen is the longest reason ECS accepts.
const maxReasonLen = 255

// ContainerStateChange is one container's reported state inside a task state change.
type ContainerStateChange struct {
	Name            string
	Status          BackendStatus
	ExitCode        *int
	Reason          string
	NetworkBindings []task.NetworkBinding
	RuntimeID       string // the Docker container ID
	ImageDigest     string // the manifest digest, when known
}

// TaskStateChange is one SubmitTaskStateChange: the task's status and the containers that changed.
type TaskStateChange struct {
	TaskArn            string
	Status             BackendStatus
	Reason             string
	Containers         []ContainerStateChange
	Attachments        []AttachmentStateChange
	PullStartedAt      time.Time // zero: not sent
	PullStoppedAt      time.Time
	ExecutionStoppedAt time.Time
}

// SubmitTaskStateChange sends one task state change. It makes one attempt; errors are *APIError.
func (c *Client) SubmitTaskStateChange(ctx context.Context, ch TaskStateChange) error {
	in := &ecs.SubmitTaskStateChangeInput{
		Cluster:            aws.String(c.cluster),
		Task:               aws.String(ch.TaskArn),
		Status:             aws.String(string(ch.Status)),
		Reason:             optString(truncate(ch.Reason)),
		PullStartedAt:      optTime(ch.PullStartedAt),
		PullStoppedAt:      optTime(ch.PullStoppedAt),
		ExecutionStoppedAt: optTime(ch.ExecutionStoppedAt),
	}
	for _, ct := range ch.Containers {
		in.Containers = append(in.Containers, types.ContainerStateChange{
			ContainerName:   aws.String(ct.Name),
			Status:          aws.String(string(ct.Status)),
			ExitCode:        optInt32(ct.ExitCode),
			Reason:          optString(truncate(ct.Reason)),
			NetworkBindings: bindings(ct.NetworkBindings, c.noIPv6),
			RuntimeId:       optString(ct.RuntimeID),
			ImageDigest:     optString(ct.ImageDigest),
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
// the single-container form. It makes one attempt; errors are *APIError.
func (c *Client) SubmitContainerStateChange(ctx context.Context, taskArn string, ct ContainerStateChange) error {
	_, err := c.api.SubmitContainerStateChange(ctx, &ecs.SubmitContainerStateChangeInput{
		Cluster:         aws.String(c.cluster),
		Task:            aws.String(taskArn),
		ContainerName:   aws.String(ct.Name),
		Status:          aws.String(string(ct.Status)),
		ExitCode:        optInt32(ct.ExitCode),
		Reason:          optString(truncate(ct.Reason)),
		NetworkBindings: bindings(ct.NetworkBindings, c.noIPv6),
		RuntimeId:       optString(ct.RuntimeID),
	})
	return translate("SubmitContainerStateChange", err)
}

// bindings converts a container's network bindings; noIPv6 leaves out those on an IPv6 host address
// (Docker binds a published port on "0.0.0.0" and on "::").
func bindings(in []task.NetworkBinding, noIPv6 bool) []types.NetworkBinding {
	var out []types.NetworkBinding
	for _, b := range in {
		if noIPv6 && isIPv6(b.BindIP) {
			continue
		}
		proto := types.TransportProtocolTcp
		if b.Protocol == "udp" {
			proto = types.TransportProtocolUdp
		}
		out = append(out, types.NetworkBinding{
			BindIP:        optString(b.BindIP),
			ContainerPort: aws.Int32(int32(b.ContainerPort)),
			HostPort:      aws.Int32(int32(b.HostPort)),
			Protocol:      proto,
		})
	}
	return out
}

// isIPv6 reports whether a binding's host address is an IPv6 one (not an IPv4-mapped one).
func isIPv6(addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && a.Is6() && !a.Is4In6()
}

func truncate(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	// Cut on a rune boundary.
	cut := maxReasonLen
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

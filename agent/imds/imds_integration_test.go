//go:build integration

package imds_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/imds/imdsmock"
)

func TestMockIdentity(t *testing.T) {
	endpoint := imdsmock.Start(t)
	c := imds.New(imds.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	region, err := c.Region(ctx)
	require.NoError(t, err)
	assert.Equal(t, "us-east-1", region)

	id, err := c.Identity(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, id.Signature)
	assert.Contains(t, id.Document, `"instanceId"`)
	assert.Equal(t, "i-1234567890abcdef0", id.InstanceID)
	assert.Equal(t, "us-east-1", id.Region)
	assert.Equal(t, "us-east-1f", id.AvailabilityZone)
	assert.Equal(t, "m4.xlarge", id.InstanceType)
	assert.Equal(t, "ami-0b69ea66ff7391e80", id.ImageID)
	assert.Equal(t, "0123456789", id.AccountID)
	assert.Equal(t, "x86_64", id.Architecture)

	attrs, err := c.Attributes(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		imds.AttrInstanceType:     "m4.xlarge",
		imds.AttrAvailabilityZone: "us-east-1f",
		imds.AttrAMIID:            "ami-0b69ea66ff7391e80",
		imds.AttrCPUArchitecture:  "x86_64",
		imds.AttrVPCID:            "vpc-d295a6a7",
		imds.AttrSubnetID:         "subnet-0ac62554",
	}, attrs, "the mock serves no outpost-arn: a 404 leaves it out")

	tags, err := c.InstanceTags(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"Name": "test-instance", "Test": "test-tag"}, tags)
}

// TestMockSpot: in its spot mode with a delay, the mock answers 404 until the delay passes and then
// serves a terminate notice, which WatchSpot reports once.
func TestMockSpot(t *testing.T) {
	endpoint := imdsmock.Start(t, "spot", "--mock-delay-sec", "3", "--action", "terminate")
	c := imds.New(imds.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, found, err := c.SpotInstanceAction(ctx)
	require.NoError(t, err)
	assert.False(t, found, "no notice before the mock's delay")

	start := time.Now()
	var notices []imds.SpotAction
	c.WatchSpot(ctx, 200*time.Millisecond, func(a imds.SpotAction) { notices = append(notices, a) })
	require.NoError(t, ctx.Err(), "WatchSpot returned because of the notice, not the deadline")
	require.Len(t, notices, 1)
	assert.Equal(t, "terminate", notices[0].Action)
	assert.False(t, notices[0].Time.IsZero())
	t.Logf("notice after %v: %+v", time.Since(start), notices[0])
}

// TestMockASGLifecycle: the mock's asglifecycle mode serves "InService" and then, after the
// termination delay, "Terminated". (It cannot serve a warm-pool state turning InService; the unit
// tests cover WaitInService's waiting.)
func TestMockASGLifecycle(t *testing.T) {
	endpoint := imdsmock.Start(t, "asglifecycle", "--asg-termination-delay-sec", "3")
	c := imds.New(imds.Options{Endpoint: endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	require.NoError(t, c.WaitInService(ctx, 200*time.Millisecond))

	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		state, err := c.TargetLifecycleState(ctx)
		require.NoError(t, err)
		if state == "Terminated" {
			return
		}
		require.Equal(t, imds.StateInService, state)
		select {
		case <-ctx.Done():
			t.Fatal("the target lifecycle state never turned Terminated")
		case <-tick.C:
		}
	}
}

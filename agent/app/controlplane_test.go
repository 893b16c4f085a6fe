package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/state"
	"github.com/berth-agent/berth/agent/task"
)

func TestACSHandlerSavesTheSequenceNumberBeforeTheAck(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	h := &acsHandler{store: store, log: logger.Nop()}
	require.NoError(t, h.HandlePayload(ctx, acs.Payload{MessageID: "m1", SeqNum: 9}))
	saved, err := store.SeqNum(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(9), saved, "saved before HandlePayload returns, so before the ack")
	assert.Equal(t, int64(9), h.SeqNum())
}

func TestTaskENI(t *testing.T) {
	got := taskENI([]*acs.ElasticNetworkInterface{{MacAddress: "0a:1b:2c:3d:4e:5f", AttachmentArn: "arn:att",
		IPv4Addresses:            []acs.IPv4Address{{PrivateAddress: "10.0.1.9"}, {PrivateAddress: "10.0.1.5", Primary: true}},
		SubnetGatewayIPv4Address: "10.0.1.1/24", DomainNameServers: []string{"10.0.0.2"}, DomainName: []string{"ec2.internal"}}})
	assert.Equal(t, &task.ENI{AttachmentArn: "arn:att", MAC: "0a:1b:2c:3d:4e:5f", IPv4CIDR: "10.0.1.5/24", Gateway: "10.0.1.1",
		DNSServers: []string{"10.0.0.2"}, SearchDomains: []string{"ec2.internal"}}, got)
	assert.Nil(t, taskENI(nil))
}

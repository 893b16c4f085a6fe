package acswire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/wire"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	msgs := []Message{
		&AckRequest{Cluster: "c", ContainerInstance: "ci", MessageID: "m"},
		&HeartbeatMessage{MessageID: "h", Healthy: true},
		&HeartbeatAckRequest{MessageID: "h"},
		&IAMRoleCredentialsMessage{MessageID: "m", TaskArn: "t", RoleType: RoleTypeTaskApplication, RoleCredentials: IAMRoleCredentials{CredentialsID: "id"}},
		&IAMRoleCredentialsAckRequest{MessageID: "m", CredentialsID: "id", Expiration: "e"},
		&AttachTaskNetworkInterfacesMessage{MessageID: "m", TaskArn: "t", WaitTimeoutMs: 5000, ElasticNetworkInterfaces: []*ElasticNetworkInterface{{Ec2ID: "eni"}}},
		&wire.CloseMessage{Message: "bye"},
		&ErrorMessage{Message: "oops"},
		&wire.ServerException{Message: "x"},
		&wire.BadRequestException{Message: "x"},
		&InvalidClusterException{Message: "x"},
		&InvalidInstanceException{Message: "x"},
		&AccessDeniedException{Message: "x"},
		&InactiveInstanceException{Message: "x"},
		&PayloadMessage{MessageID: "p", SeqNum: 3, Tasks: []*Task{{Arn: "a"}}},
	}
	for _, m := range msgs {
		t.Run(m.MessageType(), func(t *testing.T) {
			data, err := Encode(m)
			require.NoError(t, err)
			var env map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(data, &env))
			assert.JSONEq(t, `"`+m.MessageType()+`"`, string(env["type"]))
			got, err := Decode(data)
			require.NoError(t, err)
			assert.Equal(t, m, got)
		})
	}
}

func TestWireNames(t *testing.T) {
	data, err := Encode(&IAMRoleCredentialsAckRequest{MessageID: "m", CredentialsID: "c", Expiration: "e"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"IAMRoleCredentialsAckRequest","message":{"messageId":"m","credentialsId":"c","expiration":"e"}}`, string(data))
	data, err = Encode(&AckRequest{Cluster: "c", ContainerInstance: "i", MessageID: "m"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"AckRequest","message":{"cluster":"c","containerInstance":"i","messageId":"m"}}`, string(data))
}

func TestDecodeErrors(t *testing.T) {
	_, err := Decode([]byte(`{"type":"PayloadMessage","message":{"messageId":"m","tasks":"secret-value"}}`))
	require.ErrorIs(t, err, wire.ErrMalformedFrame)
	assert.NotContains(t, err.Error(), "secret-value")

	_, err = Decode([]byte(`{not json secret-value`))
	require.ErrorIs(t, err, wire.ErrMalformedFrame)
	assert.NotContains(t, err.Error(), "secret-value")

	_, err = Decode([]byte(`{"type":"FancyNewMessage","message":{}}`))
	var ute *wire.UnknownTypeError
	require.ErrorAs(t, err, &ute)
	assert.Equal(t, "FancyNewMessage", ute.Type)
}

func TestCredentialsStringHidesSecrets(t *testing.T) {
	c := IAMRoleCredentials{CredentialsID: "id", AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "TOKEN"}
	s := c.String()
	for _, secret := range []string{"AKID", "SECRET", "TOKEN"} {
		assert.False(t, strings.Contains(s, secret), "%q leaks %s", s, secret)
	}
}

// The client must never put frame contents in its logs; check that Decode errors, which it logs,
// do not quote them.
func TestMalformedFrameErrorHasNoContents(t *testing.T) {
	frame, _ := json.Marshal(map[string]any{"type": "IAMRoleCredentialsMessage", "message": map[string]any{"roleCredentials": "AKIDSECRET"}})
	_, err := Decode(frame)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "AKIDSECRET")
}

func TestMalformedFrameIsInvalidArgument(t *testing.T) {
	_, err := Decode([]byte(`{"type": "HeartbeatMessage", "message": [1]}`))
	require.ErrorIs(t, err, wire.ErrMalformedFrame)
	assert.True(t, errdefs.IsInvalidArgument(err))
	assert.False(t, errdefs.IsRetriable(err))
}

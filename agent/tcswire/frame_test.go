package tcswire_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/tcswire"
	"github.com/berth-agent/berth/agent/wire"
)

func TestParseFrame(t *testing.T) {
	h, body, err := tcswire.ParseFrame([]byte("Authorization: AWS4-HMAC-SHA256 Credential=AKID/20240101/us-west-2/ecs/aws4_request, SignedHeaders=host;x-amz-date, Signature=ab\r\nHost: h:1\r\nX-Amz-Date: 20240101T000000Z\r\n\r\n{\"a\":1}"))
	require.NoError(t, err)
	assert.Equal(t, "AKID", tcswire.AccessKeyID(h.Get("Authorization")))
	assert.Equal(t, "h:1", h.Get("Host"))
	assert.JSONEq(t, `{"a":1}`, string(body))
	assert.True(t, json.Valid(body))

	_, _, err = tcswire.ParseFrame([]byte(`{"type":"PublishMetricsRequest"}`))
	assert.ErrorIs(t, err, wire.ErrMalformedFrame)
	assert.Empty(t, tcswire.AccessKeyID("Bearer x"))
}

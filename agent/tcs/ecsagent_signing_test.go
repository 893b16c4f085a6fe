//lint:file-ignore SA1019 the Amazon ECS agent signs TCS frames with the AWS SDK for Go v1; the test recomputes them with it.

package tcs_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	awsv1creds "github.com/aws/aws-sdk-go/aws/credentials"
	awsv1signer "github.com/aws/aws-sdk-go/aws/signer/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/tcs"
	"github.com/berth-agent/berth/agent/tcs/tcstest"
)

// ecsAgentFrame builds the frame the Amazon ECS agent sends for body (ecs-agent/tcs/client/client.go,
// signRequestFunc): a GET of the session's upgrade URL whose payload is body, signed by the AWS SDK
// for Go v1's SigV4 signer at the given time, its header lines in Go's header order, then an empty
// line and body. It shares no code with Berth's signer.
func ecsAgentFrame(t *testing.T, upgrade tcstest.Upgrade, body []byte, creds *awsv1creds.Credentials, region string, at time.Time) []byte {
	t.Helper()
	payload := bytes.NewReader(body)
	req, err := http.NewRequest(http.MethodGet, "http://"+upgrade.Host+upgrade.URI, payload)
	require.NoError(t, err)
	_, err = awsv1signer.NewSigner(creds).Sign(req, payload, "ecs", region, at)
	require.NoError(t, err)
	req.Header.Add("Host", req.Host)
	var b bytes.Buffer
	require.NoError(t, req.Header.Write(&b))
	_, _ = io.WriteString(&b, "\r\n")
	b.Write(body)
	return b.Bytes()
}

// Every frame is byte for byte the frame the ECS agent's signer makes for the same body, URL, keys
// and time — with and without a session token — so TCS accepts Berth's frames as it accepts the ECS
// agent's.
func TestFramesSignedAsTheECSAgentSignsThem(t *testing.T) {
	for name, token := range map[string]string{"long-term keys": "", "session token": "FwoGZXIvYXdzEXAMPLETOKEN"} {
		t.Run(name, func(t *testing.T) {
			h := start(t, &fakeSource{metrics: tasks(3), health: healths(1)}, func(c *tcs.Config) {
				c.Credentials = credentials.NewStaticCredentialsProvider(accessKey, "secret", token)
			})
			h.tick(t)
			h.srv.WaitFor(t, "a round", func(s *tcstest.Server) bool { return len(s.InstanceStatuses()) == 1 })
			up := h.srv.Upgrades()
			require.Len(t, up, 1)
			require.True(t, strings.HasPrefix(up[0].URI, "/ws?"), "upgrade URI %q", up[0].URI)
			creds := awsv1creds.NewStaticCredentials(accessKey, "secret", token)
			received := h.srv.Received()
			require.Len(t, received, 3, "metrics, health and instance status")
			for _, r := range received {
				at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
				require.NoError(t, err)
				end := bytes.Index(r.Frame, []byte("\r\n\r\n"))
				require.Positive(t, end)
				body := r.Frame[end+4:]
				assert.Equal(t, string(ecsAgentFrame(t, up[0], body, creds, "us-west-2", at)), string(r.Frame), "%s frame", r.Message.MessageType())
			}
		})
	}
}

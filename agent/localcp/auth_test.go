package localcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
)

// rootDef is what a stranger would run to own the host.
const rootDef = `{"family":"root","containerDefinitions":[{"name":"app","image":"busybox","memory":32,"privileged":true,
	"mountPoints":[{"sourceVolume":"host","containerPath":"/host"}]}],"volumes":[{"name":"host","host":{"sourcePath":"/"}}]}`

// TestStrangersAreRefused sends requests over real HTTP as a local user without the keys would:
// each is refused with ECS's exception and changes nothing.
func TestStrangersAreRefused(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)

	send := func(t *testing.T, host string, sign func(*http.Request, []byte)) (int, map[string]any) {
		t.Helper()
		body := []byte(rootDef)
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/", bytes.NewReader(body))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", targetPrefix+"RegisterTaskDefinition")
		sign(req, body)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out := map[string]any{}
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &out), "%s", data)
		return resp.StatusCode, out
	}
	signWith := func(keys localauth.Keys, at time.Time) func(*http.Request, []byte) {
		return func(r *http.Request, body []byte) {
			require.NoError(t, localauth.Sign(t.Context(), r, body, keys, "us-east-1", at))
		}
	}
	local := strings.TrimPrefix(ts.URL, "http://")
	for _, c := range []struct {
		name, host string
		sign       func(*http.Request, []byte)
		status     int
		typ        string
	}{
		{"unsigned", local, func(*http.Request, []byte) {}, http.StatusForbidden, "MissingAuthenticationTokenException"},
		{"other keys", local, signWith(localauth.Keys{AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}, time.Now()),
			http.StatusBadRequest, "UnrecognizedClientException"},
		{"wrong secret", local, signWith(localauth.Keys{AccessKeyID: testKeys.AccessKeyID, SecretAccessKey: "guess"}, time.Now()),
			http.StatusForbidden, "InvalidSignatureException"},
		{"replayed an hour later", local, signWith(testKeys, time.Now().Add(-time.Hour)), http.StatusForbidden, "InvalidSignatureException"},
		{"foreign host (DNS rebinding)", "attacker.example:51677", signWith(testKeys, time.Now()), http.StatusForbidden, "AccessDeniedException"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out := send(t, c.host, c.sign)
			assert.Equal(t, c.status, status)
			assert.Equal(t, c.typ, out["__type"])
			assert.NotEmpty(t, out["message"])
		})
	}
	out := h.ok("ListTaskDefinitionFamilies", `{}`)
	assert.Empty(t, out["families"], "no refused request registered anything")

	// The keys' owner gets through the same way.
	status, out2 := send(t, local, signWith(testKeys, time.Now()))
	require.Equal(t, http.StatusOK, status, "%v", out2)
	assert.Equal(t, "root", at(t, out2, "taskDefinition", "family"))
}

// TestACSRefusesUnsignedUpgrade checks that a stranger who knows the instance ARN cannot take the
// agent's place on /ws: the upgrade is refused and the pending payload still goes to the agent.
func TestACSRefusesUnsignedUpgrade(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ci := registerInstance(t, h)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)

	q := url.Values{"clusterArn": {"default"}, "containerInstanceArn": {ci}, "seqNum": {"1"}, "sendCredentials": {"true"}}
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws?" + q.Encode()
	otherKeys := localauth.Keys{AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}
	for name, header := range map[string]http.Header{
		"unsigned":   nil,
		"other keys": signedUpgrade(t, ts.URL+"/ws?"+q.Encode(), otherKeys),
		"signed for another query": signedUpgrade(t, ts.URL+"/ws?"+url.Values{"clusterArn": {"default"},
			"containerInstanceArn": {"arn:aws:ecs:local:000000000000:container-instance/default/other"}}.Encode(), testKeys),
	} {
		t.Run(name, func(t *testing.T) {
			ws, resp, err := websocket.DefaultDialer.Dial(wsURL, header)
			if ws != nil {
				_ = ws.Close()
			}
			require.ErrorIs(t, err, websocket.ErrBadHandshake)
			defer resp.Body.Close()
			assert.GreaterOrEqual(t, resp.StatusCode, 400)
			var out map[string]string
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			assert.Contains(t, out["__type"], "Exception")
		})
	}

	agent := dialACS(t, ts, ci)
	p := agent.payload()
	require.Len(t, p.Tasks, 1)
	assert.Equal(t, arn, p.Tasks[0].Arn)
}

package localcp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/localauth"
)

// TestExecuteCommandPointsAtBerthExec drives ExecuteCommand with aws-sdk-go-v2's ECS client: a
// Session Manager session needs AWS, so the answer is ECS's TargetNotConnectedException with the
// berth exec command that runs the same command on this host.
func TestExecuteCommandPointsAtBerthExec(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), Credentials: testKeys.Provider()})
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	id := arn[strings.LastIndexByte(arn, '/')+1:]

	for _, tt := range []struct {
		name    string
		in      ecs.ExecuteCommandInput
		wantCmd string
	}{
		{"by ARN, with a container", ecs.ExecuteCommandInput{Task: aws.String(arn), Container: aws.String("app"),
			Command: aws.String("/bin/sh -c 'echo hi'"), Interactive: true}, "berth exec " + id + " app -- /bin/sh -c 'echo hi'"},
		{"by ID, in the named cluster", ecs.ExecuteCommandInput{Cluster: aws.String("default"), Task: aws.String(id),
			Command: aws.String("/bin/sh"), Interactive: true}, "berth exec " + id + " -- /bin/sh"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.ExecuteCommand(t.Context(), &tt.in)
			var notConnected *types.TargetNotConnectedException
			require.True(t, errors.As(err, &notConnected), "ECS's error for an exec that cannot reach its target, got %v", err)
			assert.Equal(t, "ECS Exec needs AWS (a Session Manager session), which the embedded control plane does not have; "+
				"on this host, run the command with: "+tt.wantCmd, aws.ToString(notConnected.Message))
		})
	}

	_, err := client.ExecuteCommand(t.Context(), &ecs.ExecuteCommandInput{Task: aws.String("0123456789abcdef0123456789abcdef"),
		Command: aws.String("/bin/sh"), Interactive: true})
	var invalid *types.InvalidParameterException
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, "The referenced task was not found.", aws.ToString(invalid.Message))

	_, err = client.ExecuteCommand(t.Context(), &ecs.ExecuteCommandInput{Cluster: aws.String("nope"), Task: aws.String(id),
		Command: aws.String("/bin/sh"), Interactive: true})
	var noCluster *types.ClusterNotFoundException
	require.ErrorAs(t, err, &noCluster)

	assert.Equal(t, "command can not be blank.", h.fails("ExecuteCommand", `{"task":"`+id+`","command":"  ","interactive":true}`, "InvalidParameterException"))
	assert.Equal(t, "Interactive is the only mode supported currently.", h.fails("ExecuteCommand", `{"task":"`+id+`","command":"sh"}`, "InvalidParameterException"),
		"ECS runs interactive sessions only")
	assert.Equal(t, "task can not be blank.", h.fails("ExecuteCommand", `{"command":"sh","interactive":true}`, "InvalidParameterException"))
}

// TestExecuteCommandRefusesStrangers: an unsigned request, or one signed with other keys, learns
// nothing about the tasks.
func TestExecuteCommandRefusesStrangers(t *testing.T) {
	h := newHarness(t)
	h.ok("RegisterTaskDefinition", sleepDef)
	arn := at(t, h.ok("RunTask", `{"taskDefinition":"sleep"}`), "tasks", 0, "taskArn").(string)
	body := `{"task":"` + arn + `","command":"sh","interactive":true}`
	for name, keys := range map[string]*localauth.Keys{"unsigned": nil, "other keys": {AccessKeyID: "AKIASTRANGER", SecretAccessKey: "x"}} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-amz-json-1.1")
			req.Header.Set("X-Amz-Target", targetPrefix+"ExecuteCommand")
			if keys != nil {
				require.NoError(t, localauth.Sign(t.Context(), req, []byte(body), *keys, "us-east-1", time.Now()))
			}
			rec := httptest.NewRecorder()
			h.srv.Handler().ServeHTTP(rec, req)
			assert.GreaterOrEqual(t, rec.Code, 400)
			assert.NotContains(t, rec.Body.String(), "berth exec")
			assert.NotContains(t, rec.Body.String(), "TargetNotConnectedException")
		})
	}
}

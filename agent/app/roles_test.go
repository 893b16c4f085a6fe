package app

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/rolecreds"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// TestRoleProviderHonoursTaskIAMRoleKey: with ECS_ENABLE_TASK_IAM_ROLE=false local mode assumes no
// task role (the task runs without its credentials, and the task endpoint knows no such ID); its
// execution role is still provided. The host has no AWS configuration here, so the roles' first
// attempts fail at once without a call.
func TestRoleProviderHonoursTaskIAMRoleKey(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
	const arn = "arn:aws:ecs:local:000000000000:task/default/0123"
	const appID, execID = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, tt := range []struct {
		name    string
		enabled bool
	}{{"key true", true}, {"key false", false}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := newRoleProvider(ctx, &config.Config{Mode: config.ModeLocal, TaskIAMRoleEnabled: tt.enabled}, logger.Nop())
			defer p.Close()
			err := p.Provide(arn, taskcreds.RoleTypeTaskApplication, "arn:aws:iam::1:role/app", appID)
			if tt.enabled {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, rolecreds.ErrTaskRolesDisabled)
			}
			require.NoError(t, p.Provide(arn, taskcreds.RoleTypeTaskExecution, "arn:aws:iam::1:role/exec", execID))
			want := 2
			if !tt.enabled {
				want = 1
			}
			assert.Equal(t, want, p.Len())
		})
	}
}

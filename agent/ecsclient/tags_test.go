package ecsclient

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
)

func TestListTagsForResource(t *testing.T) {
	const taskArn = "arn:aws:ecs:us-west-2:123456789012:task/test/0123"
	t.Run("tags by key", func(t *testing.T) {
		f := newFakeECS(t)
		f.handle("ListTagsForResource", func(map[string]any) (int, any) {
			return http.StatusOK, map[string]any{"tags": []any{map[string]any{"key": "team", "value": "infra"}, map[string]any{"key": "env", "value": ""}}}
		})
		f.failNext("ListTagsForResource", 1)
		c := newTestClient(t, f, nil)
		tags, err := c.ListTagsForResource(context.Background(), taskArn)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"team": "infra", "env": ""}, tags)
		calls := f.callsOf("ListTagsForResource", false)
		require.Len(t, calls, 2, "a server error is retried")
		assert.Equal(t, map[string]any{"resourceArn": taskArn}, calls[1].Body)
	})
	t.Run("none", func(t *testing.T) {
		f := newFakeECS(t)
		f.handle("ListTagsForResource", func(map[string]any) (int, any) { return http.StatusOK, map[string]any{"tags": []any{}} })
		tags, err := newTestClient(t, f, nil).ListTagsForResource(context.Background(), taskArn)
		require.NoError(t, err)
		assert.Empty(t, tags)
	})
	t.Run("access denied: not retried, the API's code and message kept", func(t *testing.T) {
		f := newFakeECS(t)
		f.handle("ListTagsForResource", apiError(http.StatusBadRequest, "AccessDeniedException", "not authorized to perform: ecs:ListTagsForResource"))
		_, err := newTestClient(t, f, nil).ListTagsForResource(context.Background(), taskArn)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrAccessDenied)
		assert.ErrorIs(t, err, errdefs.ErrUnauthorized)
		var api interface {
			ErrorCode() string
			ErrorMessage() string
		}
		require.True(t, errors.As(err, &api), "the SDK's API error is in the chain: %v", err)
		assert.Equal(t, "AccessDeniedException", api.ErrorCode())
		assert.Equal(t, "not authorized to perform: ecs:ListTagsForResource", api.ErrorMessage())
		var resp interface{ HTTPStatusCode() int }
		require.True(t, errors.As(err, &resp))
		assert.Equal(t, http.StatusBadRequest, resp.HTTPStatusCode())
		assert.Len(t, f.callsOf("ListTagsForResource", false), 1)
	})
}

package localcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCall(t *testing.T) {
	srv, err := New(Config{DBPath: filepath.Join(t.TempDir(), "cp.db"), Keys: testKeys}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ctx := context.Background()

	var clusters struct {
		ClusterArns []string `json:"clusterArns"`
	}
	require.NoError(t, Call(ctx, http.DefaultClient, hs.URL, testKeys, "ListClusters", map[string]any{}, &clusters))
	assert.Len(t, clusters.ClusterArns, 1, "the default cluster")

	err = Call(ctx, http.DefaultClient, hs.URL, testKeys, "DescribeTaskDefinition", map[string]any{"taskDefinition": "nope"}, nil)
	var apiErr *APIError
	require.True(t, errors.As(err, &apiErr), "got %v", err)
	assert.Equal(t, "ClientException", apiErr.Type)
	assert.Equal(t, http.StatusBadRequest, apiErr.Status)
	assert.Contains(t, err.Error(), "DescribeTaskDefinition")
}

package ecsclient

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

// ListTagsForResource returns the ECS tags of a resource, a task or a container instance, by its
// ARN: what the task metadata endpoint's /taskWithTags shows. Throttling and server errors are
// retried until ctx ends, as the ECS agent retries them; any other error is returned at once. Errors
// are *APIError, which unwrap to the SDK's error and so to the API's error code and message, the
// HTTP status and the request ID.
func (c *Client) ListTagsForResource(ctx context.Context, arn string) (map[string]string, error) {
	var tags map[string]string
	err := c.retry(ctx, func() error {
		out, err := c.api.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		if err != nil {
			return translate("ListTagsForResource", err)
		}
		tags = make(map[string]string, len(out.Tags))
		for _, t := range out.Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tags of %q: %w", arn, err)
	}
	return tags, nil
}

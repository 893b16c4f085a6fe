package ecsclient

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// UserAgent is the User-Agent of every ECS API call, in the ECS agent's form
// (ecs-agent/httpclient/httpclient.go, userAgent): "<agent version> (<os type>; <detailed OS
// family>) (+http://aws.amazon.com/ecs/)", the detailed family left out when unknown. ECS and
// CloudTrail see the caller as an ECS agent of that version.
func UserAgent(agentVersion, osType, detailedOSFamily string) string {
	if detailedOSFamily == "" {
		return agentVersion + " (" + osType + ") (+http://aws.amazon.com/ecs/)"
	}
	return agentVersion + " (" + osType + "; " + detailedOSFamily + ") (+http://aws.amazon.com/ecs/)"
}

// withUserAgent replaces the SDK's User-Agent with ua, after the SDK has built its own, as the ECS
// agent's HTTP client replaces it.
func withUserAgent(ua string) func(*ecs.Options) {
	return func(o *ecs.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Build.Add(middleware.BuildMiddlewareFunc("BerthUserAgent", func(
				ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler,
			) (middleware.BuildOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok {
					req.Header.Set("User-Agent", ua)
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
		})
	}
}

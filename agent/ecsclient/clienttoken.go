package ecsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// withClientToken adds "clientToken" to the JSON body of the request. The ECS agent sends it in
// RegisterContainerInstance from its own build of the ECS SDK; the public SDK's input has no such
// field, so it is added to the serialized body, before the request is signed.
func withClientToken(token string) func(*ecs.Options) {
	return func(o *ecs.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Serialize.Insert(middleware.SerializeMiddlewareFunc("BerthClientToken", func(
				ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler,
			) (middleware.SerializeOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.SerializeOutput{}, middleware.Metadata{}, fmt.Errorf("client token: unexpected request type %T", in.Request)
				}
				body, err := addJSONField(req.GetStream(), "clientToken", token)
				if err != nil {
					return middleware.SerializeOutput{}, middleware.Metadata{}, fmt.Errorf("client token: %w", err)
				}
				if in.Request, err = req.SetStream(bytes.NewReader(body)); err != nil {
					return middleware.SerializeOutput{}, middleware.Metadata{}, fmt.Errorf("client token: %w", err)
				}
				return next.HandleSerialize(ctx, in)
			}), "OperationSerializer", middleware.After)
		})
	}
}

// addJSONField returns the JSON object read from r with key set to value.
func addJSONField(r io.Reader, key, value string) ([]byte, error) {
	doc := map[string]json.RawMessage{}
	if r != nil {
		if err := json.NewDecoder(r).Decode(&doc); err != nil && err != io.EOF {
			return nil, fmt.Errorf("decode the request body: %w", err)
		}
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	doc[key] = v
	return json.Marshal(doc)
}

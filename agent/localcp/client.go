package localcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/localauth"
)

// signingRegion is the region Call signs for; the control plane accepts any.
const signingRegion = "us-east-1"

// TargetPrefix prefixes every ECS API operation in the X-Amz-Target header.
const TargetPrefix = "AmazonEC2ContainerServiceV20141113."

// Call sends one ECS JSON 1.1 operation to the control plane at endpoint (http://host:port), signed
// with keys as the AWS CLI signs it, and decodes the answer into out (nil: ignore it). An error
// answer comes back as an *APIError with ECS's exception name.
func Call(ctx context.Context, client *http.Client, endpoint string, keys localauth.Keys, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(endpoint, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Amz-Target", TargetPrefix+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	if err := localauth.Sign(ctx, req, body, keys, signingRegion, time.Now()); err != nil {
		return fmt.Errorf("%s: sign: %w", op, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &e) != nil || e.Type == "" {
			return fmt.Errorf("%s: %s", op, resp.Status)
		}
		return fmt.Errorf("%s: %w", op, &APIError{Status: resp.StatusCode, Type: e.Type[strings.LastIndexByte(e.Type, '#')+1:], Message: e.Message})
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// protectionPath is the task scale-in protection state below the agent API.
const protectionPath = "/task-protection/v1/state"

// taskProtection GETs $ECS_AGENT_URI/task-protection/v1/state, or PUTs body to it when body is not
// empty, and writes "status=CODE" and the answer's body, one line each, to w: whatever the status,
// so that a test reads refusals too. It fails when the answer is not a 200, or none came.
func taskProtection(ctx context.Context, w io.Writer, body string, timeout time.Duration) error {
	base := os.Getenv(agentURIEnv)
	if base == "" {
		return fmt.Errorf("%s is not set (not in an ECS task?)", agentURIEnv)
	}
	url := strings.TrimRight(base, "/") + protectionPath
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, rd = http.MethodPut, strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	fmt.Fprintf(w, "status=%d\n%s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s answered %s", method, url, resp.Status)
	}
	return nil
}

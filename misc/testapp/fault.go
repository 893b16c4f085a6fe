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

// agentURIEnv is the agent API's base URL in a task (http://169.254.170.2/api/TOKEN), which the
// agent sets in every container.
const agentURIEnv = "ECS_AGENT_URI"

// faultURL returns the URL of a fault route for the container's task: ${ECS_AGENT_URI}/fault/v1/FAULT/OP.
func faultURL(fault, op string) (string, error) {
	base := strings.TrimRight(os.Getenv(agentURIEnv), "/")
	if base == "" {
		return "", fmt.Errorf("%s is not set (not in an ECS task?)", agentURIEnv)
	}
	return base + "/fault/v1/" + fault + "/" + op, nil
}

// postFault POSTs body to the task's fault route and prints "STATUS BODY" as one line. It fails
// when the request cannot be made, or when want is not 0 and the answer's status is not want.
func postFault(ctx context.Context, w io.Writer, fault, op, body string, want int, timeout time.Duration) error {
	url, err := faultURL(fault, op)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("POST %s: read body: %w", url, err)
	}
	fmt.Fprintf(w, "%d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	if want != 0 && resp.StatusCode != want {
		return fmt.Errorf("POST %s answered %d, want %d", url, resp.StatusCode, want)
	}
	return nil
}

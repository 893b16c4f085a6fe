package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/app"
	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/registryauth"
)

// pull pulls one image through the agent's pull path (credentials, retries, progress, limits) and
// prints each attempt's outcome and the result to out. Logs go to console. It returns an error that
// says why the pull failed.
func pull(ctx context.Context, res *config.Result, image string, out, console io.Writer) error {
	cfg := res.Config
	log, err := logger.New(cfg.Log, console)
	if err != nil {
		return fmt.Errorf("set up logging: %w", err)
	}
	defer log.Close()
	auth, err := app.NewRegistryAuth(ctx, cfg, log)
	if err != nil {
		return err
	}
	client, err := app.NewDockerClient(cfg, log)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer client.Close()

	result, err := client.PullImage(ctx, image, auth)
	for _, a := range result.Attempts {
		if a.Err != nil {
			fmt.Fprintf(out, "attempt %d: failed after %s: %v (%s)\n", a.Number, a.Duration.Round(time.Millisecond), a.Err, pullFailureClass(a.Err))
			continue
		}
		fmt.Fprintf(out, "attempt %d: succeeded after %s, %s downloaded\n", a.Number, a.Duration.Round(time.Millisecond), bytesText(a.Bytes))
	}
	if err != nil {
		return fmt.Errorf("pull %s failed after %d attempt(s): %s: %w", image, len(result.Attempts), pullFailureClass(err), err)
	}
	switch {
	case result.Cached && !result.Pulled:
		fmt.Fprintf(out, "%s: using the local copy (image pull behavior %s)\n", image, cfg.ImagePullBehavior)
	default:
		fmt.Fprintf(out, "pulled %s in %s after %d attempt(s), %s downloaded\n", image, result.Duration.Round(time.Millisecond), len(result.Attempts), bytesText(result.Bytes))
	}
	return nil
}

// pullFailureClass names what kind of pull failure err is and whether it is retried; an error of no
// known kind says what errdefs.IsRetriable says of it.
func pullFailureClass(err error) string {
	var ecr *registryauth.CannotPullECRContainerError
	classes := []struct {
		is   bool
		text string
	}{
		{errors.As(err, &ecr), "ECR refused credentials, not retried"},
		{errors.Is(err, dockerclient.ErrAuthRefused), "registry authentication refused, not retried"},
		{errors.Is(err, dockerclient.ErrInvalidReference), "invalid image reference, not retried"},
		{errdefs.IsNotFound(err), "repository or manifest not found, not retried"},
		{errors.Is(err, dockerclient.ErrInactivity), "no progress within the inactivity timeout, retried"},
		{errors.Is(err, dockerclient.ErrTooManyRequests), "registry throttled the pull, retried"},
		{errors.Is(err, dockerclient.ErrRegistryUnavailable), "registry unavailable, retried"},
		{errors.Is(err, dockerclient.ErrConnection), "connection failed, retried"},
		{errors.Is(err, context.DeadlineExceeded), "timed out"},
		{errors.Is(err, context.Canceled), "cancelled"},
	}
	for _, c := range classes {
		if c.is {
			return c.text
		}
	}
	if errdefs.IsRetriable(err) {
		return "unclassified, retried"
	}
	return "unclassified, not retried"
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %siB", float64(n)/float64(div), strings.Split("K M G T P", " ")[exp])
}

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	ecsdetector "go.opentelemetry.io/contrib/detectors/aws/ecs"
)

// otelECS runs OpenTelemetry's ECS resource detector (go.opentelemetry.io/contrib/detectors/aws/ecs)
// against $ECS_CONTAINER_METADATA_URI_V4 and prints every attribute it extracts as KEY=VALUE, one a
// line, sorted. It fails when the detector does.
func otelECS(ctx context.Context, w io.Writer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := ecsdetector.NewResourceDetector().Detect(ctx)
	if err != nil {
		return fmt.Errorf("OpenTelemetry ECS resource detector: %w", err)
	}
	if res == nil {
		return fmt.Errorf("OpenTelemetry ECS resource detector found no ECS metadata (%s is not set)", metadataEnv)
	}
	var lines []string
	for _, kv := range res.Attributes() {
		lines = append(lines, string(kv.Key)+"="+kv.Value.String())
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return nil
}

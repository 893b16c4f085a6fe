package app

import (
	"time"

	"github.com/berth-agent/berth/agent/config"
)

// telemetrySettings are the configuration of what the agent publishes to TCS and samples for it, as
// the ECS agent names it: ECS_DISABLE_METRICS (DisableMetrics), ECS_POLL_METRICS (PollMetrics) and
// ECS_POLLING_METRICS_WAIT_DURATION (PollingWait).
type telemetrySettings struct {
	// DisableMetrics publishes no container metrics and samples no stats; health and instance
	// status are still published.
	DisableMetrics bool
	// PollMetrics samples each container every PollingWait instead of every second.
	PollMetrics bool
	PollingWait time.Duration
}

// telemetrySettingsOf reads the telemetry keys of the configuration.
func telemetrySettingsOf(cfg *config.Config) telemetrySettings {
	return telemetrySettings{DisableMetrics: cfg.MetricsDisabled, PollMetrics: cfg.PollMetrics, PollingWait: cfg.PollingMetricsWaitDuration}
}

// sampleInterval is how often the telemetry source samples each container; zero is its default.
func (s telemetrySettings) sampleInterval() time.Duration {
	if s.PollMetrics {
		return s.PollingWait
	}
	return 0
}

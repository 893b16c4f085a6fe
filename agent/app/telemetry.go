package app

import "time"

// telemetrySettings are the configuration of what the agent publishes to TCS and samples for it, as
// the ECS agent names it: ECS_DISABLE_METRICS (DisableMetrics), ECS_POLL_METRICS (PollMetrics) and
// ECS_POLLING_METRICS_WAIT_DURATION (PollingWait). agent/config does not carry these keys yet, so
// the agent runs with their defaults.
type telemetrySettings struct {
	// DisableMetrics publishes no container metrics and samples no stats; health and instance
	// status are still published.
	DisableMetrics bool
	// PollMetrics samples each container every PollingWait instead of every second.
	PollMetrics bool
	PollingWait time.Duration
}

// defaultTelemetrySettings returns the ECS agent's defaults: metrics on, sampled every second.
func defaultTelemetrySettings() telemetrySettings {
	return telemetrySettings{PollingWait: 10 * time.Second}
}

// sampleInterval is how often the telemetry source samples each container; zero is its default.
func (s telemetrySettings) sampleInterval() time.Duration {
	if s.PollMetrics {
		return s.PollingWait
	}
	return 0
}

package task

import "time"

// UnknownContainer is a running Docker container labelled as Berth's for this host's cluster that
// belongs to no task the agent holds: its task's record was lost, so the agent leaves it running
// (it may still be wanted) and reports it instead. The engine finds them at recovery; the
// introspection API and the metrics show them.
type UnknownContainer struct {
	DockerID   string
	DockerName string    // without Docker's leading slash
	TaskArn    string    // from its com.amazonaws.ecs.task-arn label; empty when it has none
	Name       string    // the task container name, from its com.amazonaws.ecs.container-name label
	Image      string    // the image it was created from
	Since      time.Time // when it started, as Docker says; zero when Docker does not say
}

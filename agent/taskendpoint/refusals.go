package taskendpoint

import "time"

// The reasons a request is refused that the operator is told about, one WARN line a
// refusalInterval at most (logger.Summary).
const (
	refusedThrottled = "throttled"                         // over its rate limit: 429
	refusedStranger  = "credentials_not_the_tasks_address" // a task's credentials asked from an address that is not the task's
	refusedAmbiguous = "address_of_several_tasks"          // v2 from an address more than one task has
)

// refusalInterval is the least time between two lines about refused requests.
const refusalInterval = time.Minute

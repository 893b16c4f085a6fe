package task

import "time"

// ExecuteCommandAgent is the name of ECS Exec's managed agent (the SSM agent run in a container), as
// ACS and the ECS API spell it.
const ExecuteCommandAgent = "ExecuteCommandAgent"

// ManagedAgentStatus is where a managed agent is, by the ECS API's names of its lastStatus.
type ManagedAgentStatus string

// Managed agent statuses. A managed agent is PENDING until it is first started, RUNNING while its
// process runs (restarts keep it RUNNING, with a new LastStartedAt), and STOPPED once it cannot run:
// its files are missing, its restarts are spent, or its container stopped.
//
//	PENDING ──start──▶ RUNNING ──process ended, restarts spent, container stopped──▶ STOPPED
//	   └──────────────── files missing, start failed ──────────────────────────────────┘
const (
	ManagedAgentPending ManagedAgentStatus = "PENDING"
	ManagedAgentRunning ManagedAgentStatus = "RUNNING"
	ManagedAgentStopped ManagedAgentStatus = "STOPPED"
)

// ManagedAgent is an agent ECS has Berth run inside a container (ACS managedAgents): only
// ExecuteCommandAgent exists. Name and Properties come from the control plane (Properties holds
// settings such as sessionLimit, never credentials); the rest is its runtime state.
type ManagedAgent struct {
	Name       string            `json:"name"`
	Properties map[string]string `json:"properties,omitempty"`

	Status        ManagedAgentStatus `json:"status,omitempty"`
	Reason        string             `json:"reason,omitempty"`
	LastStartedAt time.Time          `json:"lastStartedAt,omitzero"`
	// ID names the agent's directory in the container (/ecs-execute-command-<ID>): random, given
	// before the container is created, never changed.
	ID string `json:"id,omitempty"`
	// ExecID is the Docker exec running the agent's process, while one was started.
	ExecID string `json:"execId,omitempty"`
	// Restarts counts the restarts of the agent's process since the container started.
	Restarts int `json:"restarts,omitempty"`
}

// ManagedAgent returns the container's managed agent of the given name, or nil.
func (c *Container) ManagedAgent(name string) *ManagedAgent {
	for i := range c.ManagedAgents {
		if c.ManagedAgents[i].Name == name {
			return &c.ManagedAgents[i]
		}
	}
	return nil
}

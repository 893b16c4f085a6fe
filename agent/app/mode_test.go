package app

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/berth-agent/berth/agent/config"
)

// TestPlanOf: what each mode decides. Local mode embeds the control plane, assumes task roles, signs
// the agent API's calls for tasks with its own keys and never asks the instance metadata service anything, not even with no region configured; ecs mode
// on EC2 reads a missing region from it and registers its EC2 identity; an external instance does
// not.
func TestPlanOf(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  config.Config
		want modePlan
	}{
		{"local, no region", config.Config{Mode: config.ModeLocal},
			modePlan{embedded: true, assumesRoles: true, agentSignsTaskCalls: true}},
		{"local, region", config.Config{Mode: config.ModeLocal, AWSRegion: "eu-west-3"},
			modePlan{embedded: true, assumesRoles: true, agentSignsTaskCalls: true}},
		{"ecs on EC2, no region", config.Config{Mode: config.ModeECS},
			modePlan{onEC2: true, regionFromIMDS: true, takesOverECSAgent: true}},
		{"ecs on EC2, region", config.Config{Mode: config.ModeECS, AWSRegion: "eu-west-3"},
			modePlan{onEC2: true, takesOverECSAgent: true}},
		{"ecs external, no region", config.Config{Mode: config.ModeECS, External: true},
			modePlan{regionFromIMDS: true, takesOverECSAgent: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, planOf(&tt.cfg))
		})
	}
}

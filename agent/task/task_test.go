package task

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func intp(i int) *int { return &i }

func TestStatusNamesRoundTrip(t *testing.T) {
	for s := ContainerNone; s <= ContainerStopped; s++ {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back ContainerStatus
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, s, back)
	}
	for s := TaskNone; s <= TaskStopped; s++ {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back TaskStatus
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, s, back)
	}
	assert.Equal(t, `"RESOURCES_PROVISIONED"`, mustJSON(t, ContainerResourcesProvisioned))
	assert.Equal(t, `"RUNNING"`, mustJSON(t, TaskRunning))
	var bad ContainerStatus
	assert.Error(t, json.Unmarshal([]byte(`"BOGUS"`), &bad))
	assert.Equal(t, "ContainerStatus(42)", ContainerStatus(42).String())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestDeriveKnownStatus(t *testing.T) {
	tests := []struct {
		name      string
		current   TaskStatus
		statuses  []ContainerStatus
		pause     int // index of the pause container, -1 for none
		essential int // index of an essential container, -1 for none
		want      TaskStatus
	}{
		{name: "all none", statuses: []ContainerStatus{ContainerNone, ContainerNone}, pause: -1, essential: -1, want: TaskNone},
		{name: "lowest wins", statuses: []ContainerStatus{ContainerRunning, ContainerCreated}, pause: -1, essential: -1, want: TaskCreated},
		{name: "all running", statuses: []ContainerStatus{ContainerRunning, ContainerRunning}, pause: -1, essential: -1, want: TaskRunning},
		{name: "pause provisioned counts as running", statuses: []ContainerStatus{ContainerResourcesProvisioned, ContainerRunning}, pause: 0, essential: -1, want: TaskRunning},
		{name: "a stopped container does not hold the task back", statuses: []ContainerStatus{ContainerStopped, ContainerRunning}, pause: -1, essential: -1, want: TaskRunning},
		{name: "all stopped", statuses: []ContainerStatus{ContainerStopped, ContainerStopped}, pause: -1, essential: -1, want: TaskStopped},
		{name: "never backwards", current: TaskRunning, statuses: []ContainerStatus{ContainerCreated, ContainerRunning}, pause: -1, essential: -1, want: TaskRunning},
		{name: "a stopped essential container holds the task where it is", current: TaskPulled, statuses: []ContainerStatus{ContainerStopped, ContainerRunning}, pause: -1, essential: 0, want: TaskPulled},
		{name: "a stopped essential container does not move a running task back", current: TaskRunning, statuses: []ContainerStatus{ContainerStopped, ContainerRunning}, pause: -1, essential: 0, want: TaskRunning},
		{name: "all stopped with an essential one", current: TaskPulled, statuses: []ContainerStatus{ContainerStopped, ContainerStopped}, pause: -1, essential: 0, want: TaskStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := &Task{KnownStatus: tt.current}
			for i, s := range tt.statuses {
				tk.Containers = append(tk.Containers, &Container{Name: string(rune('a' + i)), KnownStatus: s, Pause: i == tt.pause, Essential: i == tt.essential})
			}
			assert.Equal(t, tt.want, tk.DeriveKnownStatus())
		})
	}
}

func TestCanStart(t *testing.T) {
	started := time.Unix(100, 0)
	tests := []struct {
		name     string
		dep      Container
		cond     Condition
		wantWait bool
		wantFail bool
	}{
		{name: "start: not yet", dep: Container{KnownStatus: ContainerCreated}, cond: ConditionStart, wantWait: true},
		{name: "start: running", dep: Container{KnownStatus: ContainerRunning}, cond: ConditionStart},
		{name: "start: ran and exited", dep: Container{KnownStatus: ContainerStopped, StartedAt: started, ExitCode: intp(0)}, cond: ConditionStart},
		{name: "start: stopped without starting", dep: Container{KnownStatus: ContainerStopped}, cond: ConditionStart, wantFail: true},
		{name: "complete: running", dep: Container{KnownStatus: ContainerRunning}, cond: ConditionComplete, wantWait: true},
		{name: "complete: exited 3", dep: Container{KnownStatus: ContainerStopped, ExitCode: intp(3)}, cond: ConditionComplete},
		{name: "success: running", dep: Container{KnownStatus: ContainerRunning}, cond: ConditionSuccess, wantWait: true},
		{name: "success: exited 0", dep: Container{KnownStatus: ContainerStopped, ExitCode: intp(0)}, cond: ConditionSuccess},
		{name: "success: exited 1", dep: Container{KnownStatus: ContainerStopped, ExitCode: intp(1)}, cond: ConditionSuccess, wantFail: true},
		{name: "success: no exit code", dep: Container{KnownStatus: ContainerStopped}, cond: ConditionSuccess, wantFail: true},
		{name: "healthy: unknown", dep: Container{KnownStatus: ContainerRunning, Health: HealthUnknown}, cond: ConditionHealthy, wantWait: true},
		{name: "healthy: unhealthy keeps waiting", dep: Container{KnownStatus: ContainerRunning, Health: HealthUnhealthy}, cond: ConditionHealthy, wantWait: true},
		{name: "healthy: healthy", dep: Container{KnownStatus: ContainerRunning, Health: HealthHealthy}, cond: ConditionHealthy},
		{name: "healthy: stopped", dep: Container{KnownStatus: ContainerStopped, Health: HealthHealthy}, cond: ConditionHealthy, wantFail: true},
		{name: "unknown condition", dep: Container{KnownStatus: ContainerRunning}, cond: "EVENTUALLY", wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := tt.dep
			dep.Name = "db"
			app := &Container{Name: "app", DependsOn: []Dependency{{ContainerName: "db", Condition: tt.cond}}}
			tk := &Task{Containers: []*Container{&dep, app}}
			got := tk.CanStart(app)
			assert.Equal(t, tt.wantWait, got.Wait != "", "wait: %q", got.Wait)
			assert.Equal(t, tt.wantFail, got.Fail != nil, "fail: %v", got.Fail)
			if tt.wantWait || tt.wantFail {
				text := got.Wait
				if got.Fail != nil {
					text = got.Fail.Error()
				}
				assert.Contains(t, text, `"db"`)
				assert.Contains(t, text, string(tt.cond))
			}
		})
	}
	t.Run("missing dependency", func(t *testing.T) {
		app := &Container{Name: "app", DependsOn: []Dependency{{ContainerName: "ghost", Condition: ConditionStart}}}
		got := (&Task{Containers: []*Container{app}}).CanStart(app)
		require.Error(t, got.Fail)
		assert.Contains(t, got.Fail.Error(), "ghost")
	})
	t.Run("no dependencies", func(t *testing.T) {
		app := &Container{Name: "app"}
		assert.Equal(t, StartBlock{}, (&Task{Containers: []*Container{app}}).CanStart(app))
	})
}

func TestStopBlockers(t *testing.T) {
	pause := &Container{Name: "~pause", Pause: true, KnownStatus: ContainerResourcesProvisioned}
	db := &Container{Name: "db", KnownStatus: ContainerRunning}
	web := &Container{Name: "web", KnownStatus: ContainerRunning, DependsOn: []Dependency{{ContainerName: "db", Condition: ConditionHealthy}}}
	side := &Container{Name: "side", KnownStatus: ContainerNone, DependsOn: []Dependency{{ContainerName: "db", Condition: ConditionStart}}}
	tk := &Task{Containers: []*Container{pause, db, web, side}}

	assert.Equal(t, []string{"web"}, tk.StopBlockers(db), "a running dependent blocks; one never started does not")
	assert.Empty(t, tk.StopBlockers(web))
	assert.ElementsMatch(t, []string{"db", "web"}, tk.StopBlockers(pause), "the pause container stops last")

	web.KnownStatus = ContainerStopped
	assert.Empty(t, tk.StopBlockers(db))
}

func TestSteadyStateAndLookup(t *testing.T) {
	tk := &Task{Containers: []*Container{{Name: "a"}, {Name: "p", Pause: true}}}
	assert.Equal(t, ContainerRunning, tk.Container("a").SteadyState())
	assert.Equal(t, ContainerResourcesProvisioned, tk.Container("p").SteadyState())
	assert.Nil(t, tk.Container("zzz"))
}

func TestCloneSharesNothingMutable(t *testing.T) {
	orig := &Task{Arn: "a", KnownStatus: TaskRunning, Containers: []*Container{{Name: "web", KnownStatus: ContainerRunning}}}
	cp := orig.Clone()
	cp.KnownStatus = TaskStopped
	cp.Containers[0].KnownStatus = ContainerStopped
	cp.Containers[0].ExitCode = intp(1)
	assert.Equal(t, TaskRunning, orig.KnownStatus)
	assert.Equal(t, ContainerRunning, orig.Containers[0].KnownStatus)
	assert.Nil(t, orig.Containers[0].ExitCode)
	assert.Equal(t, "a", cp.Arn)
}

func TestCloneCopiesManagedAgents(t *testing.T) {
	orig := &Task{Containers: []*Container{{Name: "web", ManagedAgents: []ManagedAgent{{Name: ExecuteCommandAgent, Status: ManagedAgentPending}}}}}
	cp := orig.Clone()
	cp.Containers[0].ManagedAgent(ExecuteCommandAgent).Status = ManagedAgentRunning
	assert.Equal(t, ManagedAgentPending, orig.Containers[0].ManagedAgents[0].Status)
	assert.Nil(t, cp.Containers[0].ManagedAgent("other"))
}

// TestFirelensRouterDependency: a container that logs with awsfirelens waits for the task's router as
// if it had a dependsOn on it (the ECS agent's addFirelensContainerDependency): START, HEALTHY when
// the router has a health check; none when it already depends on the router or the router depends
// on others; and the router stops after it.
func TestFirelensRouterDependency(t *testing.T) {
	firelensLog := &LogConfiguration{LogDriver: LogDriverFirelens, Options: map[string]string{"Name": "stdout"}}
	check := &HealthCheck{Command: []string{"CMD", "true"}}
	tests := []struct {
		name     string
		router   Container
		app      Container
		wantWait string // "" : the app may start
		wantFail bool
	}{
		{name: "router created, not running: START waits",
			router: Container{KnownStatus: ContainerCreated}, app: Container{LogConfiguration: firelensLog},
			wantWait: `waiting for "log_router" to start (condition START)`},
		{name: "router running: the app starts",
			router: Container{KnownStatus: ContainerRunning}, app: Container{LogConfiguration: firelensLog}},
		{name: "router with a health check, running but not healthy: HEALTHY waits",
			router: Container{KnownStatus: ContainerRunning, HealthCheck: check, Health: HealthUnknown}, app: Container{LogConfiguration: firelensLog},
			wantWait: `waiting for "log_router" to become healthy (condition HEALTHY)`},
		{name: "router healthy: the app starts",
			router: Container{KnownStatus: ContainerRunning, HealthCheck: check, Health: HealthHealthy}, app: Container{LogConfiguration: firelensLog}},
		{name: "router stopped before it started: the app cannot start",
			router: Container{KnownStatus: ContainerStopped}, app: Container{LogConfiguration: firelensLog}, wantFail: true},
		{name: "another log driver: no dependency",
			router: Container{KnownStatus: ContainerCreated}, app: Container{LogConfiguration: &LogConfiguration{LogDriver: "json-file"}}},
		{name: "an explicit dependsOn on the router wins",
			router: Container{KnownStatus: ContainerRunning, HealthCheck: check, Health: HealthUnknown},
			app:    Container{LogConfiguration: firelensLog, DependsOn: []Dependency{{ContainerName: "log_router", Condition: ConditionStart}}}},
		{name: "a router with dependsOn of its own gets no implicit dependents",
			router: Container{KnownStatus: ContainerCreated, DependsOn: []Dependency{{ContainerName: "init", Condition: ConditionComplete}}},
			app:    Container{LogConfiguration: firelensLog}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			router, app := tt.router, tt.app
			router.Name, router.Firelens = "log_router", &FirelensConfiguration{Type: FirelensFluentbit}
			app.Name = "app"
			init := &Container{Name: "init", KnownStatus: ContainerStopped, ExitCode: intp(0)}
			tk := &Task{Containers: []*Container{init, &router, &app}}
			got := tk.CanStart(&app)
			assert.Equal(t, tt.wantWait, got.Wait)
			assert.Equal(t, tt.wantFail, got.Fail != nil, "fail: %v", got.Fail)
		})
	}
	t.Run("a router that logs through itself does not wait for itself", func(t *testing.T) {
		router := &Container{Name: "log_router", KnownStatus: ContainerCreated, Firelens: &FirelensConfiguration{Type: FirelensFluentd}, LogConfiguration: firelensLog}
		assert.Equal(t, StartBlock{}, (&Task{Containers: []*Container{router}}).CanStart(router))
	})
	t.Run("the router stops after the containers that log through it", func(t *testing.T) {
		router := &Container{Name: "log_router", KnownStatus: ContainerRunning, Firelens: &FirelensConfiguration{Type: FirelensFluentbit}}
		app := &Container{Name: "app", KnownStatus: ContainerRunning, LogConfiguration: firelensLog}
		other := &Container{Name: "other", KnownStatus: ContainerRunning}
		tk := &Task{Containers: []*Container{router, app, other}}
		assert.Equal(t, []string{"app"}, tk.StopBlockers(router))
		assert.Empty(t, tk.StopBlockers(app))
		app.KnownStatus = ContainerStopped
		assert.Empty(t, tk.StopBlockers(router))
	})
}

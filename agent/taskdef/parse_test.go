package taskdef

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// validCase is a definition Parse must accept.
type validCase struct {
	name  string
	json  string
	check func(t *testing.T, d *Definition, tk *task.Task)
}

func validCases(t testing.TB) []validCase {
	web := string(readTestdata(t, "web.json"))
	return []validCase{
		{
			name: "two-container web example",
			json: web,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, "web", tk.Family)
				assert.Equal(t, task.NetworkBridge, tk.NetworkMode)
				assert.Equal(t, 512, tk.CPU)
				assert.Equal(t, 1024, tk.Memory)
				require.Len(t, tk.Containers, 2)
				web, side := tk.Containers[0], tk.Containers[1]
				assert.Equal(t, "web", web.Name)
				assert.True(t, web.Essential)
				assert.Equal(t, []task.PortMapping{{ContainerPort: 8080, HostPort: 8080, Protocol: "tcp"}}, web.PortMappings)
				assert.Equal(t, &task.HealthCheck{
					Command:     []string{"CMD-SHELL", "wget -q -O /dev/null http://localhost:8080/ || exit 1"},
					Interval:    10 * time.Second,
					Timeout:     3 * time.Second,
					Retries:     2,
					StartPeriod: 5 * time.Second,
				}, web.HealthCheck)
				assert.Equal(t, task.HealthUnknown, web.Health)
				assert.Equal(t, 20*time.Second, web.StopTimeout)
				assert.Equal(t, []task.Ulimit{{Name: "nofile", SoftLimit: 1024, HardLimit: 4096}}, web.Ulimits)
				assert.Equal(t, map[string]string{"app": "web"}, web.DockerLabels)
				assert.Equal(t, &task.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}}, web.LogConfiguration)
				assert.True(t, web.InitProcessEnabled)
				assert.Equal(t, []task.MountPoint{{SourceVolume: "site", ContainerPath: "/srv", ReadOnly: true}}, web.MountPoints)
				assert.Equal(t, []task.KeyValue{{Name: "PYTHONUNBUFFERED", Value: "1"}}, web.Environment)

				assert.Equal(t, "sidecar", side.Name)
				assert.False(t, side.Essential)
				assert.Zero(t, side.Memory)
				assert.Equal(t, 32, side.MemoryReservation)
				assert.Equal(t, []task.Dependency{{ContainerName: "web", Condition: task.ConditionHealthy}}, side.DependsOn)
				assert.Equal(t, []task.VolumeFrom{{SourceContainer: "web", ReadOnly: true}}, side.VolumesFrom)
				assert.Equal(t, []string{"sh", "-c"}, side.EntryPoint)
				assert.Equal(t, "nobody", side.User)
				assert.True(t, side.ReadonlyRootFilesystem)
				assert.Equal(t, time.Minute, side.StartTimeout)
				assert.Equal(t, task.HealthStatus(""), side.Health)

				assert.Equal(t, []task.Volume{{Name: "site", Host: &task.HostVolume{}}}, tk.Volumes)
			},
		},
		{
			name: "describe-task-definition wrapper",
			json: `{"taskDefinition": ` + web + `, "tags": [{"key": "team", "value": "a"}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, "web", d.Family)
				assert.Len(t, tk.Containers, 2)
			},
		},
		{
			name: "minimal",
			json: `{"family": "m", "containerDefinitions": [{"name": "c", "image": "busybox", "memory": 6}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, &task.Task{
					Arn:         "arn:aws:ecs:us-east-1:123456789012:task/default/1",
					Family:      "m",
					NetworkMode: task.NetworkBridge,
					Containers: []*task.Container{{
						Name: "c", Image: "busybox", Memory: 6, Essential: true, DesiredStatus: task.ContainerRunning,
					}},
					DesiredStatus: task.TaskRunning,
				}, tk)
			},
		},
		{
			name: "task memory instead of container memory, revision and roles",
			json: `{"family": "m", "revision": 7, "memory": "512", "taskRoleArn": "arn:aws:iam::1:role/t",
				"executionRoleArn": "arn:aws:iam::1:role/e", "requiresCompatibilities": ["EC2"],
				"containerDefinitions": [{"name": "c", "image": "busybox"}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, 7, tk.Revision)
				assert.Equal(t, 512, tk.Memory)
				assert.Zero(t, tk.Containers[0].Memory)
				assert.Equal(t, "arn:aws:iam::1:role/t", d.TaskRoleArn)
				assert.Equal(t, "arn:aws:iam::1:role/e", d.ExecutionRoleArn)
			},
		},
		{
			name: "awsvpc",
			json: `{"family": "vpc", "networkMode": "awsvpc", "cpu": "1 vCPU", "memory": "2 GB",
				"containerDefinitions": [
					{"name": "app", "image": "app", "portMappings": [{"containerPort": 80}, {"containerPort": 443, "hostPort": 443}]},
					{"name": "dns", "image": "dns", "essential": false, "portMappings": [{"containerPort": 53, "protocol": "udp"}, {"containerPort": 53}]}
				]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, task.NetworkAWSVPC, tk.NetworkMode)
				assert.Equal(t, 1024, tk.CPU)
				assert.Equal(t, 2048, tk.Memory)
				assert.Len(t, tk.Containers, 2, "no pause container is added")
				assert.Equal(t, []task.PortMapping{{ContainerPort: 53, Protocol: "udp"}, {ContainerPort: 53, Protocol: "tcp"}}, tk.Containers[1].PortMappings)
			},
		},
		{
			name: "host mode",
			json: `{"family": "h", "networkMode": "host", "containerDefinitions": [
				{"name": "a", "image": "a", "memory": 64, "portMappings": [{"containerPort": 80, "hostPort": 80}]},
				{"name": "b", "image": "b", "memory": 64, "portMappings": [{"containerPort": 81}]}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, task.NetworkHost, tk.NetworkMode)
			},
		},
		{
			name: "bridge dynamic host ports may repeat",
			json: `{"family": "b", "containerDefinitions": [
				{"name": "a", "image": "a", "memory": 64, "portMappings": [{"containerPort": 80}, {"containerPort": 80, "hostPort": 0}]},
				{"name": "b", "image": "b", "memory": 64, "portMappings": [{"containerPort": 80}, {"containerPort": 8080, "hostPort": 8080, "protocol": "udp"}, {"containerPort": 8080, "hostPort": 8080}]}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Len(t, tk.Containers[1].PortMappings, 3)
			},
		},
		{
			name: "volumes of all three kinds",
			json: `{"family": "v", "volumes": [
					{"name": "scratch", "host": {}},
					{"name": "bare"},
					{"name": "logs", "host": {"sourcePath": "/var/log/app"}},
					{"name": "cache", "dockerVolumeConfiguration": {"scope": "shared", "autoprovision": true, "driver": "local",
						"driverOpts": {"type": "tmpfs"}, "labels": {"team": "a"}}},
					{"name": "tmp", "dockerVolumeConfiguration": {}}
				],
				"containerDefinitions": [{"name": "c", "image": "busybox", "memory": 64, "mountPoints": [
					{"sourceVolume": "scratch", "containerPath": "/scratch"},
					{"sourceVolume": "logs", "containerPath": "/logs", "readOnly": true},
					{"sourceVolume": "cache", "containerPath": "/cache"}]}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, []task.Volume{
					{Name: "scratch", Host: &task.HostVolume{}},
					{Name: "bare", Host: &task.HostVolume{}},
					{Name: "logs", Host: &task.HostVolume{SourcePath: "/var/log/app"}},
					{Name: "cache", Docker: &task.DockerVolume{Scope: "shared", Autoprovision: true, Driver: "local",
						DriverOpts: map[string]string{"type": "tmpfs"}, Labels: map[string]string{"team": "a"}}},
					{Name: "tmp", Docker: &task.DockerVolume{Scope: "task"}},
				}, tk.Volumes)
				assert.Len(t, tk.Containers[0].MountPoints, 3)
			},
		},
		{
			name: "string and numeric cpu and memory",
			json: `{"family": "s", "cpu": 256, "memory": "512 MiB", "containerDefinitions": [{"name": "c", "image": "i", "cpu": 128}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, 256, tk.CPU)
				assert.Equal(t, 512, tk.Memory)
				assert.Equal(t, 128, tk.Containers[0].CPU)
			},
		},
		{
			name: "dependency chain with every condition",
			json: `{"family": "d", "containerDefinitions": [
				{"name": "init", "image": "i", "memory": 8, "essential": false},
				{"name": "migrate", "image": "m", "memory": 8, "essential": false, "dependsOn": [{"containerName": "init", "condition": "COMPLETE"}]},
				{"name": "db", "image": "d", "memory": 8, "healthCheck": {"command": ["CMD", "pg_isready"]},
					"dependsOn": [{"containerName": "migrate", "condition": "SUCCESS"}]},
				{"name": "app", "image": "a", "memory": 8, "dependsOn": [
					{"containerName": "db", "condition": "HEALTHY"}, {"containerName": "init", "condition": "START"}]}]}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, &task.HealthCheck{Command: []string{"CMD", "pg_isready"}, Interval: 30 * time.Second,
					Timeout: 5 * time.Second, Retries: 3}, tk.Containers[2].HealthCheck)
				assert.Len(t, tk.Containers[3].DependsOn, 2)
			},
		},
		{
			name: "describe output with read-only and empty fields",
			json: `{"taskDefinition": {"taskDefinitionArn": "arn:aws:ecs:us-east-1:1:task-definition/d:3", "family": "d",
				"revision": 3, "status": "ACTIVE", "compatibilities": ["EC2"], "placementConstraints": [], "registeredAt": null,
				"containerDefinitions": [{"name": "c", "image": "i", "cpu": 0, "memory": 64, "portMappings": [], "essential": true,
					"environment": [], "mountPoints": [], "volumesFrom": [], "systemControls": [], "secrets": null}],
				"volumes": []}}`,
			check: func(t *testing.T, d *Definition, tk *task.Task) {
				assert.Equal(t, 3, tk.Revision)
			},
		},
	}
}

func TestParseValid(t *testing.T) {
	for _, tt := range validCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse([]byte(tt.json))
			require.NoError(t, err)
			tk := d.NewTask("arn:aws:ecs:us-east-1:123456789012:task/default/1")
			assert.Equal(t, "arn:aws:ecs:us-east-1:123456789012:task/default/1", tk.Arn)
			assert.Equal(t, task.TaskRunning, tk.DesiredStatus)
			assert.Equal(t, task.TaskNone, tk.KnownStatus)
			for _, c := range tk.Containers {
				assert.Equal(t, task.ContainerRunning, c.DesiredStatus, c.Name)
				assert.Equal(t, task.ContainerNone, c.KnownStatus, c.Name)
			}
			tt.check(t, d, tk)
		})
	}
}

func TestParseAnswersEveryField(t *testing.T) {
	tests := []struct {
		name string
		json string
		want []string // errors; none: the definition is accepted
	}{
		{
			name: "refused and unknown fields at every level",
			json: `{"family": "w", "proxyConfiguration": {"type": "APPMESH"}, "ephemeralStorage": {"sizeInGiB": 30},
				"volumes": [{"name": "v", "host": {"sourcePath": "/v", "extra": 1}, "x": true},
					{"name": "e", "efsVolumeConfiguration": {"fileSystemId": "fs-1"}}],
				"containerDefinitions": [{"name": "c", "image": "i", "memory": 8,
					"credentialSpecs": ["credentialspec:file://gmsa.json"], "resourceRequirements": [{"type": "GPU", "value": "1"}],
					"healthCheck": {"command": ["CMD", "true"], "grace": 1}}]}`,
			want: []string{
				"volumes[0].host.extra: unknown field",
				"volumes[0].x: unknown field",
				"volumes[1].efsVolumeConfiguration: not supported by Berth: EFS: this volume type is not supported by Berth yet",
				"containerDefinitions[0].healthCheck.grace: unknown field",
				"containerDefinitions[0].credentialSpecs: not supported by Berth: applies to Windows containers only (gMSA)",
				"containerDefinitions[0].resourceRequirements: not supported by Berth: GPUs and inference accelerators are not supported by Berth yet",
				"ephemeralStorage: not supported by Berth: applies to AWS Fargate only",
				"proxyConfiguration: not supported by Berth: App Mesh proxy configuration is not supported by Berth yet",
			},
		},
		{
			name: "wrong case suggests the field",
			json: `{"family": "w", "NetworkMode": "host", "containerDefinitions": [{"name": "c", "image": "i", "Memory": 8, "memory": 8}]}`,
			want: []string{
				`containerDefinitions[0].Memory: unknown field (did you mean "memory"?)`,
				`NetworkMode: unknown field (did you mean "networkMode"?)`,
			},
		},
		{
			name: "informational fields are accepted",
			json: `{"family": "w", "tags": [{"key": "k"}], "placementConstraints": [{"type": "memberOf"}],
				"runtimePlatform": {"cpuArchitecture": "X86_64"}, "requiresAttributes": [{"name": "a"}],
				"containerDefinitions": [{"name": "c", "image": "i", "memory": 8, "versionConsistency": "enabled",
					"portMappings": [{"containerPort": 80, "name": "http", "appProtocol": "http"}]}]}`,
		},
		{
			name: "empty refused and unknown fields ask for nothing",
			json: `{"family": "w", "proxyConfiguration": null, "inferenceAccelerators": [], "enableFaultInjection": false,
				"volumes": [{"name": "v", "configuredAtLaunch": false}],
				"containerDefinitions": [{"name": "c", "image": "i", "memory": 8, "credentialSpecs": [], "bogus": ""}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, strings.Split(err.Error(), "\n"))
		})
	}
}

func TestQuantities(t *testing.T) {
	const bad = -1 // the value does not decode
	tests := []struct {
		in       string
		cpu, mem int
	}{
		{in: `256`, cpu: 256, mem: 256},
		{in: `"256"`, cpu: 256, mem: 256},
		{in: `" 1024 "`, cpu: 1024, mem: 1024},
		{in: `""`},
		{in: `null`},
		{in: `"0.25 vCPU"`, cpu: 256, mem: bad},
		{in: `"1 vCPU"`, cpu: 1024, mem: bad},
		{in: `"2vcpu"`, cpu: 2048, mem: bad},
		{in: `"1 GB"`, cpu: bad, mem: 1024},
		{in: `"0.5GB"`, cpu: bad, mem: 512},
		{in: `"2 GiB"`, cpu: bad, mem: 2048},
		{in: `"512 MiB"`, cpu: bad, mem: 512},
		{in: `"512 MB"`, cpu: bad, mem: 512},
		{in: `"-1"`, cpu: bad, mem: bad},
		{in: `-1`, cpu: bad, mem: bad},
		{in: `1.5`, cpu: bad, mem: bad},
		{in: `"1.5"`, cpu: bad, mem: bad},
		{in: `"abc"`, cpu: bad, mem: bad},
		{in: `"1 TB"`, cpu: bad, mem: bad},
		{in: `"1e3"`, cpu: bad, mem: bad},
		{in: `"99999999999"`, cpu: bad, mem: bad},
		{in: `"9999999 vCPU"`, cpu: bad, mem: bad},
		{in: `true`, cpu: bad, mem: bad},
		{in: `[1]`, cpu: bad, mem: bad},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var c CPUUnits
			if err := c.UnmarshalJSON([]byte(tt.in)); tt.cpu == bad {
				assert.Error(t, err, "cpu")
			} else if assert.NoError(t, err, "cpu") {
				assert.Equal(t, CPUUnits(tt.cpu), c)
			}
			var m MiB
			if err := m.UnmarshalJSON([]byte(tt.in)); tt.mem == bad {
				assert.Error(t, err, "memory")
			} else if assert.NoError(t, err, "memory") {
				assert.Equal(t, MiB(tt.mem), m)
			}
		})
	}
}

func TestCanonicalAndDigest(t *testing.T) {
	web := readTestdata(t, "web.json")
	d, err := Parse(web)
	require.NoError(t, err)
	canon, err := Canonical(d)
	require.NoError(t, err)
	assert.Contains(t, string(canon), `"cpu":"512"`, "task cpu is a string, as ECS writes it")
	assert.Contains(t, string(canon), `|| exit 1`, "no HTML escaping")
	assert.NotContains(t, string(canon), "Warnings")

	back, err := Parse(canon)
	require.NoError(t, err)
	assert.Equal(t, d, back, "canonical JSON parses back to the same definition")

	digest, err := d.Digest()
	require.NoError(t, err)
	assert.Len(t, digest, 64)

	t.Run("layout and wrapper do not change the digest", func(t *testing.T) {
		other, err := Parse([]byte(`{"taskDefinition":` + strings.ReplaceAll(string(canon), ",", " ,\n ") + `}`))
		require.NoError(t, err)
		got, err := other.Digest()
		require.NoError(t, err)
		assert.Equal(t, digest, got)
	})
	t.Run("equivalent units do not change the digest", func(t *testing.T) {
		a, err := Parse([]byte(`{"family": "u", "cpu": "0.5 vCPU", "memory": "1 GB", "containerDefinitions": [{"name": "c", "image": "i"}]}`))
		require.NoError(t, err)
		b, err := Parse([]byte(`{"family": "u", "cpu": 512, "memory": "1024", "containerDefinitions": [{"name": "c", "image": "i"}]}`))
		require.NoError(t, err)
		da, err := a.Digest()
		require.NoError(t, err)
		db, err := b.Digest()
		require.NoError(t, err)
		assert.Equal(t, da, db)
	})
	t.Run("a change changes the digest", func(t *testing.T) {
		other, err := Parse([]byte(strings.Replace(string(canon), `"stopTimeout":20`, `"stopTimeout":21`, 1)))
		require.NoError(t, err)
		got, err := other.Digest()
		require.NoError(t, err)
		assert.NotEqual(t, digest, got)
	})
}

func TestNewTaskSharesNothing(t *testing.T) {
	d, err := Parse(readTestdata(t, "web.json"))
	require.NoError(t, err)
	a := d.NewTask("a")
	b := d.NewTask("b")
	a.Containers[0].Command[0] = "changed"
	a.Containers[0].DockerLabels["app"] = "changed"
	a.Containers[0].HealthCheck.Command[0] = "changed"
	a.Containers[0].LogConfiguration.Options["max-size"] = "changed"
	assert.Equal(t, "python3", b.Containers[0].Command[0])
	assert.Equal(t, "web", b.Containers[0].DockerLabels["app"])
	assert.Equal(t, "python3", d.ContainerDefinitions[0].Command[0])
	assert.Equal(t, "CMD-SHELL", d.ContainerDefinitions[0].HealthCheck.Command[0])
	assert.Equal(t, "10m", d.ContainerDefinitions[0].LogConfiguration.Options["max-size"])
}

// fieldErrors flattens a joined error into its *FieldErrors; it fails the test on any other error.
func fieldErrors(t testing.TB, err error) []*FieldError {
	t.Helper()
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v (%T) is not a *FieldError", err, err)
			return
		}
		out = append(out, fe)
	}
	walk(err)
	return out
}

// A definition with an executionRoleArn pulls its ECR images with it, as Amazon ECS decides.
func TestNewTaskExecutionRolePulls(t *testing.T) {
	tests := []struct {
		name string
		role string
		want *task.ECRAuth
	}{
		{name: "execution role", role: "arn:aws:iam::012345678901:role/exec", want: &task.ECRAuth{UseExecutionRole: true}},
		{name: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Definition{Family: "f", ExecutionRoleArn: tt.role, ContainerDefinitions: []ContainerDefinition{
				{Name: "a", Image: "012345678901.dkr.ecr.us-east-1.amazonaws.com/app:1"}, {Name: "b", Image: "busybox"}}}
			tk := d.NewTask("arn")
			assert.Equal(t, tt.role, tk.ExecutionRoleArn)
			for _, c := range tk.Containers {
				assert.Equal(t, tt.want, c.ECRAuth, c.Name)
			}
		})
	}
}

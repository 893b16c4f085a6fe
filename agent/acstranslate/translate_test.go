package acstranslate

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskdef"
)

// realisticPayload is a PayloadMessage as ACS sends it, dockerConfig strings included.
const realisticPayload = `{
  "type": "PayloadMessage",
  "message": {
    "messageId": "msg-1",
    "clusterArn": "arn:aws:ecs:us-west-2:123456789012:cluster/default",
    "containerInstanceArn": "arn:aws:ecs:us-west-2:123456789012:container-instance/default/abc",
    "seqNum": 7,
    "generatedAt": 1700000000,
    "tasks": [{
      "arn": "arn:aws:ecs:us-west-2:123456789012:task/default/t1",
      "family": "web",
      "version": "12",
      "desiredStatus": "RUNNING",
      "networkMode": "bridge",
      "cpu": 0.5,
      "memory": 1024,
      "taskDefinitionAccountId": "123456789012",
      "launchType": "EC2",
      "serviceName": "web-svc",
      "volumes": [
        {"name": "data", "type": "host", "host": {"sourcePath": "/srv/data"}},
        {"name": "scratch", "type": "host", "host": {}},
        {"name": "shared", "type": "docker", "dockerVolumeConfiguration": {"scope": "shared", "autoprovision": true, "driver": "local", "driverOpts": {"type": "tmpfs"}, "labels": {"a": "b"}}}
      ],
      "roleCredentials": {"credentialsId": "cred-task", "roleArn": "arn:aws:iam::123456789012:role/app", "accessKeyId": "AKIDEXAMPLE", "secretAccessKey": "SECRET", "sessionToken": "TOKEN", "expiration": "2030-01-01T00:00:00Z"},
      "executionRoleCredentials": {"credentialsId": "cred-exec", "roleArn": "arn:aws:iam::123456789012:role/exec", "accessKeyId": "AKIDEXAMPLE2", "secretAccessKey": "SECRET2", "sessionToken": "TOKEN2", "expiration": "2030-01-01T00:00:00Z"},
      "containers": [
        {
          "name": "app",
          "containerArn": "arn:aws:ecs:us-west-2:123456789012:container/default/t1/2f4e6a8c-0b1d-4e3f-9a7c-5d6e7f8a9b0c",
          "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/app:1",
          "cpu": 256,
          "memory": 512,
          "essential": true,
          "entryPoint": ["/bin/app"],
          "command": ["serve", "--port=8080"],
          "environment": {"B": "2", "A": "1"},
          "portMappings": [{"containerPort": 8080, "hostPort": 0, "protocol": "tcp"}, {"containerPort": 53, "hostPort": 5353, "protocol": "udp"}],
          "mountPoints": [{"sourceVolume": "data", "containerPath": "/data", "readOnly": true}, {"sourceVolume": "scratch", "containerPath": "/tmp/s"}],
          "links": [],
          "dependsOn": [{"containerName": "init", "condition": "SUCCESS"}],
          "startTimeout": 60,
          "stopTimeout": 30,
          "healthCheckType": "docker",
          "dockerConfig": {
            "config": "{\"Healthcheck\":{\"Test\":[\"CMD-SHELL\",\"curl -f http://localhost:8080/ || exit 1\"],\"Interval\":10000000000,\"Timeout\":2000000000,\"Retries\":5,\"StartPeriod\":15000000000},\"Labels\":{\"team\":\"web\"},\"User\":\"1000:1000\",\"WorkingDir\":\"/srv\"}",
            "hostConfig": "{\"Ulimits\":[{\"Name\":\"nofile\",\"Soft\":1024,\"Hard\":4096}],\"LogConfig\":{\"Type\":\"json-file\",\"Config\":{\"max-size\":\"10m\"}},\"ReadonlyRootfs\":true,\"Init\":true,\"MemoryReservation\":268435456}",
            "version": "1.17"
          },
          "registryAuthentication": {"type": "ecr", "ecrAuthData": {"registryId": "123456789012", "region": "us-west-2", "useExecutionRole": true}}
        },
        {
          "name": "init",
          "image": "busybox",
          "memory": 32,
          "essential": false,
          "command": ["true"],
          "volumesFrom": [{"sourceContainer": "app", "readOnly": true}],
          "mountPoints": [{"sourceVolume": "shared", "containerPath": "/shared"}],
          "dockerConfig": {"config": "{}", "hostConfig": "{\"Privileged\":true}"}
        }
      ]
    }]
  }
}`

func TestTranslateRealisticPayload(t *testing.T) {
	m, err := acswire.Decode([]byte(realisticPayload))
	require.NoError(t, err)
	pm, ok := m.(*acswire.PayloadMessage)
	require.True(t, ok, "got %T", m)
	assert.Equal(t, "msg-1", pm.MessageID)
	assert.EqualValues(t, 7, pm.SeqNum)

	accepted, rejected := TranslatePayload(pm)
	require.Empty(t, rejected)
	require.Len(t, accepted, 1)
	a := accepted[0]
	tk := a.Task

	assert.Equal(t, "arn:aws:ecs:us-west-2:123456789012:task/default/t1", tk.Arn)
	assert.Equal(t, "web", tk.Family)
	assert.Equal(t, 12, tk.Revision)
	assert.Equal(t, task.NetworkBridge, tk.NetworkMode)
	assert.Equal(t, 512, tk.CPU, "0.5 vCPU is 512 units")
	assert.Equal(t, 1024, tk.Memory)
	assert.Equal(t, task.TaskRunning, tk.DesiredStatus)
	assert.Equal(t, "web-svc", tk.ServiceName)
	assert.Equal(t, "EC2", tk.LaunchType)
	assert.Equal(t, []task.Volume{
		{Name: "data", Host: &task.HostVolume{SourcePath: "/srv/data"}},
		{Name: "scratch", Host: &task.HostVolume{}},
		{Name: "shared", Docker: &task.DockerVolume{Scope: "shared", Autoprovision: true, Driver: "local", DriverOpts: map[string]string{"type": "tmpfs"}, Labels: map[string]string{"a": "b"}}},
	}, tk.Volumes)

	require.Len(t, tk.Containers, 2)
	app := tk.Container("app")
	require.NotNil(t, app)
	assert.Equal(t, "123456789012.dkr.ecr.us-west-2.amazonaws.com/app:1", app.Image)
	assert.Equal(t, "arn:aws:ecs:us-west-2:123456789012:container/default/t1/2f4e6a8c-0b1d-4e3f-9a7c-5d6e7f8a9b0c", app.ARN)
	assert.Empty(t, tk.Container("init").ARN, "a container without containerArn has none")
	assert.Equal(t, 256, app.CPU)
	assert.Equal(t, 512, app.Memory)
	assert.Equal(t, 256, app.MemoryReservation, "from hostConfig.MemoryReservation bytes")
	assert.True(t, app.Essential)
	assert.Equal(t, []string{"/bin/app"}, app.EntryPoint)
	assert.Equal(t, []string{"serve", "--port=8080"}, app.Command)
	assert.Equal(t, []task.KeyValue{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}, app.Environment)
	assert.Equal(t, []task.PortMapping{{ContainerPort: 8080, Protocol: "tcp"}, {ContainerPort: 53, HostPort: 5353, Protocol: "udp"}}, app.PortMappings)
	assert.Equal(t, []task.MountPoint{{SourceVolume: "data", ContainerPath: "/data", ReadOnly: true}, {SourceVolume: "scratch", ContainerPath: "/tmp/s"}}, app.MountPoints)
	assert.Equal(t, []task.Dependency{{ContainerName: "init", Condition: task.ConditionSuccess}}, app.DependsOn)
	assert.Equal(t, 60*time.Second, app.StartTimeout)
	assert.Equal(t, 30*time.Second, app.StopTimeout)
	assert.Equal(t, &task.HealthCheck{
		Command:     []string{"CMD-SHELL", "curl -f http://localhost:8080/ || exit 1"},
		Interval:    10 * time.Second,
		Timeout:     2 * time.Second,
		Retries:     5,
		StartPeriod: 15 * time.Second,
	}, app.HealthCheck)
	assert.Equal(t, map[string]string{"team": "web"}, app.DockerLabels)
	assert.Equal(t, "1000:1000", app.User)
	assert.Equal(t, "/srv", app.WorkingDirectory)
	assert.Equal(t, []task.Ulimit{{Name: "nofile", SoftLimit: 1024, HardLimit: 4096}}, app.Ulimits)
	assert.Equal(t, &task.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}}, app.LogConfiguration)
	assert.True(t, app.ReadonlyRootFilesystem)
	assert.True(t, app.InitProcessEnabled)
	assert.False(t, app.Privileged)
	assert.Equal(t, task.ContainerRunning, app.DesiredStatus)

	initC := tk.Container("init")
	require.NotNil(t, initC)
	assert.False(t, initC.Essential)
	assert.True(t, initC.Privileged)
	assert.Nil(t, initC.HealthCheck)
	assert.Equal(t, []task.VolumeFrom{{SourceContainer: "app", ReadOnly: true}}, initC.VolumesFrom)

	require.NotNil(t, a.RoleCredentials)
	assert.Equal(t, "cred-task", a.RoleCredentials.CredentialsID)
	require.NotNil(t, a.ExecutionRoleCredentials)
	assert.Equal(t, "cred-exec", a.ExecutionRoleCredentials.CredentialsID)
	assert.Equal(t, &task.ECRAuth{UseExecutionRole: true, Region: "us-west-2", RegistryID: "123456789012"}, app.ECRAuth,
		"the app's ECR image is pulled with the execution role")
	assert.Nil(t, initC.ECRAuth)
	assert.Equal(t, "web", a.Definition.Family)
}

// TestTranslateManagedAgents: ACS's managedAgents, as the ECS agent reads them (ecsacs.ManagedAgent:
// name and properties), become the container's managed agents, PENDING.
func TestTranslateManagedAgents(t *testing.T) {
	frame := `{"type":"PayloadMessage","message":{"messageId":"m","seqNum":1,"tasks":[{"arn":"arn:aws:ecs:us-east-1:012345678901:task/c/1",
	 "family":"f","version":"1","desiredStatus":"RUNNING","containers":[
	  {"name":"web","image":"busybox","memory":16,"managedAgents":[{"name":"ExecuteCommandAgent","properties":{"sessionLimit":"3"}}]},
	  {"name":"side","image":"busybox","memory":16}]}]}}`
	m, err := acswire.Decode([]byte(frame))
	require.NoError(t, err)
	accepted, err := TranslateTask(m.(*acswire.PayloadMessage).Tasks[0])
	require.NoError(t, err)
	assert.Equal(t, []task.ManagedAgent{{Name: "ExecuteCommandAgent", Properties: map[string]string{"sessionLimit": "3"}, Status: "PENDING"}},
		accepted.Task.Containers[0].ManagedAgents)
	assert.Nil(t, accepted.Task.Containers[1].ManagedAgents)
}

func TestTranslateRegistryAuthentication(t *testing.T) {
	tests := []struct {
		name      string
		auth      *acswire.RegistryAuthentication
		want      *task.ECRAuth
		wantCreds *task.RepositoryCredentials
		wantErr   string
	}{
		{name: "none"},
		{name: "ecr with the execution role", auth: &acswire.RegistryAuthentication{Type: "ecr", ECRAuthData: &acswire.ECRAuthData{
			RegistryID: "210987654321", Region: "eu-west-1", EndpointOverride: "https://api.ecr.eu-west-1.amazonaws.com", UseExecutionRole: true}},
			want: &task.ECRAuth{UseExecutionRole: true, RegistryID: "210987654321", Region: "eu-west-1", EndpointOverride: "https://api.ecr.eu-west-1.amazonaws.com"}},
		{name: "ecr with the agent's credentials", auth: &acswire.RegistryAuthentication{Type: "ecr", ECRAuthData: &acswire.ECRAuthData{RegistryID: "210987654321", Region: "eu-west-1"}}},
		{name: "ecr without data", auth: &acswire.RegistryAuthentication{Type: "ecr"}},
		{name: "asm", auth: &acswire.RegistryAuthentication{Type: "asm", ASMAuthData: &acswire.ASMAuthData{CredentialsParameter: "arn:aws:secretsmanager:eu-west-1:210987654321:secret:reg-AbCdEf"}},
			wantCreds: &task.RepositoryCredentials{CredentialsParameter: "arn:aws:secretsmanager:eu-west-1:210987654321:secret:reg-AbCdEf"}},
		{name: "asm without a parameter", auth: &acswire.RegistryAuthentication{Type: "asm"},
			wantErr: "containerDefinitions[0].registryAuthentication.asmAuthData.credentialsParameter: required for type asm"},
		{name: "unknown type", auth: &acswire.RegistryAuthentication{Type: "basic"},
			wantErr: `containerDefinitions[0].registryAuthentication.type: "basic" is not supported by Berth (want ecr or asm)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := TranslateTask(&acswire.Task{Arn: "arn:t", Family: "f", Version: "1", DesiredStatus: "RUNNING",
				Containers: []*acswire.Container{{Name: "c", Image: "210987654321.dkr.ecr.eu-west-1.amazonaws.com/app", Memory: 64, RegistryAuthentication: tt.auth}}})
			if tt.wantErr != "" {
				require.ErrorIs(t, err, taskdef.ErrInvalid)
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, a.Task.Containers[0].ECRAuth)
			assert.Equal(t, tt.wantCreds, a.Task.Containers[0].RepositoryCredentials)
		})
	}
}

func TestTranslateStoppedAndDefaults(t *testing.T) {
	tk := &acswire.Task{
		Arn: "arn:t2", Family: "f", Version: "1", DesiredStatus: "STOPPED", NetworkMode: "awsvpc",
		Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}},
		ElasticNetworkInterfaces: []*acswire.ElasticNetworkInterface{{Ec2ID: "eni-1", MacAddress: "0A:00:00:00:00:01", AttachmentArn: "arn:att",
			IPv4Addresses:            []acswire.IPv4Address{{PrivateAddress: "10.0.0.9"}, {PrivateAddress: "10.0.0.5", Primary: true}},
			SubnetGatewayIPv4Address: "10.0.0.1/24", DomainNameServers: []string{"10.0.0.2"}, DomainName: []string{"ec2.internal"},
			PrivateDNSName: "ip-10-0-0-5.ec2.internal"}},
	}
	a, err := TranslateTask(tk)
	require.NoError(t, err)
	assert.Equal(t, task.TaskStopped, a.Task.DesiredStatus)
	assert.Equal(t, task.ContainerStopped, a.Task.Containers[0].DesiredStatus)
	assert.True(t, a.Task.Containers[0].Essential, "essential defaults to true when absent")
	assert.Equal(t, task.NetworkAWSVPC, a.Task.NetworkMode)
	assert.Equal(t, &task.ENI{AttachmentArn: "arn:att", MAC: "0a:00:00:00:00:01", IPv4: netip.MustParsePrefix("10.0.0.5/24"),
		Gateway: netip.MustParseAddr("10.0.0.1"), DNSServers: []string{"10.0.0.2"}, SearchDomains: []string{"ec2.internal"},
		PrivateDNSName: "ip-10-0-0-5.ec2.internal"}, a.Task.ENI,
		"the primary address with the gateway's prefix, the MAC normalised")
}

// A malformed ENI rejects its task at the boundary with an error naming the field; the engine never
// sees it.
func TestTranslateRejectsBadENIs(t *testing.T) {
	good := func() *acswire.ElasticNetworkInterface {
		return &acswire.ElasticNetworkInterface{MacAddress: "0a:00:00:00:00:01", IPv4Addresses: []acswire.IPv4Address{{PrivateAddress: "10.0.0.5", Primary: true}},
			SubnetGatewayIPv4Address: "10.0.0.1/24"}
	}
	tests := []struct {
		name     string
		mod      func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface
		wantPath string
	}{
		{"bad MAC", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.MacAddress = "nope"
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0].macAddress"},
		{"bad address", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.IPv4Addresses[0].PrivateAddress = "10.0.0"
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0].ipv4Addresses[0].privateAddress"},
		{"no address", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.IPv4Addresses = nil
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0].ipv4Addresses"},
		{"gateway without prefix", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.SubnetGatewayIPv4Address = "10.0.0.1"
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0].subnetGatewayIpv4Address"},
		{"address outside the subnet", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.SubnetGatewayIPv4Address = "10.9.0.1/24"
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0]"},
		{"bad DNS server", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			e.DomainNameServers = []string{"dns"}
			return []*acswire.ElasticNetworkInterface{e}
		}, "elasticNetworkInterfaces[0].domainNameServers[0]"},
		{"null", func(*acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			return []*acswire.ElasticNetworkInterface{nil}
		}, "elasticNetworkInterfaces[0]"},
		{"two", func(e *acswire.ElasticNetworkInterface) []*acswire.ElasticNetworkInterface {
			return []*acswire.ElasticNetworkInterface{e, good()}
		}, "elasticNetworkInterfaces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &acswire.PayloadMessage{Tasks: []*acswire.Task{
				{Arn: "arn:bad", Family: "f", Version: "1", NetworkMode: "awsvpc", Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}},
					ElasticNetworkInterfaces: tt.mod(good())},
				{Arn: "arn:good", Family: "f", Version: "1", NetworkMode: "awsvpc", Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}},
					ElasticNetworkInterfaces: []*acswire.ElasticNetworkInterface{good()}},
			}}
			accepted, rejected := TranslatePayload(m)
			require.Len(t, accepted, 1, "the other task is unaffected")
			assert.Equal(t, "arn:good", accepted[0].Task.Arn)
			require.Len(t, rejected, 1)
			assert.Equal(t, "arn:bad", rejected[0].Arn)
			var fe *taskdef.FieldError
			require.ErrorAs(t, rejected[0].Err, &fe)
			assert.Equal(t, tt.wantPath, fe.Path)
			assert.ErrorIs(t, rejected[0].Err, taskdef.ErrInvalid)
		})
	}
}

func TestTranslateRejects(t *testing.T) {
	valid := func() *acswire.Task {
		return &acswire.Task{Arn: "arn:t", Family: "f", Version: "1", DesiredStatus: "RUNNING",
			Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}}}
	}
	tests := []struct {
		name   string
		mutate func(*acswire.Task)
		want   string // substring of the error
	}{
		{"no containers", func(t *acswire.Task) { t.Containers = nil }, "containerDefinitions"},
		{"no image", func(t *acswire.Task) { t.Containers[0].Image = "" }, "containerDefinitions[0].image"},
		{"bad revision", func(t *acswire.Task) { t.Version = "latest" }, "version"},
		{"bad desired status", func(t *acswire.Task) { t.DesiredStatus = "PAUSED" }, "desiredStatus"},
		{"unknown dependency", func(t *acswire.Task) {
			t.Containers[0].DependsOn = []acswire.ContainerDependency{{ContainerName: "ghost", Condition: "START"}}
		}, "dependsOn"},
		{"malformed docker config", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{Config: "{not json"}
		}, "containerDefinitions[0].dockerConfig.config"},
		{"malformed host config", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{HostConfig: `{"Ulimits":"x"}`}
		}, "containerDefinitions[0].dockerConfig.hostConfig"},
		{"efs volume", func(t *acswire.Task) { t.Volumes = []*acswire.Volume{{Name: "v", Type: "efs"}} }, "volumes[0].type"},
		{"mount point secrets", func(t *acswire.Task) {
			t.Containers[0].Secrets = []acswire.Secret{{Name: "S", ValueFrom: "/p", Type: "MOUNT_POINT"}}
		}, `containerDefinitions[0].secrets[0].type: secret type "MOUNT_POINT" is not supported by Berth`},
		{"log driver secrets without a log driver", func(t *acswire.Task) {
			t.Containers[0].Secrets = []acswire.Secret{{Name: "S", ValueFrom: "/p", Target: "LOG_DRIVER"}}
		}, "containerDefinitions[0].secrets: log driver secrets without a log driver"},
		{"host config member Berth does not honour", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{HostConfig: `{"CpusetCpus":"0-1","OomKillDisable":false}`}
		}, "containerDefinitions[0].dockerConfig.hostConfig.CpusetCpus: not supported by Berth"},
		{"container config member Berth does not honour", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{Config: `{"StopSignal":"SIGINT"}`}
		}, "containerDefinitions[0].dockerConfig.config.StopSignal: not supported by Berth"},
		{"two log routers", func(t *acswire.Task) {
			t.Containers[0].FirelensConfiguration = &acswire.FirelensConfiguration{Type: "fluentbit"}
			t.Containers = append(t.Containers, &acswire.Container{Name: "r2", Image: "fluentd", Memory: 64,
				FirelensConfiguration: &acswire.FirelensConfiguration{Type: "fluentd"}})
		}, `containerDefinitions[1].firelensConfiguration: a task has at most one log router and container "c" already is one`},
		{"awsfirelens without a router", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{HostConfig: `{"LogConfig":{"Type":"awsfirelens","Config":{"Name":"stdout"}}}`}
		}, "containerDefinitions[0].logConfiguration.logDriver: awsfirelens needs a log router"},
		{"unknown router type", func(t *acswire.Task) {
			t.Containers[0].FirelensConfiguration = &acswire.FirelensConfiguration{Type: "vector"}
		}, `containerDefinitions[0].firelensConfiguration.type: unknown type "vector" (want fluentbit or fluentd)`},
		{"unknown router option", func(t *acswire.Task) {
			t.Containers[0].FirelensConfiguration = &acswire.FirelensConfiguration{Type: "fluentd", Options: map[string]string{"buffer": "1"}}
		}, `containerDefinitions[0].firelensConfiguration.options["buffer"]: unknown option`},
		{"awsfirelens output without Name", func(t *acswire.Task) {
			t.Containers[0].FirelensConfiguration = &acswire.FirelensConfiguration{Type: "fluentbit"}
			t.Containers = append(t.Containers, &acswire.Container{Name: "app", Image: "app", Memory: 64,
				DockerConfig: &acswire.DockerConfig{HostConfig: `{"LogConfig":{"Type":"awsfirelens","Config":{"region":"us-east-1"}}}`}})
		}, "containerDefinitions[1].logConfiguration.options: Name (the output plugin) is required with output options for a fluentbit log router"},
		{"unknown managed agent", func(t *acswire.Task) {
			t.Containers[0].ManagedAgents = []acswire.ManagedAgent{{Name: "ExecuteCommandAgent"}, {Name: "ServiceConnectAgent"}}
		}, `containerDefinitions[0].managedAgents[1].name: managed agent "ServiceConnectAgent" is not supported by Berth (only ExecuteCommandAgent)`},
		{"managed agent twice", func(t *acswire.Task) {
			t.Containers[0].ManagedAgents = []acswire.ManagedAgent{{Name: "ExecuteCommandAgent"}, {Name: "ExecuteCommandAgent"}}
		}, `containerDefinitions[0].managedAgents[1].name: managed agent "ExecuteCommandAgent" given twice`},
		{"fault injection in bridge mode", func(t *acswire.Task) { t.EnableFaultInjection = true },
			"enableFaultInjection: only allowed with networkMode awsvpc or host, not bridge"},
		{"fault injection in none mode", func(t *acswire.Task) { t.EnableFaultInjection, t.NetworkMode = true, "none" },
			"enableFaultInjection: only allowed with networkMode awsvpc or host, not none"},
		{"App Mesh", func(t *acswire.Task) { t.ProxyConfiguration = json.RawMessage(`{"type":"APPMESH"}`) },
			"proxyConfiguration: App Mesh proxy configuration is not supported by Berth yet"},
		{"Service Connect", func(t *acswire.Task) { t.Attachments = json.RawMessage(`[{"attachmentType":"serviceconnectdetail"}]`) },
			"attachments: Service Connect and EBS attachments are not supported by Berth yet"},
		{"GPU", func(t *acswire.Task) { t.Associations = json.RawMessage(`[{"type":"gpu","name":"0"}]`) }, "associations: GPUs"},
		{"tmpfs without a size", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{HostConfig: `{"Tmpfs":{"/run":"rw"}}`}
		}, `containerDefinitions[0].dockerConfig.hostConfig.Tmpfs["/run"]: no size`},
		{"missing arn", func(t *acswire.Task) { t.Arn = "" }, "arn"},
		{"memory whose bytes overflow int64", func(t *acswire.Task) { t.Containers[0].Memory = 1 << 44 },
			"containerDefinitions[0].memory: 17592186044416 MiB is out of range"},
		{"memory just above an int32", func(t *acswire.Task) { t.Containers[0].Memory = 1 << 31 },
			"containerDefinitions[0].memory: 2147483648 MiB is out of range"},
		{"memory reservation of 2^63 bytes", func(t *acswire.Task) {
			t.Containers[0].DockerConfig = &acswire.DockerConfig{HostConfig: `{"MemoryReservation":9223372036854775807}`}
		}, "containerDefinitions[0].dockerConfig.hostConfig.MemoryReservation: 8796093022207 MiB is out of range"},
		{"container cpu beyond an int32", func(t *acswire.Task) { t.Containers[0].CPU = 1 << 40 },
			"containerDefinitions[0].cpu: 1099511627776 CPU units is out of range"},
		{"container cpu above the kernel's cpu.shares", func(t *acswire.Task) { t.Containers[0].CPU = 262145 },
			"containerDefinitions[0].cpu: 262145 CPU units is above the maximum of 262144"},
		{"task cpu above 192 vCPU", func(t *acswire.Task) { t.CPU = 193 }, "cpu: 197632 CPU units is above the maximum of 196608"},
		{"task memory beyond an int32", func(t *acswire.Task) { t.Memory = 1 << 44 }, "memory: 17592186044416 MiB is out of range"},
		{"eleven containers", func(t *acswire.Task) {
			for range 10 {
				t.Containers = append(t.Containers, nil) // refused before any is looked at
			}
		}, "containerDefinitions: 11 entries; at most 10 are allowed"},
		{"too many volumes", func(t *acswire.Task) { t.Volumes = make([]*acswire.Volume, taskdef.MaxEntries+1) },
			"volumes: 4097 entries; at most 4096 are allowed"},
		{"too many environment variables", func(t *acswire.Task) {
			t.Containers[0].Environment = map[string]string{}
			for i := range taskdef.MaxEntries + 1 {
				t.Containers[0].Environment[strconv.Itoa(i)] = ""
			}
		}, "containerDefinitions[0].environment: 4097 entries; at most 4096 are allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := valid()
			tc.mutate(tk)
			_, err := TranslateTask(tk)
			require.Error(t, err)
			assert.True(t, errors.Is(err, taskdef.ErrInvalid), "error %v should match taskdef.ErrInvalid", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestTranslatePayloadKeepsGoodTasks(t *testing.T) {
	good := &acswire.Task{Arn: "arn:good", Family: "f", Version: "1", DesiredStatus: "RUNNING",
		Containers: []*acswire.Container{{Name: "c", Image: "busybox", Memory: 64}}}
	bad := &acswire.Task{Arn: "arn:bad", Family: "f", Version: "1", DesiredStatus: "RUNNING",
		Containers: []*acswire.Container{{Name: "c", Image: "busybox"}}} // no memory anywhere
	accepted, rejected := TranslatePayload(&acswire.PayloadMessage{MessageID: "m", Tasks: []*acswire.Task{bad, good, nil}})
	require.Len(t, accepted, 1)
	assert.Equal(t, "arn:good", accepted[0].Task.Arn)
	require.Len(t, rejected, 2)
	assert.Equal(t, "arn:bad", rejected[0].Arn)
	assert.Contains(t, rejected[0].Err.Error(), "memory")
}

// firelensPayload is a FireLens task as ACS sends it: the router's firelensConfiguration as a field,
// the app's awsfirelens driver in its hostConfig's LogConfig and its secret option as a secret with
// target LOG_DRIVER (the ECS agent reads them there: agent/api/task/task.go,
// collectFirelensLogOptions and collectFirelensLogEnvOptions).
const firelensPayload = `{"type": "PayloadMessage", "message": {"messageId": "m-fl", "seqNum": 1, "tasks": [{
  "arn": "arn:aws:ecs:us-west-2:123456789012:task/default/fl", "family": "logs", "version": "2", "desiredStatus": "RUNNING",
  "containers": [
    {"name": "log_router", "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:stable", "memory": 100, "essential": true,
     "firelensConfiguration": {"type": "fluentbit", "options": {"enable-ecs-log-metadata": "true", "config-file-type": "file", "config-file-value": "/fluent-bit/configs/parse-json.conf"}},
     "dockerConfig": {"config": "{}", "hostConfig": "{\"LogConfig\":{\"Type\":\"json-file\",\"Config\":{}}}"}},
    {"name": "app", "image": "nginx", "memory": 64, "essential": true,
     "secrets": [{"name": "HTTP_Passwd", "valueFrom": "arn:aws:ssm:us-west-2:123456789012:parameter/es-pass", "type": "ENVIRONMENT_VARIABLE", "target": "LOG_DRIVER", "provider": "ssm"}],
     "dockerConfig": {"config": "{}", "hostConfig": "{\"LogConfig\":{\"Type\":\"awsfirelens\",\"Config\":{\"Name\":\"es\",\"Host\":\"search.example\",\"Port\":\"443\",\"tls\":\"On\"}}}"}}
  ]}]}}`

// TestTranslateFirelens: a FireLens task from ACS becomes the router's firelensConfiguration and the
// app's awsfirelens log configuration with its secret option in the model, values as sent.
func TestTranslateFirelens(t *testing.T) {
	m, err := acswire.Decode([]byte(firelensPayload))
	require.NoError(t, err)
	accepted, rejected := TranslatePayload(m.(*acswire.PayloadMessage))
	require.Empty(t, rejected)
	require.Len(t, accepted, 1)
	router, app := accepted[0].Task.Containers[0], accepted[0].Task.Containers[1]
	assert.Equal(t, &task.FirelensConfiguration{Type: "fluentbit", Options: map[string]string{"enable-ecs-log-metadata": "true",
		"config-file-type": "file", "config-file-value": "/fluent-bit/configs/parse-json.conf"}}, router.Firelens)
	assert.Equal(t, &task.LogConfiguration{LogDriver: "json-file", Options: map[string]string{}}, router.LogConfiguration)
	assert.Nil(t, app.Firelens)
	assert.Equal(t, &task.LogConfiguration{LogDriver: "awsfirelens",
		Options:       map[string]string{"Name": "es", "Host": "search.example", "Port": "443", "tls": "On"},
		SecretOptions: []task.Secret{{Name: "HTTP_Passwd", ValueFrom: "arn:aws:ssm:us-west-2:123456789012:parameter/es-pass"}}},
		app.LogConfiguration)
	assert.Empty(t, app.Secrets, "a LOG_DRIVER secret is not an environment variable")

	wire, err := WireTask(accepted[0].Task)
	require.NoError(t, err)
	assert.Equal(t, &acswire.FirelensConfiguration{Type: "fluentbit", Options: router.Firelens.Options}, wire.Containers[0].FirelensConfiguration)
	assert.Nil(t, wire.Containers[1].FirelensConfiguration)
	assert.Contains(t, wire.Containers[1].DockerConfig.HostConfig, `"LogConfig":{"Type":"awsfirelens","Config":{"Host":"search.example","Name":"es","Port":"443","tls":"On"}}`)
	assert.Equal(t, []acswire.Secret{{Name: "HTTP_Passwd", ValueFrom: "arn:aws:ssm:us-west-2:123456789012:parameter/es-pass",
		Type: "ENVIRONMENT_VARIABLE", Target: "LOG_DRIVER", Provider: "ssm"}}, wire.Containers[1].Secrets)
}

package state

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/task"
)

var updateGolden = flag.Bool("update-golden", false, "write testdata/berth-v<SchemaVersion>.db from its entry in goldens (read TestGolden first)")

// golden is one checked-in state file, testdata/berth-v<version>.db: what an agent of one schema
// version wrote. Beside it, testdata/berth-v<version>.json shows its records as text, so that a
// review sees what a regeneration changed.
type golden struct {
	version int
	// want is what the file holds, decoded by today's code after OpenBolt has upgraded it.
	want goldenState
}

// file is the path of the golden state file.
func (g golden) file() string {
	return filepath.Join("testdata", fmt.Sprintf("berth-v%d.db", g.version))
}

// text is the path of the file's records as text.
func (g golden) text() string {
	return filepath.Join("testdata", fmt.Sprintf("berth-v%d.json", g.version))
}

// goldenState is one record of each kind a state file holds.
type goldenState struct {
	Registration Registration
	SeqNum       int64
	Tasks        []*task.Task
	Images       []ImageRecord
	Sent         []SentRecord
}

// goldens are the state files agents have written, oldest schema version first; the last is of
// SchemaVersion. Older ones are never removed: each keeps testing the upgrade from its version.
var goldens = []golden{
	{version: 2, want: goldenV2()},
}

// TestGolden opens a copy of each checked-in state file (testdata/berth-v<N>.db) the normal way and
// checks that it holds exactly the records berth-v<N>.json shows; that they decode to the values
// written out in goldens; and that encoding the decoded values again keeps every field the file has.
// So a change that would make an upgraded agent misread the berth.db an older one wrote fails here:
// a JSON field of task.Task or task.Container (or of any record) renamed, removed or re-typed, a
// status or time encoded differently, a bucket or key renamed.
//
// When TestGolden fails, the change under test breaks the upgrade: fix the change (keep the JSON
// name; give a new field omitempty or omitzero), or make it a schema change.
//
// Regenerating is right only for a deliberate schema change: SchemaVersion bumped and its step
// appended to upgrades. Then add an entry for the new version to goldens, run
//
//	go test ./agent/state -run TestGolden -update-golden
//
// which writes testdata/berth-v<SchemaVersion>.db and .json, review the .json, and keep the older
// files and entries: they now test the upgrade step.
//
// Regenerating is wrong to make a failing TestGolden pass, to rewrite a golden file agents have
// written already (change its entry and rerun), and to cover a field added to the model: files
// written before the field existed do not have it, and that they still decode is what is tested.
func TestGolden(t *testing.T) {
	if *updateGolden {
		writeGolden(t)
	}
	require.NotEmpty(t, goldens)
	assert.Equal(t, SchemaVersion, goldens[len(goldens)-1].version, "a new schema version needs its golden file (see TestGolden)")
	for _, g := range goldens {
		t.Run(fmt.Sprintf("v%d", g.version), func(t *testing.T) {
			text, err := os.ReadFile(g.text())
			require.NoError(t, err)
			assert.Equal(t, string(text), recordsText(t, readRecords(t, g.file())), "%s shows the records of %s", g.text(), g.file())

			// A copy named and made as OpenBolt makes it: OpenBolt upgrades the file it opens.
			data, err := os.ReadFile(g.file())
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), "berth.db")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			b := openTestBolt(t, path)
			got := loadState(t, b)
			assert.Equal(t, g.want, got)
			require.NoError(t, b.Close())

			stored := readRecords(t, path)
			reg, err := json.Marshal(got.Registration)
			require.NoError(t, err)
			assertKeeps(t, stored[bucketMeta][keyRegistration], reg, "registration")
			for _, tk := range got.Tasks {
				data, err := encodeTask(tk)
				require.NoError(t, err)
				assertKeeps(t, stored[bucketTasks][tk.Arn], data, "task "+tk.Arn)
			}
			for _, img := range got.Images {
				data, err := encodeImage(img)
				require.NoError(t, err)
				assertKeeps(t, stored[bucketImages][img.Ref], data, "image "+img.Ref)
			}
			for _, r := range got.Sent {
				data, err := encodeSent(r)
				require.NoError(t, err)
				assertKeeps(t, stored[bucketSent][r.TaskArn], data, "sent record "+r.TaskArn)
			}
		})
	}
}

// writeGolden writes the golden file of SchemaVersion: its records saved through the Store, then
// compacted.
func writeGolden(t *testing.T) {
	i := slices.IndexFunc(goldens, func(g golden) bool { return g.version == SchemaVersion })
	require.GreaterOrEqual(t, i, 0, "goldens has no entry for schema version %d", SchemaVersion)
	g := goldens[i]
	ctx := t.Context()
	src := filepath.Join(t.TempDir(), "berth.db")
	b, err := OpenBolt(src, time.Second)
	require.NoError(t, err)
	require.NoError(t, b.SaveRegistration(ctx, g.want.Registration))
	require.NoError(t, b.SaveSeqNum(ctx, g.want.SeqNum))
	for _, tk := range g.want.Tasks {
		require.NoError(t, b.SaveTask(ctx, tk))
	}
	for _, img := range g.want.Images {
		require.NoError(t, b.SaveImage(ctx, img))
	}
	for _, r := range g.want.Sent {
		require.NoError(t, b.SaveSent(ctx, r))
	}
	require.NoError(t, b.Close())

	from, err := bbolt.Open(src, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer from.Close()
	tmp := filepath.Join(t.TempDir(), "compact.db")
	to, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer to.Close()
	require.NoError(t, bbolt.Compact(to, from, 0))
	// WriteTo, as SaveLastGood copies: only the pages in use, not the file's preallocated tail.
	var buf bytes.Buffer
	require.NoError(t, to.View(func(tx *bbolt.Tx) error {
		_, err := tx.WriteTo(&buf)
		return err
	}))
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	require.NoError(t, os.WriteFile(g.file(), buf.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(g.text(), []byte(recordsText(t, readRecords(t, g.file()))), 0o644))
	t.Logf("wrote %s (%d bytes) and %s", g.file(), buf.Len(), g.text())
}

// readRecords returns every record of a closed state file, read with bbolt alone.
func readRecords(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	out := map[string]map[string]string{}
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bbolt.Bucket) error {
			records := map[string]string{}
			out[string(name)] = records
			return bk.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("bucket %q: unexpected nested bucket %q", name, k)
				}
				records[string(k)] = string(v)
				return nil
			})
		})
	}))
	return out
}

// loadState reads every record through the Store; a record that does not decode fails the test.
func loadState(t *testing.T, s Store) goldenState {
	t.Helper()
	ctx := t.Context()
	var (
		got goldenState
		ok  bool
		err error
	)
	got.Registration, ok, err = s.Registration(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the registration is found")
	got.SeqNum, err = s.SeqNum(ctx)
	require.NoError(t, err)
	got.Tasks, err = s.Tasks(ctx)
	require.NoError(t, err)
	got.Images, err = s.Images(ctx)
	require.NoError(t, err)
	got.Sent, err = s.SentRecords(ctx)
	require.NoError(t, err)
	return got
}

// recordsText shows records as indented JSON, by bucket and key: a JSON object stored as a record
// appears as itself, any other value (the schema version, the sequence number) as a string.
func recordsText(t *testing.T, records map[string]map[string]string) string {
	t.Helper()
	out := map[string]map[string]any{}
	for bk, kv := range records {
		out[bk] = map[string]any{}
		for k, v := range kv {
			if strings.HasPrefix(v, "{") && json.Valid([]byte(v)) {
				out[bk][k] = json.RawMessage(v)
			} else {
				out[bk][k] = v
			}
		}
	}
	data, err := json.MarshalIndent(out, "", "\t")
	require.NoError(t, err)
	return string(data) + "\n"
}

// assertKeeps checks that every field of the stored JSON record is in the re-encoded one with the
// same value: decoding and encoding again loses nothing.
func assertKeeps(t *testing.T, stored string, reencoded []byte, what string) {
	t.Helper()
	var a, b any
	require.NoError(t, json.Unmarshal([]byte(stored), &a), what)
	require.NoError(t, json.Unmarshal(reencoded, &b), what)
	assert.Empty(t, lostFields(a, b, "$"), "%s: fields of the stored record lost or changed when decoded and encoded again", what)
}

// lostFields returns the paths of the values of stored that are missing from or different in got.
func lostFields(stored, got any, path string) []string {
	switch s := stored.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range s {
			gv, ok := g[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, lostFields(v, gv, path+"."+k)...)
		}
		slices.Sort(out)
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(s) {
			return []string{path}
		}
		var out []string
		for i := range s {
			out = append(out, lostFields(s[i], g[i], path+"["+strconv.Itoa(i)+"]")...)
		}
		return out
	default:
		if !reflect.DeepEqual(stored, got) {
			return []string{path}
		}
		return nil
	}
}

// goldenV2 is what testdata/berth-v2.db holds: one record of each kind, the task with every field of
// the model set (it is not a task the engine would run: it pins the encoding of each field).
func goldenV2() goldenState {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	return goldenState{
		Registration: Registration{
			Cluster:              "prod",
			ContainerInstanceArn: "arn:aws:ecs:eu-west-1:012345678901:container-instance/prod/4b1c0e5f6a7d4e8f9a0b1c2d3e4f5a6b",
		},
		SeqNum: 42,
		Tasks: []*task.Task{{
			Arn:         "arn:aws:ecs:eu-west-1:012345678901:task/prod/0f1e2d3c4b5a69788796a5b4c3d2e1f0",
			Family:      "web",
			Revision:    7,
			NetworkMode: task.NetworkAWSVPC,
			CPU:         1024,
			Memory:      2048,
			PidMode:     "task",
			IpcMode:     "host",
			Volumes: []task.Volume{
				{Name: "scratch", Host: &task.HostVolume{}},
				{Name: "logs", Host: &task.HostVolume{SourcePath: "/var/log/web"}},
				{Name: "data", Docker: &task.DockerVolume{Scope: "shared", Autoprovision: true, Driver: "local",
					DriverOpts: map[string]string{"type": "tmpfs"}, Labels: map[string]string{"team": "core"}}},
			},
			Containers: []*task.Container{
				{
					Name:          "~internal~ecs~pause",
					Image:         "amazon/amazon-ecs-pause:0.1.0",
					Essential:     true,
					Pause:         true,
					DesiredStatus: task.ContainerResourcesProvisioned,
					KnownStatus:   task.ContainerResourcesProvisioned,
					DockerID:      "9d8c7b6a5f4e3d2c1b0a9d8c7b6a5f4e3d2c1b0a9d8c7b6a5f4e3d2c1b0a9d8c",
					DockerName:    "ecs-web-7-internalecspause-a1b2c3d4e5f6a7b8c9d0",
					ImageID:       "sha256:1111111111111111111111111111111111111111111111111111111111111111",
					Networks:      []task.Network{{Mode: "awsvpc", IPv4Addresses: []string{"10.0.1.5"}}},
					CreatedAt:     t0.Add(time.Second),
					StartedAt:     t0.Add(2 * time.Second),
				},
				{
					Name:              "app",
					Image:             "012345678901.dkr.ecr.eu-west-1.amazonaws.com/web:1.4.2",
					CPU:               512,
					Memory:            1024,
					MemoryReservation: 768,
					Essential:         true,
					EntryPoint:        []string{"/docker-entrypoint.sh"},
					Command:           []string{"nginx", "-g", "daemon off;"},
					Environment:       []task.KeyValue{{Name: "MODE", Value: "prod"}, {Name: "EMPTY", Value: ""}},
					PortMappings: []task.PortMapping{
						{ContainerPort: 80, HostPort: 80, Protocol: "tcp"},
						{Protocol: "udp", ContainerPortRange: "9000-9002"},
					},
					MountPoints: []task.MountPoint{
						{SourceVolume: "logs", ContainerPath: "/var/log/nginx"},
						{SourceVolume: "data", ContainerPath: "/data", ReadOnly: true},
					},
					VolumesFrom: []task.VolumeFrom{{SourceContainer: "side", ReadOnly: true}},
					DependsOn:   []task.Dependency{{ContainerName: "side", Condition: task.ConditionHealthy}},
					HealthCheck: &task.HealthCheck{Command: []string{"CMD-SHELL", "curl -f http://localhost/"},
						Interval: 30 * time.Second, Timeout: 5 * time.Second, Retries: 3, StartPeriod: 10 * time.Second},
					StopTimeout:      45 * time.Second,
					StartTimeout:     2 * time.Minute,
					User:             "nginx",
					WorkingDirectory: "/srv",
					Ulimits:          []task.Ulimit{{Name: "nofile", SoftLimit: 1024, HardLimit: 4096}},
					DockerLabels:     map[string]string{"com.example.team": "core"},
					LogConfiguration: &task.LogConfiguration{
						LogDriver:     "awslogs",
						Options:       map[string]string{"awslogs-group": "/ecs/web", "awslogs-region": "eu-west-1"},
						SecretOptions: []task.Secret{{Name: "awslogs-endpoint", ValueFrom: "arn:aws:ssm:eu-west-1:012345678901:parameter/logs/endpoint"}},
					},
					Privileged:             true,
					ReadonlyRootFilesystem: true,
					InitProcessEnabled:     true,
					Linux: &task.LinuxParameters{
						CapAdd:           []string{"NET_ADMIN"},
						CapDrop:          []string{"MKNOD"},
						Devices:          []task.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: []string{"read", "write"}}},
						SharedMemorySize: 64,
						Tmpfs:            []task.Tmpfs{{ContainerPath: "/run", Size: 32, MountOptions: []string{"noexec", "mode=1777"}}},
						MaxSwap:          intp(0),
						Swappiness:       intp(10),
					},
					Links:                 []string{"side:sidecar"},
					Hostname:              "web",
					DNSServers:            []string{"10.0.0.2"},
					DNSSearchDomains:      []string{"corp.internal"},
					ExtraHosts:            []task.HostEntry{{Hostname: "api", IPAddress: "10.0.0.9"}},
					SystemControls:        []task.SystemControl{{Namespace: "net.core.somaxconn", Value: "1024"}},
					DockerSecurityOptions: []string{"no-new-privileges"},
					PseudoTerminal:        true,
					Interactive:           true,
					Secrets: []task.Secret{
						{Name: "DB_PASSWORD", ValueFrom: "arn:aws:ssm:eu-west-1:012345678901:parameter/web/db-password"},
						{Name: "API_KEY", ValueFrom: "arn:aws:secretsmanager:eu-west-1:012345678901:secret:web/api-AbCdEf:key::",
							Provider: "asm", Region: "eu-west-1"},
					},
					EnvironmentFiles: []task.EnvironmentFile{{Value: "arn:aws:s3:::config-bucket/web.env", Type: "s3"}},
					RepositoryCredentials: &task.RepositoryCredentials{
						CredentialsParameter: "arn:aws:secretsmanager:eu-west-1:012345678901:secret:registry-AbCdEf",
						Region:               "eu-west-1",
					},
					LogsAuthExecutionRole: true,
					RestartPolicy:         &task.RestartPolicy{Enabled: true, IgnoredExitCodes: []int{0, 143}, AttemptPeriod: time.Minute},
					ECRAuth: &task.ECRAuth{UseExecutionRole: true, Region: "eu-west-1", RegistryID: "012345678901",
						EndpointOverride: "https://api.ecr.eu-west-1.amazonaws.com"},
					MetadataToken: "3f2e1d0c-b9a8-4765-8432-10fedcba9876",
					DesiredStatus: task.ContainerRunning,
					KnownStatus:   task.ContainerRunning,
					DockerID:      "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2",
					DockerName:    "ecs-web-7-app-f0e1d2c3b4a596877869",
					ImageID:       "sha256:2222222222222222222222222222222222222222222222222222222222222222",
					ExitCode:      intp(137),
					Reason:        "OutOfMemoryError: container killed due to memory usage",
					Health:        task.HealthHealthy,
					NetworkBindings: []task.NetworkBinding{
						{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 80, Protocol: "tcp"},
						{BindIP: "::", ContainerPort: 9000, HostPort: 9000, Protocol: "udp"},
					},
					Networks:     []task.Network{{Mode: "awsvpc", IPv4Addresses: []string{"10.0.1.5"}}},
					CreatedAt:    t0.Add(3 * time.Second),
					StartedAt:    t0.Add(4 * time.Second),
					FinishedAt:   t0.Add(time.Hour),
					RestartCount: 2,
					RestartedAt:  t0.Add(time.Hour + time.Second),
				},
				{
					Name:              "side",
					Image:             "busybox:1.36",
					MemoryReservation: 16,
					DisableNetworking: true,
					DesiredStatus:     task.ContainerStopped,
					KnownStatus:       task.ContainerStopped,
					ExitCode:          intp(0),
					Health:            task.HealthUnhealthy,
				},
				{
					Name:          "init",
					Image:         "busybox:1.36",
					DesiredStatus: task.ContainerRunning,
					KnownStatus:   task.ContainerCreated,
					Health:        task.HealthUnknown,
				},
			},
			Static: true,
			ENI: &task.ENI{
				AttachmentArn:  "arn:aws:ecs:eu-west-1:012345678901:attachment/5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b",
				MAC:            "0a:1b:2c:3d:4e:5f",
				IPv4:           netip.MustParsePrefix("10.0.1.5/24"),
				Gateway:        netip.MustParseAddr("10.0.1.1"),
				DNSServers:     []string{"10.0.0.2"},
				SearchDomains:  []string{"eu-west-1.compute.internal"},
				PrivateDNSName: "ip-10-0-1-5.eu-west-1.compute.internal",
			},
			AWSVPC: &task.AWSVPC{
				NetNS:      "/proc/4321/ns/net",
				IPv4:       "10.0.1.5",
				BridgeIPv4: "169.254.172.2",
				TornDown:   true,
			},
			RoleArn:                "arn:aws:iam::012345678901:role/web-task",
			ExecutionRoleArn:       "arn:aws:iam::012345678901:role/web-exec",
			CredentialsID:          "c0ffee00-1111-4222-8333-444455556666",
			ExecutionCredentialsID: "c0ffee00-7777-4888-9999-aaaabbbbcccc",
			DesiredStatus:          task.TaskStopped,
			KnownStatus:            task.TaskRunning,
			StoppedReason:          task.StopReasonEssentialExited,
			PendingReason:          "waiting for the ENI",
			CreatedAt:              t0,
			PullStartedAt:          t0.Add(time.Millisecond),
			PullStoppedAt:          t0.Add(900 * time.Millisecond),
			StartedAt:              t0.Add(5 * time.Second),
			StoppedAt:              t0.Add(2 * time.Hour),
		}},
		Images: []ImageRecord{{
			Ref:        "012345678901.dkr.ecr.eu-west-1.amazonaws.com/web:1.4.2",
			ImageID:    "sha256:2222222222222222222222222222222222222222222222222222222222222222",
			PulledAt:   t0.Add(900 * time.Millisecond),
			LastUsedAt: t0.Add(4 * time.Second),
		}},
		Sent: []SentRecord{{
			TaskArn: "arn:aws:ecs:eu-west-1:012345678901:task/prod/77777777777777777777777777777777",
			Task:    task.TaskStopped,
			Containers: map[string]task.ContainerStatus{
				"app":  task.ContainerStopped,
				"side": task.ContainerRunning,
			},
			Report: &task.Task{
				Arn:           "arn:aws:ecs:eu-west-1:012345678901:task/prod/77777777777777777777777777777777",
				Family:        "batch",
				Revision:      3,
				NetworkMode:   task.NetworkBridge,
				Containers:    []*task.Container{{Name: "app", Image: "busybox:1.36", Essential: true, DesiredStatus: task.ContainerStopped, KnownStatus: task.ContainerStopped}},
				DesiredStatus: task.TaskStopped,
				KnownStatus:   task.TaskStopped,
				StoppedReason: "refused: privileged containers are not allowed",
				StoppedAt:     t0.Add(3 * time.Hour),
			},
		}},
	}
}

package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func intp(i int) *int { return &i }

// fullTask returns a task with every kind of field set, times in UTC.
func fullTask(arn string) *task.Task {
	created := time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)
	return &task.Task{
		Arn:         arn,
		Family:      "web",
		Revision:    7,
		NetworkMode: task.NetworkAWSVPC,
		CPU:         512,
		Memory:      1024,
		Volumes: []task.Volume{
			{Name: "scratch", Host: &task.HostVolume{}},
			{Name: "logs", Host: &task.HostVolume{SourcePath: "/var/log/app"}},
			{Name: "data", Docker: &task.DockerVolume{Scope: "shared", Autoprovision: true, Driver: "local",
				DriverOpts: map[string]string{"type": "tmpfs"}, Labels: map[string]string{"team": "a"}}},
		},
		Containers: []*task.Container{
			{
				Name: "~internal~ecs~pause", Image: "amazon/amazon-ecs-pause:0.1.0", Essential: true, Pause: true,
				DesiredStatus: task.ContainerResourcesProvisioned, KnownStatus: task.ContainerResourcesProvisioned,
				DockerID:  "p123",
				Networks:  []task.Network{{Mode: "awsvpc", IPv4Addresses: []string{"10.0.0.5"}}},
				StartedAt: created.Add(time.Second),
			},
			{
				Name: "app", Image: "nginx:1.27", CPU: 256, Memory: 512, MemoryReservation: 256, Essential: true,
				EntryPoint: []string{"/docker-entrypoint.sh"}, Command: []string{"nginx", "-g", "daemon off;"},
				Environment:  []task.KeyValue{{Name: "A", Value: "1"}, {Name: "B", Value: "two"}},
				PortMappings: []task.PortMapping{{ContainerPort: 80, HostPort: 8080, Protocol: "tcp"}},
				MountPoints:  []task.MountPoint{{SourceVolume: "logs", ContainerPath: "/logs", ReadOnly: true}},
				VolumesFrom:  []task.VolumeFrom{{SourceContainer: "side", ReadOnly: true}},
				DependsOn:    []task.Dependency{{ContainerName: "side", Condition: task.ConditionHealthy}},
				HealthCheck: &task.HealthCheck{Command: []string{"CMD-SHELL", "curl -f localhost"}, Interval: 30 * time.Second,
					Timeout: 5 * time.Second, Retries: 3, StartPeriod: 10 * time.Second},
				StopTimeout: 45 * time.Second, StartTimeout: 2 * time.Minute, User: "nginx", WorkingDirectory: "/srv",
				Ulimits:          []task.Ulimit{{Name: "nofile", SoftLimit: 1024, HardLimit: 4096}},
				DockerLabels:     map[string]string{"x": "y"},
				LogConfiguration: &task.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}},
				Privileged:       true, ReadonlyRootFilesystem: true, InitProcessEnabled: true,
				DesiredStatus: task.ContainerStopped, KnownStatus: task.ContainerStopped,
				DockerID: "abc123", DockerName: "ecs-web-7-app", ImageID: "sha256:feed", ExitCode: intp(137),
				Reason: "OutOfMemoryError", Health: task.HealthUnhealthy,
				NetworkBindings: []task.NetworkBinding{{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 8080, Protocol: "tcp"}},
				StartedAt:       created.Add(2 * time.Second),
				FinishedAt:      created.Add(time.Hour),
			},
			{
				Name: "side", Image: "busybox", Essential: false, ExitCode: intp(0), Health: task.HealthHealthy,
				DesiredStatus: task.ContainerRunning, KnownStatus: task.ContainerCreated,
			},
		},
		DesiredStatus: task.TaskStopped,
		KnownStatus:   task.TaskRunning,
		StoppedReason: task.StopReasonEssentialExited,
		PendingReason: "waiting for ENI",
		CreatedAt:     created,
		StartedAt:     created.Add(3 * time.Second),
		StoppedAt:     created.Add(2 * time.Hour),
	}
}

func arns(ts []*task.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Arn
	}
	return out
}

// testStoreContract runs the behaviour every Store must have. open returns a fresh, empty store
// that the test may close; open arranges its clean-up.
func testStoreContract(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()

	t.Run("ACS sequence number", func(t *testing.T) {
		s := open(t)
		seq, err := s.SeqNum(ctx)
		require.NoError(t, err)
		assert.Zero(t, seq, "none saved yet")
		require.NoError(t, s.SaveSeqNum(ctx, 41))
		require.NoError(t, s.SaveSeqNum(ctx, 42))
		seq, err = s.SeqNum(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(42), seq)
	})

	t.Run("tasks save replace delete", func(t *testing.T) {
		s := open(t)
		got, err := s.Tasks(ctx)
		require.NoError(t, err)
		assert.Empty(t, got)

		require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: "arn:c", KnownStatus: task.TaskPulled}))
		require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: "arn:a"}))
		require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: "arn:b"}))
		require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: "arn:c", KnownStatus: task.TaskRunning}))

		got, err = s.Tasks(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"arn:a", "arn:b", "arn:c"}, arns(got), "ordered by ARN, replaced in place")
		assert.Equal(t, task.TaskRunning, got[2].KnownStatus, "the last save wins")

		require.NoError(t, s.DeleteTask(ctx, "arn:b"))
		require.NoError(t, s.DeleteTask(ctx, "arn:never-there"), "deleting an unknown ARN is a no-op")
		got, err = s.Tasks(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"arn:a", "arn:c"}, arns(got))
	})

	t.Run("tasks ordered by ARN bytewise", func(t *testing.T) {
		s := open(t)
		in := []string{"arn:aws:ecs:us-east-1:1:task/c/2", "arn:aws:ecs:us-east-1:1:task/B/9", "arn:aws:ecs:us-east-1:1:task/a/1", "arn:aws:ecs:us-east-1:1:task/c/10"}
		for _, a := range in {
			require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: a}))
		}
		got, err := s.Tasks(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"arn:aws:ecs:us-east-1:1:task/B/9", "arn:aws:ecs:us-east-1:1:task/a/1", "arn:aws:ecs:us-east-1:1:task/c/10", "arn:aws:ecs:us-east-1:1:task/c/2"}, arns(got))
	})

	t.Run("task deep round trip", func(t *testing.T) {
		s := open(t)
		want := fullTask("arn:full")
		require.NoError(t, s.SaveTask(ctx, want))
		got, err := s.Tasks(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, fullTask("arn:full"), got[0])
		assert.True(t, want.CreatedAt.Equal(got[0].CreatedAt))
		assert.Equal(t, time.UTC, got[0].Containers[1].FinishedAt.Location())
		require.NotNil(t, got[0].Containers[1].ExitCode)
		assert.Equal(t, 137, *got[0].Containers[1].ExitCode)
	})

	t.Run("stored tasks are not aliased", func(t *testing.T) {
		s := open(t)
		mine := fullTask("arn:x")
		require.NoError(t, s.SaveTask(ctx, mine))

		// Change the caller's object after the save, in place, the way a careless caller might.
		mine.KnownStatus = task.TaskStopped
		mine.Containers[1].KnownStatus = task.ContainerNone
		*mine.Containers[1].ExitCode = 1
		mine.Containers[1].Environment[0].Value = "changed"
		mine.Containers[1].DockerLabels["x"] = "changed"
		mine.Containers[1].NetworkBindings[0].HostPort = 1
		mine.Containers = append(mine.Containers[:1], mine.Containers[2:]...)

		got, err := s.Tasks(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, fullTask("arn:x"), got[0], "the save kept its own copy")

		// Change what the store returned; a second read is unaffected.
		got[0].KnownStatus = task.TaskNone
		got[0].Containers[1].Environment[0].Value = "changed"
		*got[0].Containers[1].ExitCode = 2
		again, err := s.Tasks(ctx)
		require.NoError(t, err)
		assert.Equal(t, fullTask("arn:x"), again[0], "the store hands out copies")
	})

	t.Run("invalid input", func(t *testing.T) {
		s := open(t)
		assert.Error(t, s.SaveTask(ctx, nil))
		assert.Error(t, s.SaveTask(ctx, &task.Task{}), "a task needs an ARN")
		assert.Error(t, s.SaveImage(ctx, ImageRecord{ImageID: "sha256:1"}), "an image needs a ref")
		tasks, err := s.Tasks(ctx)
		require.NoError(t, err)
		assert.Empty(t, tasks)
		imgs, err := s.Images(ctx)
		require.NoError(t, err)
		assert.Empty(t, imgs)
	})

	t.Run("registration", func(t *testing.T) {
		s := open(t)
		_, ok, err := s.Registration(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "none saved yet")

		first := Registration{Cluster: "default", ContainerInstanceArn: "arn:aws:ecs:us-east-1:1:container-instance/default/1"}
		require.NoError(t, s.SaveRegistration(ctx, first))
		got, ok, err := s.Registration(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, first, got)

		second := Registration{Cluster: "prod", ContainerInstanceArn: "arn:aws:ecs:us-east-1:1:container-instance/prod/2"}
		require.NoError(t, s.SaveRegistration(ctx, second))
		got, ok, err = s.Registration(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, second, got)
	})

	t.Run("instance ARN", func(t *testing.T) {
		s := open(t)
		assert.Empty(t, InstanceARN(ctx, s, "prod"), "not registered yet")
		require.NoError(t, s.SaveRegistration(ctx, Registration{Cluster: "prod", ContainerInstanceArn: "arn:aws:ecs:r:1:container-instance/prod/2"}))
		assert.Equal(t, "arn:aws:ecs:r:1:container-instance/prod/2", InstanceARN(ctx, s, "prod"))
		assert.Empty(t, InstanceARN(ctx, s, "default"), "another cluster's registration is not this one's")
	})

	t.Run("images save list delete", func(t *testing.T) {
		s := open(t)
		got, err := s.Images(ctx)
		require.NoError(t, err)
		assert.Empty(t, got)

		t0 := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
		nginx := ImageRecord{Ref: "nginx:1.27", ImageID: "sha256:aa", PulledAt: t0, LastUsedAt: t0.Add(time.Minute)}
		busybox := ImageRecord{Ref: "busybox:latest", ImageID: "sha256:bb", PulledAt: t0}
		ecr := ImageRecord{Ref: "1.dkr.ecr.us-east-1.amazonaws.com/app@sha256:cc", ImageID: "sha256:cc"}
		for _, img := range []ImageRecord{nginx, busybox, ecr} {
			require.NoError(t, s.SaveImage(ctx, img))
		}
		nginx.LastUsedAt = t0.Add(time.Hour)
		require.NoError(t, s.SaveImage(ctx, nginx), "replace by ref")

		got, err = s.Images(ctx)
		require.NoError(t, err)
		assert.Equal(t, []ImageRecord{ecr, busybox, nginx}, got, "ordered by ref")

		require.NoError(t, s.DeleteImage(ctx, "busybox:latest"))
		require.NoError(t, s.DeleteImage(ctx, "never-there"), "deleting an unknown ref is a no-op")
		got, err = s.Images(ctx)
		require.NoError(t, err)
		assert.Equal(t, []ImageRecord{ecr, nginx}, got)
	})

	t.Run("sent records save replace delete", func(t *testing.T) {
		s := open(t)
		got, err := s.SentRecords(ctx)
		require.NoError(t, err)
		assert.Empty(t, got)

		report := &task.Task{Arn: "arn:rejected", DesiredStatus: task.TaskStopped, KnownStatus: task.TaskStopped, StoppedReason: "bad"}
		require.NoError(t, s.SaveSent(ctx, SentRecord{TaskArn: "arn:b", Task: task.TaskRunning}))
		require.NoError(t, s.SaveSent(ctx, SentRecord{TaskArn: "arn:rejected", Report: report}))
		require.NoError(t, s.SaveSent(ctx, SentRecord{TaskArn: "arn:a", Task: task.TaskRunning,
			Containers: map[string]task.ContainerStatus{"app": task.ContainerRunning}}))
		require.NoError(t, s.SaveSent(ctx, SentRecord{TaskArn: "arn:b", Task: task.TaskStopped,
			Containers: map[string]task.ContainerStatus{"app": task.ContainerStopped}}))

		got, err = s.SentRecords(ctx)
		require.NoError(t, err)
		require.Len(t, got, 3)
		assert.Equal(t, SentRecord{TaskArn: "arn:a", Task: task.TaskRunning, Containers: map[string]task.ContainerStatus{"app": task.ContainerRunning}}, got[0])
		assert.Equal(t, SentRecord{TaskArn: "arn:b", Task: task.TaskStopped, Containers: map[string]task.ContainerStatus{"app": task.ContainerStopped}}, got[1], "the last save wins")
		assert.Equal(t, "arn:rejected", got[2].TaskArn)
		require.NotNil(t, got[2].Report)
		assert.Equal(t, "bad", got[2].Report.StoppedReason)

		require.NoError(t, s.DeleteSent(ctx, "arn:a"))
		require.NoError(t, s.DeleteSent(ctx, "arn:never-there"), "deleting an unknown ARN is a no-op")
		got, err = s.SentRecords(ctx)
		require.NoError(t, err)
		assert.Len(t, got, 2)

		assert.Error(t, s.SaveSent(ctx, SentRecord{}), "a record needs its task ARN")
		assert.Error(t, s.SaveSent(ctx, SentRecord{TaskArn: "arn:x", Report: report}), "a report must be of its record's task")
	})

	t.Run("concurrent saves", func(t *testing.T) {
		s := open(t)
		const n = 20
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				arn := fmt.Sprintf("arn:%02d", i)
				for status := task.TaskNone; status <= task.TaskRunning; status++ {
					tk := fullTask(arn)
					tk.KnownStatus = status
					assert.NoError(t, s.SaveTask(ctx, tk))
				}
				assert.NoError(t, s.SaveImage(ctx, ImageRecord{Ref: fmt.Sprintf("img:%02d", i), ImageID: "sha256:x"}))
				assert.NoError(t, s.SaveRegistration(ctx, Registration{Cluster: "c", ContainerInstanceArn: arn}))
				_, err := s.Tasks(ctx)
				assert.NoError(t, err)
			})
		}
		wg.Wait()

		got, err := s.Tasks(ctx)
		require.NoError(t, err)
		require.Len(t, got, n)
		for i, tk := range got {
			assert.Equal(t, fmt.Sprintf("arn:%02d", i), tk.Arn)
			assert.Equal(t, task.TaskRunning, tk.KnownStatus, "each goroutine's last save wins")
		}
		imgs, err := s.Images(ctx)
		require.NoError(t, err)
		assert.Len(t, imgs, n)
		_, ok, err := s.Registration(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
	})

	t.Run("cancelled context writes nothing", func(t *testing.T) {
		s := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, s.SaveTask(cctx, &task.Task{Arn: "arn:a"}), context.Canceled)
		assert.ErrorIs(t, s.SaveImage(cctx, ImageRecord{Ref: "r"}), context.Canceled)
		assert.ErrorIs(t, s.SaveRegistration(cctx, Registration{Cluster: "c"}), context.Canceled)

		tasks, err := s.Tasks(ctx)
		require.NoError(t, err)
		assert.Empty(t, tasks)
		imgs, err := s.Images(ctx)
		require.NoError(t, err)
		assert.Empty(t, imgs)
		_, ok, err := s.Registration(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
	})

	t.Run("close is idempotent and later calls fail", func(t *testing.T) {
		s := open(t)
		require.NoError(t, s.SaveTask(ctx, &task.Task{Arn: "arn:a"}))
		require.NoError(t, s.Close())
		require.NoError(t, s.Close())

		calls := map[string]error{
			"SaveTask":         s.SaveTask(ctx, &task.Task{Arn: "arn:b"}),
			"DeleteTask":       s.DeleteTask(ctx, "arn:a"),
			"SaveRegistration": s.SaveRegistration(ctx, Registration{Cluster: "c"}),
			"SaveImage":        s.SaveImage(ctx, ImageRecord{Ref: "r"}),
			"DeleteImage":      s.DeleteImage(ctx, "r"),
		}
		_, calls["Tasks"] = s.Tasks(ctx)
		_, calls["Images"] = s.Images(ctx)
		_, _, calls["Registration"] = s.Registration(ctx)
		for name, err := range calls {
			assert.True(t, errors.Is(err, ErrClosed), "%s after Close: %v", name, err)
		}
	})
}

func TestMemoryContract(t *testing.T) {
	testStoreContract(t, func(t *testing.T) Store {
		m := NewMemory()
		t.Cleanup(func() { _ = m.Close() })
		return m
	})
}

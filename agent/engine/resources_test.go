package engine

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/task"
)

func TestNeedOf(t *testing.T) {
	pm := func(c, h uint16, proto string) task.PortMapping {
		return task.PortMapping{ContainerPort: c, HostPort: h, Protocol: proto}
	}
	tests := []struct {
		name string
		tk   task.Task
		want need
	}{
		{
			name: "sum of containers, memoryReservation when no hard limit",
			tk: task.Task{NetworkMode: task.NetworkBridge, Containers: []*task.Container{
				{CPU: 100, Memory: 256, MemoryReservation: 128}, {CPU: 50, MemoryReservation: 64},
			}},
			want: need{cpu: 150, mem: 320},
		},
		{
			name: "task-level cpu and memory win",
			tk:   task.Task{CPU: 1024, Memory: 2048, Containers: []*task.Container{{CPU: 100, Memory: 256}}},
			want: need{cpu: 1024, mem: 2048},
		},
		{
			name: "bridge: static host ports only",
			tk: task.Task{NetworkMode: task.NetworkBridge, Containers: []*task.Container{
				{PortMappings: []task.PortMapping{pm(80, 8080, ""), pm(443, 0, "tcp"), pm(53, 53, "UDP")}},
			}},
			want: need{ports: []hostPort{{8080, "tcp"}, {53, "udp"}}},
		},
		{
			name: "host: the container port is the host port",
			tk: task.Task{NetworkMode: task.NetworkHost, Containers: []*task.Container{
				{PortMappings: []task.PortMapping{pm(80, 0, ""), pm(9000, 9000, "tcp")}},
			}},
			want: need{ports: []hostPort{{80, "tcp"}, {9000, "tcp"}}},
		},
		{
			name: "awsvpc: no host ports",
			tk: task.Task{NetworkMode: task.NetworkAWSVPC, Containers: []*task.Container{
				{PortMappings: []task.PortMapping{pm(80, 80, "")}},
			}},
			want: need{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := needOf(&tc.tk)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestNeedOfRefusesOverflow checks that values no validated definition holds, but a damaged state
// record or a future caller might, are errors naming the field rather than sums or byte values that
// wrap (2^44 MiB is 2^64 bytes, which wrapped to 0: no memory limit at all) or negative needs that
// free what other tasks hold.
func TestNeedOfRefusesOverflow(t *testing.T) {
	tests := []struct {
		name string
		tk   task.Task
		want string
	}{
		{"memory whose bytes overflow", task.Task{Containers: []*task.Container{{Name: "web", Memory: 1 << 44}}},
			`container "web": memory: 17592186044416 MiB is out of range 0-8796093022207 MiB`},
		{"reservation whose bytes overflow, under a hard limit", task.Task{Containers: []*task.Container{{Name: "web", Memory: 64, MemoryReservation: 1 << 50}}},
			`container "web": memoryReservation: 1125899906842624 MiB is out of range`},
		{"task memory whose bytes overflow", task.Task{Memory: math.MaxInt, Containers: []*task.Container{{Name: "web", Memory: 64}}},
			"task memory: 9223372036854775807 MiB is out of range"},
		{"negative memory", task.Task{Containers: []*task.Container{{Name: "web", Memory: -64}}},
			`container "web": memory: -64 MiB is out of range`},
		{"negative cpu", task.Task{Containers: []*task.Container{{Name: "a", CPU: 10}, {Name: "b", CPU: -1 << 62}}},
			`container "b": cpu -4611686018427387904 is negative`},
		{"negative task cpu", task.Task{CPU: -1, Containers: []*task.Container{{Name: "web"}}}, "task cpu -1 is negative"},
		{"cpu sum overflows", task.Task{Containers: []*task.Container{{Name: "a", CPU: math.MaxInt}, {Name: "b", CPU: 1}}},
			`container "b": the task's cpu or memory summed over its containers overflows`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := needOf(&tc.tk)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "error %q, want prefix %q", err, tc.want)
		})
	}
}

func TestCreateOptionsRefusesOverflow(t *testing.T) {
	c := &task.Container{Name: "web", Image: "busybox", MemoryReservation: 1 << 44}
	_, err := createOptions(&task.Task{Arn: "arn", Containers: []*task.Container{c}}, c, "prod", "", Config{}, createInputs{})
	require.EqualError(t, err, `container "web": memoryReservation: 17592186044416 MiB is out of range 0-8796093022207 MiB`)

	c = &task.Container{Name: "web", Image: "busybox", Memory: 512, MemoryReservation: 256}
	opts, err := createOptions(&task.Task{Arn: "arn", Containers: []*task.Container{c}}, c, "prod", "", Config{}, createInputs{})
	require.NoError(t, err)
	assert.Equal(t, int64(512<<20), opts.HostConfig.Memory)
	assert.Equal(t, int64(256<<20), opts.HostConfig.MemoryReservation)
}

// acquireAsync runs Acquire on its own goroutine; the result arrives on the returned channel, and
// reasons passed to the waiting callback are recorded.
type pending struct {
	done    chan error
	mu      sync.Mutex
	reasons []string
}

func (p *pending) lastReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reasons) == 0 {
		return ""
	}
	return p.reasons[len(p.reasons)-1]
}

func acquireAsync(ctx context.Context, q *resourceQueue, arn string, n need) *pending {
	p := &pending{done: make(chan error, 1)}
	go func() {
		p.done <- q.Acquire(ctx, arn, n, func(reason string) {
			p.mu.Lock()
			p.reasons = append(p.reasons, reason)
			p.mu.Unlock()
		})
	}()
	return p
}

func requireGranted(t *testing.T, p *pending) {
	t.Helper()
	select {
	case err := <-p.done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("not granted")
	}
}

func requireWaiting(t *testing.T, p *pending, reason string) {
	t.Helper()
	require.True(t, pollUntil(func() bool { return p.lastReason() != "" }), "no waiting reason reported")
	assert.Contains(t, p.lastReason(), reason)
	select {
	case err := <-p.done:
		t.Fatalf("granted (err %v) but should wait", err)
	default:
	}
}

func TestResourceQueue(t *testing.T) {
	host := Resources{CPU: 1000, MemoryMiB: 1000, ReservedTCP: []uint16{22}, ReservedUDP: []uint16{161}}
	ctx := context.Background()

	t.Run("grants at once when it fits; twice is a no-op", func(t *testing.T) {
		q := newResourceQueue(host)
		called := false
		require.NoError(t, q.Acquire(ctx, "a", need{cpu: 500, mem: 500}, func(string) { called = true }))
		require.NoError(t, q.Acquire(ctx, "a", need{cpu: 500, mem: 500}, func(string) { called = true }))
		assert.False(t, called)
		assert.Equal(t, 500, q.usedCPU, "the second Acquire took nothing more")
		q.Release("a")
		q.Release("a")
		q.Release("never")
		assert.Zero(t, q.usedCPU)
		assert.Zero(t, q.usedMem)
	})

	t.Run("FIFO: a big task at the head blocks smaller ones; release wakes", func(t *testing.T) {
		q := newResourceQueue(host)
		require.NoError(t, q.Acquire(ctx, "a", need{mem: 600}, nil))
		big := acquireAsync(ctx, q, "big", need{mem: 800})
		requireWaiting(t, big, "memory 400 of 1000 MiB free, 800 needed")
		small := acquireAsync(ctx, q, "small", need{mem: 100})
		requireWaiting(t, small, "1 task(s) ahead in the queue")

		q.Release("a")
		requireGranted(t, big)
		requireGranted(t, small)
		assert.Equal(t, 900, q.usedMem)
	})

	t.Run("cancellation removes the waiter and lets the queue move", func(t *testing.T) {
		q := newResourceQueue(host)
		require.NoError(t, q.Acquire(ctx, "a", need{cpu: 600}, nil))
		cctx, cancel := context.WithCancel(ctx)
		big := acquireAsync(cctx, q, "big", need{cpu: 800})
		requireWaiting(t, big, "CPU 400 of 1000 units free, 800 needed")
		small := acquireAsync(ctx, q, "small", need{cpu: 300})
		requireWaiting(t, small, "1 task(s) ahead")
		medium := acquireAsync(ctx, q, "medium", need{cpu: 200})
		requireWaiting(t, medium, "2 task(s) ahead")

		cancel()
		select {
		case err := <-big.done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(waitFor):
			t.Fatal("a cancelled Acquire did not return")
		}
		requireGranted(t, small)
		require.True(t, pollUntil(func() bool { return medium.lastReason() != "" && !strings.Contains(medium.lastReason(), "ahead") }))
		assert.Contains(t, medium.lastReason(), "CPU 100 of 1000 units free, 200 needed", "the reason follows the queue")

		q.mu.Lock()
		assert.Len(t, q.queue, 1)
		_, held := q.held["big"]
		q.mu.Unlock()
		assert.False(t, held)
		q.Release("a")
		requireGranted(t, medium)
	})

	t.Run("host ports", func(t *testing.T) {
		q := newResourceQueue(host)
		require.NoError(t, q.Acquire(ctx, "a", need{ports: []hostPort{{8080, "tcp"}}}, nil))
		require.NoError(t, q.Acquire(ctx, "udp", need{ports: []hostPort{{8080, "udp"}}}, nil), "another protocol is another port")
		b := acquireAsync(ctx, q, "b", need{ports: []hostPort{{8080, "tcp"}}})
		requireWaiting(t, b, "host port 8080/tcp is used by task a")
		q.Release("a")
		requireGranted(t, b)
	})

	impossible := []struct {
		name string
		n    need
		want string
	}{
		{"CPU", need{cpu: 1001}, "task needs 1001 CPU units; the host has 1000"},
		{"memory", need{mem: 2000}, "task needs 2000 MiB of memory; the host offers 1000"},
		{"reserved TCP port", need{ports: []hostPort{{22, "tcp"}}}, "host port 22/tcp is reserved"},
		{"reserved UDP port", need{ports: []hostPort{{161, "udp"}}}, "host port 161/udp is reserved"},
		{"port twice", need{ports: []hostPort{{80, "tcp"}, {80, "tcp"}}}, "host port 80/tcp is bound twice"},
	}
	for _, tc := range impossible {
		t.Run("impossible: "+tc.name, func(t *testing.T) {
			q := newResourceQueue(host)
			err := q.Acquire(ctx, "x", tc.n, func(string) { t.Error("an impossible need does not wait") })
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, errors.Is(err, context.Canceled))
			assert.Empty(t, q.queue)
		})
	}

	t.Run("reserved ports of the other protocol are free", func(t *testing.T) {
		q := newResourceQueue(host)
		require.NoError(t, q.Acquire(ctx, "x", need{ports: []hostPort{{22, "udp"}, {161, "tcp"}}}, nil))
	})
}

func TestHostResources(t *testing.T) {
	t.Run("waits with a reason and starts when resources free", func(t *testing.T) {
		cfg := testConfig()
		cfg.Resources = Resources{CPU: 1000, MemoryMiB: 1000}
		h := newHarness(t, cfg)
		h.add(newTask("arn:a", ctr("app", func(c *task.Container) { c.CPU = 600 })))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:b", ctr("app", func(c *task.Container) { c.CPU = 600 })))

		b := h.waitTask("arn:b", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, b.PendingReason, "CPU 400 of 1000 units free, 600 needed")
		var fromList *task.Task
		for _, tk := range h.engine.Tasks() {
			if tk.Arn == "arn:b" {
				fromList = tk
			}
		}
		require.NotNil(t, fromList)
		assert.Equal(t, b.PendingReason, fromList.PendingReason, "Tasks shows the reason too")
		assert.Equal(t, task.TaskNone, b.KnownStatus)
		assert.Len(t, h.docker.createCalls(), 1, "b waits without creating anything")

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		b = h.waitStatus("arn:b", task.TaskRunning)
		assert.Empty(t, b.PendingReason)
	})

	t.Run("FIFO and a reason that follows the queue", func(t *testing.T) {
		cfg := testConfig()
		cfg.Resources = Resources{CPU: 4096, MemoryMiB: 1000}
		h := newHarness(t, cfg)
		mem := func(m int) func(*task.Container) { return func(c *task.Container) { c.Memory = m } }
		h.add(newTask("arn:a", ctr("app", mem(600))))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:big", ctr("app", mem(800))))
		h.waitTask("arn:big", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		h.add(newTask("arn:small", ctr("app", mem(100))))
		small := h.waitTask("arn:small", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, small.PendingReason, "1 task(s) ahead", "small fits but waits behind big")
		h.add(newTask("arn:medium", ctr("app", mem(500))))
		medium := h.waitTask("arn:medium", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, medium.PendingReason, "2 task(s) ahead")

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:big", "cancelled"))
		h.waitStatus("arn:big", task.TaskStopped)
		h.waitStatus("arn:small", task.TaskRunning)
		medium = h.waitTask("arn:medium", "waits for memory", func(tk *task.Task) bool {
			return regexp.MustCompile(`memory \d+ of 1000 MiB free, 500 needed`).MatchString(tk.PendingReason)
		})
		assert.Equal(t, task.TaskNone, medium.KnownStatus)

		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		h.waitStatus("arn:medium", task.TaskRunning)
	})

	t.Run("host port held by another task", func(t *testing.T) {
		h := newHarness(t, testConfig())
		port := func(c *task.Container) { c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: 8080}} }
		h.add(newTask("arn:a", ctr("web", port)))
		h.waitStatus("arn:a", task.TaskRunning)
		h.add(newTask("arn:b", ctr("web", port)))
		b := h.waitTask("arn:b", "pending", func(tk *task.Task) bool { return tk.PendingReason != "" })
		assert.Contains(t, b.PendingReason, "host port 8080/tcp is used by task arn:a")
		require.NoError(t, h.engine.StopTask(context.Background(), "arn:a", "make room"))
		h.waitStatus("arn:b", task.TaskRunning)
	})

	tests := []struct {
		name       string
		tk         *task.Task
		wantReason string
	}{
		{"too much CPU", newTask("arn:cpu", ctr("app", func(c *task.Container) { c.CPU = 5000 })), "task needs 5000 CPU units; the host has 4096"},
		{"too much task memory", func() *task.Task {
			tk := newTask("arn:mem", ctr("app"))
			tk.Memory = 9000
			return tk
		}(), "task needs 9000 MiB of memory; the host offers 8192"},
		{"reserved port", newTask("arn:ssh", ctr("app", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 22, HostPort: 22}}
		})), "host port 22/tcp is reserved"},
		{"port bound twice", newTask("arn:dup", ctr("a", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 80, HostPort: 8080, Protocol: "udp"}}
		}), ctr("b", func(c *task.Container) {
			c.PortMappings = []task.PortMapping{{ContainerPort: 81, HostPort: 8080, Protocol: "UDP"}}
		})), "host port 8080/udp is bound twice"},
		// Values no validated definition holds, from a damaged state record, say. They used to be
		// admitted: the reservation's byte value wrapped to 0 (no reservation), and a negative cpu
		// made room for every other task.
		{"memoryReservation whose bytes overflow", newTask("arn:wrap", ctr("app", func(c *task.Container) { c.MemoryReservation = 1 << 44 })),
			`container "app": memoryReservation: 17592186044416 MiB is out of range`},
		{"negative cpu", newTask("arn:neg", ctr("app", func(c *task.Container) { c.CPU = -1 << 40 })),
			`container "app": cpu -1099511627776 is negative`},
	}
	for _, tc := range tests {
		t.Run("never fits: "+tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Resources.ReservedTCP = []uint16{22, 2375}
			h := newHarness(t, cfg)
			h.add(tc.tk)
			stopped := h.waitStatus(tc.tk.Arn, task.TaskStopped)
			assert.Contains(t, stopped.StoppedReason, "ResourceError")
			assert.Contains(t, stopped.StoppedReason, tc.wantReason)
			assert.Empty(t, h.docker.createCalls())
			h.add(newTask("arn:other", ctr("app")))
			h.waitStatus("arn:other", task.TaskRunning)
		})
	}
}

func TestDynamicHostPorts(t *testing.T) {
	h := newHarness(t, testConfig())
	const arn = "arn:ports"
	h.add(newTask(arn, ctr("web", func(c *task.Container) {
		c.PortMappings = []task.PortMapping{{ContainerPort: 80}, {ContainerPort: 53, HostPort: 5353, Protocol: "udp"}}
	})))
	web := h.waitStatus(arn, task.TaskRunning).Container("web")
	assert.Equal(t, []task.NetworkBinding{
		{BindIP: "0.0.0.0", ContainerPort: 53, HostPort: 5353, Protocol: "udp"},
		{BindIP: "0.0.0.0", ContainerPort: 80, HostPort: 32768, Protocol: "tcp"},
	}, web.NetworkBindings)
}

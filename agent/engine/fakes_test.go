package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"

	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/dockerclient"
	"github.com/berth-agent/berth/agent/task"
)

// fakeImage says how containers of an image behave in fakeDocker.
type fakeImage struct {
	exitOnStart    *int // the container exits with this code right after it starts (and a die event is sent)
	ignoresSIGTERM bool // a stop ends in SIGKILL: exit code 137 after the timeout
	oomOnStart     bool // with exitOnStart: the kernel killed it for memory
	stateError     string
}

type fakeContainer struct {
	id    string
	name  string
	opts  docker.CreateContainerOptions
	state docker.State
	ports map[docker.Port][]docker.PortBinding
}

type stopCall struct {
	id        string
	container string // the task container name, from the labels
	timeout   time.Duration
}

// fakeDocker is an in-memory Docker Engine implementing Docker.
type fakeDocker struct {
	mu         sync.Mutex
	images     map[string]fakeImage
	containers map[string]*fakeContainer // by ID
	names      map[string]bool
	nextID     int
	nextPort   int
	events     chan dockerclient.Event
	closed     bool
	// hook, when set, is consulted first by every call with the call's name ("create", "start", "stop",
	// "inspect", "remove", "removeVolume", "events") and its object (container ID or name); a non-nil
	// error is returned.
	hook func(op, id string) error
	// answer, when set, is consulted by a create or start that has taken effect, with the call's name
	// and object: a non-nil error is returned instead of the answer, as when the Engine's answer is
	// lost on the way (dockerd dying mid-call).
	answer func(op, id string) error

	calls          []string // "op:container" in call order
	creates        []docker.CreateContainerOptions
	stops          []stopCall
	removed        []string
	removedVolumes []string
	inspects       int
}

var _ Docker = (*fakeDocker)(nil)

func newFakeDocker() *fakeDocker {
	return &fakeDocker{images: map[string]fakeImage{}, containers: map[string]*fakeContainer{}, names: map[string]bool{}, nextPort: 32768}
}

func (f *fakeDocker) setImage(image string, fi fakeImage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[image] = fi
}

func (f *fakeDocker) setHook(h func(op, id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

func (f *fakeDocker) setAnswer(a func(op, id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

func (f *fakeDocker) callHook(op, id string) error {
	if f.hook == nil {
		return nil
	}
	return f.hook(op, id)
}

func notFound(id string) error {
	return &dockerclient.NotFoundError{Kind: "container", Name: id, Err: errors.New("no such container")}
}

// emitLocked sends an event if anyone subscribed. Caller holds f.mu.
func (f *fakeDocker) emitLocked(action, id string) {
	if f.events == nil || f.closed {
		return
	}
	select {
	case f.events <- dockerclient.Event{Type: "container", Action: action, ID: id, Time: time.Now()}:
	default:
		panic("fake Docker event buffer full")
	}
}

// push sends ev on the event stream as Docker would.
func (f *fakeDocker) push(ev dockerclient.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.events == nil || f.closed {
		return
	}
	f.events <- ev
}

func (f *fakeDocker) CreateContainer(_ context.Context, opts docker.CreateContainerOptions) (*docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "create:"+opts.Config.Labels[LabelContainerName])
	if err := f.callHook("create", opts.Name); err != nil {
		return nil, err
	}
	if f.names[opts.Name] {
		return nil, fmt.Errorf("create container %q: %w", opts.Name, dockerclient.ErrNameInUse)
	}
	f.nextID++
	id := fmt.Sprintf("%064x", f.nextID)
	f.names[opts.Name] = true
	f.containers[id] = &fakeContainer{id: id, name: opts.Name, opts: opts, state: docker.State{Status: "created"}}
	f.creates = append(f.creates, opts)
	if f.answer != nil {
		if err := f.answer("create", opts.Name); err != nil {
			return nil, err
		}
	}
	return &docker.Container{ID: id, Name: opts.Name}, nil
}

func (f *fakeDocker) StartContainer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return notFound(id)
	}
	f.calls = append(f.calls, "start:"+c.opts.Config.Labels[LabelContainerName])
	if err := f.callHook("start", id); err != nil {
		return err
	}
	if c.state.Running {
		return nil
	}
	c.state = docker.State{Status: "running", Running: true, Pid: 100, StartedAt: time.Now()}
	c.ports = map[docker.Port][]docker.PortBinding{}
	for port, binds := range c.opts.HostConfig.PortBindings {
		for _, b := range binds {
			hp := b.HostPort
			if hp == "" || hp == "0" {
				hp = strconv.Itoa(f.nextPort)
				f.nextPort++
			}
			c.ports[port] = append(c.ports[port], docker.PortBinding{HostIP: "0.0.0.0", HostPort: hp})
		}
	}
	f.emitLocked("start", id)
	if img := f.images[c.opts.Config.Image]; img.exitOnStart != nil {
		f.exitLocked(c, *img.exitOnStart, img.oomOnStart, img.stateError)
		f.emitLocked("die", id)
	}
	if f.answer != nil {
		return f.answer("start", id)
	}
	return nil
}

func (f *fakeDocker) exitLocked(c *fakeContainer, code int, oom bool, stateErr string) {
	started := c.state.StartedAt
	c.state = docker.State{Status: "exited", ExitCode: code, OOMKilled: oom, Error: stateErr, StartedAt: started, FinishedAt: time.Now()}
}

func (f *fakeDocker) StopContainer(_ context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return notFound(id)
	}
	f.calls = append(f.calls, "stop:"+c.opts.Config.Labels[LabelContainerName])
	f.stops = append(f.stops, stopCall{id: id, container: c.opts.Config.Labels[LabelContainerName], timeout: timeout})
	if err := f.callHook("stop", id); err != nil {
		return err
	}
	if !c.state.Running {
		return nil
	}
	code := 143
	if f.images[c.opts.Config.Image].ignoresSIGTERM {
		code = 137
	}
	f.exitLocked(c, code, false, "")
	f.emitLocked("die", id)
	return nil
}

func (f *fakeDocker) RemoveContainer(_ context.Context, opts docker.RemoveContainerOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "remove:"+opts.ID)
	if err := f.callHook("remove", opts.ID); err != nil {
		return err
	}
	if c, ok := f.containers[opts.ID]; ok {
		delete(f.names, c.name)
		delete(f.containers, opts.ID)
		f.removed = append(f.removed, opts.ID)
	}
	return nil
}

func (f *fakeDocker) InspectContainer(_ context.Context, id string) (*docker.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects++
	if err := f.callHook("inspect", id); err != nil {
		return nil, err
	}
	c, ok := f.containers[id]
	if !ok {
		c, ok = f.byNameLocked(id)
	}
	if !ok {
		return nil, notFound(id)
	}
	ports := map[docker.Port][]docker.PortBinding{}
	if c.state.Running {
		for k, v := range c.ports {
			ports[k] = append([]docker.PortBinding(nil), v...)
		}
	}
	return &docker.Container{
		ID:    c.id,
		Name:  "/" + c.name,
		Image: "sha256:" + c.opts.Config.Image,
		State: c.state,
		NetworkSettings: &docker.NetworkSettings{Ports: ports,
			Networks: map[string]docker.ContainerNetwork{"bridge": {IPAddress: "172.17.0.2"}}},
	}, nil
}

// byNameLocked finds a container by name, as Docker resolves names. Caller holds f.mu.
func (f *fakeDocker) byNameLocked(name string) (*fakeContainer, bool) {
	for _, c := range f.containers {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

func (f *fakeDocker) ListContainersByLabel(_ context.Context, labels map[string]string) ([]docker.APIContainers, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.callHook("list", ""); err != nil {
		return nil, err
	}
	var out []docker.APIContainers
	for _, c := range f.containers {
		match := true
		for k, v := range labels {
			got, ok := c.opts.Config.Labels[k]
			match = match && ok && (v == "" || got == v)
		}
		if match {
			out = append(out, docker.APIContainers{ID: c.id, Image: c.opts.Config.Image, Names: []string{"/" + c.name}, Labels: c.opts.Config.Labels})
		}
	}
	return out, nil
}

func (f *fakeDocker) RemoveVolume(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.callHook("removeVolume", name); err != nil {
		return err
	}
	f.removedVolumes = append(f.removedVolumes, name)
	return nil
}

func (f *fakeDocker) Events(ctx context.Context, _ map[string][]string) (<-chan dockerclient.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.callHook("events", ""); err != nil {
		return nil, err
	}
	ch := make(chan dockerclient.Event, 1000)
	f.events, f.closed = ch, false
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.closed = true
		close(ch)
	}()
	return ch, nil
}

// exit ends a running container as if its process exited, with a die event unless quiet.
func (f *fakeDocker) exit(id string, code int, oom, quiet bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	if c == nil || !c.state.Running {
		panic("exit: container " + id + " is not running")
	}
	f.exitLocked(c, code, oom, "")
	if oom {
		f.emitLocked("oom", id)
	}
	if !quiet {
		f.emitLocked("die", id)
	}
}

// setHealth sets a container's health and sends the health_status event.
func (f *fakeDocker) setHealth(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	c.state.Health.Status = status
	f.emitLocked("health_status: "+status, id)
}

func (f *fakeDocker) running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	return c != nil && c.state.Running
}

func (f *fakeDocker) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDocker) createCalls() []docker.CreateContainerOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]docker.CreateContainerOptions(nil), f.creates...)
}

func (f *fakeDocker) stopCalls() []stopCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stopCall(nil), f.stops...)
}

func (f *fakeDocker) removedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.removed...)
}

func (f *fakeDocker) removedVolumeNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.removedVolumes...)
}

// fakePuller implements Puller with per-image errors, an optional gate and call counts.
type fakePuller struct {
	mu    sync.Mutex
	errs  map[string]error
	gates map[string]chan struct{} // a pull of the image waits until the channel is closed
	count map[string]int
	auths map[string]dockerclient.AuthSource // the credentials source of the image's last pull
}

var _ Puller = (*fakePuller)(nil)

func newFakePuller() *fakePuller {
	return &fakePuller{errs: map[string]error{}, gates: map[string]chan struct{}{}, count: map[string]int{},
		auths: map[string]dockerclient.AuthSource{}}
}

func (p *fakePuller) fail(image string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[image] = err
}

// gate makes pulls of image wait; the returned func lets them through.
func (p *fakePuller) gate(image string) func() {
	ch := make(chan struct{})
	p.mu.Lock()
	p.gates[image] = ch
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (p *fakePuller) pulls(image string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[image]
}

// authOf returns the credentials source of the image's last pull.
func (p *fakePuller) authOf(image string) dockerclient.AuthSource {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.auths[image]
}

// Pull asks auth, when there is one, for credentials first, as the real pull path does.
func (p *fakePuller) Pull(ctx context.Context, image string, auth dockerclient.AuthSource) (dockerclient.PullResult, error) {
	if auth != nil {
		if _, err := auth.Auth(ctx, image); err != nil {
			return dockerclient.PullResult{}, &dockerclient.CannotPullContainerError{Image: image, Err: err}
		}
	}
	p.mu.Lock()
	p.auths[image] = auth
	p.count[image]++
	err, gate := p.errs[image], p.gates[image]
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return dockerclient.PullResult{}, ctx.Err()
		}
	}
	if err != nil {
		return dockerclient.PullResult{}, &dockerclient.CannotPullContainerError{Image: image, Err: err}
	}
	return dockerclient.PullResult{Image: image, Pulled: true}, nil
}

// fakeStore implements Store in memory. It appends "save <json>" to the shared journal for every
// successful save, so a test can check that listeners only hear of saved states.
type fakeStore struct {
	mu      sync.Mutex
	saved   map[string]*task.Task
	deleted []string
	saves   int
	journal *journal
	fail    func(n int, t *task.Task) error // n counts SaveTask calls from 1
	// slow, when set, is called by SaveTask before it takes the store's lock: a slow disk for one task
	// need not hold up the saves of others.
	slow func(t *task.Task)
}

var _ Store = (*fakeStore)(nil)

func newFakeStore(j *journal) *fakeStore {
	return &fakeStore{saved: map[string]*task.Task{}, journal: j}
}

func (s *fakeStore) SaveTask(_ context.Context, t *task.Task) error {
	s.mu.Lock()
	slow := s.slow
	s.mu.Unlock()
	if slow != nil {
		slow(t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	if s.fail != nil {
		if err := s.fail(s.saves, t); err != nil {
			return err
		}
	}
	s.saved[t.Arn] = t.Clone()
	s.journal.add("save", t)
	return nil
}

func (s *fakeStore) DeleteTask(_ context.Context, arn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.saved, arn)
	s.deleted = append(s.deleted, arn)
	return nil
}

func (s *fakeStore) deletedARNs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deleted...)
}

func (s *fakeStore) saveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

// journal records saves and listener calls in order, each with the task as JSON.
type journal struct {
	mu      sync.Mutex
	entries []journalEntry
}

type journalEntry struct {
	kind string // "save" or "notify"
	arn  string
	json string
	t    *task.Task
}

func (j *journal) add(kind string, t *task.Task) {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, journalEntry{kind: kind, arn: t.Arn, json: string(b), t: t.Clone()})
}

func (j *journal) all() []journalEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]journalEntry(nil), j.entries...)
}

// journalListener records what the engine tells its listeners.
type journalListener struct{ j *journal }

func (l journalListener) TaskChanged(t *task.Task) { l.j.add("notify", t) }

func (l journalListener) TaskRemoved(arn string) { l.j.add("removed", &task.Task{Arn: arn}) }

// removed reports whether listeners heard that arn was removed.
func (j *journal) removed(arn string) bool {
	for _, e := range j.all() {
		if e.kind == "removed" && e.arn == arn {
			return true
		}
	}
	return false
}

// notified returns the tasks listeners heard of for arn, in order.
func (j *journal) notified(arn string) []*task.Task {
	var out []*task.Task
	for _, e := range j.all() {
		if e.kind == "notify" && e.arn == arn {
			out = append(out, e.t)
		}
	}
	return out
}

// errCrashed is what the fake store answers once a test's simulated crash has happened.
var errCrashed = errors.New("agent crashed: nothing more is saved")

// streamClosed reports whether the current event stream has ended.
func (f *fakeDocker) streamClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// containersOf returns the IDs of the containers labelled with a task ARN and whether each runs.
func (f *fakeDocker) containersOf(arn string) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for id, c := range f.containers {
		if c.opts.Config.Labels[LabelTaskARN] == arn {
			out[id] = c.state.Running
		}
	}
	return out
}

// snapshot returns copies of the saved tasks: what a restarted agent would load.
func (s *fakeStore) snapshot() []*task.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*task.Task, 0, len(s.saved))
	for _, t := range s.saved {
		out = append(out, t.Clone())
	}
	return out
}

var _ Network = (*fakeNetwork)(nil)

func mustCIDR(t *testing.T, s string) cnitypes.IPNet {
	t.Helper()
	n, err := cnitypes.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return cnitypes.IPNet{IP: n.IP, Mask: n.Mask}
}

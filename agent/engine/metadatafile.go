package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	docker "github.com/fsouza/go-dockerclient"

	"github.com/berth-agent/berth/agent/task"
)

// ContainerMetadataConfig is the container metadata file (ECS_ENABLE_CONTAINER_METADATA): a JSON file
// per container, in the ECS agent's format, on the host under Dir/<task id>/<container name>/, which
// the container sees read-only at the path in ECS_CONTAINER_METADATA_FILE.
type ContainerMetadataConfig struct {
	// Enabled writes a file for every container created from now on (not for the pause container).
	Enabled bool
	// Dir is the files' root on the host, ECS_DATADIR/metadata. A stopped task's directory under it is
	// removed at cleanup whenever Dir is set, enabled or not, so turning the feature off leaves nothing.
	Dir string
	// InstanceARN returns the container instance ARN, or "" while the host is not registered; a file
	// written before then gets it at the first rewrite after. Nil: never known.
	InstanceARN func() string
	// AvailabilityZone and HostPrivateIPv4Address go into every file when not empty.
	AvailabilityZone       string
	HostPrivateIPv4Address string
}

// Names of the container metadata file, as the ECS agent has them.
const (
	MetadataFileName   = "ecs-container-metadata.json"
	MetadataFileEnv    = "ECS_CONTAINER_METADATA_FILE"
	MetadataMountRoot  = "/opt/ecs/metadata" // + /<random>/ inside the container
	MetadataPending    = "PENDING"           // written at create: only what the task definition says
	MetadataReady      = "READY"             // the container has run and its network is known
	metadataTempPrefix = ".ecs-container-metadata-"
)

// containerMetadata is the file's content; field names and order are the ECS agent's.
type containerMetadata struct {
	Cluster                string            `json:"Cluster,omitempty"`
	ContainerInstanceARN   string            `json:"ContainerInstanceARN,omitempty"`
	TaskARN                string            `json:"TaskARN,omitempty"`
	TaskDefinitionFamily   string            `json:"TaskDefinitionFamily,omitempty"`
	TaskDefinitionRevision string            `json:"TaskDefinitionRevision,omitempty"`
	ContainerID            string            `json:"ContainerID,omitempty"`
	ContainerName          string            `json:"ContainerName,omitempty"`
	DockerContainerName    string            `json:"DockerContainerName,omitempty"`
	ImageID                string            `json:"ImageID,omitempty"`
	ImageName              string            `json:"ImageName,omitempty"`
	PortMappings           []metadataPort    `json:"PortMappings,omitempty"`
	Networks               []metadataNetwork `json:"Networks,omitempty"`
	MetadataFileStatus     string            `json:"MetadataFileStatus,omitempty"`
	AvailabilityZone       string            `json:"AvailabilityZone,omitempty"`
	HostPrivateIPv4Address string            `json:"HostPrivateIPv4Address,omitempty"`
}

type metadataPort struct {
	ContainerPort uint16 `json:"ContainerPort"`
	HostPort      uint16 `json:"HostPort"`
	BindIP        string `json:"BindIp,omitempty"`
	Protocol      string `json:"Protocol,omitempty"`
}

type metadataNetwork struct {
	NetworkMode   string   `json:"NetworkMode"`
	IPv4Addresses []string `json:"IPv4Addresses,omitempty"`
}

var safePathPart = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)

// metadataTaskDir is a task's directory under root: the ECS agent's, the part of the ARN after
// "task/" (<cluster>/<id> for today's ARNs, <id> for the old form). Every part must be a plain name,
// so no ARN can name a path outside root.
func metadataTaskDir(root, arn string) (string, error) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) < 6 {
		return "", fmt.Errorf("task ARN %q has no resource part", arn)
	}
	_, id, ok := strings.Cut(parts[5], "/")
	if !ok || id == "" {
		return "", fmt.Errorf("task ARN %q has no task ID", arn)
	}
	dir := root
	for _, p := range strings.Split(id, "/") {
		if !safePathPart.MatchString(p) || p == "." || p == ".." {
			return "", fmt.Errorf("task ARN %q: %q is not a plain name", arn, p)
		}
		dir = filepath.Join(dir, p)
	}
	return dir, nil
}

// metadataDir is a container's directory, the one mounted into it.
func metadataDir(root, arn, container string) (string, error) {
	dir, err := metadataTaskDir(root, arn)
	if err != nil {
		return "", err
	}
	if !safePathPart.MatchString(container) || container == "." || container == ".." {
		return "", fmt.Errorf("container name %q is not a plain name", container)
	}
	return filepath.Join(dir, container), nil
}

// buildMetadata is what the file of c says now. A container is READY once it has run and its network
// is known: its Docker networks (bridge, host), its task's address (awsvpc), or none at all.
func buildMetadata(t *task.Task, c *task.Container, cluster string, cfg ContainerMetadataConfig, instanceARN string) containerMetadata {
	md := containerMetadata{Cluster: cluster, ContainerInstanceARN: instanceARN, TaskARN: t.Arn, TaskDefinitionFamily: t.Family,
		TaskDefinitionRevision: strconv.Itoa(t.Revision), ContainerName: c.Name, MetadataFileStatus: MetadataPending,
		AvailabilityZone: cfg.AvailabilityZone, HostPrivateIPv4Address: cfg.HostPrivateIPv4Address}
	if c.DockerID == "" || !c.Started() {
		return md
	}
	var networks []metadataNetwork
	switch t.NetworkMode {
	case task.NetworkAWSVPC:
		if t.AWSVPC != nil && t.AWSVPC.IPv4 != "" {
			networks = []metadataNetwork{{NetworkMode: string(task.NetworkAWSVPC), IPv4Addresses: []string{t.AWSVPC.IPv4}}}
		}
	default:
		for _, n := range c.Networks {
			networks = append(networks, metadataNetwork{NetworkMode: n.Mode, IPv4Addresses: n.IPv4Addresses})
		}
	}
	if len(networks) == 0 && t.NetworkMode != task.NetworkNone {
		return md // running, but not inspected yet
	}
	md.ContainerID = c.DockerID
	md.DockerContainerName = "/" + c.DockerName // as Docker's inspect names it
	md.ImageID = c.ImageID
	md.ImageName = c.Image
	md.Networks = networks
	for _, b := range c.NetworkBindings {
		md.PortMappings = append(md.PortMappings, metadataPort{ContainerPort: b.ContainerPort, HostPort: b.HostPort, BindIP: b.BindIP, Protocol: b.Protocol})
	}
	md.MetadataFileStatus = MetadataReady
	return md
}

// writeMetadataFile replaces dir's metadata file with data atomically (a temporary file in dir,
// renamed over it), so a reader sees the old content or the new, never part of it. The directories
// from root down are made 0755 and the file 0644, so a container's non-root user can read it.
func writeMetadataFile(root, dir string, data []byte) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for p := dir; ; p = filepath.Dir(p) { // whatever the umask
		if err := os.Chmod(p, 0o755); err != nil {
			return fmt.Errorf("make %s readable: %w", p, err)
		}
		if p == root || p == filepath.Dir(p) {
			break
		}
	}
	f, err := os.CreateTemp(dir, metadataTempPrefix+"*.tmp")
	if err != nil {
		return fmt.Errorf("write the metadata file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, MetadataFileName)); err != nil {
		return fmt.Errorf("replace the metadata file in %s: %w", dir, err)
	}
	return nil
}

// withMetadataMount mounts the container's metadata directory read-only at a random path under
// /opt/ecs/metadata, as the ECS agent does, and points ECS_CONTAINER_METADATA_FILE at the file there
// (replacing the definition's variable of that name).
func withMetadataMount(opts *docker.CreateContainerOptions, hostDir string) {
	target := MetadataMountRoot + "/" + newEndpointID()
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, docker.HostMount{Type: "bind", Source: hostDir, Target: target, ReadOnly: true})
	env := opts.Config.Env[:0:0]
	for _, kv := range opts.Config.Env {
		if !strings.HasPrefix(kv, MetadataFileEnv+"=") {
			env = append(env, kv)
		}
	}
	opts.Config.Env = append(env, MetadataFileEnv+"="+target+"/"+MetadataFileName)
}

// metadataFeature writes the container metadata file of every container (see hooks.go): PENDING
// before its create, rewritten as it changes, removed with its task.
type metadataFeature struct {
	cfg     ContainerMetadataConfig
	cluster string
}

func (metadataFeature) Name() string { return "container metadata file" }

// TaskHook returns the hook of every task while the files have a root: a task's files are removed at
// its cleanup even when the feature has been turned off since they were written.
func (f metadataFeature) TaskHook(*task.Task) TaskHook {
	if f.cfg.Dir == "" {
		return nil
	}
	return &metadataHook{f: f, files: map[string]*metadataFile{}}
}

// instanceARN returns the container instance ARN, "" before registration.
func (f metadataFeature) instanceARN() string {
	if f.cfg.InstanceARN == nil {
		return ""
	}
	return f.cfg.InstanceARN()
}

// metadataHook is one task's metadata files.
type metadataHook struct {
	f     metadataFeature
	files map[string]*metadataFile // container name → its file as last written
}

var (
	_ CreateHook  = (*metadataHook)(nil)
	_ CommitHook  = (*metadataHook)(nil)
	_ CleanupHook = (*metadataHook)(nil)
)

// metadataFile is what a hook knows of one container's file: what it wrote last.
type metadataFile struct {
	data   []byte
	failed bool // the last write failed and was logged
}

// BeforeCreate writes c's PENDING file and mounts its directory into c. The file exists before the
// container does, since Docker mounts its directory; a container whose file cannot be written is
// created without one.
func (h *metadataHook) BeforeCreate(_ context.Context, r *Run, c *task.Container, opts *docker.CreateContainerOptions) error {
	dir, err := h.sync(r.Task(), c, h.f.instanceARN(), true)
	if err != nil {
		r.Log().Warn("the container gets no metadata file", "container", c.Name, "error", err)
	}
	if dir != "" {
		withMetadataMount(opts, dir)
	}
	return nil
}

// sync brings the metadata file of c up to date, with arn as the instance ARN ("" keeps the one the
// file has), and returns its directory, or "" when c has none.
// create is true just before Docker creates c, when its first (PENDING) file is written; later a
// file is only rewritten, never made for a container created without one (before the feature was
// turned on). Nothing is written when the content is unchanged.
func (h *metadataHook) sync(t *task.Task, c *task.Container, arn string, create bool) (string, error) {
	cfg := h.f.cfg
	if !cfg.Enabled || c.Pause {
		return "", nil
	}
	dir, err := metadataDir(cfg.Dir, t.Arn, c.Name)
	if err != nil {
		return "", err
	}
	last, known := h.files[c.Name]
	if !known {
		// After a restart: the file on disk is what was written last, if there is one.
		data, err := os.ReadFile(filepath.Join(dir, MetadataFileName))
		switch {
		case err == nil:
			last = &metadataFile{data: data}
		case !create && errors.Is(err, os.ErrNotExist):
			return "", nil
		case !create:
			return "", fmt.Errorf("read the metadata file in %s: %w", dir, err)
		default:
			last = &metadataFile{}
		}
		h.files[c.Name] = last
	}
	if arn == "" && len(last.data) > 0 { // not registered yet since a restart: keep what the file says
		var old containerMetadata
		if json.Unmarshal(last.data, &old) == nil {
			arn = old.ContainerInstanceARN
		}
	}
	data, err := json.MarshalIndent(buildMetadata(t, c, h.f.cluster, cfg, arn), "", "\t")
	if err != nil {
		return "", fmt.Errorf("encode the metadata of container %s: %w", c.Name, err)
	}
	if bytes.Equal(data, last.data) {
		return dir, nil
	}
	if err := writeMetadataFile(cfg.Dir, dir, data); err != nil {
		return "", err
	}
	last.data = data
	return dir, nil
}

// AfterCommit rewrites the metadata file of every container whose content has changed (the instance
// ARN may have become known without a change of the task). A failure is logged once per container
// until a write succeeds again; the container runs on.
func (h *metadataHook) AfterCommit(r *Run) {
	if !h.f.cfg.Enabled {
		return
	}
	t, arn := r.Task(), h.f.instanceARN() // asked once per commit, not once per container
	for _, c := range t.Containers {
		if c.DockerName == "" || c.Pause {
			continue
		}
		_, err := h.sync(t, c, arn, false)
		f := h.files[c.Name]
		if f == nil {
			continue
		}
		switch {
		case err != nil && !f.failed:
			f.failed = true
			r.Log().Warn("the container's metadata file is not up to date", "container", c.Name, "error", err)
		case err == nil && f.failed:
			f.failed = false
			r.Log().Info("the container's metadata file is up to date again", "container", c.Name)
		}
	}
}

// Cleanup removes the task's metadata directory; it is idempotent.
func (h *metadataHook) Cleanup(_ context.Context, r *Run) {
	dir, err := metadataTaskDir(h.f.cfg.Dir, r.Task().Arn)
	if err != nil {
		return // no file was ever written for it
	}
	if err := os.RemoveAll(dir); err != nil {
		r.Log().Warn("removing the task's metadata files failed", "dir", dir, "error", err)
	}
}

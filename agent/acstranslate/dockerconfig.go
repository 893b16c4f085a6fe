package acstranslate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/set"
	"github.com/berth-agent/berth/agent/wire"
)

// DockerContainerConfig is the part of Docker's container config that ACS sends in
// dockerConfig.config and Berth honours. Any other member with a value refuses the task.
type DockerContainerConfig struct {
	Hostname        string             `json:"Hostname,omitempty"`
	User            string             `json:"User,omitempty"`
	WorkingDir      string             `json:"WorkingDir,omitempty"`
	Tty             bool               `json:"Tty,omitempty"`
	OpenStdin       bool               `json:"OpenStdin,omitempty"`
	NetworkDisabled bool               `json:"NetworkDisabled,omitempty"`
	Labels          map[string]string  `json:"Labels,omitempty"`
	Healthcheck     *DockerHealthcheck `json:"Healthcheck,omitempty"`
}

// DockerHealthcheck is Docker's health check; times in nanoseconds, 0: Docker's default.
type DockerHealthcheck struct {
	Test        []string `json:"Test"`
	Interval    int64    `json:"Interval,omitempty"`
	Timeout     int64    `json:"Timeout,omitempty"`
	StartPeriod int64    `json:"StartPeriod,omitempty"`
	Retries     int      `json:"Retries,omitempty"`
}

// DockerHostConfig is the part of Docker's host config that ACS sends in dockerConfig.hostConfig
// and Berth honours. Sizes are in bytes. Any other member with a value refuses the task.
type DockerHostConfig struct {
	Privileged        bool              `json:"Privileged,omitempty"`
	ReadonlyRootfs    bool              `json:"ReadonlyRootfs,omitempty"`
	Init              *bool             `json:"Init,omitempty"`
	MemoryReservation int64             `json:"MemoryReservation,omitempty"`
	MemorySwap        int64             `json:"MemorySwap,omitempty"` // memory plus swap
	MemorySwappiness  *int64            `json:"MemorySwappiness,omitempty"`
	ShmSize           int64             `json:"ShmSize,omitempty"`
	CapAdd            []string          `json:"CapAdd,omitempty"`
	CapDrop           []string          `json:"CapDrop,omitempty"`
	Devices           []DockerDevice    `json:"Devices,omitempty"`
	Tmpfs             map[string]string `json:"Tmpfs,omitempty"` // path to mount options, size=<n>m among them
	ExtraHosts        []string          `json:"ExtraHosts,omitempty"`
	DNS               []string          `json:"Dns,omitempty"`
	DNSSearch         []string          `json:"DnsSearch,omitempty"`
	Sysctls           map[string]string `json:"Sysctls,omitempty"`
	SecurityOpt       []string          `json:"SecurityOpt,omitempty"`
	Ulimits           []DockerUlimit    `json:"Ulimits,omitempty"`
	LogConfig         *DockerLogConfig  `json:"LogConfig,omitempty"`
}

// DockerDevice is a device mapping; CgroupPermissions is a subset of "rwm".
type DockerDevice struct {
	PathOnHost        string `json:"PathOnHost"`
	PathInContainer   string `json:"PathInContainer,omitempty"`
	CgroupPermissions string `json:"CgroupPermissions,omitempty"`
}

// DockerUlimit is one resource limit.
type DockerUlimit struct {
	Name string `json:"Name"`
	Soft int64  `json:"Soft"`
	Hard int64  `json:"Hard"`
}

// DockerLogConfig selects a logging driver.
type DockerLogConfig struct {
	Type   string            `json:"Type"`
	Config map[string]string `json:"Config,omitempty"`
}

// decodeDockerJSON decodes s, the JSON object found at path, into out, a pointer to one of the
// Docker config types above. A member out has no field for is an error naming it unless its value
// is empty (null, false, 0, "", [] or {}), since running without it would drop part of the task.
// Errors never quote the input.
func decodeDockerJSON(path, s string, out any, errs *fieldErrors) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &members); err != nil {
		errs.add(path, "not a JSON object: %s", wire.DescribeJSONError(err))
		return
	}
	known := jsonNames(reflect.TypeOf(out).Elem())
	names := make([]string, 0, len(members))
	for k := range members {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !known.Has(k) && !emptyJSON(members[k]) {
			errs.add(path+"."+k, "not supported by Berth")
		}
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		errs.add(path, "%s", wire.DescribeJSONError(err))
	}
}

func jsonNames(t reflect.Type) set.Set[string] {
	var names set.Set[string]
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names.Add(name)
	}
	return names
}

// emptyJSON reports whether raw is null, false, 0, "", [] or {}.
func emptyJSON(raw json.RawMessage) bool {
	switch string(bytes.Join(bytes.Fields(raw), nil)) {
	case "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	return false
}

// devicePermissions translates Docker's cgroup permissions ("rwm") into ECS's words.
func devicePermissions(s string) ([]string, error) {
	var out []string
	for _, r := range s {
		switch r {
		case 'r':
			out = append(out, "read")
		case 'w':
			out = append(out, "write")
		case 'm':
			out = append(out, "mknod")
		default:
			return nil, fmt.Errorf("unknown cgroup permission %q (want r, w and m)", r)
		}
	}
	return out, nil
}

// tmpfsOptions splits Docker's tmpfs options into the size in MiB and the other options. The size
// must be whole MiB.
func tmpfsOptions(s string) (sizeMiB int, opts []string, err error) {
	for _, o := range strings.Split(s, ",") {
		v, ok := strings.CutPrefix(o, "size=")
		if !ok {
			if o != "" {
				opts = append(opts, o)
			}
			continue
		}
		mult := int64(1)
		switch {
		case strings.HasSuffix(v, "g"):
			mult, v = 1<<30, strings.TrimSuffix(v, "g")
		case strings.HasSuffix(v, "m"):
			mult, v = 1<<20, strings.TrimSuffix(v, "m")
		case strings.HasSuffix(v, "k"):
			mult, v = 1<<10, strings.TrimSuffix(v, "k")
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 || n > math.MaxInt64/mult || n*mult%(1<<20) != 0 || n*mult>>20 > math.MaxInt32 {
			return 0, nil, fmt.Errorf("size %q is not a whole number of MiB", v)
		}
		sizeMiB = int(n * mult >> 20)
	}
	if sizeMiB == 0 {
		return 0, nil, fmt.Errorf("no size")
	}
	return sizeMiB, opts, nil
}

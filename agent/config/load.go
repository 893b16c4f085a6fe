package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Sources are the inputs of Load besides the two files, which Load finds itself.
type Sources struct {
	// Environ is the process environment as KEY=VALUE strings, as os.Environ returns it.
	Environ []string
	// Flags holds the flags given on the command line, keyed by configuration key name.
	Flags map[string]string
}

// RegisterFlags defines a string flag on fs for every key that has one. The returned function, called
// after fs.Parse, reports the flags that were given, keyed by their configuration key name, for
// Sources.Flags.
func RegisterFlags(fs *flag.FlagSet) func() map[string]string {
	byFlag := map[string]string{}
	for _, k := range keyTable() {
		if k.flag == "" {
			continue
		}
		byFlag[k.flag] = k.name
		fs.String(k.flag, "", fmt.Sprintf("%s (overrides %s)", k.doc, k.name))
	}
	return func() map[string]string {
		out := map[string]string{}
		fs.Visit(func(f *flag.Flag) {
			if name, ok := byFlag[f.Name]; ok {
				out[name] = f.Value.String()
			}
		})
		return out
	}
}

// candidate is a value for a key from one source.
type candidate struct {
	v      value
	origin Origin
}

// Load builds the configuration from src, the env file and the JSON file, and validates every key.
// The returned error joins one *Error per bad key or file, each wrapping ErrInvalid; with a non-nil
// error the Result is still returned so a caller can show what did parse.
func Load(src Sources) (*Result, error) {
	keys := keyTable()
	env := environMap(src.Environ)
	res := &Result{Config: &Config{}, Origins: map[string]Origin{}}
	var errs []error

	pick := func(k key, envFile map[string]entry, jsonFile map[string]entry) (candidate, bool) {
		allowed := func(f from) bool { return k.only == 0 || k.only&f != 0 }
		if v, ok := src.Flags[k.name]; ok && k.flag != "" && allowed(fromFlag) {
			return candidate{v: value{text: v}, origin: Origin{Kind: SourceFlag}}, true
		}
		if v, ok := env[k.name]; ok && allowed(fromEnv) {
			return candidate{v: value{text: v}, origin: Origin{Kind: SourceEnv}}, true
		}
		if e, ok := envFile[k.name]; ok && allowed(fromEnvFile) {
			return candidate{v: value{text: e.text}, origin: Origin{Kind: SourceEnvFile, File: res.Config.EnvFile, Line: e.line}}, true
		}
		if e, ok := jsonFile[k.name]; ok && allowed(fromJSON) {
			return candidate{v: value{text: e.text, json: !e.isStr}, origin: Origin{Kind: SourceJSONFile, File: res.Config.JSONFile, Line: e.line}}, true
		}
		if k.noDef {
			return candidate{}, false
		}
		return candidate{v: value{text: k.def}, origin: Origin{Kind: SourceDefault}}, true
	}
	apply := func(k key, c candidate) {
		res.Origins[k.name] = c.origin
		warn, err := k.field(res.Config).parse(c.v)
		if err != nil {
			switch {
			case k.secret && !errors.Is(err, errAuthData):
				err = errors.New("value does not parse (not shown: it holds credentials)")
			case c.origin.Kind == SourceEnvFile && strings.Contains(c.v.text, "\n"):
				// A quoted value that spans lines may have swallowed the lines after it (a closing
				// quote is missing), secrets included: name the lines, never the contents.
				end := c.origin.Line + strings.Count(c.v.text, "\n")
				err = &hiddenError{err: err, msg: fmt.Sprintf("the quoted value on lines %d-%d does not parse "+
					"(contents not shown: is a closing quote missing?)", c.origin.Line, end)}
			}
			errs = append(errs, &Error{Key: k.name, Origin: c.origin, Err: err})
		}
		if warn != "" {
			res.Warnings = append(res.Warnings, Warning{Key: k.name, Origin: c.origin, Msg: warn})
		}
	}
	byName := map[string]key{}
	for _, k := range keys {
		byName[k.name] = k
	}

	// The files are located first: the env file by flag or environment, the JSON file by those or the env file.
	envFileKey := byName[keyEnvFile]
	c, _ := pick(envFileKey, nil, nil)
	apply(envFileKey, c)
	envEntries, err := readEnvFile(res.Config.EnvFile, c.origin.Kind != SourceDefault)
	errs = append(errs, err)
	envFile := indexEntries(envEntries, func(e entry) string { return e.key })

	jsonFileKey := byName[keyJSONFile]
	c, _ = pick(jsonFileKey, envFile, nil)
	apply(jsonFileKey, c)
	jsonEntries, err := readJSONFile(res.Config.JSONFile, c.origin.Kind != SourceDefault)
	errs = append(errs, err)
	jsonNames := map[string]string{}
	for _, k := range keys {
		jsonNames[k.name] = k.name
		if k.jsonName != "" {
			jsonNames[k.jsonName] = k.name
		}
	}
	jsonFile := indexEntries(jsonEntries, func(e entry) string { return jsonNames[e.key] })

	for _, k := range keys {
		if k.name == keyEnvFile || k.name == keyJSONFile {
			continue
		}
		if c, ok := pick(k, envFile, jsonFile); ok {
			apply(k, c)
		}
	}

	res.Warnings = append(res.Warnings, unknownKeys(envEntries, jsonEntries, byName, jsonNames, res.Config)...)
	errs = append(errs, checkRemovedKeys(env, envEntries, jsonEntries, res.Config))
	res.Warnings = append(res.Warnings, unsupportedWarnings(env, envEntries, jsonEntries, res.Config)...)
	errs = append(errs, crossChecks(res)...)
	res.Config.Mode, res.Config.ModeReason = chooseMode(res)
	if res.Config.Mode == ModeLocal {
		errs = append(errs, checkLocalListen(res))
	}
	errs = append(errs, checkIntrospectionListen(res))
	return res, errors.Join(errs...)
}

// hiddenError replaces a parse error's text, which may quote the value, and keeps it for errors.As.
type hiddenError struct {
	msg string
	err error
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }

func environMap(environ []string) map[string]string {
	out := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// indexEntries keys entries by name; a later entry for the same key wins, as in a shell.
func indexEntries(entries []entry, name func(entry) string) map[string]entry {
	out := map[string]entry{}
	for _, e := range entries {
		if n := name(e); n != "" {
			out[n] = e
		}
	}
	return out
}

// readEnvFile parses the env file at path. A missing file is fine unless it was named explicitly.
func readEnvFile(path string, explicit bool) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			return nil, nil
		}
		return nil, &Error{Origin: Origin{Kind: SourceEnvFile, File: path}, Err: err}
	}
	defer f.Close()
	return parseEnvFile(f, path)
}

// readJSONFile parses the JSON file at path. A missing file is fine unless it was named explicitly.
func readJSONFile(path string, explicit bool) ([]entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			return nil, nil
		}
		return nil, &Error{Origin: Origin{Kind: SourceJSONFile, File: path}, Err: err}
	}
	return parseJSONFile(data, path)
}

// unknownKeys warns about keys in the files that Berth does not read from there: any unknown ECS_* key
// in the env file, any unknown key in the JSON file, and known keys in a file they may not come from.
// ECS keys Berth does not support are left to unsupportedWarnings.
func unknownKeys(envEntries, jsonEntries []entry, byName map[string]key, jsonNames map[string]string, c *Config) []Warning {
	var out []Warning
	unsupported := unsupportedKeys()
	for _, e := range envEntries {
		if _, ok := unsupported[e.key]; ok || e.key == keyRemovedAllowedHosts {
			continue
		}
		o := Origin{Kind: SourceEnvFile, File: c.EnvFile, Line: e.line}
		k, known := byName[e.key]
		switch {
		case !known && (strings.HasPrefix(e.key, "ECS_") || e.key == "OverrideAWSVPCLocalIPv4Address"):
			out = append(out, Warning{Key: e.key, Origin: o, Msg: "unknown key, ignored"})
		case known && k.only != 0 && k.only&fromEnvFile == 0:
			out = append(out, Warning{Key: e.key, Origin: o, Msg: "not read from the env file, ignored"})
		}
	}
	for _, e := range jsonEntries {
		if _, ok := unsupported[e.key]; ok || e.key == keyRemovedAllowedHosts {
			continue
		}
		o := Origin{Kind: SourceJSONFile, File: c.JSONFile, Line: e.line}
		name, known := jsonNames[e.key]
		switch {
		case !known:
			out = append(out, Warning{Key: e.key, Origin: o, Msg: "unknown key, ignored"})
		case byName[name].only != 0 && byName[name].only&fromJSON == 0:
			out = append(out, Warning{Key: e.key, Origin: o, Msg: "not read from the JSON file, ignored"})
		}
	}
	return out
}

// crossChecks validates rules that span keys.
func crossChecks(res *Result) []error {
	c := res.Config
	var errs []error
	if c.DiskHighWaterPercent > 100 || c.DiskLowWaterPercent >= c.DiskHighWaterPercent {
		errs = append(errs, &Error{Key: "ECS_DISK_LOW_WATER_PERCENT", Origin: res.Origins["ECS_DISK_LOW_WATER_PERCENT"],
			Err: fmt.Errorf("%d%% must be below ECS_DISK_HIGH_WATER_PERCENT (%d%%), which must be at most 100%%", c.DiskLowWaterPercent, c.DiskHighWaterPercent)})
	}
	if c.TaskPidsLimit > 0 && !c.TaskCPUMemLimit {
		errs = append(errs, &Error{Key: "ECS_TASK_PIDS_LIMIT", Origin: res.Origins["ECS_TASK_PIDS_LIMIT"],
			Err: errors.New("is set to a task cgroup limit, but ECS_ENABLE_TASK_CPU_MEM_LIMIT=false: tasks have no cgroup to hold it")})
	}
	if c.EngineAuthData != "" && c.EngineAuthType == "" {
		errs = append(errs, &Error{Key: "ECS_ENGINE_AUTH_TYPE", Origin: res.Origins["ECS_ENGINE_AUTH_TYPE"],
			Err: errors.New("must be docker or dockercfg when ECS_ENGINE_AUTH_DATA is set")})
	}
	return errs
}

// useECSMode is what a configuration that asks the embedded control plane to serve other hosts is
// told: more than one host is what Amazon ECS is for.
const useECSMode = "the embedded control plane serves its own host only; to run tasks on several hosts " +
	"from one cluster, use ecs mode (set ECS_CLUSTER and let each host's agent register with Amazon ECS)"

// checkLocalListen refuses a non-loopback listen address for the embedded control plane: it serves
// its own host only, so its port (a root agent's control port) is never opened to the network.
func checkLocalListen(res *Result) error {
	c := res.Config
	host, _, err := net.SplitHostPort(c.LocalControlPlaneAddr)
	if err != nil {
		return &Error{Key: keyLocalCPAddr, Origin: res.Origins[keyLocalCPAddr], Err: fmt.Errorf("%q is not host:port: %w", c.LocalControlPlaneAddr, err)}
	}
	if isLoopbackHost(host) {
		return nil
	}
	return &Error{Key: keyLocalCPAddr, Origin: res.Origins[keyLocalCPAddr],
		Err: fmt.Errorf("%q is not a loopback address: %s", c.LocalControlPlaneAddr, useECSMode)}
}

// keyRemovedAllowedHosts is a Berth key that no longer exists: it served the embedded control plane
// to other hosts. Setting it is an error, so that such a configuration does not start half-working.
const keyRemovedAllowedHosts = "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS"

// checkRemovedKeys refuses a configuration that sets keyRemovedAllowedHosts to a value, naming the
// source of highest precedence it is set in. An empty value asks for nothing and is ignored.
func checkRemovedKeys(env map[string]string, envEntries, jsonEntries []entry, c *Config) error {
	var (
		where Origin
		set   bool
	)
	nonEmpty := func(text string) bool {
		t := strings.TrimSpace(text)
		return t != "" && t != "null" && t != "[]"
	}
	for _, e := range jsonEntries {
		if e.key == keyRemovedAllowedHosts && nonEmpty(e.text) {
			where, set = Origin{Kind: SourceJSONFile, File: c.JSONFile, Line: e.line}, true
		}
	}
	for _, e := range envEntries {
		if e.key == keyRemovedAllowedHosts && nonEmpty(e.text) {
			where, set = Origin{Kind: SourceEnvFile, File: c.EnvFile, Line: e.line}, true
		}
	}
	if v, ok := env[keyRemovedAllowedHosts]; ok && nonEmpty(v) {
		where, set = Origin{Kind: SourceEnv}, true
	}
	if !set {
		return nil
	}
	return &Error{Key: keyRemovedAllowedHosts, Origin: where, Err: errors.New("was removed: " + useECSMode)}
}

// OffhostIntrospectionAddr is where the introspection API listens with ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS
// and no ECS_INTROSPECTION_ADDR: every address, on the ECS agent's port.
const OffhostIntrospectionAddr = ":51678"

// checkIntrospectionListen keeps the introspection API on loopback unless the operator allowed
// off-host access, as the ECS agent's ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS does; with it and no
// address of the operator's, it listens on every address.
func checkIntrospectionListen(res *Result) error {
	c := res.Config
	if c.OffhostIntrospectionAccess && res.Origins[keyIntroAddr].Kind == SourceDefault {
		c.IntrospectionAddr = OffhostIntrospectionAddr
	}
	host, _, err := net.SplitHostPort(c.IntrospectionAddr)
	if err != nil {
		return &Error{Key: keyIntroAddr, Origin: res.Origins[keyIntroAddr], Err: fmt.Errorf("%q is not host:port: %w", c.IntrospectionAddr, err)}
	}
	if isLoopbackHost(host) || c.OffhostIntrospectionAccess {
		return nil
	}
	return &Error{Key: keyIntroAddr, Origin: res.Origins[keyIntroAddr],
		Err: fmt.Errorf("%q is not a loopback address: the introspection API answers without authentication; "+
			"set %s=true to allow access from other hosts", c.IntrospectionAddr, keyOffhost)}
}

// IntrospectionURL is the base URL local commands (healthcheck, ps, drain) reach the introspection
// API at: its listen address, with loopback for a listener on every address.
func (c *Config) IntrospectionURL() string {
	host, port, err := net.SplitHostPort(c.IntrospectionAddr)
	if err != nil {
		return "http://" + c.IntrospectionAddr
	}
	if a, err := netip.ParseAddr(host); host == "" || (err == nil && a.IsUnspecified()) {
		host = "127.0.0.1"
		if err == nil && a.Is6() {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// isLoopbackHost reports whether a listen host is "localhost" or a loopback address ("" and
// unspecified addresses listen everywhere).
func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// chooseMode picks ecs mode when the operator named a cluster, as the ECS agent does (the region, when
// none is configured, is read from the instance metadata service at start, not here), unless
// ECS_LOCAL_CONTROL_PLANE asks for the embedded control plane; otherwise local. Credentials are left to
// the AWS SDK's chain in ecs mode. Nothing here touches the network.
func chooseMode(res *Result) (Mode, string) {
	c := res.Config
	clusterSet := res.Origins[keyCluster].Kind != SourceDefault && c.Cluster != ""
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	switch {
	case !clusterSet:
		return ModeLocal, "ECS_CLUSTER is not set"
	case c.LocalControlPlane:
		return ModeLocal, fmt.Sprintf("ECS_CLUSTER is set (%s) and %s=true (%s) asks for the embedded control plane", res.Origins[keyCluster], keyLocalCP, res.Origins[keyLocalCP])
	case c.AWSRegion == "":
		return ModeECS, fmt.Sprintf("ECS_CLUSTER is set (%s); no AWS region is configured (%s), so it is read from the instance metadata service", res.Origins[keyCluster], keyRegion)
	default:
		return ModeECS, fmt.Sprintf("ECS_CLUSTER is set (%s) and region %s is configured (%s)", res.Origins[keyCluster], c.AWSRegion, res.Origins[keyRegion])
	}
}

// Shown is one key in Show's output.
type Shown struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
	Berth  bool   `json:"berthExtension,omitempty"`
}

// Effective is the configuration as `berth config` prints it and the agent logs it: secrets redacted.
type Effective struct {
	Mode       Mode             `json:"mode"`
	ModeReason string           `json:"modeReason"`
	EnvFile    string           `json:"envFile"`
	JSONFile   string           `json:"jsonFile"`
	Keys       map[string]Shown `json:"keys"`
}

// Show returns every key's effective value and source. Secret values are redacted.
func (r *Result) Show() Effective {
	out := Effective{Mode: r.Config.Mode, ModeReason: r.Config.ModeReason, EnvFile: r.Config.EnvFile,
		JSONFile: r.Config.JSONFile, Keys: map[string]Shown{}}
	for _, k := range keyTable() {
		o, ok := r.Origins[k.name]
		source := "unset"
		if ok {
			source = o.String()
		}
		out.Keys[k.name] = Shown{Value: k.field(r.Config).show(), Source: source, Berth: k.berth}
	}
	return out
}

// LogFields renders the configuration as logger fields: every key with its value as text (strings as
// they are, Stringers such as a redacted secret through String, anything else as JSON), ordered by
// name, and, separately, every key that did not come from its default with its source.
func (e Effective) LogFields() (values, sources []any) {
	for _, name := range slices.Sorted(maps.Keys(e.Keys)) {
		k := e.Keys[name]
		values = append(values, name, shownText(k.Value))
		if k.Source != string(SourceDefault) && k.Source != "unset" {
			sources = append(sources, name, k.Source)
		}
	}
	return values, sources
}

// shownText renders one shown value for LogFields.
func shownText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	}
	text, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(%T)", v)
	}
	return string(text)
}

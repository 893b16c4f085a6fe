package config

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/set"
)

func TestLoadDefaults(t *testing.T) {
	f := newFiles(t, "", "")
	res := f.mustLoad(t, nil)
	assert.Empty(t, res.Warnings)

	c := res.Config
	// The ECS agent's documented defaults.
	assert.Equal(t, "default", c.Cluster)
	assert.Equal(t, 30*time.Second, c.DockerStopTimeout)
	assert.Equal(t, 3*time.Hour, c.TaskCleanupWaitDuration)
	assert.Equal(t, 30*time.Minute, c.ImageCleanupInterval)
	assert.Equal(t, time.Hour, c.ImageMinimumCleanupAge)
	assert.Equal(t, 5, c.NumImagesToDeletePerCycle)
	assert.Equal(t, PullDefault, c.ImagePullBehavior)
	assert.Equal(t, 3*time.Minute, c.ContainerStartTimeout)
	assert.Equal(t, 4*time.Minute, c.ContainerCreateTimeout)
	assert.Equal(t, time.Minute, c.ImagePullInactivityTimeout)
	assert.Equal(t, "info", c.Log.Level)
	assert.Equal(t, "date", c.Log.RolloverType)
	assert.Equal(t, 24, c.Log.MaxRollCount)
	assert.Equal(t, 10.0, c.Log.MaxFileSizeMB)
	assert.Equal(t, "logfmt", c.Log.OutputFormat)
	assert.Equal(t, "", c.Log.File)
	assert.Equal(t, []uint16{22, 2375, 2376, 51678, 51679}, c.ReservedPorts)
	assert.Empty(t, c.ReservedPortsUDP)
	assert.Equal(t, "unix:///var/run/docker.sock", c.DockerHost)
	assert.Equal(t, 0, c.ReservedMemoryMiB)
	assert.False(t, c.ImageCleanupDisabled)
	assert.False(t, c.PrivilegedDisabled)
	assert.False(t, c.TaskENIEnabled)
	assert.Equal(t, map[string]string{}, c.InstanceAttributes)
	assert.Empty(t, c.AWSVPCAdditionalLocalRoutes)
	assert.Nil(t, c.OverrideAWSVPCLocalIPv4Address)
	assert.Equal(t, Secret(""), c.EngineAuthData)
	assert.Equal(t, "", c.EngineAuthType)

	assert.Equal(t, 0, c.Registry.Require.Len())
	assert.False(t, c.Registry.ECRRegions.Configured)
	assert.Equal(t, 0, c.Registry.IncludeAccounts.Len())
	assert.Equal(t, []string{"602401143452", "918309763551"}, set.Sorted(c.Registry.ExcludeAccounts))

	assert.Equal(t, f.env, c.EnvFile)
	assert.Equal(t, f.json, c.JSONFile)
	assert.Equal(t, ModeLocal, c.Mode)
	assert.NotEmpty(t, c.ModeReason)

	for _, k := range keyTable() {
		o, ok := res.Origins[k.name]
		switch k.name {
		case keyEnvFile, keyJSONFile:
			assert.Equal(t, "env", o.String(), k.name)
		case "ECS_REGISTRY_ECR_REGIONS":
			assert.False(t, ok, "a key without a default has no origin until a source sets it")
		default:
			assert.Equal(t, "default", o.String(), k.name)
		}
	}
}

// TestLoadPrecedence sets one key in every source and removes the sources from the top down.
func TestLoadPrecedence(t *testing.T) {
	const envFile = "# comment\nECS_CLUSTER=from-env-file\n"
	const jsonFile = "{\n  \"Cluster\": \"from-json\"\n}\n"
	tests := []struct {
		name               string
		flag, env          bool
		envFile, jsonFile  bool
		want, wantOrigin   string
		wantOriginLineFile string
	}{
		{name: "flag wins", flag: true, env: true, envFile: true, jsonFile: true, want: "from-flag", wantOrigin: "flag"},
		{name: "env beats files", env: true, envFile: true, jsonFile: true, want: "from-env", wantOrigin: "env"},
		{name: "env file beats JSON file", envFile: true, jsonFile: true, want: "from-env-file", wantOrigin: "env-file:2"},
		{name: "JSON file beats default", jsonFile: true, want: "from-json", wantOrigin: "json-file:2"},
		{name: "default", want: "default", wantOrigin: "default"},
		{name: "flag over JSON file", flag: true, jsonFile: true, want: "from-flag", wantOrigin: "flag"},
		{name: "env over JSON file", env: true, jsonFile: true, want: "from-env", wantOrigin: "env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ef, jf string
			if tt.envFile {
				ef = envFile
			}
			if tt.jsonFile {
				jf = jsonFile
			}
			f := newFiles(t, ef, jf)
			var flags map[string]string
			if tt.flag {
				flags = map[string]string{keyCluster: "from-flag"}
			}
			var env []string
			if tt.env {
				env = append(env, "ECS_CLUSTER=from-env")
			}
			res := f.mustLoad(t, flags, env...)
			assert.Equal(t, tt.want, res.Config.Cluster)
			assert.Equal(t, tt.wantOrigin, res.Origins[keyCluster].String())
			assert.Empty(t, res.Warnings)
		})
	}
}

// TestLoadPrecedenceAllSources takes each key from a different source in one Load, through the process
// environment set with t.Setenv.
func TestLoadPrecedenceAllSources(t *testing.T) {
	f := newFiles(t,
		"ECS_CLUSTER=env-file\n"+ // 1
			"ECS_LOGLEVEL=error\n"+ // 2
			"ECS_CONTAINER_STOP_TIMEOUT=50s\n", // 3
		"{\n"+
			`  "Cluster": "json",`+"\n"+ // 2
			`  "LogLevel": "warn",`+"\n"+ // 3
			`  "DockerStopTimeout": "40s",`+"\n"+ // 4
			`  "NumImagesToDeletePerCycle": 7,`+"\n"+ // 5
			`  "ECS_DATADIR": "/json/data"`+"\n"+ // 6: ECS_* names are accepted in the JSON file
			"}\n")
	t.Setenv(keyEnvFile, f.env)
	t.Setenv(keyJSONFile, f.json)
	t.Setenv("ECS_CLUSTER", "env")
	t.Setenv("ECS_LOGLEVEL", "debug")

	res, err := Load(Sources{Environ: os.Environ(), Flags: map[string]string{keyCluster: "flag"}})
	require.NoError(t, err)
	c := res.Config
	assert.Equal(t, "flag", c.Cluster)
	assert.Equal(t, "debug", c.Log.Level)
	assert.Equal(t, 50*time.Second, c.DockerStopTimeout)
	assert.Equal(t, 7, c.NumImagesToDeletePerCycle)
	assert.Equal(t, "/json/data", c.DataDir)

	assert.Equal(t, "flag", res.Origins["ECS_CLUSTER"].String())
	assert.Equal(t, "env", res.Origins["ECS_LOGLEVEL"].String())
	assert.Equal(t, "env-file:3", res.Origins["ECS_CONTAINER_STOP_TIMEOUT"].String())
	assert.Equal(t, "json-file:5", res.Origins["ECS_NUM_IMAGES_DELETE_PER_CYCLE"].String())
	assert.Equal(t, "json-file:6", res.Origins["ECS_DATADIR"].String())
	assert.Equal(t, f.env, res.Origins["ECS_CONTAINER_STOP_TIMEOUT"].File)
	assert.Equal(t, f.json, res.Origins["ECS_DATADIR"].File)
}

func TestLoadFileLocation(t *testing.T) {
	t.Run("flag --ecs-config beats ECS_ENV_FILE", func(t *testing.T) {
		f := newFiles(t, "ECS_CLUSTER=from-env-named\n", "")
		other := filepath.Join(f.dir, "other.config")
		require.NoError(t, os.WriteFile(other, []byte("ECS_CLUSTER=from-flag-named\n"), 0o600))
		res := f.mustLoad(t, map[string]string{keyEnvFile: other})
		assert.Equal(t, other, res.Config.EnvFile)
		assert.Equal(t, "flag", res.Origins[keyEnvFile].String())
		assert.Equal(t, "from-flag-named", res.Config.Cluster)
	})
	t.Run("ECS_ENV_FILE names the env file", func(t *testing.T) {
		f := newFiles(t, "ECS_CLUSTER=from-env-file\n", "")
		res := f.mustLoad(t, nil)
		assert.Equal(t, f.env, res.Config.EnvFile)
		assert.Equal(t, "env", res.Origins[keyEnvFile].String())
		assert.Equal(t, "from-env-file", res.Config.Cluster)
	})
	t.Run("JSON file path from the env file", func(t *testing.T) {
		f := newFiles(t, "", "")
		other := filepath.Join(f.dir, "other.json")
		require.NoError(t, os.WriteFile(other, []byte(`{"Cluster": "from-other-json"}`), 0o600))
		require.NoError(t, os.WriteFile(f.env, []byte("# c\nECS_AGENT_CONFIG_FILE_PATH="+other+"\n"), 0o600))
		res, err := Load(Sources{Environ: []string{keyEnvFile + "=" + f.env}})
		require.NoError(t, err)
		assert.Equal(t, other, res.Config.JSONFile)
		assert.Equal(t, "env-file:2", res.Origins[keyJSONFile].String())
		assert.Equal(t, "from-other-json", res.Config.Cluster)
	})
	t.Run("env beats the env file for the JSON file path", func(t *testing.T) {
		f := newFiles(t, "", `{"Cluster": "from-env-named-json"}`)
		require.NoError(t, os.WriteFile(f.env, []byte("ECS_AGENT_CONFIG_FILE_PATH="+filepath.Join(f.dir, "missing.json")+"\n"), 0o600))
		res := f.mustLoad(t, nil)
		assert.Equal(t, f.json, res.Config.JSONFile)
		assert.Equal(t, "from-env-named-json", res.Config.Cluster)
	})
	t.Run("flag --config-file beats env", func(t *testing.T) {
		f := newFiles(t, "", `{"Cluster": "wrong"}`)
		other := filepath.Join(f.dir, "other.json")
		require.NoError(t, os.WriteFile(other, []byte(`{"Cluster": "from-flag-json"}`), 0o600))
		res := f.mustLoad(t, map[string]string{keyJSONFile: other})
		assert.Equal(t, "flag", res.Origins[keyJSONFile].String())
		assert.Equal(t, "from-flag-json", res.Config.Cluster)
	})
}

func TestLoadMissingFiles(t *testing.T) {
	t.Run("explicitly named files that are missing are errors", func(t *testing.T) {
		tests := []struct {
			name    string
			environ func(f files, missing string) []string
			flags   func(missing string) map[string]string
			envFile func(missing string) string
		}{
			{name: "env file from ECS_ENV_FILE", environ: func(f files, m string) []string {
				return []string{keyEnvFile + "=" + m, keyJSONFile + "=" + f.json}
			}},
			{name: "env file from --ecs-config", environ: func(f files, m string) []string {
				return []string{keyJSONFile + "=" + f.json}
			}, flags: func(m string) map[string]string { return map[string]string{keyEnvFile: m} }},
			{name: "JSON file from ECS_AGENT_CONFIG_FILE_PATH", environ: func(f files, m string) []string {
				return []string{keyEnvFile + "=" + f.env, keyJSONFile + "=" + m}
			}},
			{name: "JSON file from --config-file", environ: func(f files, m string) []string {
				return []string{keyEnvFile + "=" + f.env}
			}, flags: func(m string) map[string]string { return map[string]string{keyJSONFile: m} }},
			{name: "JSON file from the env file", environ: func(f files, m string) []string {
				return []string{keyEnvFile + "=" + f.env}
			}, envFile: func(m string) string { return keyJSONFile + "=" + m + "\n" }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFiles(t, "", "")
				missing := filepath.Join(f.dir, "does-not-exist")
				if tt.envFile != nil {
					require.NoError(t, os.WriteFile(f.env, []byte(tt.envFile(missing)), 0o600))
				}
				var flags map[string]string
				if tt.flags != nil {
					flags = tt.flags(missing)
				}
				res, err := Load(Sources{Environ: tt.environ(f, missing), Flags: flags})
				errs := requireConfigErrors(t, err)
				require.Len(t, errs, 1)
				assert.Contains(t, err.Error(), missing)
				assert.ErrorIs(t, err, os.ErrNotExist)
				require.NotNil(t, res, "the result is returned with the error")
			})
		}
	})
	t.Run("files at their default paths may be missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "does-not-exist")
		entries, err := readEnvFile(missing, false)
		require.NoError(t, err)
		assert.Empty(t, entries)
		entries, err = readJSONFile(missing, false)
		require.NoError(t, err)
		assert.Empty(t, entries)

		_, err = readEnvFile(missing, true)
		require.ErrorIs(t, err, ErrInvalid)
		_, err = readJSONFile(missing, true)
		require.ErrorIs(t, err, ErrInvalid)
	})
	t.Run("the default paths are the ECS agent's", func(t *testing.T) {
		byName := map[string]key{}
		for _, k := range keyTable() {
			byName[k.name] = k
		}
		assert.Equal(t, "/etc/ecs/ecs.config", byName[keyEnvFile].def)
		assert.Equal(t, "/etc/ecs/ecs.config.json", byName[keyJSONFile].def)
		assert.Equal(t, "ecs-config", byName[keyEnvFile].flag)
	})
}

func TestOriginString(t *testing.T) {
	tests := []struct {
		o         Origin
		want      string
		wantWhere string
	}{
		{Origin{Kind: SourceFlag}, "flag", "flag"},
		{Origin{Kind: SourceEnv}, "env", "env"},
		{Origin{Kind: SourceEnvFile, File: "/x/ecs.config", Line: 3}, "env-file:3", "env-file /x/ecs.config:3"},
		{Origin{Kind: SourceJSONFile, File: "/x/ecs.config.json", Line: 12}, "json-file:12", "json-file /x/ecs.config.json:12"},
		{Origin{Kind: SourceJSONFile, File: "/x/ecs.config.json"}, "json-file", "json-file /x/ecs.config.json"},
		{Origin{Kind: SourceDefault}, "default", "default"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.o.String())
			assert.Equal(t, tt.wantWhere, tt.o.where())
		})
	}
}

func TestErrorAndWarningText(t *testing.T) {
	o := Origin{Kind: SourceEnvFile, File: "/e", Line: 4}
	e := &Error{Key: "ECS_X", Origin: o, Err: errEnvLine}
	assert.Equal(t, "ECS_X (env-file /e:4): expected KEY=VALUE", e.Error())
	assert.ErrorIs(t, e, ErrInvalid)
	assert.ErrorIs(t, e, errEnvLine)
	assert.Equal(t, "env-file /e:4: expected KEY=VALUE", (&Error{Origin: o, Err: errEnvLine}).Error())
	assert.Equal(t, "ECS_X (env-file /e:4): raised", Warning{Key: "ECS_X", Origin: o, Msg: "raised"}.String())
	assert.Equal(t, "env-file /e:4: raised", Warning{Origin: o, Msg: "raised"}.String())
}

func TestAdditionalLocalRoutes(t *testing.T) {
	const key = "ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES"
	want := []string{"10.0.0.0/8", "192.168.1.0/24"}
	tests := []struct {
		name               string
		env, envFile, json string
		want               []string
		wantOrigin         string
	}{
		{name: "env JSON array", env: `["10.0.0.0/8", "192.168.1.0/24"]`, want: want, wantOrigin: "env"},
		{name: "env comma list", env: "10.0.0.0/8, 192.168.1.0/24", want: want, wantOrigin: "env"},
		{name: "env file JSON array", envFile: "\n" + key + `=["10.0.0.0/8","192.168.1.0/24"]` + "\n", want: want, wantOrigin: "env-file:2"},
		{name: "env file quoted JSON array", envFile: key + `='["10.0.0.0/8","192.168.1.0/24"]'` + "\n", want: want, wantOrigin: "env-file:1"},
		{name: "env file comma list", envFile: key + "=10.0.0.0/8,192.168.1.0/24\n", want: want, wantOrigin: "env-file:1"},
		{name: "JSON file field name", json: "{\n\"AWSVPCAdditionalLocalRoutes\": [\"10.0.0.0/8\", \"192.168.1.0/24\"]\n}", want: want, wantOrigin: "json-file:2"},
		{name: "JSON file ECS name", json: `{"` + key + `": ["10.0.0.0/8", "192.168.1.0/24"]}`, want: want, wantOrigin: "json-file:1"},
		{name: "JSON file comma string", json: `{"AWSVPCAdditionalLocalRoutes": "10.0.0.0/8,192.168.1.0/24"}`, want: want, wantOrigin: "json-file:1"},
		{name: "env beats JSON file", env: "172.16.0.0/12", json: `{"AWSVPCAdditionalLocalRoutes": ["10.0.0.0/8"]}`, want: []string{"172.16.0.0/12"}, wantOrigin: "env"},
		{name: "empty array", env: "[]", want: []string{}, wantOrigin: "env"},
		{name: "empty list", env: "", want: []string{}, wantOrigin: "env"},
		{name: "IPv6", env: "fd00::/8", want: []string{"fd00::/8"}, wantOrigin: "env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			var env []string
			if tt.env != "" || tt.wantOrigin == "env" {
				env = append(env, key+"="+tt.env)
			}
			res := f.mustLoad(t, nil, env...)
			assert.Equal(t, tt.want, cidrs(res.Config.AWSVPCAdditionalLocalRoutes))
			assert.Equal(t, tt.wantOrigin, res.Origins[key].String())
		})
	}

	bad := []struct {
		name, envFile, json string
		env                 []string
		wantWhere           string
	}{
		{name: "env", env: []string{key + "=10.0.0.0/8,10.0.0.300/8"}, wantWhere: "(env)"},
		{name: "env file", envFile: "# routes\n" + key + "=10.0.0.0/8,10.0.0.300/8\n", wantWhere: "ecs.config:2)"},
		{name: "env file array", envFile: key + `=["10.0.0.300/8"]` + "\n", wantWhere: "ecs.config:1)"},
		{name: "JSON file", json: "{\n  \"Cluster\": \"c\",\n  \"AWSVPCAdditionalLocalRoutes\": [\"10.0.0.300/8\"]\n}", wantWhere: "ecs.config.json:3)"},
		{name: "not a list", json: `{"AWSVPCAdditionalLocalRoutes": 42}`, wantWhere: "ecs.config.json:1)"},
		{name: "not an array", env: []string{key + "=[10.0.0.0/8"}, wantWhere: "(env)"},
	}
	for _, tt := range bad {
		t.Run("bad "+tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			_, err := f.load(nil, tt.env...)
			ce := keyError(t, err, key)
			assert.Contains(t, err.Error(), key)
			assert.Contains(t, err.Error(), tt.wantWhere)
			if strings.Contains(tt.json+tt.envFile+strings.Join(tt.env, ""), "10.0.0.300/8") {
				assert.Contains(t, err.Error(), "10.0.0.300/8", "the bad CIDR is named")
			}
			if tt.envFile != "" {
				assert.Equal(t, f.env, ce.Origin.File)
				assert.Equal(t, SourceEnvFile, ce.Origin.Kind)
			}
			if tt.json != "" {
				assert.Equal(t, f.json, ce.Origin.File)
				assert.Equal(t, SourceJSONFile, ce.Origin.Kind)
			}
		})
	}
}

func TestOverrideAWSVPCLocalIPv4Address(t *testing.T) {
	const key = "OverrideAWSVPCLocalIPv4Address"
	t.Run("validation", func(t *testing.T) {
		tests := []struct {
			value   string
			want    string // empty: an error
			wantErr string
		}{
			{value: "169.254.172.10/22", want: "169.254.172.10/22"},
			{value: "169.254.172.1/22", want: "169.254.172.1/22"},
			{value: "169.254.175.254/22", want: "169.254.175.254/22"},
			{value: "169.254.172.0/22", wantErr: "network address"},
			{value: "169.254.173.0/22", want: "169.254.173.0/22"}, // inside the prefix, not its network address
			{value: "169.254.175.255/22", wantErr: "broadcast address"},
			{value: "10.0.0.1", wantErr: "prefix length"},
			{value: "::1/64", wantErr: "not an IPv4 address"},
			{value: "::ffff:169.254.172.10/118", wantErr: "not an IPv4 address"},
			{value: "fe80::1/64", wantErr: "not an IPv4 address"},
			{value: "10.0.0.0/31", want: "10.0.0.0/31"},
			{value: "10.0.0.1/31", want: "10.0.0.1/31"},
			{value: "10.0.0.7/32", want: "10.0.0.7/32"},
			{value: "10.0.0.1/33", wantErr: "prefix length"},
			{value: "garbage", wantErr: "prefix length"},
			{value: "", want: ""},
		}
		for _, tt := range tests {
			t.Run(tt.value, func(t *testing.T) {
				f := newFiles(t, "", "{\n  \""+key+"\": \""+tt.value+"\"\n}\n")
				res, err := f.load(nil)
				if tt.wantErr != "" {
					ce := keyError(t, err, key)
					assert.Contains(t, ce.Error(), tt.wantErr)
					assert.Equal(t, "json-file:2", ce.Origin.String())
					assert.Contains(t, err.Error(), key)
					assert.Nil(t, res.Config.OverrideAWSVPCLocalIPv4Address)
					return
				}
				require.NoError(t, err)
				got := res.Config.OverrideAWSVPCLocalIPv4Address
				if tt.want == "" {
					assert.Nil(t, got)
					return
				}
				require.NotNil(t, got)
				assert.Equal(t, []string{tt.want}, cidrs([]cnitypes.IPNet{*got}))
				assert.Len(t, got.IP, 4, "stored as a 4-byte IPv4 address")
				assert.Equal(t, "json-file:2", res.Origins[key].String())
			})
		}
	})
	t.Run("JSON value is not a string", func(t *testing.T) {
		f := newFiles(t, "", `{"`+key+`": 42}`)
		_, err := f.load(nil)
		keyError(t, err, key)
	})
	t.Run("no env var sets it", func(t *testing.T) {
		f := newFiles(t,
			"ECS_CLUSTER=c\n"+ // 1
				key+"=169.254.172.10/22\n"+ // 2
				"ECS_OVERRIDE_AWSVPC_LOCAL_IPV4_ADDRESS=169.254.172.10/22\n", // 3
			"")
		res := f.mustLoad(t, nil,
			key+"=169.254.172.10/22",
			"ECS_OVERRIDE_AWSVPC_LOCAL_IPV4_ADDRESS=169.254.172.10/22")
		assert.Nil(t, res.Config.OverrideAWSVPCLocalIPv4Address)
		assert.Equal(t, "default", res.Origins[key].String())

		w := warningFor(res, key)
		require.NotNil(t, w, "the env file's %s is reported", key)
		assert.Equal(t, 2, w.Origin.Line)
		assert.Contains(t, w.String(), key)
		assert.Contains(t, w.String(), ":2")
		w = warningFor(res, "ECS_OVERRIDE_AWSVPC_LOCAL_IPV4_ADDRESS")
		require.NotNil(t, w, "the env file's ECS_OVERRIDE_AWSVPC_LOCAL_IPV4_ADDRESS is reported")
		assert.Equal(t, 3, w.Origin.Line)
		assert.Contains(t, w.String(), ":3")
	})
	t.Run("flags do not set it either", func(t *testing.T) {
		f := newFiles(t, "", "")
		res := f.mustLoad(t, map[string]string{key: "169.254.172.10/22"})
		assert.Nil(t, res.Config.OverrideAWSVPCLocalIPv4Address)
	})
	t.Run("the JSON file's value stands against env", func(t *testing.T) {
		f := newFiles(t, key+"=169.254.172.20/22\n", `{"`+key+`": "169.254.172.10/22"}`)
		res := f.mustLoad(t, nil, key+"=169.254.172.30/22")
		require.NotNil(t, res.Config.OverrideAWSVPCLocalIPv4Address)
		assert.Equal(t, []string{"169.254.172.10/22"}, cidrs([]cnitypes.IPNet{*res.Config.OverrideAWSVPCLocalIPv4Address}))
		assert.Equal(t, "json-file:1", res.Origins[key].String())
	})
}

func TestInstanceAttributes(t *testing.T) {
	const key = "ECS_INSTANCE_ATTRIBUTES"
	tests := []struct {
		name               string
		env, envFile, json string
		want               map[string]string
		wantType, wantSyn  bool
	}{
		{name: "env object", env: `{"stack":"prod","team":"x"}`, want: map[string]string{"stack": "prod", "team": "x"}},
		{name: "env empty", env: "", want: map[string]string{}},
		{name: "env file quoted", envFile: key + `='{"stack": "prod"}'` + "\n", want: map[string]string{"stack": "prod"}},
		{name: "env file multi-line", envFile: key + "='{\n  \"stack\": \"prod\"\n}'\n", want: map[string]string{"stack": "prod"}},
		{name: "JSON file object", json: `{"InstanceAttributes": {"stack": "prod"}}`, want: map[string]string{"stack": "prod"}},
		{name: "JSON file ECS name", json: `{"` + key + `": {"stack": "prod"}}`, want: map[string]string{"stack": "prod"}},
		{name: "number value", env: `{"a": 1}`, wantType: true},
		{name: "nested value", env: `{"a": {"b": "c"}}`, wantType: true},
		{name: "array", env: `["a"]`, wantType: true},
		{name: "string", env: `"a"`, wantType: true},
		{name: "syntax", env: `{"a": "b"`, wantSyn: true},
		{name: "not JSON", env: `stack=prod`, wantSyn: true},
		{name: "env file number value", envFile: key + `={"a": 1}` + "\n", wantType: true},
		{name: "env file multi-line number value", envFile: key + "='{\n\"a\": 1\n}'\n", wantType: true},
		{name: "JSON file number value", json: `{"InstanceAttributes": {"a": 1}}`, wantType: true},
		{name: "JSON file string holding bad JSON", json: `{"InstanceAttributes": "{bad"}`, wantSyn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			var env []string
			if tt.env != "" || (tt.envFile == "" && tt.json == "") {
				env = append(env, key+"="+tt.env)
			}
			res, err := f.load(nil, env...)
			if !tt.wantType && !tt.wantSyn {
				require.NoError(t, err)
				assert.Equal(t, tt.want, res.Config.InstanceAttributes)
				return
			}
			ce := keyError(t, err, key)
			assert.Contains(t, err.Error(), key)
			assert.Equal(t, key, ce.Key)
			assert.Equal(t, tt.wantType, errorsAs[*json.UnmarshalTypeError](err), "errors.As *json.UnmarshalTypeError")
			assert.Equal(t, tt.wantSyn, errorsAs[*json.SyntaxError](err), "errors.As *json.SyntaxError")
		})
	}
}

// TestSecretsNeverShown puts the secret in the env, the env file and the JSON file in many broken ways
// and checks it reaches no error, warning or Show output.
func TestSecretsNeverShown(t *testing.T) {
	const key = "ECS_ENGINE_AUTH_DATA"
	tests := []struct {
		name               string
		env                []string
		envFile, json      string
		wantErr            bool
		wantErrKey         string
		wantWarn           bool
		wantSecretRevealed bool
	}{
		{name: "valid env", env: []string{key + "=" + authData, "ECS_ENGINE_AUTH_TYPE=dockercfg"}, wantSecretRevealed: true},
		{name: "valid env file", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + key + "='" + authData + "'\n", wantSecretRevealed: true},
		{name: "valid JSON file object", json: `{"EngineAuthType": "docker", "EngineAuthData": ` + authData + `}`, wantSecretRevealed: true},
		{name: "valid JSON file string", json: `{"EngineAuthType": "docker", "EngineAuthData": ` + strconv.Quote(authData) + `}`, wantSecretRevealed: true},
		{name: "valid with unknown keys", env: []string{key + "=" + authData, "ECS_ENGINE_AUTH_TYPE=docker"},
			envFile: "ECS_BOGUS=1\n", json: `{"Bogus": 1}`, wantWarn: true, wantSecretRevealed: true},

		{name: "env not JSON", env: []string{key + "=" + secret, "ECS_ENGINE_AUTH_TYPE=docker"}, wantErr: true, wantErrKey: key},
		{name: "env truncated JSON", env: []string{key + "=" + authData[:len(authData)-1], "ECS_ENGINE_AUTH_TYPE=docker"}, wantErr: true, wantErrKey: key},
		{name: "env array", env: []string{key + `=["` + secret + `"]`, "ECS_ENGINE_AUTH_TYPE=docker"}, wantErr: true, wantErrKey: key},
		{name: "env JSON string", env: []string{key + `="` + secret + `"`, "ECS_ENGINE_AUTH_TYPE=docker"}, wantErr: true, wantErrKey: key},
		{name: "env without auth type", env: []string{key + "=" + authData}, wantErr: true, wantErrKey: "ECS_ENGINE_AUTH_TYPE"},
		{name: "env bad auth type", env: []string{key + "=" + authData, "ECS_ENGINE_AUTH_TYPE=basic"}, wantErr: true, wantErrKey: "ECS_ENGINE_AUTH_TYPE"},

		{name: "env file bad line after secret", envFile: key + "=" + authData + "\nnot a line\n", wantErr: true},
		{name: "env file bad line holding secret", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + secret + "\n", wantErr: true},
		{name: "env file unterminated double quote", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + key + `="` + authData + "\nECS_CLUSTER=x\n", wantErr: true},
		{name: "env file unterminated single quote", envFile: key + `='` + authData + "\n", wantErr: true},
		{name: "env file bad JSON", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + key + "=" + authData[:len(authData)-2] + "\n", wantErr: true, wantErrKey: key},
		{name: "env file not an object", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + key + "=" + secret + "\n", wantErr: true, wantErrKey: key},
		{name: "env file multi-line not an object", envFile: "ECS_ENGINE_AUTH_TYPE=docker\n" + key + "='[\n\"" + secret + "\"\n]'\n", wantErr: true, wantErrKey: key},
		{name: "env file quote swallows secret into a string key",
			envFile: "ECS_LOGLEVEL=\"debug\n" + key + `="` + authData + `"` + "\nECS_ENGINE_AUTH_TYPE=docker\n", wantErr: true, wantErrKey: "ECS_LOGLEVEL"},
		{name: "env file quote swallows secret into a number key",
			envFile: "ECS_NUM_IMAGES_DELETE_PER_CYCLE='5\n" + key + `='` + authData + "'\n", wantErr: true, wantErrKey: "ECS_NUM_IMAGES_DELETE_PER_CYCLE"},
		{name: "env file quote swallows secret into a list key",
			envFile: "ECS_REGISTRY_REQUIRE='ecr,\n" + key + `=` + secret + "'\n", wantErr: true, wantErrKey: "ECS_REGISTRY_REQUIRE"},
		{name: "env file quote swallows secret into a free string key",
			envFile: "ECS_LOGFILE=\"/var/log/berth.log\n" + key + `="` + authData + `"` + "\nECS_ENGINE_AUTH_TYPE=docker\n", wantErr: true, wantErrKey: "ECS_LOGFILE"},
		{name: "env file quote swallows secret into ECR regions",
			envFile: "ECS_REGISTRY_ECR_REGIONS='us-east-1,\n" + key + `=` + secret + "'\n", wantErr: true, wantErrKey: "ECS_REGISTRY_ECR_REGIONS"},
		{name: "env file quote swallows secret into an attributes object",
			envFile: "ECS_INSTANCE_ATTRIBUTES='{\"a\": \"b\"}\n" + key + `='` + authData + "'\n", wantErr: true, wantErrKey: "ECS_INSTANCE_ATTRIBUTES"},
		{name: "env file quote swallows secret into an unknown key",
			envFile: "ECS_BOGUS='x\n" + key + `=` + secret + "'\n", wantWarn: true},

		{name: "JSON syntax error after secret", json: "{\n  \"EngineAuthData\": " + authData + ",\n  oops\n}", wantErr: true},
		{name: "JSON missing comma after secret", json: `{"EngineAuthData": ` + authData + ` "Cluster": "x"}`, wantErr: true},
		{name: "JSON unterminated string", json: `{"EngineAuthType": "docker", "EngineAuthData": "` + secret + "\n}", wantErr: true},
		{name: "JSON unterminated at EOF", json: `{"EngineAuthData": "` + secret, wantErr: true},
		{name: "JSON nested trailing comma", json: "{\"EngineAuthData\": {\n \"a\": \"" + secret + "\",\n}}", wantErr: true},
		{name: "JSON bad escape in secret", json: `{"EngineAuthData": "` + secret + `\x"}`, wantErr: true},
		{name: "JSON control character in secret", json: "{\"EngineAuthData\": \"" + secret + "\x01\"}", wantErr: true},
		{name: "JSON trailing data", json: `{"EngineAuthData": ` + authData + `} ` + secret, wantErr: true},
		{name: "JSON second object", json: `{} {"EngineAuthData": "` + secret + `"}`, wantErr: true},
		{name: "JSON top level array", json: `["` + secret + `"]`, wantErr: true},
		{name: "JSON top level string", json: `"` + secret + `"`, wantErr: true},
		{name: "JSON secret as bare word", json: `{"EngineAuthData": ` + secret + `}`, wantErr: true},
		{name: "JSON not an object", json: `{"EngineAuthType": "docker", "EngineAuthData": "` + secret + `"}`, wantErr: true, wantErrKey: key},
		{name: "JSON array", json: `{"EngineAuthType": "docker", "EngineAuthData": ["` + secret + `"]}`, wantErr: true, wantErrKey: key},
		{name: "JSON string holding bad JSON", json: `{"EngineAuthType": "docker", "EngineAuthData": "{\"a\": \"` + secret + `\""}`, wantErr: true, wantErrKey: key},
		{name: "JSON ECS name not an object", json: `{"EngineAuthType": "docker", "` + key + `": ["` + secret + `"]}`, wantErr: true, wantErrKey: key},
		{name: "JSON without auth type", json: `{"EngineAuthData": ` + authData + `}`, wantErr: true, wantErrKey: "ECS_ENGINE_AUTH_TYPE"},
		{name: "JSON with bad neighbours", json: `{"EngineAuthType": "docker", "EngineAuthData": ` + authData + `, "LogLevel": "loud", "Bogus": 1}`,
			wantErr: true, wantErrKey: "ECS_LOGLEVEL", wantWarn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			res, err := f.load(nil, tt.env...)
			requireNoSecret(t, res, err)
			if tt.wantErr {
				errs := requireConfigErrors(t, err)
				if tt.wantErrKey != "" {
					keyError(t, err, tt.wantErrKey)
				}
				for _, e := range errs {
					assert.NotContains(t, e.Error(), secret)
				}
			} else {
				require.NoError(t, err)
			}
			if tt.wantWarn {
				assert.NotEmpty(t, res.Warnings)
			}
			if tt.wantSecretRevealed {
				assert.Contains(t, res.Config.EngineAuthData.Reveal(), secret)
				shown := res.Show().Keys[key]
				assert.Equal(t, Secret(authData), shown.Value)
				out, mErr := json.Marshal(shown)
				require.NoError(t, mErr)
				var back Shown
				require.NoError(t, json.Unmarshal(out, &back))
				assert.Equal(t, redacted, back.Value)
			}
		})
	}
}

func TestSecretSwallowedIntoJSONFilePath(t *testing.T) {
	f := newFiles(t, "", "")
	require.NoError(t, os.WriteFile(f.env, []byte(keyJSONFile+"=\""+f.json+"\nECS_ENGINE_AUTH_DATA=\""+authData+"\"\n"), 0o600))
	res, err := Load(Sources{Environ: []string{keyEnvFile + "=" + f.env}})
	requireNoSecret(t, res, err)
	ce := keyError(t, err, keyJSONFile)
	assert.Contains(t, ce.Error(), "lines 1-2")
}

func TestUnknownKeysWarn(t *testing.T) {
	f := newFiles(t,
		"# comment\n"+ // 1
			"PATH=/usr/bin\n"+ // 2: not ECS_*: the env file may hold other variables
			"ECS_BOGUS=1\n"+ // 3
			"ECS_CLUSTER=c\n"+ // 4
			"export ECS_TYPO_CLUSTER=x\n"+ // 5
			"ECS_ENV_FILE=/elsewhere\n", // 6: known, but not read from the env file
		"{\n"+
			`  "Cluster": "c",`+"\n"+ // 2
			`  "Bogus": 1,`+"\n"+ // 3
			`  "ECS_BOGUS2": "x",`+"\n"+ // 4
			`  "lowercase": {"nested": [1, 2]},`+"\n"+ // 5
			`  "ECS_ENV_FILE": "/elsewhere"`+"\n"+ // 6: known, but not read from the JSON file
			"}\n")
	res := f.mustLoad(t, nil)
	type want struct {
		key  string
		kind SourceKind
		line int
	}
	wants := []want{
		{"ECS_BOGUS", SourceEnvFile, 3},
		{"ECS_TYPO_CLUSTER", SourceEnvFile, 5},
		{"ECS_ENV_FILE", SourceEnvFile, 6},
		{"Bogus", SourceJSONFile, 3},
		{"ECS_BOGUS2", SourceJSONFile, 4},
		{"lowercase", SourceJSONFile, 5},
		{"ECS_ENV_FILE", SourceJSONFile, 6},
	}
	var got []want
	for _, w := range res.Warnings {
		got = append(got, want{w.Key, w.Origin.Kind, w.Origin.Line})
		s := w.String()
		assert.Contains(t, s, w.Key)
		assert.Contains(t, s, ":"+strconv.Itoa(w.Origin.Line))
	}
	assert.ElementsMatch(t, wants, got)
	assert.Equal(t, f.env, res.Config.EnvFile, "ECS_ENV_FILE in a file does not move the env file")
	assert.Equal(t, "c", res.Config.Cluster)
}

func TestMinimums(t *testing.T) {
	tests := []struct {
		name       string
		env        string
		envFile    string
		json       string
		get        func(c *Config) any
		want       any
		wantInWarn []string
	}{
		{name: "stop timeout", env: "ECS_CONTAINER_STOP_TIMEOUT=10ms",
			get: func(c *Config) any { return c.DockerStopTimeout }, want: time.Second, wantInWarn: []string{"10ms", "1s"}},
		{name: "stop timeout negative", env: "ECS_CONTAINER_STOP_TIMEOUT=-5s",
			get: func(c *Config) any { return c.DockerStopTimeout }, want: time.Second, wantInWarn: []string{"-5s", "1s"}},
		{name: "images per cycle", env: "ECS_NUM_IMAGES_DELETE_PER_CYCLE=0",
			get: func(c *Config) any { return c.NumImagesToDeletePerCycle }, want: 1, wantInWarn: []string{"0", "1"}},
		{name: "cleanup wait", env: "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1s",
			get: func(c *Config) any { return c.TaskCleanupWaitDuration }, want: time.Minute, wantInWarn: []string{"1s", "1m"}},
		{name: "cleanup wait from env file", envFile: "\nECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=30s\n",
			get: func(c *Config) any { return c.TaskCleanupWaitDuration }, want: time.Minute, wantInWarn: []string{"30s", "1m", "env-file", ":2"}},
		{name: "stop timeout from JSON nanoseconds", json: "{\n\"DockerStopTimeout\": 5\n}",
			get: func(c *Config) any { return c.DockerStopTimeout }, want: time.Second, wantInWarn: []string{"5ns", "1s", "json-file", ":2"}},
		{name: "image cleanup interval", env: "ECS_IMAGE_CLEANUP_INTERVAL=1m",
			get: func(c *Config) any { return c.ImageCleanupInterval }, want: 10 * time.Minute, wantInWarn: []string{"1m", "10m"}},
		{name: "start timeout", env: "ECS_CONTAINER_START_TIMEOUT=1s",
			get: func(c *Config) any { return c.ContainerStartTimeout }, want: 45 * time.Second, wantInWarn: []string{"1s", "45s"}},
		{name: "roll count", env: "ECS_LOG_MAX_ROLL_COUNT=0",
			get: func(c *Config) any { return c.Log.MaxRollCount }, want: 1, wantInWarn: []string{"0", "1"}},
		{name: "file size", env: "ECS_LOG_MAX_FILE_SIZE_MB=0",
			get: func(c *Config) any { return c.Log.MaxFileSizeMB }, want: 0.001, wantInWarn: []string{"0", "0.001"}},
		{name: "at the minimum", env: "ECS_CONTAINER_STOP_TIMEOUT=1s",
			get: func(c *Config) any { return c.DockerStopTimeout }, want: time.Second},
		{name: "images at the minimum", env: "ECS_NUM_IMAGES_DELETE_PER_CYCLE=1",
			get: func(c *Config) any { return c.NumImagesToDeletePerCycle }, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			var env []string
			if tt.env != "" {
				env = append(env, tt.env)
			}
			res := f.mustLoad(t, nil, env...)
			assert.Equal(t, tt.want, tt.get(res.Config))
			if len(tt.wantInWarn) == 0 {
				assert.Empty(t, res.Warnings)
				return
			}
			require.Len(t, res.Warnings, 1)
			w := res.Warnings[0].String()
			for _, s := range tt.wantInWarn {
				assert.Contains(t, w, s)
			}
			assert.Contains(t, w, "minimum")
		})
	}
	t.Run("warning names both numbers", func(t *testing.T) {
		f := newFiles(t, "", "")
		res := f.mustLoad(t, nil, "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1s", "ECS_NUM_IMAGES_DELETE_PER_CYCLE=0")
		w := warningFor(res, "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION")
		require.NotNil(t, w)
		assert.Equal(t, "1s is below the minimum 1m0s; using 1m0s", w.Msg)
		w = warningFor(res, "ECS_NUM_IMAGES_DELETE_PER_CYCLE")
		require.NotNil(t, w)
		assert.Equal(t, "0 is below the minimum 1; using 1", w.Msg)
	})
}

func TestRegistry(t *testing.T) {
	t.Run("require", func(t *testing.T) {
		tests := []struct {
			name    string
			env     []string
			flags   map[string]string
			envFile string
			json    string
			want    []string
			origin  string
			wantErr string
		}{
			{name: "unset", want: []string{}, origin: "default"},
			{name: "env", env: []string{"ECS_REGISTRY_REQUIRE=ecr"}, want: []string{"ecr"}, origin: "env"},
			{name: "env JSON array", env: []string{`ECS_REGISTRY_REQUIRE=["ecr"]`}, want: []string{"ecr"}, origin: "env"},
			{name: "flag", flags: map[string]string{"ECS_REGISTRY_REQUIRE": "ecr"}, env: []string{"ECS_REGISTRY_REQUIRE=quay"}, want: []string{"ecr"}, origin: "flag"},
			{name: "env file", envFile: "ECS_REGISTRY_REQUIRE=ecr\n", want: []string{"ecr"}, origin: "env-file:1"},
			{name: "JSON file", json: `{"ECS_REGISTRY_REQUIRE": ["ecr"]}`, want: []string{"ecr"}, origin: "json-file:1"},
			{name: "empty items dropped", env: []string{`ECS_REGISTRY_REQUIRE=["ecr", ""]`}, want: []string{"ecr"}, origin: "env"},
			{name: "unknown vendor", env: []string{"ECS_REGISTRY_REQUIRE=ecr,quay"}, wantErr: "quay"},
			{name: "unknown vendor in array", env: []string{`ECS_REGISTRY_REQUIRE=["gcr"]`}, wantErr: "gcr"},
			{name: "unknown vendor by flag", flags: map[string]string{"ECS_REGISTRY_REQUIRE": "dockerhub"}, wantErr: "dockerhub"},
			{name: "vendor is case sensitive", env: []string{"ECS_REGISTRY_REQUIRE=ECR"}, wantErr: "ECR"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFiles(t, tt.envFile, tt.json)
				res, err := f.load(tt.flags, tt.env...)
				if tt.wantErr != "" {
					ce := keyError(t, err, "ECS_REGISTRY_REQUIRE")
					assert.Contains(t, ce.Error(), tt.wantErr)
					assert.Contains(t, ce.Error(), "ECS_REGISTRY_REQUIRE")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tt.want, set.Sorted(res.Config.Registry.Require))
				assert.Equal(t, tt.origin, res.Origins["ECS_REGISTRY_REQUIRE"].String())
			})
		}
	})
	t.Run("ECR regions", func(t *testing.T) {
		tests := []struct {
			name           string
			env            []string
			envFile, json  string
			wantConfigured bool
			want           []string
		}{
			{name: "unset", wantConfigured: false, want: []string{}},
			{name: "env empty", env: []string{"ECS_REGISTRY_ECR_REGIONS="}, wantConfigured: true, want: []string{}},
			{name: "env empty array", env: []string{"ECS_REGISTRY_ECR_REGIONS=[]"}, wantConfigured: true, want: []string{}},
			{name: "env list", env: []string{"ECS_REGISTRY_ECR_REGIONS=us-east-1, eu-west-1"}, wantConfigured: true, want: []string{"eu-west-1", "us-east-1"}},
			{name: "env file empty", envFile: "ECS_REGISTRY_ECR_REGIONS=\n", wantConfigured: true, want: []string{}},
			{name: "env file quoted empty", envFile: "ECS_REGISTRY_ECR_REGIONS=''\n", wantConfigured: true, want: []string{}},
			{name: "JSON file empty array", json: `{"ECS_REGISTRY_ECR_REGIONS": []}`, wantConfigured: true, want: []string{}},
			{name: "JSON file array", json: `{"ECS_REGISTRY_ECR_REGIONS": ["us-west-2"]}`, wantConfigured: true, want: []string{"us-west-2"}},
			{name: "GovCloud and China", env: []string{"ECS_REGISTRY_ECR_REGIONS=us-gov-west-1,cn-north-1"}, wantConfigured: true, want: []string{"cn-north-1", "us-gov-west-1"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFiles(t, tt.envFile, tt.json)
				res := f.mustLoad(t, nil, tt.env...)
				r := res.Config.Registry.ECRRegions
				assert.Equal(t, tt.wantConfigured, r.Configured)
				assert.Equal(t, tt.want, set.Sorted(r.Regions))
				_, hasOrigin := res.Origins["ECS_REGISTRY_ECR_REGIONS"]
				assert.Equal(t, tt.wantConfigured, hasOrigin)
				shown := res.Show().Keys["ECS_REGISTRY_ECR_REGIONS"]
				if tt.wantConfigured {
					assert.Equal(t, tt.want, shown.Value)
				} else {
					assert.Equal(t, "unset", shown.Source)
					assert.Equal(t, "(detected region)", shown.Value)
				}
			})
		}
	})
	t.Run("ECR regions must be region names", func(t *testing.T) {
		for _, bad := range []string{"US-EAST-1", "us east 1", `{"a":"b"}`, "us-east-1=x", "-us-east-1"} {
			t.Run(bad, func(t *testing.T) {
				f := newFiles(t, "", "")
				res, err := f.load(nil, "ECS_REGISTRY_ECR_REGIONS=us-west-2,"+bad)
				ce := keyError(t, err, "ECS_REGISTRY_ECR_REGIONS")
				assert.Contains(t, ce.Error(), strconv.Quote(bad))
				assert.False(t, res.Config.Registry.ECRRegions.Configured)
			})
		}
	})
	t.Run("accounts", func(t *testing.T) {
		const inc, exc = "ECS_REGISTRY_ECR_INCLUDE_ACCOUNTS", "ECS_REGISTRY_ECR_EXCLUDE_ACCOUNTS"
		tests := []struct {
			name          string
			env           []string
			envFile, json string
			wantInc       []string
			wantExc       []string
			wantErrKey    string
			wantErr       string
		}{
			{name: "defaults", wantInc: []string{}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "env leading zero", env: []string{inc + "=012345678901"}, wantInc: []string{"012345678901"}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "env JSON array", env: []string{inc + `=["012345678901", "123456789012"]`}, wantInc: []string{"012345678901", "123456789012"}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "env file leading zero", envFile: exc + "=012345678901,000000000001\n", wantInc: []string{}, wantExc: []string{"000000000001", "012345678901"}},
			{name: "env file quoted", envFile: inc + `="012345678901"` + "\n", wantInc: []string{"012345678901"}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "JSON array of strings", json: `{"` + inc + `": ["012345678901"]}`, wantInc: []string{"012345678901"}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "JSON comma string", json: `{"` + exc + `": "012345678901"}`, wantInc: []string{}, wantExc: []string{"012345678901"}},
			{name: "JSON array of numbers", json: `{"` + inc + `": [123456789012]}`, wantInc: []string{"123456789012"}, wantExc: []string{"602401143452", "918309763551"}},
			{name: "exclude set to empty", env: []string{exc + "="}, wantInc: []string{}, wantExc: []string{}},
			{name: "too short", env: []string{inc + "=12345"}, wantErrKey: inc, wantErr: "12345"},
			{name: "too long", env: []string{exc + "=0123456789012"}, wantErrKey: exc, wantErr: "0123456789012"},
			{name: "letters", envFile: exc + "=12345678901a\n", wantErrKey: exc, wantErr: "12345678901a"},
			{name: "JSON number loses its zero", json: `{"` + inc + `": [12345678901]}`, wantErrKey: inc, wantErr: "12345678901"},
			{name: "JSON number not array", json: `{"` + inc + `": 123456789012}`, wantErrKey: inc},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFiles(t, tt.envFile, tt.json)
				res, err := f.load(nil, tt.env...)
				if tt.wantErrKey != "" {
					ce := keyError(t, err, tt.wantErrKey)
					assert.Contains(t, ce.Error(), tt.wantErr)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tt.wantInc, set.Sorted(res.Config.Registry.IncludeAccounts))
				assert.Equal(t, tt.wantExc, set.Sorted(res.Config.Registry.ExcludeAccounts))
			})
		}
	})
}

func TestLists(t *testing.T) {
	tests := []struct {
		name    string
		env     string
		json    string
		want    []uint16
		wantErr bool
	}{
		{name: "JSON array", env: "[22, 80]", want: []uint16{22, 80}},
		{name: "JSON array of strings", env: `["22", "80"]`, want: []uint16{22, 80}},
		{name: "comma list", env: "22,80", want: []uint16{22, 80}},
		{name: "comma list with spaces and empties", env: " 80 , 22 ,, ", want: []uint16{22, 80}},
		{name: "duplicates", env: "80,80,22", want: []uint16{22, 80}},
		{name: "empty", env: "", want: []uint16{}},
		{name: "empty array", env: "[]", want: []uint16{}},
		{name: "JSON file array", json: `{"ReservedPorts": [80, 22]}`, want: []uint16{22, 80}},
		{name: "JSON file comma string", json: `{"ReservedPorts": "80,22"}`, want: []uint16{22, 80}},
		{name: "zero", env: "0", wantErr: true},
		{name: "too big", env: "65536", wantErr: true},
		{name: "not a number", env: "ssh", wantErr: true},
		{name: "bad array", env: "[22,", wantErr: true},
		{name: "array of objects", env: `[{"a":1}]`, wantErr: true},
		{name: "JSON file object", json: `{"ReservedPorts": {"a": 1}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, "", tt.json)
			var env []string
			if tt.json == "" {
				env = append(env, "ECS_RESERVED_PORTS="+tt.env)
			}
			res, err := f.load(nil, env...)
			if tt.wantErr {
				keyError(t, err, "ECS_RESERVED_PORTS")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Config.ReservedPorts)
		})
	}
}

func TestJSONFileValues(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		check   func(t *testing.T, c *Config)
		wantErr string // key
	}{
		{name: "duration string", json: `{"DockerStopTimeout": "45s"}`,
			check: func(t *testing.T, c *Config) { assert.Equal(t, 45*time.Second, c.DockerStopTimeout) }},
		{name: "duration nanoseconds", json: `{"DockerStopTimeout": 45000000000}`,
			check: func(t *testing.T, c *Config) { assert.Equal(t, 45*time.Second, c.DockerStopTimeout) }},
		{name: "duration ECS name", json: `{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION": "2h"}`,
			check: func(t *testing.T, c *Config) { assert.Equal(t, 2*time.Hour, c.TaskCleanupWaitDuration) }},
		{name: "duration float", json: `{"DockerStopTimeout": 1.5}`, wantErr: "ECS_CONTAINER_STOP_TIMEOUT"},
		{name: "duration bool", json: `{"DockerStopTimeout": true}`, wantErr: "ECS_CONTAINER_STOP_TIMEOUT"},
		{name: "duration bad string", json: `{"DockerStopTimeout": "soon"}`, wantErr: "ECS_CONTAINER_STOP_TIMEOUT"},
		{name: "bool", json: `{"PrivilegedDisabled": true, "TaskENIEnabled": "true"}`,
			check: func(t *testing.T, c *Config) { assert.True(t, c.PrivilegedDisabled); assert.True(t, c.TaskENIEnabled) }},
		{name: "int", json: `{"NumImagesToDeletePerCycle": 9, "ReservedMemory": "32"}`,
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, 9, c.NumImagesToDeletePerCycle)
				assert.Equal(t, 32, c.ReservedMemoryMiB)
			}},
		{name: "string must be a string", json: `{"Cluster": 5}`, wantErr: "ECS_CLUSTER"},
		{name: "string must be one line", json: `{"Cluster": "a\nb"}`, wantErr: "ECS_CLUSTER"},
		{name: "one of", json: `{"ImagePullBehavior": "prefer-cached", "LogLevel": "debug"}`,
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, PullPreferCached, c.ImagePullBehavior)
				assert.Equal(t, "debug", c.Log.Level)
			}},
		{name: "not one of", json: `{"ImagePullBehavior": "sometimes"}`, wantErr: "ECS_IMAGE_PULL_BEHAVIOR"},
		{name: "later duplicate wins", json: `{"Cluster": "a", "ECS_CLUSTER": "b"}`,
			check: func(t *testing.T, c *Config) { assert.Equal(t, "b", c.Cluster) }},
		{name: "BOM", json: "\ufeff{\"Cluster\": \"bom\"}",
			check: func(t *testing.T, c *Config) { assert.Equal(t, "bom", c.Cluster) }},
		{name: "whitespace only", json: " \n\t\n",
			check: func(t *testing.T, c *Config) { assert.Equal(t, "default", c.Cluster) }},
		{name: "empty object", json: "{}",
			check: func(t *testing.T, c *Config) { assert.Equal(t, "default", c.Cluster) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, "", tt.json)
			res, err := f.load(nil)
			if tt.wantErr != "" {
				ce := keyError(t, err, tt.wantErr)
				assert.Equal(t, SourceJSONFile, ce.Origin.Kind)
				assert.Equal(t, 1, ce.Origin.Line)
				return
			}
			require.NoError(t, err)
			tt.check(t, res.Config)
		})
	}
}

func TestJSONFileSyntaxErrors(t *testing.T) {
	tests := []struct {
		name     string
		json     string
		wantLine int
		wantCol  int
		wantMsg  string
	}{
		{name: "bad value", json: "{\n  \"Cluster\": \"x\",\n  \"LogLevel\": oops\n}", wantLine: 3, wantCol: 15, wantMsg: "invalid JSON"},
		{name: "missing comma", json: "{\n  \"Cluster\": \"x\"\n  \"LogLevel\": \"a\"\n}", wantLine: 3, wantCol: 3, wantMsg: "invalid JSON"},
		{name: "missing colon", json: `{"a" 1}`, wantLine: 1, wantCol: 6, wantMsg: "invalid JSON"},
		{name: "nested trailing comma", json: "{\n  \"EngineAuthData\": {\n    \"a\": \"" + secret + "\",\n  },\n  \"Cluster\": \"x\"\n}", wantLine: 4, wantCol: 3, wantMsg: "invalid JSON"},
		{name: "newline in string", json: "{\n  \"EngineAuthData\": \"" + secret + "\n}", wantLine: 2, wantCol: 33, wantMsg: "invalid JSON"},
		{name: "truncated", json: "{\n  \"Cluster\": \"x\",\n", wantLine: 2, wantCol: 18, wantMsg: "invalid JSON"},
		{name: "non-string key", json: "{\n1: 2}", wantLine: 2, wantCol: 1, wantMsg: "invalid JSON"},
		{name: "trailing data", json: "{}\nx", wantLine: 2, wantCol: 1, wantMsg: "after the top-level object"},
		{name: "second object", json: "{}\n\n  {}", wantLine: 3, wantCol: 3, wantMsg: "after the top-level object"},
		{name: "top level array", json: "[1]", wantLine: 1, wantCol: 1, wantMsg: "must be a JSON object"},
		{name: "top level null", json: "null", wantLine: 1, wantCol: 1, wantMsg: "must be a JSON object"},
		{name: "garbage", json: secret, wantLine: 1, wantCol: 1, wantMsg: "invalid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, "", tt.json)
			_, err := f.load(nil)
			errs := requireConfigErrors(t, err)
			require.Len(t, errs, 1)
			ce := errs[0]
			assert.Equal(t, "", ce.Key)
			assert.Equal(t, SourceJSONFile, ce.Origin.Kind)
			assert.Equal(t, f.json, ce.Origin.File)
			assert.Equal(t, tt.wantLine, ce.Origin.Line)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Contains(t, err.Error(), "at line "+strconv.Itoa(tt.wantLine)+", column "+strconv.Itoa(tt.wantCol))
			assert.NotContains(t, err.Error(), secret)
			for _, word := range []string{"oops", "Cluster", "LogLevel"} {
				assert.NotContains(t, err.Error(), word, "the file's contents are not quoted")
			}
		})
	}
}

func TestLoadEnvFileErrors(t *testing.T) {
	tests := []struct {
		name     string
		envFile  string
		wantLine int
		wantKey  string
		wantMsg  string
	}{
		{name: "no equals", envFile: "ECS_CLUSTER=c\n\nthis is not a setting\n", wantLine: 3, wantMsg: "expected KEY=VALUE"},
		{name: "empty key", envFile: "=hunter2\n", wantLine: 1, wantMsg: "expected KEY=VALUE"},
		{name: "space in key", envFile: "# c\nECS CLUSTER=c\n", wantLine: 2, wantMsg: "expected KEY=VALUE"},
		{name: "unterminated", envFile: "ECS_CLUSTER=c\nECS_LOGLEVEL=\"debug\nECS_DATADIR=/x\n", wantLine: 2, wantKey: "ECS_LOGLEVEL", wantMsg: "not closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, "")
			_, err := f.load(nil)
			errs := requireConfigErrors(t, err)
			require.Len(t, errs, 1)
			ce := errs[0]
			assert.Equal(t, tt.wantKey, ce.Key)
			assert.Equal(t, tt.wantLine, ce.Origin.Line)
			assert.Equal(t, f.env, ce.Origin.File)
			assert.Contains(t, err.Error(), ":"+strconv.Itoa(tt.wantLine))
			assert.Contains(t, err.Error(), tt.wantMsg)
			for _, word := range []string{"this", "hunter2", "debug", "/x"} {
				assert.NotContains(t, err.Error(), word, "the line's contents are not quoted")
			}
		})
	}
	t.Run("a quoted value that swallowed later lines is not quoted", func(t *testing.T) {
		f := newFiles(t, "ECS_CLUSTER=c\nECS_LOGLEVEL=\"debug\nECS_DATADIR=/x\nECS_CHECKPOINT=\"true\"\n", "")
		_, err := f.load(nil)
		ce := keyError(t, err, "ECS_LOGLEVEL")
		assert.Equal(t, 2, ce.Origin.Line)
		assert.Contains(t, ce.Error(), "lines 2-4")
		assert.NotContains(t, ce.Error(), "debug")
		assert.NotContains(t, ce.Error(), "/x")
	})
}

func TestEveryErrorWrapsErrInvalid(t *testing.T) {
	f := newFiles(t,
		"ECS_CLUSTER=c\n"+
			"bad line\n"+
			"ECS_CONTAINER_STOP_TIMEOUT=soon\n"+
			"ECS_CHECKPOINT=maybe\n",
		"")
	_, err := f.load(nil,
		"ECS_LOGLEVEL=loud",
		"ECS_NUM_IMAGES_DELETE_PER_CYCLE=five",
		"ECS_LOG_MAX_FILE_SIZE_MB=NaN",
		"ECS_RESERVED_PORTS=70000",
		"ECS_INSTANCE_ATTRIBUTES=[]",
		"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES=nope",
		"ECS_REGISTRY_REQUIRE=gcr",
		"ECS_REGISTRY_ECR_INCLUDE_ACCOUNTS=1",
		"ECS_REGISTRY_ECR_REGIONS=[",
		"ECS_ENGINE_AUTH_DATA=x",
		"ECS_ENGINE_AUTH_TYPE=docker",
	)
	errs := requireConfigErrors(t, err)
	var keys []string
	for _, ce := range errs {
		keys = append(keys, ce.Key)
		assert.Contains(t, ce.Error(), ce.Key)
	}
	assert.ElementsMatch(t, []string{
		"", // the bad line
		"ECS_CONTAINER_STOP_TIMEOUT", "ECS_CHECKPOINT",
		"ECS_LOGLEVEL", "ECS_NUM_IMAGES_DELETE_PER_CYCLE", "ECS_LOG_MAX_FILE_SIZE_MB", "ECS_RESERVED_PORTS",
		"ECS_INSTANCE_ATTRIBUTES", "ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES", "ECS_REGISTRY_REQUIRE",
		"ECS_REGISTRY_ECR_INCLUDE_ACCOUNTS", "ECS_REGISTRY_ECR_REGIONS", "ECS_ENGINE_AUTH_DATA",
	}, keys)
}

func TestMode(t *testing.T) {
	tests := []struct {
		name       string
		env        []string
		envFile    string
		json       string
		flags      map[string]string
		want       Mode
		wantReason []string
	}{
		{name: "nothing set", want: ModeLocal, wantReason: []string{"ECS_CLUSTER is not set"}},
		{name: "region only", env: []string{"AWS_DEFAULT_REGION=us-east-1"}, want: ModeLocal, wantReason: []string{"ECS_CLUSTER is not set"}},
		{name: "cluster only: the region comes from IMDS", env: []string{"ECS_CLUSTER=prod"}, want: ModeECS,
			wantReason: []string{"ECS_CLUSTER is set", "AWS_DEFAULT_REGION", "instance metadata service"}},
		{name: "cluster and empty region", env: []string{"ECS_CLUSTER=prod", "AWS_DEFAULT_REGION="}, want: ModeECS, wantReason: []string{"AWS_DEFAULT_REGION"}},
		{name: "cluster with the embedded control plane asked for", env: []string{"ECS_CLUSTER=prod", "ECS_LOCAL_CONTROL_PLANE=true", "AWS_DEFAULT_REGION=us-east-1"},
			want: ModeLocal, wantReason: []string{"ECS_LOCAL_CONTROL_PLANE=true (env)"}},
		{name: "cluster and region", env: []string{"ECS_CLUSTER=prod", "AWS_DEFAULT_REGION=us-east-1"}, want: ModeECS, wantReason: []string{"ECS_CLUSTER is set (env)", "us-east-1"}},
		{name: "cluster set to default explicitly", env: []string{"ECS_CLUSTER=default", "AWS_DEFAULT_REGION=us-east-1"}, want: ModeECS, wantReason: []string{"us-east-1"}},
		{name: "cluster from env file", envFile: "\nECS_CLUSTER=prod\nAWS_DEFAULT_REGION=eu-west-1\n", want: ModeECS, wantReason: []string{"env-file:2", "eu-west-1"}},
		{name: "cluster from JSON file", json: `{"Cluster": "prod", "AWSRegion": "eu-west-1"}`, env: nil, want: ModeECS, wantReason: []string{"json-file:1", "eu-west-1"}},
		{name: "empty cluster counts as unset", env: []string{"ECS_CLUSTER=", "AWS_DEFAULT_REGION=us-east-1"}, want: ModeLocal, wantReason: []string{"ECS_CLUSTER is not set"}},
		{name: "cluster from flag", flags: map[string]string{keyCluster: "prod"}, env: []string{"AWS_DEFAULT_REGION=us-west-2"}, want: ModeECS, wantReason: []string{"(flag)", "us-west-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.json)
			res := f.mustLoad(t, tt.flags, tt.env...)
			assert.Equal(t, tt.want, res.Config.Mode)
			for _, s := range tt.wantReason {
				assert.Contains(t, res.Config.ModeReason, s)
			}
			assert.NotEmpty(t, res.Config.Cluster, "an empty cluster name falls back to default")
			assert.Equal(t, tt.want, res.Show().Mode)
			assert.Equal(t, res.Config.ModeReason, res.Show().ModeReason)
		})
	}
}

func TestRegisterFlags(t *testing.T) {
	f := newFiles(t, "ECS_CLUSTER=from-env-file\nECS_REGISTRY_REQUIRE=\n", "")
	fs := flag.NewFlagSet("berth", flag.ContinueOnError)
	given := RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--registry-require=ecr", "--cluster=x", "--ecs-config", f.env}))
	flags := given()
	assert.Equal(t, map[string]string{"ECS_REGISTRY_REQUIRE": "ecr", "ECS_CLUSTER": "x", "ECS_ENV_FILE": f.env}, flags)

	res, err := Load(Sources{Environ: []string{keyJSONFile + "=" + f.json, "ECS_CLUSTER=from-env"}, Flags: flags})
	require.NoError(t, err)
	assert.Equal(t, "x", res.Config.Cluster)
	assert.True(t, res.Config.Registry.Require.Has(RegistryECR))
	assert.Equal(t, 1, res.Config.Registry.Require.Len())
	assert.Equal(t, "flag", res.Origins["ECS_CLUSTER"].String())
	assert.Equal(t, "flag", res.Origins["ECS_REGISTRY_REQUIRE"].String())
	assert.Equal(t, "flag", res.Origins[keyEnvFile].String())
	assert.Equal(t, Origin{Kind: SourceFlag}, res.Origins["ECS_CLUSTER"])

	t.Run("every key with a flag is registered", func(t *testing.T) {
		fs := flag.NewFlagSet("berth", flag.ContinueOnError)
		RegisterFlags(fs)
		for _, k := range keyTable() {
			if k.flag != "" {
				assert.NotNil(t, fs.Lookup(k.flag), k.flag)
			}
		}
		assert.NotNil(t, fs.Lookup("registry-require"))
		assert.NotNil(t, fs.Lookup("cluster"))
		assert.NotNil(t, fs.Lookup("ecs-config"))
	})
	t.Run("flags not given are not reported", func(t *testing.T) {
		fs := flag.NewFlagSet("berth", flag.ContinueOnError)
		given := RegisterFlags(fs)
		require.NoError(t, fs.Parse(nil))
		assert.Empty(t, given())
	})
}

func TestShow(t *testing.T) {
	f := newFiles(t, "ECS_CLUSTER=prod\n", `{"OverrideAWSVPCLocalIPv4Address": "169.254.172.10/22"}`)
	res := f.mustLoad(t, nil, "ECS_ENGINE_AUTH_TYPE=docker", "ECS_ENGINE_AUTH_DATA="+authData,
		"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES=10.0.0.0/8")
	e := res.Show()
	assert.Equal(t, f.env, e.EnvFile)
	assert.Equal(t, f.json, e.JSONFile)
	assert.Len(t, e.Keys, len(keyTable()))
	assert.Equal(t, Shown{Value: "prod", Source: "env-file:1"}, e.Keys["ECS_CLUSTER"])
	assert.Equal(t, Shown{Value: "30s", Source: "default"}, e.Keys["ECS_CONTAINER_STOP_TIMEOUT"])
	assert.Equal(t, Shown{Value: "169.254.172.10/22", Source: "json-file:1"}, e.Keys["OverrideAWSVPCLocalIPv4Address"])
	assert.Equal(t, Shown{Value: []string{"10.0.0.0/8"}, Source: "env"}, e.Keys["ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES"])
	assert.True(t, e.Keys["ECS_REGISTRY_REQUIRE"].Berth)
	assert.False(t, e.Keys["ECS_CLUSTER"].Berth)

	out, err := json.Marshal(e)
	require.NoError(t, err)
	assert.NotContains(t, string(out), secret)
	assert.Contains(t, string(out), `"ECS_ENGINE_AUTH_DATA":{"value":"\u003credacted\u003e","source":"env"}`)
	indented, err := json.MarshalIndent(e, "", "  ")
	require.NoError(t, err)
	assert.NotContains(t, string(indented), secret)
	requireNoSecret(t, res, nil)
}

func TestSecret(t *testing.T) {
	s := Secret(authData)
	assert.Equal(t, redacted, s.String())
	assert.Equal(t, redacted, s.GoString())
	assert.Equal(t, authData, s.Reveal())
	out, err := json.Marshal(struct{ S Secret }{s})
	require.NoError(t, err)
	assert.NotContains(t, string(out), secret)
	assert.NotContains(t, sprintAll(s), secret)
	assert.NotContains(t, sprintAll(struct{ S Secret }{s}), secret)

	var empty Secret
	assert.Equal(t, "", empty.String())
	out, err = json.Marshal(empty)
	require.NoError(t, err)
	assert.Equal(t, `""`, string(out))
}

func TestDiskWaterMarks(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		wantErr string
	}{
		{name: "defaults", env: nil},
		{name: "low at high", env: []string{"ECS_DISK_HIGH_WATER_PERCENT=80", "ECS_DISK_LOW_WATER_PERCENT=80"}, wantErr: "80% must be below ECS_DISK_HIGH_WATER_PERCENT (80%)"},
		{name: "high above 100", env: []string{"ECS_DISK_HIGH_WATER_PERCENT=120"}, wantErr: "at most 100%"},
		{name: "valid", env: []string{"ECS_DISK_HIGH_WATER_PERCENT=90", "ECS_DISK_LOW_WATER_PERCENT=50"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, "", "")
			res, err := Load(Sources{Environ: f.environ(tt.env...)})
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Less(t, res.Config.DiskLowWaterPercent, res.Config.DiskHighWaterPercent)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), "ECS_DISK_LOW_WATER_PERCENT")
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestAWSVPCLocalSubnet(t *testing.T) {
	tests := []struct {
		value, want, wantErr string
	}{
		{value: "", want: "172.31.250.0/24"},
		{value: "10.99.0.0/16", want: "10.99.0.0/16"},
		{value: "10.99.0.7/16", want: "10.99.0.0/16"},
		{value: "10.99.0.0/31", wantErr: "too small"},
		{value: "fd00::/64", wantErr: "not an IPv4 subnet"},
		{value: "nope", wantErr: "not an IPv4 subnet"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			f := newFiles(t, "", "")
			var env []string
			if tt.value != "" {
				env = append(env, "ECS_AWSVPC_LOCAL_SUBNET="+tt.value)
			}
			res, err := Load(Sources{Environ: f.environ(env...)})
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), "ECS_AWSVPC_LOCAL_SUBNET (env)")
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Show().Keys["ECS_AWSVPC_LOCAL_SUBNET"].Value)
		})
	}
}

func TestAvailableLoggingDrivers(t *testing.T) {
	tests := []struct {
		value   string
		want    []string
		wantErr string
	}{
		{value: "", want: []string{"json-file", "none"}},
		{value: `["awslogs","json-file","awslogs"]`, want: []string{"awslogs", "json-file"}},
		{value: "journald,syslog", want: []string{"journald", "syslog"}},
		{value: `["json-file","graylog"]`, wantErr: `unknown logging driver "graylog"`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			f := newFiles(t, "", "")
			var env []string
			if tt.value != "" {
				env = append(env, "ECS_AVAILABLE_LOGGING_DRIVERS="+tt.value)
			}
			res, err := Load(Sources{Environ: f.environ(env...)})
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), "ECS_AVAILABLE_LOGGING_DRIVERS (env)")
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Config.AvailableLoggingDrivers)
		})
	}
}

func TestLocalControlPlaneListensOnLoopbackOnly(t *testing.T) {
	f := newFiles(t, "", "")
	for _, addr := range []string{"127.0.0.1:51677", "localhost:51677", "[::1]:51677", "127.0.0.2:0"} {
		res := f.mustLoad(t, nil, "ECS_LOCAL_CONTROL_PLANE_ADDR="+addr)
		require.Equal(t, addr, res.Config.LocalControlPlaneAddr)
	}
	for _, addr := range []string{"0.0.0.0:51677", ":51677", "[::]:51677", "10.0.0.5:51677", "cp.example:51677"} {
		_, err := f.load(nil, "ECS_LOCAL_CONTROL_PLANE_ADDR="+addr)
		errs := requireConfigErrors(t, err)
		require.Len(t, errs, 1, addr)
		require.Equal(t, "ECS_LOCAL_CONTROL_PLANE_ADDR", errs[0].Key, addr)
		require.Contains(t, err.Error(), "not a loopback address", addr)
		require.Contains(t, err.Error(), "serves its own host only", addr)
		require.Contains(t, err.Error(), "use ecs mode", addr)
	}
	_, err := f.load(nil, "ECS_LOCAL_CONTROL_PLANE_ADDR=127.0.0.1")
	require.ErrorContains(t, err, "not host:port")

	// In ecs mode the embedded control plane does not run, so its address is not checked.
	res := f.mustLoad(t, nil, "ECS_LOCAL_CONTROL_PLANE_ADDR=0.0.0.0:51677", "ECS_CLUSTER=prod", "AWS_DEFAULT_REGION=us-east-1")
	require.Equal(t, ModeECS, res.Config.Mode)
}

// TestRemovedAllowedHostsKeyIsRefused holds that the key that once served the embedded control plane
// to other hosts is refused wherever it is set, in either mode, with a message pointing at ecs mode;
// an empty value asks for nothing.
func TestRemovedAllowedHostsKeyIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, envFile, jsonFile string
		env                     []string
		want                    SourceKind
	}{
		{name: "environment", env: []string{"ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=cp.example"}, want: SourceEnv},
		{name: "environment, with a non-loopback address", env: []string{"ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=cp.example,10.0.0.5",
			"ECS_LOCAL_CONTROL_PLANE_ADDR=127.0.0.1:51677"}, want: SourceEnv},
		{name: "ecs mode", env: []string{"ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=cp.example", "ECS_CLUSTER=prod", "AWS_DEFAULT_REGION=us-east-1"}, want: SourceEnv},
		{name: "env file", envFile: "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=cp.example\n", want: SourceEnvFile},
		{name: "JSON file", jsonFile: `{"ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS": "cp.example"}`, want: SourceJSONFile},
		{name: "environment over env file", envFile: "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=a.example\n",
			env: []string{"ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=b.example"}, want: SourceEnv},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFiles(t, tt.envFile, tt.jsonFile)
			_, err := f.load(nil, tt.env...)
			errs := requireConfigErrors(t, err)
			require.Len(t, errs, 1)
			assert.Equal(t, "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS", errs[0].Key)
			assert.Equal(t, tt.want, errs[0].Origin.Kind)
			assert.Contains(t, err.Error(), "was removed")
			assert.Contains(t, err.Error(), "serves its own host only")
			assert.Contains(t, err.Error(), "use ecs mode")
		})
	}
	t.Run("empty", func(t *testing.T) {
		f := newFiles(t, "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=\n", "")
		res := f.mustLoad(t, nil, "ECS_LOCAL_CONTROL_PLANE_ALLOWED_HOSTS=")
		assert.Empty(t, res.Warnings)
	})
}

func TestTaskPidsLimitNeedsTaskCgroups(t *testing.T) {
	f := newFiles(t, "", "")
	res := f.mustLoad(t, nil, "ECS_TASK_PIDS_LIMIT=100")
	assert.Equal(t, 100, res.Config.TaskPidsLimit)
	_, err := f.load(nil, "ECS_TASK_PIDS_LIMIT=100", "ECS_ENABLE_TASK_CPU_MEM_LIMIT=false")
	e := keyError(t, err, "ECS_TASK_PIDS_LIMIT")
	assert.Contains(t, e.Error(), "ECS_ENABLE_TASK_CPU_MEM_LIMIT=false")
	f.mustLoad(t, nil, "ECS_TASK_PIDS_LIMIT=0", "ECS_ENABLE_TASK_CPU_MEM_LIMIT=false")
}

func TestIntrospectionListensOnLoopbackUnlessOffhostAllowed(t *testing.T) {
	f := newFiles(t, "", "")
	res := f.mustLoad(t, nil)
	assert.Equal(t, "127.0.0.1:51678", res.Config.IntrospectionAddr)
	assert.Equal(t, "http://127.0.0.1:51678", res.Config.IntrospectionURL())
	for _, addr := range []string{"0.0.0.0:51678", ":51678", "[::]:51678", "10.0.0.5:51678"} {
		_, err := f.load(nil, "ECS_INTROSPECTION_ADDR="+addr)
		e := keyError(t, err, "ECS_INTROSPECTION_ADDR")
		assert.Contains(t, e.Error(), "not a loopback address")
		assert.Contains(t, e.Error(), "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS=true")
	}
	_, err := f.load(nil, "ECS_INTROSPECTION_ADDR=51678")
	keyError(t, err, "ECS_INTROSPECTION_ADDR")

	// Allowed: every address on the ECS agent's port, as the ECS agent's introspection server.
	res = f.mustLoad(t, nil, "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS=true")
	assert.Equal(t, ":51678", res.Config.IntrospectionAddr)
	assert.Equal(t, ":51678", res.Show().Keys["ECS_INTROSPECTION_ADDR"].Value, "berth config shows where it listens")
	assert.Equal(t, "http://127.0.0.1:51678", res.Config.IntrospectionURL(), "local commands reach it on loopback")
	res = f.mustLoad(t, nil, "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS=true", "ECS_INTROSPECTION_ADDR=[::]:9000")
	assert.Equal(t, "[::]:9000", res.Config.IntrospectionAddr, "the operator's address wins")
	assert.Equal(t, "http://[::1]:9000", res.Config.IntrospectionURL())
	res = f.mustLoad(t, nil, "ECS_ALLOW_OFFHOST_INTROSPECTION_ACCESS=true", "ECS_INTROSPECTION_ADDR=127.0.0.1:9000")
	assert.Equal(t, "127.0.0.1:9000", res.Config.IntrospectionAddr)
}

// TestLogFileSizeWhoseBytesOverflow: a size whose byte value does not fit an int64 used to reach the
// logger, whose conversion made it 1 byte, rolling the log at every line.
func TestLogFileSizeWhoseBytesOverflow(t *testing.T) {
	f := newFiles(t, "", "")
	_, err := f.load(nil, "ECS_LOG_MAX_FILE_SIZE_MB=1e300")
	errs := requireConfigErrors(t, err)
	require.Len(t, errs, 1)
	assert.Equal(t, "ECS_LOG_MAX_FILE_SIZE_MB", errs[0].Key)
	assert.Contains(t, errs[0].Error(), "1e+300 is above the maximum 8.796093022207e+12")

	res, err := f.load(nil, "ECS_LOG_MAX_FILE_SIZE_MB=8796093022207")
	require.NoError(t, err)
	assert.Equal(t, float64(8796093022207), res.Config.Log.MaxFileSizeMB)
}

// TestLogFields: the logged configuration names every key in order with its value as text, a
// redacted secret as its mask, and lists the sources of only the keys not at their defaults.
func TestLogFields(t *testing.T) {
	eff := Effective{Keys: map[string]Shown{
		"ECS_CLUSTER":          {Value: "prod", Source: "environment"},
		"ECS_ENGINE_AUTH_DATA": {Value: Secret("hunter2"), Source: "/etc/ecs/ecs.config:3"},
		"ECS_RESERVED_PORTS":   {Value: []int{22, 2375}, Source: string(SourceDefault)},
		"ECS_LOGFILE":          {Value: "", Source: "unset"},
	}}
	values, sources := eff.LogFields()
	assert.Equal(t, []any{"ECS_CLUSTER", "prod", "ECS_ENGINE_AUTH_DATA", Secret("hunter2").String(),
		"ECS_LOGFILE", "", "ECS_RESERVED_PORTS", "[22,2375]"}, values)
	assert.NotContains(t, fmt.Sprint(values...), "hunter2")
	assert.Equal(t, []any{"ECS_CLUSTER", "environment", "ECS_ENGINE_AUTH_DATA", "/etc/ecs/ecs.config:3"}, sources)
}

// TestTaskCredentialsBindToTask: the Berth extension is on unless the operator turns it off, and a
// value that is not a boolean is an error naming the key.
func TestTaskCredentialsBindToTask(t *testing.T) {
	f := newFiles(t, "", "")
	assert.True(t, f.mustLoad(t, nil).Config.TaskCredentialsBindToTask)
	assert.False(t, f.mustLoad(t, nil, "ECS_TASK_CREDENTIALS_BIND_TO_TASK=false").Config.TaskCredentialsBindToTask)
	_, err := f.load(nil, "ECS_TASK_CREDENTIALS_BIND_TO_TASK=sometimes")
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "ECS_TASK_CREDENTIALS_BIND_TO_TASK")
}

// ECS_TASK_SECURITY_POLICY is none unless set, takes baseline in any case, and any other value is an
// error naming the key and the values it takes; ECS_BRIDGE_BLOCK_IMDS is off unless set.
func TestTaskSecurityPolicyAndBridgeIMDS(t *testing.T) {
	f := newFiles(t, "", "")
	res := f.mustLoad(t, nil)
	assert.Equal(t, TaskSecurityPolicyNone, res.Config.TaskSecurityPolicy)
	assert.False(t, res.Config.BridgeBlockIMDS)
	res = f.mustLoad(t, nil, "ECS_TASK_SECURITY_POLICY=Baseline", "ECS_BRIDGE_BLOCK_IMDS=true")
	assert.Equal(t, TaskSecurityPolicyBaseline, res.Config.TaskSecurityPolicy)
	assert.True(t, res.Config.BridgeBlockIMDS)
	_, err := f.load(nil, "ECS_TASK_SECURITY_POLICY=restricted")
	e := keyError(t, err, "ECS_TASK_SECURITY_POLICY")
	assert.Contains(t, e.Error(), `"restricted" is not one of none, baseline`)
	_, err = f.load(nil, "ECS_BRIDGE_BLOCK_IMDS=yes please")
	keyError(t, err, "ECS_BRIDGE_BLOCK_IMDS")
}

// TestExecDirs: ECS Exec's directories default to the ECS agent's and must be absolute paths; a
// relative one is an error naming the key.
func TestExecDirs(t *testing.T) {
	f := newFiles(t, "", "")
	cfg, err := f.load(nil)
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/ecs/deps/execute-command", cfg.Config.ExecDepsDir)
	assert.Equal(t, "/var/log/ecs/exec", cfg.Config.ExecLogDir)
	cfg, err = f.load(nil, "ECS_EXEC_DEPS_DIR=/srv/exec/", "ECS_EXEC_LOG_DIR=/srv/logs")
	require.NoError(t, err)
	assert.Equal(t, "/srv/exec", cfg.Config.ExecDepsDir)
	assert.Equal(t, "/srv/logs", cfg.Config.ExecLogDir)
	for _, key := range []string{"ECS_EXEC_DEPS_DIR", "ECS_EXEC_LOG_DIR"} {
		_, err = f.load(nil, key+"=deps")
		keyError(t, err, key)
		assert.Contains(t, err.Error(), `"deps" is not an absolute path`)
	}
}

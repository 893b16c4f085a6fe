package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-agent/berth/agent/set"
)

// envMarker is a secret value for the env file fuzzer. It holds a double quote and a space, which no
// key can hold, so no error text can contain it unless it quoted a value: parseEnvFile's errors name
// keys and lines only.
const envMarker = `{"password": "` + secret + `"}`

// envMarkerLine is the line that puts envMarker in the env file.
const envMarkerLine = "ECS_ENGINE_AUTH_DATA=" + envMarker

func FuzzParseEnvFile(f *testing.F) {
	seeds := []string{
		"",
		"\n\n\n",
		"# only a comment\n",
		"ECS_CLUSTER=prod\nECS_LOGLEVEL=debug\n",
		"export ECS_CLUSTER=prod\n  # c\nECS_RESERVED_PORTS=[22, 80]\n",
		envMarkerLine + "\n",
		"ECS_ENGINE_AUTH_TYPE=docker\n" + envMarkerLine + "\nECS_CLUSTER=c\n",
		"ECS_ENGINE_AUTH_DATA='" + envMarker + "'\n",
		"ECS_ENGINE_AUTH_DATA=\"" + envMarker + "\n",                      // unterminated, holding the secret
		"ECS_INSTANCE_ATTRIBUTES='{\n  \"a\": \"b\"\n}'\nECS_CLUSTER=c\n", // multi-line single quotes
		"A=\"one\ntwo\nthree\"\n",                                         // multi-line double quotes
		"A=\"open\n" + envMarkerLine + "\n",                               // unterminated swallowing the secret line
		"A='\n'\n",
		"A=\"\n",
		"'\n",
		"\"A\"=b\n",
		"not a line\n" + envMarkerLine + "\nno equals\n",
		"=value\n",
		"export\n",
		"\ufeffECS_CLUSTER=bom\n",
		"A=a\r\nB=\"b\r\nc\"\r\n",
		"A=a\rB=b\r",
		"ECS_ENGINE_AUTH_DATA={\"a\": {\"b\": [1, {\"c\": \"" + secret + "\"}]}}\n", // nested
		"A=" + strings.Repeat("x", 70000) + "\n",                                    // longer than the scanner's first buffer
		"A=\x00\xff\xfe\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{
			data,
			append([]byte(envMarkerLine+"\n"), data...),
			append(append(bytes.Clone(data), '\n'), envMarkerLine...),
		} {
			entries, err := parseEnvFile(bytes.NewReader(in), "/fuzz/ecs.config")
			lines := bytes.Count(in, []byte{'\n'}) + 1
			last := 0
			for _, e := range entries {
				if e.key == "" || strings.ContainsAny(e.key, " \t\"'\n") {
					t.Fatalf("entry with a bad key %q", e.key)
				}
				if e.line <= last || e.line > lines {
					t.Fatalf("entry %q on line %d: after line %d, file has %d lines", e.key, e.line, last, lines)
				}
				last = e.line
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			for _, e := range flatten(err) {
				var ce *Error
				if !errors.As(e, &ce) {
					t.Fatalf("error is not a *Error: %v", e)
				}
				if ce.Origin.Kind != SourceEnvFile || ce.Origin.Line < 1 || ce.Origin.Line > lines+1 {
					t.Fatalf("error has a bad origin %+v (file has %d lines)", ce.Origin, lines)
				}
			}
			if bytes.Contains(in, []byte(envMarkerLine)) && strings.Contains(err.Error(), envMarker) {
				t.Fatalf("error quotes the secret: %v", err)
			}
		}
	})
}

// authKeys are the JSON file's names for ECS_ENGINE_AUTH_DATA.
var authKeys = set.Of("EngineAuthData", "ECS_ENGINE_AUTH_DATA")

// secretOutsideAuthData reports whether the (valid) JSON object data holds the secret anywhere but in
// the value of an auth data key: as a key, or in another key's value, escaped or not. Such a file may
// rightly get the secret quoted in an error about that other key.
func secretOutsideAuthData(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return true
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		k, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return true
		}
		if strings.Contains(k, secret) {
			return true
		}
		if !authKeys.Has(k) && holdsSecret(raw) {
			return true
		}
	}
	return false
}

// holdsSecret reports whether the JSON value raw holds the secret in its text or in any decoded string.
func holdsSecret(raw []byte) bool {
	if bytes.Contains(raw, []byte(secret)) {
		return true
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return true
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return strings.Contains(v, secret)
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case map[string]any:
			for k, x := range v {
				if strings.Contains(k, secret) || walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

func FuzzLoadJSON(f *testing.F) {
	seeds := []string{
		"",
		"{}",
		" \n\t",
		`{"Cluster": "prod", "EngineAuthType": "docker", "EngineAuthData": ` + authData + `}`,
		`{"EngineAuthType": "dockercfg", "EngineAuthData": "{\"r\": {\"auth\": \"` + secret + `\"}}"}`,
		`{"EngineAuthData": "` + secret + `"}`,                        // not a JSON object
		`{"EngineAuthData": ["` + secret + `"]}`,                      // an array
		"{\n  \"EngineAuthData\": " + authData + ",\n  oops\n}",       // bad syntax after the secret
		`{"EngineAuthData": "` + secret + "\n}",                       // unterminated string
		`{"EngineAuthData": "` + secret,                               // unterminated at EOF
		"{\"EngineAuthData\": {\n \"a\": \"" + secret + "\",\n}}",     // nested trailing comma
		`{"EngineAuthData": ` + authData + `} ` + secret,              // trailing data
		`{"ECS_ENGINE_AUTH_DATA": {"a": {"b": [1, 2, {"c": null}]}}}`, // nested
		"\ufeff{\"Cluster\": \"bom\"}",                                // BOM
		`[1, 2, 3]`,
		`null`,
		`"` + secret + `"`,
		`{"LogLevel": "` + secret + `"}`, // the secret outside auth data: may be quoted
		`{"DockerStopTimeout": 5, "TaskCleanupWaitDuration": "1s", "NumImagesToDeletePerCycle": 0}`,
		`{"DockerStopTimeout": 1e400, "ReservedPorts": [22, "80", 70000], "ImagePullTimeout": -9223372036854775808}`,
		`{"AWSVPCAdditionalLocalRoutes": ["10.0.0.0/8", "bad"], "OverrideAWSVPCLocalIPv4Address": "169.254.172.0/22"}`,
		`{"InstanceAttributes": {"a": 1}, "ECS_REGISTRY_ECR_INCLUDE_ACCOUNTS": ["012345678901", 12345678901]}`,
		`{"ECS_ENV_FILE": "/x", "ECS_AGENT_CONFIG_FILE_PATH": "/y", "Unknown": {}}`,
		`{"Cluster": "a", "Cluster": "b", "Cluster": null}`,
		`{1: 2}`,
		"{\"a\":" + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "}", // past the decoder's depth limit
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		envFile, jsonFile := filepath.Join(dir, "ecs.config"), filepath.Join(dir, "ecs.config.json")
		if err := os.WriteFile(envFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jsonFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Load(Sources{Environ: []string{keyEnvFile + "=" + envFile, keyJSONFile + "=" + jsonFile}})
		if res == nil || res.Config == nil {
			t.Fatal("Load returned no result")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			for _, e := range flatten(err) {
				var ce *Error
				if !errors.As(e, &ce) {
					t.Fatalf("error is not a *Error: %v", e)
				}
			}
		}
		shown, mErr := json.Marshal(res.Show())
		if mErr != nil {
			t.Fatalf("Show does not marshal: %v", mErr)
		}

		if _, perr := parseJSONFile(data, jsonFile); perr == nil && secretOutsideAuthData(bytes.TrimPrefix(data, []byte(utf8BOM))) {
			return // the secret is also another key's value or a key: it may be quoted for that key
		}
		// Either the file does not parse (errors give a position, never contents), or the secret is only
		// ever auth data.
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("error quotes the secret: %v", err)
		}
		for _, w := range res.Warnings {
			if strings.Contains(w.String(), secret) {
				t.Fatalf("warning quotes the secret: %s", w)
			}
		}
		if bytes.Contains(shown, []byte(secret)) {
			t.Fatalf("Show holds the secret: %s", shown)
		}
	})
}

// secretOnlyOnAuthLines reports whether every line of the env file that holds the secret is an
// ECS_ENGINE_AUTH_DATA= line.
func secretOnlyOnAuthLines(data []byte) bool {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if bytes.Contains(line, []byte(secret)) && !bytes.HasPrefix(line, []byte("ECS_ENGINE_AUTH_DATA=")) {
			return false
		}
	}
	return true
}

// FuzzLoadEnvFile loads arbitrary bytes as the env file. When the secret is only ever on
// ECS_ENGINE_AUTH_DATA lines it must reach no error, warning or Show output, even when a missing
// closing quote earlier in the file makes another key's value swallow those lines.
func FuzzLoadEnvFile(f *testing.F) {
	seeds := []string{
		"",
		"ECS_CLUSTER=prod\nAWS_DEFAULT_REGION=us-east-1\n",
		"ECS_ENGINE_AUTH_TYPE=docker\nECS_ENGINE_AUTH_DATA=" + authData + "\n",
		"ECS_ENGINE_AUTH_DATA='" + authData + "'\n",
		"ECS_ENGINE_AUTH_DATA=" + secret + "\n",
		"ECS_ENGINE_AUTH_DATA=\"" + authData + "\nECS_CLUSTER=c\n",
		"ECS_LOGLEVEL=\"debug\nECS_ENGINE_AUTH_DATA=\"" + authData + "\"\n",
		"ECS_LOGFILE='/var/log/x\nECS_ENGINE_AUTH_DATA='" + authData + "'\n",
		"ECS_REGISTRY_ECR_REGIONS='us-east-1,\nECS_ENGINE_AUTH_DATA=a," + secret + "'\n",
		"ECS_INSTANCE_ATTRIBUTES='{\"a\":\nECS_ENGINE_AUTH_DATA=" + secret + "}'\n",
		"ECS_RESERVED_PORTS=\"22,\nECS_ENGINE_AUTH_DATA=" + secret + "\"\n",
		"ECS_AWSVPC_ADDITIONAL_LOCAL_ROUTES='10.0.0.0/8\nECS_ENGINE_AUTH_DATA=" + secret + "'\n",
		"ECS_BOGUS='\nECS_ENGINE_AUTH_DATA=" + secret + "'\n",
		"OverrideAWSVPCLocalIPv4Address='\nECS_ENGINE_AUTH_DATA=" + secret + "'\n",
		"bad line\nECS_ENGINE_AUTH_DATA=" + authData + "\n",
		"\ufeffECS_CLUSTER=c\r\nECS_ENGINE_AUTH_DATA=\"" + authData + "\r\n\"\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		envFile, jsonFile := filepath.Join(dir, "ecs.config"), filepath.Join(dir, "ecs.config.json")
		if err := os.WriteFile(envFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jsonFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Load(Sources{Environ: []string{keyEnvFile + "=" + envFile, keyJSONFile + "=" + jsonFile}})
		if res == nil || res.Config == nil {
			t.Fatal("Load returned no result")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not match ErrInvalid: %v", err)
			}
			for _, e := range flatten(err) {
				var ce *Error
				if !errors.As(e, &ce) {
					t.Fatalf("error is not a *Error: %v", e)
				}
			}
		}
		shown, mErr := json.Marshal(res.Show())
		if mErr != nil {
			t.Fatalf("Show does not marshal: %v", mErr)
		}
		if !secretOnlyOnAuthLines(data) {
			return
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("error quotes the secret: %v", err)
		}
		for _, w := range res.Warnings {
			if strings.Contains(w.String(), secret) {
				t.Fatalf("warning quotes the secret: %s", w)
			}
		}
		if bytes.Contains(shown, []byte(secret)) {
			t.Fatalf("Show holds the secret: %s", shown)
		}
	})
}

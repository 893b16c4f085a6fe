//go:build integration

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/introspection"
	"github.com/berth-agent/berth/agent/secrets/secretstest"
)

// fluentStandinImage is misc/fluentstandin, the FireLens router stand-in that make images pushes.
const fluentStandinImage = "127.0.0.1:5000/berth/fluentstandin:latest"

// standinLine is one JSON line the stand-in writes on its stdout: a record it received, or a
// configuration file it found at start (path and SHA-256 only, never the contents).
type standinLine struct {
	Kind     string         `json:"kind"`
	Source   string         `json:"source"`
	Tag      string         `json:"tag"`
	Record   map[string]any `json:"record"`
	Path     string         `json:"path"`
	SHA256   string         `json:"sha256"`
	Includes []struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	} `json:"includes"`
}

// routerLines reads the router's output with `berth logs TASK log_router`, as the README shows.
func routerLines(t *testing.T, agent *agentRun, taskID string) (lines []standinLine, printed string) {
	t.Helper()
	out, errOut, _ := agent.berthCLI("", "logs", taskID, "log_router")
	for _, l := range strings.Split(out, "\n") {
		i := strings.IndexByte(l, '{')
		if i < 0 {
			continue
		}
		var sl standinLine
		if json.Unmarshal([]byte(l[i:]), &sl) == nil {
			lines = append(lines, sl)
		}
	}
	return lines, out + errOut
}

// waitRouterRecord polls the router's output until it holds a record with tag whose log is line.
func waitRouterRecord(t *testing.T, agent *agentRun, taskID, tag, line string) []standinLine {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		lines, printed := routerLines(t, agent, taskID)
		for _, l := range lines {
			if l.Kind == "record" && l.Tag == tag && l.Record["log"] == line {
				return lines
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router of %s got no record tagged %s with log %q within 60s; berth logs printed:\n%s\nagent log:\n%s",
				taskID, tag, line, printed, agent.out.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// firelensTaskDef is a task definition with a Fluent Bit router (the stand-in) and an app that prints
// line and logs through awsfirelens with output options (and extra, JSON members of the
// logConfiguration, such as secretOptions); routerOptions are the router's firelensConfiguration
// options (JSON object members), role the executionRoleArn or "".
func firelensTaskDef(family, role, routerOptions, line, output, extra string) string {
	roleField := ""
	if role != "" {
		roleField = fmt.Sprintf(`"executionRoleArn": %q, `, role)
	}
	return fmt.Sprintf(`{"family": %q, %s"networkMode": "bridge", "containerDefinitions": [
		{"name": "log_router", "image": %q, "memory": 32, "essential": true,
		 "firelensConfiguration": {"type": "fluentbit", "options": {%s}}},
		{"name": "app", "image": %q, "memory": 16, "essential": true, "command": ["print", "-out", %q, "-stay"],
		 "logConfiguration": {"logDriver": "awsfirelens", "options": {%s}%s}}]}`,
		family, roleField, fluentStandinImage, routerOptions, testappImage, line, output, extra)
}

// redact hides secret in s, for failure messages.
func redact(s, secret string) string { return strings.ReplaceAll(s, secret, "<secret>") }

// assertMatch asserts that text matches re, showing text without secret when it does not.
func assertMatch(t *testing.T, re, text, secret, what string) {
	t.Helper()
	assert.True(t, regexp.MustCompile(re).MatchString(text), "%s does not match %s:\n%s", what, redact(re, secret), redact(text, secret))
}

func taskIDOf(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }

// TestIntegrationFirelens runs FireLens tasks on the real Docker Engine with the router stand-in
// (misc/fluentstandin) as their Fluent Bit:
//   - through the embedded control plane (`berth run`): a router with an s3 configuration file and an
//     app whose awsfirelens output has a secret option from SSM. The app's line reaches the router
//     over the unix socket with the tag app-firelens-<task id>; the router started before the app;
//     the configuration the router saw is the file under ECS_DATADIR/firelens/<task id>/config (mode
//     0600), with the output section, the ECS metadata and the secret's value, and it includes the S3
//     object, fetched (like the secret) with a key STS issued for the execution role; the secret's
//     value is nowhere else: not in the agent's log, berth.db, the console or the app's log options.
//   - from a static task file: the same routing, with a stdout output and no execution role.
//   - the README's example, misc/examples/firelens.json, run with berth run: its line reaches the router.
//   - a definition with two routers is refused, naming firelensConfiguration.
func TestIntegrationFirelens(t *testing.T) {
	bin := buildBerth(t)
	dc := dockerFromEnv(t)
	for _, img := range []string{fluentStandinImage, testappImage} {
		_, err := dc.InspectImage(img)
		require.NoError(t, err, "image %s: run make images", img)
	}
	aws := secretstest.New(t)
	secretValue := "shared-key-" + randomHex(t, 8)
	aws.PutParameter("/berth/firelens/shared-key", secretValue)
	s3Body := "[FILTER]\n    Name   modify\n    Match  *\n    Add    from_s3 " + randomHex(t, 4) + "\n"
	aws.PutObject("firelens-config", "extra.conf", []byte(s3Body))
	roleArn := "arn:aws:iam::" + secretstest.Account + ":role/firelens-exec"
	sts := &stsStandIn{issued: map[string]string{}}

	env := newRecoveryEnv(t, bin)
	staticLine := "static line " + randomHex(t, 4)
	require.NoError(t, os.WriteFile(filepath.Join(env.tasksDir, "firelens-static.json"),
		[]byte(firelensTaskDef("firelens-static", "", "", staticLine, `"Name": "stdout"`, "")), 0o600))

	logFile := filepath.Join(t.TempDir(), "berth.log")
	const hostKey = "AKIAHOSTHOSTHOST0000" // the key the STS stand-in lets assume roles
	environ := []string{"AWS_ACCESS_KEY_ID=" + hostKey, "AWS_SECRET_ACCESS_KEY=host-secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"ECS_LOCAL_CONTROL_PLANE_ADDR=" + freeAddr(t), "AWS_ENDPOINT_URL_STS=http://" + serveLoopback(t, sts),
		"ECS_LOGFILE=" + logFile, "ECS_LOGLEVEL=debug", "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION=1m"}
	for k, v := range aws.Env() {
		environ = append(environ, k+"="+v)
	}
	agent := env.start(environ...)
	var console strings.Builder // what the CLI printed, checked for the secret with the agent's output

	// The static task: routed like the others, its config generated without an execution role.
	ts := agent.waitTasks(90*time.Second, "the static FireLens task runs", familyRunning("firelens-static", 2))
	var staticID string
	for _, tk := range ts {
		if tk.Family == "firelens-static" {
			staticID = taskIDOf(tk.Arn)
		}
	}
	waitRouterRecord(t, agent, staticID, "app-firelens-"+staticID, staticLine)

	// The README's example, misc/examples/firelens.json, as make run's users run it.
	out, errOut, code := agent.berthCLI("", "run", "../../../misc/examples/firelens.json")
	console.WriteString(out + errOut)
	require.Equal(t, 0, code, "berth run misc/examples/firelens.json: %s%s\nagent log:\n%s", out, errOut, agent.out.String())
	example := regexp.MustCompile(`started (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, example, "berth run printed no task: %s", out)
	exampleID := taskIDOf(example[1])
	waitRouterRecord(t, agent, exampleID, "app-firelens-"+exampleID, "hello from app through FireLens")

	// Two routers: refused by name before anything runs.
	dir := t.TempDir()
	twoRouters := filepath.Join(dir, "two-routers.json")
	require.NoError(t, os.WriteFile(twoRouters, []byte(`{"family": "firelens-two", "containerDefinitions": [
		{"name": "r1", "image": "`+fluentStandinImage+`", "memory": 16, "firelensConfiguration": {"type": "fluentbit"}},
		{"name": "r2", "image": "`+fluentStandinImage+`", "memory": 16, "firelensConfiguration": {"type": "fluentd"}}]}`), 0o600))
	out, errOut, code = agent.berthCLI("", "run", twoRouters)
	console.WriteString(out + errOut)
	assert.NotEqual(t, 0, code, "berth run of a task with two routers: %s%s", out, errOut)
	assert.Contains(t, out+errOut, "firelensConfiguration", "the refusal names the field")

	// Through the embedded control plane: s3 configuration, a secret option, the execution role.
	line := "hello through firelens " + randomHex(t, 4)
	defFile := filepath.Join(dir, "firelens.json")
	require.NoError(t, os.WriteFile(defFile, []byte(firelensTaskDef("firelens-run", roleArn,
		`"config-file-type": "s3", "config-file-value": "arn:aws:s3:::firelens-config/extra.conf"`, line,
		`"Name": "forward", "Host": "logs.example.com", "Port": "24224"`,
		`, "secretOptions": [{"name": "Shared_Key", "valueFrom": "/berth/firelens/shared-key"}]`)), 0o600))
	fetchedBefore := len(aws.Calls())
	out, errOut, code = agent.berthCLI("", "run", defFile)
	console.WriteString(out + errOut)
	require.Equal(t, 0, code, "berth run: %s%s\nagent log:\n%s", out, errOut, agent.out.String())
	arn := regexp.MustCompile(`started (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, arn, "berth run printed no task: %s", out)
	taskID := taskIDOf(arn[1])
	tag := "app-firelens-" + taskID

	ts = agent.waitTasks(90*time.Second, "the FireLens task runs", familyRunning("firelens-run", 2))
	containers := map[string]introspection.ContainerResponse{}
	for _, tk := range ts {
		if tk.Arn == arn[1] {
			for _, c := range tk.Containers {
				containers[c.Name] = c
			}
		}
	}
	require.Len(t, containers, 2)
	lines := waitRouterRecord(t, agent, taskID, tag, line)
	for _, l := range lines {
		if l.Kind == "record" && l.Tag == tag {
			assert.Equal(t, "unix", l.Source, "the app's driver writes to the router's unix socket")
			assert.Equal(t, "stdout", l.Record["source"])
		}
	}

	// Start order: the router ran before the app was started.
	router, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: containers["log_router"].DockerID})
	require.NoError(t, err)
	app, err := dc.InspectContainerWithOptions(docker.InspectContainerOptions{ID: containers["app"].DockerID})
	require.NoError(t, err)
	assert.True(t, router.State.StartedAt.Before(app.State.StartedAt), "router started %s, app %s", router.State.StartedAt, app.State.StartedAt)
	assert.Equal(t, "fluentd", app.HostConfig.LogConfig.Type)
	assert.Equal(t, tag, app.HostConfig.LogConfig.Config["tag"])
	assert.Equal(t, "unix://"+filepath.Join(env.dataDir, "firelens", taskID, "socket", "fluent.sock"),
		app.HostConfig.LogConfig.Config["fluentd-address"])
	for k, v := range app.HostConfig.LogConfig.Config {
		assert.NotContains(t, v, secretValue, "the app's log option %s holds the secret", k)
	}
	for _, e := range append(router.Config.Env, app.Config.Env...) {
		assert.NotContains(t, e, secretValue, "a container's environment holds the secret")
	}

	// The configuration the router saw is the generated file, and it includes the S3 object.
	var seen *standinLine
	for i, l := range lines {
		if l.Kind == "config" && l.Path == "/fluent-bit/etc/fluent-bit.conf" {
			seen = &lines[i]
		}
	}
	require.NotNil(t, seen, "the router found no /fluent-bit/etc/fluent-bit.conf: %+v", lines)
	configDir := filepath.Join(env.dataDir, "firelens", taskID, "config")
	files, err := filepath.Glob(filepath.Join(configDir, "*"))
	require.NoError(t, err)
	var generated []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) == seen.SHA256 {
			generated = b
			fi, err := os.Stat(f)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s's mode", f)
		}
	}
	require.NotNil(t, generated, "no file of %s (%v) is the one the router saw", configDir, files)
	conf := string(generated)
	for _, re := range []string{`(?m)^\s+unix_path\s+/var/run/fluent\.sock$`, `(?m)^@INCLUDE /fluent-bit/etc/external\.conf$`,
		`(?m)^\s+Record\s+ecs_task_arn\s+` + regexp.QuoteMeta(arn[1]) + `$`, `(?m)^\s+Record\s+ecs_cluster\s+` + regexp.QuoteMeta(env.cluster) + `$`} {
		assertMatch(t, re, conf, secretValue, "the generated configuration")
	}
	var output string // the app's output section: the one matching its tag
	for _, section := range strings.Split(conf, "\n\n") {
		if section = strings.TrimSpace(section); strings.HasPrefix(section, "[OUTPUT]") && regexp.MustCompile(`(?m)^\s+Match\s+app-firelens\*$`).MatchString(section) {
			output = section
		}
	}
	require.NotEmpty(t, output, "no output section matches app-firelens*:\n%s", redact(conf, secretValue))
	for _, re := range []string{`(?m)^\s+Name\s+forward$`, `(?m)^\s+Host\s+logs\.example\.com$`, `(?m)^\s+Port\s+24224$`,
		`(?m)^\s+Shared_Key\s+` + regexp.QuoteMeta(secretValue) + `$`} {
		assertMatch(t, re, output, secretValue, "the app's output section")
	}
	s3Sum := sha256.Sum256([]byte(s3Body))
	var included bool
	for _, inc := range seen.Includes {
		included = included || (inc.Path == "/fluent-bit/etc/external.conf" && inc.SHA256 == hex.EncodeToString(s3Sum[:]))
	}
	assert.True(t, included, "the router's configuration includes the S3 object: %+v", seen.Includes)
	var s3Fetched, secretFetched bool
	for _, c := range aws.Calls()[fetchedBefore:] {
		byRole := sts.roleOf(c.AccessKeyID) == roleArn
		assert.True(t, byRole, "%s signed with %s, not a key STS issued for %s", c.Operation, c.AccessKeyID, roleArn)
		s3Fetched = s3Fetched || (c.Operation == "GetObject" && byRole)
		secretFetched = secretFetched || (c.Operation == "GetParameters" && byRole)
	}
	assert.True(t, s3Fetched, "the S3 configuration file was fetched with the execution role's key")
	assert.True(t, secretFetched, "the secret option was fetched with the execution role's key")

	// Stop it. (That cleanup leaves nothing of its FireLens directory is held by agent/firelens's
	// TestIntegrationRouterAndApp on the real Engine: here it would cost the minute
	// ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION takes at the least.)
	out, errOut, code = agent.berthCLI("", "stop", taskID)
	console.WriteString(out + errOut)
	require.Equal(t, 0, code, "berth stop: %s%s", out, errOut)
	_, printed := routerLines(t, agent, staticID)
	console.WriteString(printed)
	agent.stop()

	logged, err := os.ReadFile(logFile)
	require.NoError(t, err)
	state, err := os.ReadFile(filepath.Join(env.dataDir, "berth.db"))
	require.NoError(t, err)
	assert.NotContains(t, string(logged), secretValue, "the agent's log holds the secret")
	assert.NotContains(t, agent.out.String(), secretValue, "the agent's console holds the secret")
	assert.NotContains(t, console.String(), secretValue, "the CLI printed the secret")
	assert.False(t, bytes.Contains(state, []byte(secretValue)), "berth.db holds the secret")
}

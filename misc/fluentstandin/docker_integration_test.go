//go:build integration

package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The images scripts/build-images.sh pushes (make images).
const (
	standinImage = "127.0.0.1:5000/berth/fluentstandin:latest"
	testappImage = "127.0.0.1:5000/berth/testapp:latest"
)

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// runContainer starts a detached container named name and removes it (and its anonymous volumes) at
// the end of the test.
func runContainer(t *testing.T, name string, args ...string) {
	t.Helper()
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", name).Run() })
	docker(t, append([]string{"run", "-d", "--name", name, "--label", "berth.test=fluentstandin"}, args...)...)
}

// waitRecord polls the router's output for a record with tag whose log field is line.
func waitRecord(t *testing.T, router, tag, line string) recordLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("docker", "logs", router).Output()
		for _, l := range strings.Split(string(out), "\n") {
			var r recordLine
			if json.Unmarshal([]byte(l), &r) == nil && r.Kind == "record" && r.Tag == tag && r.Record["log"] == line {
				return r
			}
		}
		if time.Now().After(deadline) {
			errOut, _ := exec.Command("docker", "logs", router).CombinedOutput()
			t.Fatalf("no record with tag %q and log %q within 30s; the router wrote:\n%s", tag, line, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A line an app container writes through Docker's fluentd log driver, as the ECS agent configures it
// for awsvpc and bridge tasks, reaches the stand-in with the tag the driver was given: over the
// unix socket bind-mounted from the host, and over TCP to the router's bridge address. The router
// records the configuration files mounted on it, by path and SHA-256.
func TestDockerFluentdDriverReachesStandin(t *testing.T) {
	b := make([]byte, 4)
	rand.Read(b)
	id := hex.EncodeToString(b)
	for _, img := range []string{standinImage, testappImage} {
		if err := exec.Command("docker", "image", "inspect", img).Run(); err != nil {
			t.Fatalf("image %s is missing: run make images", img)
		}
	}
	dir, confDir := t.TempDir(), t.TempDir()
	conf := "[INPUT]\n    Name forward\n    unix_path /var/run/fluent.sock\n\n@INCLUDE /fluent-bit/etc/external.conf\n"
	external := "[FILTER]\n    Name modify\n    Match *\n"
	os.WriteFile(filepath.Join(confDir, "fluent.conf"), []byte(conf), 0o600)
	os.WriteFile(filepath.Join(confDir, "external.conf"), []byte(external), 0o600)
	router := "fstandin-router-" + id
	// Mounted as the ECS agent mounts a Fluent Bit router's files: the socket directory on /var/run/,
	// the generated file on /fluent-bit/etc/fluent-bit.conf, an S3 file on /fluent-bit/etc/external.conf.
	runContainer(t, router, "-v", dir+":/var/run/",
		"-v", filepath.Join(confDir, "fluent.conf")+":/fluent-bit/etc/fluent-bit.conf:ro",
		"-v", filepath.Join(confDir, "external.conf")+":/fluent-bit/etc/external.conf:ro", standinImage)
	sock := filepath.Join(dir, "fluent.sock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear: %s", sock, docker(t, "logs", router))
		}
		time.Sleep(100 * time.Millisecond)
	}
	var seen configLine
	for _, l := range strings.Split(docker(t, "logs", router), "\n") {
		if json.Unmarshal([]byte(l), &seen) == nil && seen.Kind == "config" {
			break
		}
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	want := configLine{Kind: "config", Path: "/fluent-bit/etc/fluent-bit.conf", Size: int64(len(conf)), SHA256: sum(conf),
		Includes: []configFile{{Path: "/fluent-bit/etc/external.conf", Size: int64(len(external)), SHA256: sum(external)}}}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("the router recorded its configuration as %+v, want %+v", seen, want)
	}
	routerIP := docker(t, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", router)

	for _, tc := range []struct{ name, address string }{
		{"unix", "unix://" + sock},
		{"tcp", routerIP + ":24224"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := "fstandin-app-" + tc.name + "-" + id
			tag := "app-firelens-" + id + tc.name
			line := "hello from " + app
			runContainer(t, app,
				"--log-driver", "fluentd",
				"--log-opt", "fluentd-address="+tc.address,
				"--log-opt", "tag="+tag,
				"--log-opt", "fluentd-async=true",
				"--log-opt", "fluentd-sub-second-precision=true",
				"--log-opt", "fluentd-buffer-limit=1048576",
				testappImage, "print", "-out", line, "-stay")
			rec := waitRecord(t, router, tag, line)
			if rec.Source != tc.name {
				t.Errorf("source = %q, want %q", rec.Source, tc.name)
			}
			if rec.Record["source"] != "stdout" || rec.Record["container_name"] != "/"+app {
				t.Errorf("record = %v, want source stdout and container_name /%s", rec.Record, app)
			}
			if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil {
				t.Errorf("time %q: %v", rec.Time, err)
			}
		})
	}
}

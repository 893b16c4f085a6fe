package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRecordsAndExits(t *testing.T) {
	dir, logDir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "configuration"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "configuration", "seelog.xml"), []byte("<seelog/>"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "exit-code"), []byte("7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"/x/amazon-ssm-agent", "-dir", dir, "-log", logDir}, make(chan os.Signal, 1)); code != 7 {
		t.Fatalf("exit code %d, want 7 from the exit-code file", code)
	}
	os.Remove(filepath.Join(logDir, "exit-code"))
	sig := make(chan os.Signal, 1)
	sig <- syscall.SIGTERM
	if code := run([]string{"/x/amazon-ssm-agent", "-dir", dir, "-log", logDir}, sig); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	f, err := os.Open(filepath.Join(logDir, "ssmstandin.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []Record
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	sum := sha256.Sum256([]byte("<seelog/>"))
	if got := recs[0].Files["configuration/seelog.xml"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("seelog.xml digest %q", got)
	}
	if got := recs[0].Files["certs/amazon-ssm-agent.crt"]; got != "missing" {
		t.Errorf("a missing file is %q, want missing", got)
	}
	if recs[0].UID != os.Getuid() || recs[0].Args[0] != "/x/amazon-ssm-agent" {
		t.Errorf("record %+v", recs[0])
	}
}

package localcp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/berth-agent/berth/agent/boltcheck/boltchecktest"
	"github.com/berth-agent/berth/agent/localauth"
)

// Every page-aligned truncation and every single-byte change of a churned localcp.db (every page
// header field of every page, and random bytes) either opens with its data readable and writable,
// or fails with ErrCorrupt: never a signal, a hang or unbounded memory. Each case runs in a child
// process with a deadline and a data-size limit.
func TestDamageSweep(t *testing.T) {
	boltchecktest.Child(256<<20, ErrCorrupt, sweepOpen)
	if testing.Short() {
		t.Skip("the sweep runs hundreds of child processes")
	}
	path := filepath.Join(t.TempDir(), "localcp.db")
	srv, err := New(Config{DBPath: path, Keys: testKeys}, nil)
	require.NoError(t, err)
	srv.db.NoSync = true // the sweep damages the file itself; durability is not what it tests
	// 300 tasks run, 200 of them stopped, over definitions registered and deregistered.
	for i := range 300 {
		if i%10 == 0 {
			_, err := call(srv, "RegisterTaskDefinition", strings.Replace(sleepDef, `"sleep"`, fmt.Sprintf(`"fam%d"`, i/30), 1))
			require.NoError(t, err)
		}
		out, err := call(srv, "RunTask", fmt.Sprintf(`{"taskDefinition":"fam%d","startedBy":"sweep-%d"}`, i/30, i))
		require.NoError(t, err)
		if i%3 != 0 {
			arn := out["tasks"].([]any)[0].(map[string]any)["taskArn"].(string)
			_, err := call(srv, "StopTask", fmt.Sprintf(`{"task":%q}`, arn))
			require.NoError(t, err)
		}
		if i%30 == 29 && i < 150 {
			_, err := call(srv, "DeregisterTaskDefinition", fmt.Sprintf(`{"taskDefinition":"fam%d:1"}`, i/30))
			require.NoError(t, err)
		}
	}
	require.NoError(t, srv.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	boltchecktest.Run(t, boltchecktest.Sweep{Test: "TestDamageSweep", File: data, PageSize: os.Getpagesize(),
		RandomFlips: 300, Seed: 21, Deadline: 10 * time.Second, MaxFailures: 10})
}

// sweepOpen is a sweep child: it opens the control plane on the file, reads every task and
// definition, runs a task, and checks that the file reopens with that task in it. It returns a digest
// of what it read.
func sweepOpen(path string) (string, error) {
	srv, err := New(Config{DBPath: path, Keys: testKeys}, nil)
	if err != nil {
		return "", err
	}
	srv.db.NoSync = true // what is written here need not survive a crash, only a reopen
	var read []map[string]any
	for _, req := range [][2]string{{"ListClusters", `{}`}, {"ListTaskDefinitions", `{}`}, {"ListTasks", `{}`},
		{"ListTasks", `{"desiredStatus":"STOPPED"}`}} {
		out, err := call(srv, req[0], req[1])
		if err != nil {
			_ = srv.Close()
			return "", err
		}
		read = append(read, out)
	}
	arns := append(read[2]["taskArns"].([]any), read[3]["taskArns"].([]any)...)
	for i := 0; i < len(arns); i += 100 {
		out, err := call(srv, "DescribeTasks", mustJSON(map[string]any{"tasks": arns[i:min(i+100, len(arns))]}))
		if err != nil {
			_ = srv.Close()
			return "", err
		}
		read = append(read, out)
	}
	if _, err := call(srv, "RegisterTaskDefinition", strings.Replace(sleepDef, `"sleep"`, `"after-open"`, 1)); err != nil {
		_ = srv.Close()
		return "", err
	}
	if err := srv.Close(); err != nil {
		return "", err
	}
	again, err := New(Config{DBPath: path, Keys: testKeys}, nil)
	if err != nil {
		return "", fmt.Errorf("reopen after writing: %v", err) // %v: damage now is a failure, not a report
	}
	defer again.Close()
	if _, err := call(again, "DescribeTaskDefinition", `{"taskDefinition":"after-open"}`); err != nil {
		return "", fmt.Errorf("the definition registered after opening: %w", err)
	}
	data, err := json.Marshal(read)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sha256.Sum256(data)), nil
}

// call sends one signed ECS API request to srv and decodes its answer, which must be a success.
func call(srv *Server, op, body string) (map[string]any, error) {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:51677/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", targetPrefix+op)
	if err := localauth.Sign(context.Background(), req, []byte(body), testKeys, "us-east-1", time.Now()); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	out := map[string]any{}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", op, rec.Code, rec.Body.String())
	}
	return out, nil
}

// TestDamagedClusterRecordIsRewritten: a cluster record that does not decode (as the sweep's random
// flips make one now and then) neither stops New nor fails the calls naming the cluster: the
// default cluster is written anew at open, another is served as new.
func TestDamagedClusterRecordIsRewritten(t *testing.T) {
	h := newHarness(t)
	h.ok("CreateCluster", `{"clusterName":"other"}`)
	h.ok("RegisterTaskDefinition", sleepDef)
	require.NoError(t, h.srv.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketClusters)
		if err := b.Put([]byte(DefaultCluster), []byte(`{"name":"default","arn":"arn:aws:ecs:local:0`)); err != nil {
			return err
		}
		return b.Put([]byte("other"), []byte(`{"name":"other",}`))
	}))
	h.restart()

	out := h.ok("DescribeClusters", `{"clusters":["default","other"]}`)
	require.Len(t, out["clusters"], 2, "%v", out)
	for i, name := range []string{"default", "other"} {
		assert.Equal(t, name, at(t, out, "clusters", i, "clusterName"))
		assert.Equal(t, "ACTIVE", at(t, out, "clusters", i, "status"))
	}
	h.ok("RunTask", `{"taskDefinition":"sleep"}`)
	h.ok("RunTask", `{"cluster":"other","taskDefinition":"sleep"}`)
	require.NoError(t, h.srv.db.View(func(tx *bolt.Tx) error {
		var rec clusterRecord
		assert.NoError(t, json.Unmarshal(tx.Bucket(bucketClusters).Get([]byte(DefaultCluster)), &rec), "the default cluster's record is rewritten at open")
		return nil
	}))
}

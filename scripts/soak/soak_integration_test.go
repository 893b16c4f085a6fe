//go:build integration

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// logWriter passes the soak's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestIntegrationSoakShort runs the soak for one minute: the agent SIGKILLed every 12-20 s (two or
// three times), dockerd restarted once and stopped once during creates, the control plane cut about
// every 20 s; every row that must be 0 is 0. A missing prerequisite (root, Docker, the test image) fails it.
func TestIntegrationSoakShort(t *testing.T) {
	o := defaultOptions()
	o.duration = time.Minute
	o.killMin, o.killMax = 12*time.Second, 20*time.Second
	o.dockerRestarts = 1
	o.engineOutages = 1
	o.cutEvery = 20 * time.Second
	o.settle = 3 * time.Minute
	o.out = logWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.print(&table)
	t.Log("\n" + table.String())
	if rep.failed() {
		t.Fatal("a row that must be 0 is not")
	}
	if rep.kills < 2 || len(rep.dockerdRuns) != 1 || len(rep.outages) != 1 || rep.cuts < 1 {
		t.Fatalf("the chaos did not happen as planned: %d kills, %d dockerd restarts, %d Engine outages during creates, %d cuts",
			rep.kills, len(rep.dockerdRuns), len(rep.outages), rep.cuts)
	}
}

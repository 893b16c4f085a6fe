package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/localauth"
	"github.com/berth-agent/berth/agent/localcp"
	"github.com/berth-agent/berth/agent/taskdef"
)

// localAPI calls the embedded control plane's ECS JSON 1.1 API, as the AWS CLI does, signed with the
// keys the agent wrote in its data directory.
type localAPI struct {
	addr  string
	keys  localauth.Keys
	http  *http.Client
	where agentLookup // how the agent was found, for errors
}

// newLocalAPI returns the client of the embedded control plane of the agent cfg names, found as
// where says.
func newLocalAPI(cfg *config.Config, where agentLookup) (localAPI, error) {
	keys, err := localauth.Load(localauth.Path(cfg.DataDir))
	if err != nil {
		return localAPI{}, noLocalKeys(cfg, where, err)
	}
	return localAPI{addr: cfg.LocalControlPlaneAddr, keys: keys, http: &http.Client{Timeout: 30 * time.Second}, where: where}, nil
}

// noLocalKeys is the error for the embedded control plane's keys not read (err) from cfg's data
// directory: where the command looked, and what to do.
func noLocalKeys(cfg *config.Config, where agentLookup, err error) error {
	switch {
	case cfg.Mode == config.ModeECS:
		return fmt.Errorf("the agent runs in ecs mode (%s), with no embedded control plane: run tasks through Amazon ECS (aws ecs run-task)%s: %w",
			cfg.ModeReason, where.hint(), err)
	case where.path == "":
		return fmt.Errorf("has the agent started in local mode with ECS_DATADIR=%s? %w", cfg.DataDir, err)
	case where.pid != 0:
		return fmt.Errorf("the running agent (pid %d, from %s) has its data directory in %s: %w", where.pid, where.path, cfg.DataDir, err)
	}
	return fmt.Errorf("no running agent found in %s (%s), nor in the default data directory %s: %w; %s",
		where.path, where.why, cfg.DataDir, err, fixDataDir)
}

func (a localAPI) call(ctx context.Context, op string, in, out any) error {
	if err := localcp.Call(ctx, a.http, "http://"+a.addr, a.keys, op, in, out); err != nil {
		var apiErr *localcp.APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("is the agent running in local mode?%s %w", a.where.hint(), err)
	}
	return nil
}

// describedTask is the part of DescribeTasks' answer `berth run` and `berth stop` print.
type describedTask struct {
	TaskArn       string `json:"taskArn"`
	LastStatus    string `json:"lastStatus"`
	DesiredStatus string `json:"desiredStatus"`
	StoppedReason string `json:"stoppedReason"`
	Containers    []struct {
		Name       string `json:"name"`
		LastStatus string `json:"lastStatus"`
		ExitCode   *int   `json:"exitCode"`
		Reason     string `json:"reason"`
	} `json:"containers"`
}

// runTaskFile registers the task definition in file with the embedded control plane, runs it, and
// follows it until it is RUNNING (nil) or STOPPED (an error with the reason), printing each change.
func runTaskFile(ctx context.Context, cfg *config.Config, where agentLookup, file string, out io.Writer, wait time.Duration) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	def, err := taskdef.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	canonical, err := taskdef.Canonical(def)
	if err != nil {
		return err
	}
	api, err := newLocalAPI(cfg, where)
	if err != nil {
		return err
	}
	var registered struct {
		TaskDefinition struct {
			TaskDefinitionArn string `json:"taskDefinitionArn"`
		} `json:"taskDefinition"`
	}
	if err := api.call(ctx, "RegisterTaskDefinition", json.RawMessage(canonical), &registered); err != nil {
		return err
	}
	fmt.Fprintf(out, "registered %s\n", registered.TaskDefinition.TaskDefinitionArn)
	var ran struct {
		Tasks    []describedTask `json:"tasks"`
		Failures []struct {
			Reason string `json:"reason"`
		} `json:"failures"`
	}
	// A client token, as the AWS CLI sends: the call, replayed, starts nothing more.
	if err := api.call(ctx, "RunTask", map[string]any{"cluster": cfg.Cluster, "taskDefinition": registered.TaskDefinition.TaskDefinitionArn,
		"startedBy": "berth run", "clientToken": rand.Text()}, &ran); err != nil {
		return err
	}
	if len(ran.Tasks) == 0 {
		reason := "no task was placed"
		if len(ran.Failures) > 0 {
			reason = ran.Failures[0].Reason
		}
		return fmt.Errorf("run task: %s", reason)
	}
	arn := ran.Tasks[0].TaskArn
	fmt.Fprintf(out, "started %s\n", arn)
	return follow(ctx, api, cfg.Cluster, arn, "RUNNING", out, wait)
}

// stopTask asks the embedded control plane to stop a task (its ARN or ID) and follows it to STOPPED.
func stopTask(ctx context.Context, cfg *config.Config, where agentLookup, taskID string, out io.Writer, wait time.Duration) error {
	api, err := newLocalAPI(cfg, where)
	if err != nil {
		return err
	}
	var stopped struct {
		Task describedTask `json:"task"`
	}
	if err := api.call(ctx, "StopTask", map[string]any{"cluster": cfg.Cluster, "task": taskID, "reason": "Stopped with berth stop"}, &stopped); err != nil {
		return err
	}
	return follow(ctx, api, cfg.Cluster, stopped.Task.TaskArn, "STOPPED", out, wait)
}

// follow polls DescribeTasks until the task's last status is want, printing each change; a task that
// stops while another status was wanted is an error with its reason.
func follow(ctx context.Context, api localAPI, cluster, arn, want string, out io.Writer, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		var described struct {
			Tasks []describedTask `json:"tasks"`
		}
		if err := api.call(ctx, "DescribeTasks", map[string]any{"cluster": cluster, "tasks": []string{arn}}, &described); err != nil {
			return err
		}
		if len(described.Tasks) == 1 {
			t := described.Tasks[0]
			if t.LastStatus != last {
				last = t.LastStatus
				fmt.Fprintf(out, "%s: %s\n", arn[strings.LastIndexByte(arn, '/')+1:], last)
				for _, c := range t.Containers {
					fmt.Fprintf(out, "  %-16s %-9s%s\n", c.Name, c.LastStatus, containerDetail(c.ExitCode, c.Reason))
				}
			}
			switch {
			case t.LastStatus == want:
				if t.StoppedReason != "" {
					fmt.Fprintf(out, "stopped reason: %s\n", t.StoppedReason)
				}
				return nil
			case t.LastStatus == "STOPPED":
				return fmt.Errorf("task stopped: %s", t.StoppedReason)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("task %s is %s, not %s, after %s", arn, last, want, wait)
		case <-tick.C:
		}
	}
}

func containerDetail(code *int, reason string) string {
	var parts []string
	if code != nil {
		parts = append(parts, fmt.Sprintf("exit %d", *code))
	}
	if reason != "" {
		parts = append(parts, reason)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

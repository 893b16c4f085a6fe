package localcp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// executeCommandRequest is ExecuteCommand's input.
type executeCommandRequest struct {
	Cluster     string `json:"cluster"`
	Container   string `json:"container"`
	Command     string `json:"command"`
	Interactive bool   `json:"interactive"`
	Task        string `json:"task"`
}

// executeCommand answers ECS Exec's ExecuteCommand, which opens a Session Manager session to the
// container's SSM agent: that needs AWS, so the embedded control plane never opens one. It checks
// the request as ECS does (the cluster, the task) and answers ECS's error for an exec that cannot
// reach its target, TargetNotConnectedException, with the `berth exec` command that does the same
// on this host, for a static task as for any other.
func (s *Server) executeCommand(r *http.Request, req *executeCommandRequest) (any, error) {
	switch {
	case req.Task == "":
		return nil, invalidParameter("task can not be blank.")
	case strings.TrimSpace(req.Command) == "":
		return nil, invalidParameter("command can not be blank.")
	case !req.Interactive:
		return nil, invalidParameter("Interactive is the only mode supported currently.")
	}
	var id string
	static := s.staticTasks(r.Context(), clusterName(req.Cluster))
	err := s.db.View(func(tx *bolt.Tx) error {
		cl, err := s.cluster(tx, req.Cluster)
		if err != nil {
			return err
		}
		t, err := s.findTask(tx, cl.Name, req.Task)
		if errors.Is(err, errNoRecord) {
			if st := findStatic(static, req.Task); st != nil {
				id = lastSegment(st.Task.Arn)
				return nil
			}
			return invalidParameter("The referenced task was not found.")
		}
		if err != nil {
			return err
		}
		id = lastSegment(t.Arn)
		return nil
	})
	if err != nil {
		return nil, err
	}
	cmd := "berth exec " + id
	if req.Container != "" {
		cmd += " " + req.Container
	}
	cmd += " -- " + req.Command
	return nil, &APIError{Status: http.StatusBadRequest, Type: "TargetNotConnectedException", Message: fmt.Sprintf(
		"ECS Exec needs AWS (a Session Manager session), which the embedded control plane does not have; "+
			"on this host, run the command with: %s", cmd)}
}

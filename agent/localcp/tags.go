package localcp

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// listTagsRequest is ListTagsForResource's input.
type listTagsRequest struct {
	ResourceArn string `json:"resourceArn"`
}

// listTagsForResource answers the tags of a task (those RunTask or StartTask gave it, or a static
// task's StaticFileTag) or of a container instance (those it registered with), as ECS does; the task
// metadata endpoint's /taskWithTags asks it through the agent's ECS client. Other resources, and ARNs
// this control plane never made, are an InvalidParameterException.
func (s *Server) listTagsForResource(r *http.Request, req *listTagsRequest) (any, error) {
	if req.ResourceArn == "" {
		return nil, invalidParameter("resourceArn can not be blank.")
	}
	var tags []tag
	isTask := strings.Contains(req.ResourceArn, ":task/")
	var static []StaticTask
	if isTask {
		static = s.staticTasks(r.Context(), taskCluster(req.ResourceArn))
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		switch {
		case isTask:
			t := &taskRecord{}
			err := get(tx, bucketTasks, req.ResourceArn, t)
			if st := findStatic(static, req.ResourceArn); errors.Is(err, errNoRecord) && st != nil {
				tags = staticTags(st)
				return nil
			}
			if err != nil {
				return err
			}
			tags = t.Tags
		case strings.Contains(req.ResourceArn, ":container-instance/"):
			ci := &instanceRecord{}
			if err := get(tx, bucketInstances, req.ResourceArn, ci); err != nil {
				return err
			}
			tags = ci.Tags
		default:
			return errNoRecord
		}
		return nil
	})
	if err == errNoRecord {
		return nil, invalidParameter("The specified resource is not found: %s", req.ResourceArn)
	}
	if err != nil {
		return nil, err
	}
	if tags == nil {
		tags = []tag{}
	}
	return map[string]any{"tags": slices.Clone(tags)}, nil
}

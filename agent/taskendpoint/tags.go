package taskendpoint

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/berth-agent/berth/agent/task"
)

// tagsTimeout bounds the ECS calls of one /taskWithTags request: the ECS agent's task endpoint
// cuts every answer at 5 seconds.
const tagsTimeout = 5 * time.Second

// The fields of a task response the tags go in, as Errors names them.
const (
	fieldInstanceTags = "ContainerInstanceTags"
	fieldTaskTags     = "TaskTags"
)

// addTags adds the container instance's and the task's tags to resp, asking the TagSource for both
// at once. A failure leaves its field out and is logged at debug (a container polling its tags must
// not flood the log; v4's answer says it); with errs (v4) it is also added to
// resp.Errors, the container instance's first, as the ECS agent reports them. A static task is
// unknown to the control plane: its tags are not asked for.
func (h *Handler) addTags(r *http.Request, t *task.Task, resp *taskResponse, errs bool) {
	if h.tags == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tagsTimeout)
	defer cancel()
	instanceARN := ""
	if h.instARN != nil {
		instanceARN = h.instARN()
	}
	type answer struct {
		field, arn string
		tags       map[string]string
		err        error
	}
	answers := []*answer{{field: fieldInstanceTags, arn: instanceARN}}
	if !t.Static {
		answers = append(answers, &answer{field: fieldTaskTags, arn: t.Arn})
	}
	var wg sync.WaitGroup
	for _, a := range answers {
		if a.arn == "" {
			a.err = errors.New("the container instance is not registered yet")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.tags, a.err = h.tags.ListTagsForResource(ctx, a.arn)
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil {
			h.log.Debug("task metadata: tags unavailable", "task_arn", t.Arn, "field", a.field, "resource_arn", a.arn, "error", a.err)
			if errs {
				resp.Errors = append(resp.Errors, newErrorResponse(a.field, a.arn, a.err))
			}
			continue
		}
		switch a.field {
		case fieldInstanceTags:
			resp.ContainerInstanceTags = a.tags
		case fieldTaskTags:
			resp.TaskTags = a.tags
		}
	}
}

// newErrorResponse is the Errors entry of a failure to get field's tags of the resource arn: the
// ECS API's error code and message when err carries them (the AWS SDK's API error), its HTTP status
// and request ID when it carries the answer's, and the error's text otherwise.
func newErrorResponse(field, arn string, err error) errorResponse {
	e := errorResponse{ErrorField: field, ErrorMessage: err.Error(), ResourceARN: arn}
	var api interface {
		ErrorCode() string
		ErrorMessage() string
	}
	if errors.As(err, &api) {
		e.ErrorCode, e.ErrorMessage = api.ErrorCode(), api.ErrorMessage()
	}
	var answered interface {
		HTTPStatusCode() int
		ServiceRequestID() string
	}
	if errors.As(err, &answered) {
		e.StatusCode, e.RequestID = answered.HTTPStatusCode(), answered.ServiceRequestID()
	}
	return e
}
